"""The baselines: plain Temporal workflows with the SDK's defaults, one that runs one activity and one
that waits for a signal; and the one-activity workflow plus one thing a workload does, each
(bench/protocol_costs.py)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.common import SearchAttributeKey


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


# --- the bare workflow, plus one thing a workload does (bench/protocol_costs.py) --------------------

PHASE = SearchAttributeKey.for_keyword("AdmitflowPhase")  # registered by admitflow's dev server
ENTITY_ID = "protocol-costs-entity"


# The server takes at most 10 updates in flight per workflow; admitflow's workers send theirs to a
# queue batched, a few updates at a time (activities/mail.py). These are sent one message per update,
# at most this many at once from the process.
_UPDATES_IN_FLIGHT = 8
_updates: asyncio.Semaphore | None = None


@activity.defn
async def update_entity(n: int) -> int:
    """A workload's enqueue or release: an update to one busy workflow, waiting for its answer."""
    global _updates
    if _updates is None:
        _updates = asyncio.Semaphore(_UPDATES_IN_FLIGHT)
    async with _updates:
        return await activity.client().get_workflow_handle(ENTITY_ID).execute_update(EntityWorkflow.take, n)


@activity.defn
async def signal_entity(n: int) -> int:
    """A notice to one busy workflow, not waiting for it to be taken."""
    await activity.client().get_workflow_handle(ENTITY_ID).signal(EntityWorkflow.poke, n)
    return n


@activity.defn
async def signal_own_workflow(n: int) -> int:
    """A queue's notice to a workload (`quota_reserved`): a signal to the workflow that runs this."""
    await activity.client().get_workflow_handle(activity.info().workflow_id).signal(SignalReceivedWorkflow.go)
    return n


@workflow.defn
class EntityWorkflow:
    """One long-running receiver of every variant's messages, as a ClusterQueue is of its workloads'."""

    def __init__(self) -> None:
        self.taken = 0

    @workflow.update
    async def take(self, n: int) -> int:
        self.taken += 1
        return n

    @workflow.signal
    def poke(self, n: int) -> None:
        self.taken += 1

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: workflow.info().is_continue_as_new_suggested())
        await workflow.wait_condition(workflow.all_handlers_finished)
        workflow.continue_as_new()


def _activity(fn, n: int):
    return workflow.execute_activity(fn, n, start_to_close_timeout=timedelta(seconds=30))


def _local_activity(fn, n: int):
    return workflow.execute_local_activity(fn, n, start_to_close_timeout=timedelta(seconds=30))


@workflow.defn
class UpsertsWorkflow:
    """Plus two search-attribute upserts (a workload's status, as it changes)."""

    @workflow.run
    async def run(self, n: int) -> int:
        workflow.upsert_search_attributes([PHASE.value_set("Pending")])
        result = await _activity(noop, n)
        workflow.upsert_search_attributes([PHASE.value_set("Finished")])
        return result


@workflow.defn
class TimerWorkflow:
    """Plus a durable timer started and cancelled (the waitForPodsReady timeout)."""

    @workflow.run
    async def run(self, n: int) -> int:
        timer = asyncio.ensure_future(workflow.sleep(timedelta(minutes=30)))
        result = await _activity(noop, n)
        timer.cancel()
        return result


@workflow.defn
class LocalActivityWorkflow:
    """Plus a local activity that does nothing."""

    @workflow.run
    async def run(self, n: int) -> int:
        await _local_activity(noop, n)
        return await _activity(noop, n)


@workflow.defn
class SecondTaskWorkflow:
    """Plus a second activity, so a second workflow task."""

    @workflow.run
    async def run(self, n: int) -> int:
        await _activity(noop, n)
        return await _activity(noop, n)


@workflow.defn
class UpdateByLocalActivityWorkflow:
    """Plus an update to the entity by local activity, in the first task (a workload's enqueue)."""

    @workflow.run
    async def run(self, n: int) -> int:
        await _local_activity(update_entity, n)
        return await _activity(noop, n)


@workflow.defn
class SignalByLocalActivityWorkflow:
    """Plus a signal to the entity by local activity, in the first task."""

    @workflow.run
    async def run(self, n: int) -> int:
        await _local_activity(signal_entity, n)
        return await _activity(noop, n)


@workflow.defn
class SignalReceivedWorkflow:
    """Plus a signal received, and the workflow task it takes: its first activity signals the
    workflow, which then runs the bare workflow's activity (a reservation notice, then the runner)."""

    def __init__(self) -> None:
        self.got = False

    @workflow.signal
    def go(self) -> None:
        self.got = True

    @workflow.run
    async def run(self, n: int) -> int:
        await _activity(signal_own_workflow, n)
        await workflow.wait_condition(lambda: self.got)
        return await _activity(noop, n)
