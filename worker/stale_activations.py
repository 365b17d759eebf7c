"""Workflow code never runs new history events on the clock of a workflow task that already ran: the
guard against stale activations, a safety net under a bug of the SDK's core.

When a query falls back to a legacy query task (a killed worker's sticky queue, or a query the
server sends on by itself, as after a restart), the server sends the history as it is by then,
which may end in events no workflow task has processed (a timer fired, a signal). The core applies
them *live*, on the clock of the last workflow task it replayed, runs local activities for them,
keeps the run cached with what that produced, and applies the real task's events after those, in
another activation than any replay puts them in: the history no longer replays (`Activity machine
does not handle this event`, `No command scheduled for event ActivityTaskScheduled`). Workflow code
cannot see it (the activation says it is live). docs/sdk-legacy-query-bug.md has the reproduction
without admitflow code (repro/legacy_query.py). No machine path of admitflow sends a query
(docs/architecture.md, "Reads"): only a person's `get`, `describe` or `explain` of one object can
meet it, and the guard is what stands between that query and the history.

The guard refuses, before workflow code sees it, an activation that brings history events on a
clock no workflow task of its own can have:

- a run's first live activation after replaying its history, when its clock is not later than the
  last replayed activation's (a real workflow task started after every task it replays);
- an activation of a live run whose history grew past that of its last workflow task, on a clock no
  later than that task's (what follows within one workflow task, a local activity's result or an
  activity cancelled with TRY_CANCEL, brings no new history and passes).

And it refuses a query task's query to a run that went live after its replay and whose history
has not grown since: that live activation may have been the query task's own history run as if it
were a task, which the first rule misses when the run's last workflow task made no activation in
the replay (its only event an activity cancelled with TRY_CANCEL, resolved at once), or when the
history ends in a workflow task that started and did not complete (another worker holds it, or
held it and died), run live on that task's own clock exactly as the real task is. Refused there,
the run does not stay cached: the local activities that live activation started have run (the
engine's are safe to repeat: an enqueue, a delivery), but nothing it decided reaches a real task.
A real run that took a task after its replay and is asked a query before its next task is refused
once the same way (the client asks again and the run replays).

No rule reads the worker's wall clock: a worker whose clock is off completes its tasks as any other.

Refused, the activation fails: the SDK fails the query it came with (admitflow's client asks again
on each message) and evicts the run, and the next real workflow task replays the whole history,
as any replay does; nothing reaches the history for a refused query. A real workflow task is
refused only if the server's clock went back between two of a run's tasks: the SDK then writes
`WorkflowTaskFailed`, and the task's next attempt, on a later clock, passes. The eviction may drop
a real task the core held for that run (it logs "leftover buffered tasks when evicting run"): that
task waits out its 10 s timeout and is retried.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import structlog
from temporalio.bridge.proto.workflow_activation import WorkflowActivation
from temporalio.bridge.proto.workflow_completion import WorkflowActivationCompletion
from temporalio.worker import WorkflowInstance, WorkflowInstanceDetails, WorkflowRunner

from admitflow.contract import EVENTS_WITHOUT_TASK_REFUSED, REPLAYED_FOR_QUERY_REFUSED, STALE_QUERY_REFUSED

# The query's failures; admitflow's client asks again when it sees any of them.
REFUSED = STALE_QUERY_REFUSED
REFUSED_EVENTS = EVENTS_WITHOUT_TASK_REFUSED
REFUSED_REPLAYED = REPLAYED_FOR_QUERY_REFUSED
# The id the SDK's core gives a query that came as a query task of its own (not with a workflow task).
LEGACY_QUERY_ID = "legacy_query"

log = structlog.get_logger("admitflow.worker")


def _brings_events(act: WorkflowActivation) -> bool:
    """Whether `act` carries more than queries or an eviction."""
    return not all(job.WhichOneof("variant") in ("query_workflow", "remove_from_cache") for job in act.jobs)


def _clock(act: WorkflowActivation) -> float:
    """The activation's workflow time, seconds since the epoch."""
    return act.timestamp.ToNanoseconds() / 1e9


def stale(act: WorkflowActivation, last_replayed: float | None) -> bool:
    """Whether `act`, a run's first activation after replaying `last_replayed` (the time of the last
    replayed activation, seconds since the epoch; None: nothing was replayed), runs new events on
    a clock not later than that: no new workflow task's."""
    if act.is_replaying or last_replayed is None or not act.HasField("timestamp") or not _brings_events(act):
        return False
    return _clock(act) <= last_replayed


@dataclass(frozen=True)
class Task:
    """Where a run's history stood at an activation: its clock (seconds since the epoch) and its
    length (the last event applied)."""

    at: float
    length: int


def task_of(act: WorkflowActivation) -> Task | None:
    """The history `act` runs on, when it brings history events (more than queries or an
    eviction) and says where they end."""
    if not act.HasField("timestamp") or not act.timestamp.seconds or not act.history_length or not _brings_events(act):
        return None
    return Task(_clock(act), act.history_length)


def legacy_query(act: WorkflowActivation) -> bool:
    """Whether `act` answers a query that came as a query task of its own."""
    return any(
        job.WhichOneof("variant") == "query_workflow" and job.query_workflow.query_id == LEGACY_QUERY_ID for job in act.jobs
    )


def without_a_task(task: Task | None, last: Task | None) -> bool:
    """Whether a live run's activation at `task` brings history events with no new workflow task:
    its history grew since `last` and its clock did not move on (a query sent on by itself, with
    the events that arrived meanwhile)."""
    return task is not None and last is not None and task.length > last.length and task.at <= last.at


class StaleActivationGuard(WorkflowRunner):
    """Wraps one of the worker's workflow runners (the sandboxed and the unsandboxed one both; not
    the Replayer's: a replayed history that ends in new events is meant to run them)."""

    def __init__(self, runner: WorkflowRunner) -> None:
        self.runner = runner

    def prepare_workflow(self, defn: Any) -> None:
        self.runner.prepare_workflow(defn)

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        return _Guarded(self.runner.create_instance(det), det.info.workflow_id)

    def set_worker_level_failure_exception_types(self, types: Sequence[type[BaseException]]) -> None:
        self.runner.set_worker_level_failure_exception_types(types)


class _Guarded(WorkflowInstance):
    def __init__(self, instance: WorkflowInstance, workflow_id: str = "") -> None:
        self.instance = instance
        self.workflow_id = workflow_id
        self.last_replayed: float | None = None
        # The furthest history any activation ran on, replayed or live.
        self.last_task: Task | None = None
        # The history length the run went live at after its replay (its first live activation's).
        self.live_at: int | None = None
        self.live = False

    def activate(self, act: WorkflowActivation) -> WorkflowActivationCompletion:
        task = task_of(act)
        last = self.last_task
        if self.live and without_a_task(task, last):
            log.warning(
                "refused.events_without_a_workflow_task", workflow_id=self.workflow_id, run_id=act.run_id,
                history_length=act.history_length, last_history_length=last.length if last else None,
            )
            return self._refuse(act, REFUSED_EVENTS)
        if self.live_at is not None and legacy_query(act) and (last is None or last.length <= self.live_at):
            # No workflow task has grown the history since the run went live: its live activation may
            # have been the query task's own history, run as if it were a task.
            log.warning("refused.query_to_a_run_rebuilt_for_it", workflow_id=self.workflow_id, run_id=act.run_id,
                        history_length=act.history_length)
            return self._refuse(act, REFUSED_REPLAYED)
        if task is not None:
            self.last_task = task if last is None else Task(max(task.at, last.at), max(task.length, last.length))
        if not self.live:
            if act.is_replaying:
                if act.HasField("timestamp") and act.timestamp.seconds:
                    self.last_replayed = _clock(act)
            elif stale(act, self.last_replayed):
                log.warning("refused.stale_clock", workflow_id=self.workflow_id, run_id=act.run_id, history_length=act.history_length)
                return self._refuse(act, REFUSED)
            else:
                self.live = True
                if self.last_replayed is not None:
                    self.live_at = act.history_length
        return self.instance.activate(act)

    @staticmethod
    def _refuse(act: WorkflowActivation, message: str) -> WorkflowActivationCompletion:
        """Fails the activation: the SDK fails the query it came with and evicts the run."""
        completion = WorkflowActivationCompletion(run_id=act.run_id)
        completion.failed.failure.message = message
        return completion

    def get_info(self) -> Any:
        return self.instance.get_info()

    def get_thread_id(self) -> int | None:
        return self.instance.get_thread_id()

    def get_serialization_context(self, command_info: Any) -> Any:
        return self.instance.get_serialization_context(command_info)

    def get_external_store_context(self, command_info: Any) -> Any:
        return self.instance.get_external_store_context(command_info)
