"""The baselines: plain Temporal workflows with the SDK's defaults, one that runs one activity and one
that waits for a signal."""

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


@workflow.defn
class BareSignalWorkflow:
    """The baseline of a round trip: waits for the signal `go`, then completes."""

    def __init__(self) -> None:
        self.go = False

    @workflow.signal(name="go")
    def signal_go(self) -> None:
        self.go = True

    @workflow.query(name="waiting")
    def waiting(self) -> bool:
        return not self.go

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: self.go)


@workflow.defn
class BareHoldWorkflow:
    """Waits for `go`, then for `stop`: the signal's effect is observed by query, not by completion."""

    def __init__(self) -> None:
        self.go = False
        self.stop = False

    @workflow.signal(name="go")
    def signal_go(self) -> None:
        self.go = True

    @workflow.signal(name="stop")
    def signal_stop(self) -> None:
        self.stop = True

    @workflow.query(name="waiting")
    def waiting(self) -> bool:
        return not self.go

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: self.stop)
