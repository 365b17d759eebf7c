"""The baseline: a plain Temporal workflow that runs one activity, with the SDK's defaults."""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity, workflow


@activity.defn
async def noop(n: int) -> int:
    return n


@workflow.defn
class BareWorkflow:
    @workflow.run
    async def run(self, n: int) -> int:
        return await workflow.execute_activity(noop, n, start_to_close_timeout=timedelta(seconds=30))
