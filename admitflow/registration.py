"""What a Temporal server needs before admitflow can run on it: the namespace, and the contract's
search attributes (without them every workload's first upsert would fail its workflow task)."""

from __future__ import annotations

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
    """Add the contract's search attributes that are missing; returns the names added."""
    missing = await missing_search_attributes(client)
    if missing:
        by_name = {k.name: k for k in sa.ALL}
        await client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(
                namespace=client.namespace,
                search_attributes={n: IndexedValueType.ValueType(by_name[n].indexed_value_type) for n in missing},
            )
        )
    return missing
