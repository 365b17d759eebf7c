"""What a runner needs of the Workloads it runs: the batch/v1 Job one was made from (`job_owner`,
its controller reference), the Workload a workload workflow was started with (`workload_of`, read
from its history's first event: no query), and reports that outlast a Temporal server's restart
(`patiently`)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from temporalio import activity
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from admitflow.api.workload import Workload
from admitflow.messages import WorkloadInput

REPORT_PATIENCE = 120.0  # seconds a report is tried again while the server cannot be reached (a restart)

T = TypeVar("T")


def job_owner(workload: dict[str, Any]) -> dict[str, Any] | None:
    """The batch/v1 Job that owns the workload (its controller reference, wire form), or None."""
    for ref in (workload.get("metadata") or {}).get("ownerReferences") or ():
        if ref.get("apiVersion") == "batch/v1" and ref.get("kind") == "Job" and ref.get("controller"):
            return ref
    return None


async def workload_of(client: Client, workflow_id: str) -> Workload | None:
    """The Workload a workload workflow was started with (its history's first event: no query), or None."""
    handle = client.get_workflow_handle(workflow_id)
    try:
        async for event in handle.fetch_history_events():
            payloads = event.workflow_execution_started_event_attributes.input.payloads
            [started] = await client.data_converter.decode(payloads, [WorkloadInput])
            return started.state.workload if started.state is not None else started.workload
    except RPCError as err:
        if err.status != RPCStatusCode.NOT_FOUND:
            raise
    return None


async def patiently(call: Callable[[], Awaitable[T]], what: str, workflow_id: str) -> T:
    """`call()`'s result, tried again while the server cannot be reached (a restart) for up to
    REPORT_PATIENCE, 1 s apart and doubling to 10 s, heartbeating meanwhile; any other error, or
    the last one, is raised."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + REPORT_PATIENCE
    delay = 1.0
    while True:
        try:
            return await call()
        except RPCError as err:
            if err.status not in (RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED) or loop.time() > give_up:
                raise
            activity.logger.warning("%s for %s failed (%s); trying again in %.0fs", what, workflow_id, err, delay)
        try:
            activity.heartbeat()
        except Exception:  # noqa: BLE001 - a report told after its activity was cancelled has no heartbeat to give
            pass
        await asyncio.sleep(delay)
        delay = min(delay * 2, 10.0)
