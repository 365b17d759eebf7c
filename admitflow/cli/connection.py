"""The Temporal client a command uses, from its connection flags: a configuration refused, a
server that cannot be reached and an unknown Temporal namespace are one-line errors before any
request; --request-timeout bounds each read and write."""

from __future__ import annotations

import argparse

from admitflow import ids
from admitflow.cli.errors import EXIT_ERROR, CLIError, first_line, unknown_namespace


def request_timeout(args: argparse.Namespace):
    """--request-timeout as a timedelta (None when not given): a Go duration or a number of seconds."""
    from datetime import timedelta

    text = getattr(args, "request_timeout", None)
    if text is None:
        return None
    if text.isdigit():
        value = timedelta(seconds=int(text))
    else:
        from admitflow.api.duration import parse_duration

        try:
            value = parse_duration(text)
        except ValueError as err:
            raise CLIError(f"--request-timeout: {err}") from None
    if value.total_seconds() <= 0:
        raise CLIError(f'--request-timeout "{text}": must be more than 0s')
    return value


async def connect(args: argparse.Namespace, runtime=None, check_namespace: bool = True):
    from admitflow.client import QUERY_TIMEOUT, AdmitflowClient
    from admitflow.codec import EncryptionConfigError, data_converter
    from admitflow.worker.connection import ConnectionConfigError, from_arguments

    timeout = request_timeout(args)
    conn = from_arguments(args)
    try:
        target = conn.describe()
        data_converter()  # a bad encryption key is refused before connecting
    except (ConnectionConfigError, EncryptionConfigError) as err:
        raise CLIError(str(err)) from None
    args.target = target  # for the one-line errors of main()
    try:
        client = await conn.connect(runtime)
    except Exception as err:  # the SDK raises a plain RuntimeError on connection failure
        raise CLIError(f"cannot reach Temporal at {target}: {_connection_failure(err)}", EXIT_ERROR) from None
    if check_namespace:
        await _check_namespace(client, target)
    return AdmitflowClient(client, ids.task_queue(args.task_queue), query_timeout=timeout or QUERY_TIMEOUT)


def _connection_failure(err: BaseException) -> str:
    text = str(err)
    if "Connection refused" in text:
        return "connection refused; is the server running there? (--address, TEMPORAL_ADDRESS)"
    return first_line(text)


async def _check_namespace(client, target: str) -> None:
    """A Temporal namespace that does not exist is an error here, not an empty list later (a
    workflow that is not found reads as no objects)."""
    from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
    from temporalio.service import RPCError, RPCStatusCode

    from admitflow.client import RPC_TIMEOUT

    try:
        await client.workflow_service.describe_namespace(
            DescribeNamespaceRequest(namespace=client.namespace), retry=True, timeout=RPC_TIMEOUT
        )
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise CLIError(unknown_namespace(client.namespace, target), EXIT_ERROR) from None
        if err.status != RPCStatusCode.PERMISSION_DENIED:  # allowed to use it but not to describe it: carry on
            raise
