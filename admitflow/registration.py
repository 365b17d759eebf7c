"""What a Temporal server needs before admitflow can run on it: the namespace, and the contract's
search attributes (without them every workload's first upsert would fail its workflow task)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from google.protobuf.duration_pb2 import Duration
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest, ListSearchAttributesRequest
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest, RegisterNamespaceRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from admitflow import search_attributes as sa

DEFAULT_RETENTION = timedelta(days=7)


async def missing_search_attributes(client: Client) -> list[str]:
    listed = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=client.namespace)
    )
    have = {**dict(listed.custom_attributes), **dict(listed.system_attributes)}
    return [k.name for k in sa.ALL if k.name not in have]


async def ensure_namespace(client: Client, retention: timedelta = DEFAULT_RETENTION) -> bool:
    """Register the client's namespace if it does not exist; returns whether it was created."""
    try:
        await client.workflow_service.describe_namespace(DescribeNamespaceRequest(namespace=client.namespace))
        return False
    except RPCError as err:
        if err.status != RPCStatusCode.NOT_FOUND:
            raise
    try:
        await client.workflow_service.register_namespace(
            RegisterNamespaceRequest(
                namespace=client.namespace,
                workflow_execution_retention_period=Duration(seconds=int(retention.total_seconds())),
            )
        )
    except RPCError as err:
        if err.status != RPCStatusCode.ALREADY_EXISTS:
            raise
        return False
    return True


async def ensure_search_attributes(client: Client) -> list[str]:
    """Add the contract's search attributes that are missing, and wait until the server accepts
    them; returns the names added."""
    missing = await missing_search_attributes(client)
    if missing:
        by_name = {k.name: k for k in sa.ALL}
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(
                namespace=client.namespace,
                search_attributes={n: IndexedValueType.ValueType(by_name[n].indexed_value_type) for n in missing},
            )
        )
        await wait_until_usable(client)
    return missing


def _probe_query() -> str:
    """A visibility query that names every attribute of the contract, each with a value of its type."""
    literals = {IndexedValueType.INDEXED_VALUE_TYPE_INT: "0", IndexedValueType.INDEXED_VALUE_TYPE_DATETIME: '"2000-01-01T00:00:00Z"'}
    values = {k.name: literals.get(k.indexed_value_type, '""') for k in sa.ALL}
    return " AND ".join(f"{name} = {value}" for name, value in values.items())


async def wait_until_usable(client: Client, timeout: timedelta = timedelta(seconds=60)) -> None:
    """Listed is not yet usable: a frontend checks search attributes against its cached copy of the
    namespace, refreshed every few seconds, and until then refuses a workflow that sets them ("no
    mapping defined for search attribute"). A visibility query naming them all goes through the
    same check, so wait until one is accepted (on a cluster with several frontends, by the one it
    reaches; the others refresh on the same interval)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout.total_seconds()
    while True:
        try:
            await client.count_workflows(_probe_query())
            return
        except RPCError as err:
            if err.status != RPCStatusCode.INVALID_ARGUMENT or loop.time() > deadline:
                raise
        await asyncio.sleep(0.2)
