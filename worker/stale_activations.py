"""Workflow code never runs on a clock no workflow task started: the guard against stale activations.

How a workflow diverged from its own history after a worker was killed (the evidence of issue 19,
reproduced since): a query reaches the dead worker's sticky queue; after the sticky queue's
schedule-to-start timeout the server sends it, as a legacy query task, to another worker, with the
history as it is by then, which may end in new events (a timer fired, a signal) and no started
workflow task. That worker has no cache of the run: it replays it, then runs those new events
*live*, on the clock, history length and continue-as-new flag of the last workflow task of the
history (a workflow task that started before the kill), and keeps the run cached with what that
produced. Local activities run (a workload enqueued itself again), and when the real workflow task
follows on that worker, its events are applied after those of the query's, in another activation
than the one a replay puts them in. Every later replay takes another branch: the workflow's tasks
fail for good (`UpsertWorkflowSearchAttributesMachine does not handle TimerStarted`, `No command
scheduled for event ActivityTaskScheduled`) and its quota stays held.

No workflow code can see this from inside (the activation says it is not replaying), and no rule
written over `workflow.now()`, the history length or the continue-as-new flag holds when those are
stale; nor can workflow code make its decisions independent of how events are grouped into
activations. So the worker refuses such an activation before workflow code sees it: the first
activation a run gets after replaying its history, if it is not replaying and carries a time that
no new workflow task can have. Failing it makes the SDK fail that query (the client is told to ask
again) and evict the run; the real workflow task then replays the whole history on the worker that
gets it, as any replay would. Nothing reaches the workflow's history.

A time no new workflow task can have: not later than the last replayed activation's, or older, by
the worker's clock when the run reached it (before its replay), than the sticky queue's
schedule-to-start timeout. A query's fallback comes at
least that long after the workflow task it replays up to started; a real workflow task's first
activation comes as soon as its history is replayed (a workflow task older than that could only be
one the server has given up on, whose completion it refuses anyway). Worker clocks must agree with
the server's to well within that timeout (NTP), as Temporal's timers already assume.

A run still cached on its worker meets the same history by another road. A query that reached the
server while a workflow task was running waits for that task; when the task ends with nothing
new, the server sends the query on by itself, and an event arriving just then (an activity's
result, a signal) comes with it, before the workflow task it schedules. The SDK applies those
events to the cached run live, on the clock of its last workflow task, and the real task then
applies the rest in an activation of its own: the simulated autoscaler's timer was armed once
more than in any replay (`Timer machine does not handle ActivityTaskScheduled` after a server
restart). So a live run also refuses an activation that brings history events its last workflow
task did not have (its history length grew) on a clock no later than that task's; refused (with a
message of its own, which admitflow's client also asks again on), the run is evicted and its real
task replays it. What follows in one workflow task never grows the history:
a local activity's result, or an activity cancelled with TRY_CANCEL, come on the same clock and
length and pass.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import structlog
from temporalio.bridge.proto.workflow_activation import WorkflowActivation
from temporalio.bridge.proto.workflow_completion import WorkflowActivationCompletion
from temporalio.worker import WorkflowInstance, WorkflowInstanceDetails, WorkflowRunner

from admitflow.contract import EVENTS_WITHOUT_TASK_REFUSED, STALE_QUERY_REFUSED

# The query's failures; admitflow's client asks again when it sees either.
REFUSED = STALE_QUERY_REFUSED
REFUSED_EVENTS = EVENTS_WITHOUT_TASK_REFUSED

log = structlog.get_logger("admitflow.worker")


def _brings_events(act: WorkflowActivation) -> bool:
    """Whether `act` carries more than queries or an eviction."""
    return not all(job.WhichOneof("variant") in ("query_workflow", "remove_from_cache") for job in act.jobs)


def _clock(act: WorkflowActivation) -> float:
    """The activation's workflow time, seconds since the epoch."""
    return act.timestamp.ToNanoseconds() / 1e9


def stale(act: WorkflowActivation, last_replayed: float | None, max_age: float, now: float | None = None) -> bool:
    """Whether `act`, a run's first activation after replaying `last_replayed` (the time of the last
    replayed activation, seconds since the epoch; None: nothing was replayed), runs new events on
    a clock no new workflow task can have."""
    if act.is_replaying or last_replayed is None or not act.HasField("timestamp") or not _brings_events(act):
        return False
    at = _clock(act)
    return at <= last_replayed or (time.time() if now is None else now) - at >= max_age


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


def without_a_task(task: Task | None, last: Task | None) -> bool:
    """Whether a live run's activation at `task` brings history events with no new workflow task:
    its history grew since `last` and its clock did not move on (a query sent on by itself, with
    the events that arrived meanwhile)."""
    return task is not None and last is not None and task.length > last.length and task.at <= last.at


class StaleActivationGuard(WorkflowRunner):
    """Wraps the worker's workflow runner (not the Replayer's: a replayed history that ends in new
    events is meant to run them)."""

    def __init__(self, runner: WorkflowRunner, max_age: timedelta) -> None:
        self.runner = runner
        self.max_age = max_age.total_seconds()

    def prepare_workflow(self, defn: Any) -> None:
        self.runner.prepare_workflow(defn)

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        return _Guarded(self.runner.create_instance(det), self.max_age, det.info.workflow_id)

    def set_worker_level_failure_exception_types(self, types: Sequence[type[BaseException]]) -> None:
        self.runner.set_worker_level_failure_exception_types(types)


class _Guarded(WorkflowInstance):
    def __init__(self, instance: WorkflowInstance, max_age: float, workflow_id: str = "") -> None:
        self.instance = instance
        self.max_age = max_age
        self.workflow_id = workflow_id
        self.last_replayed: float | None = None
        # The furthest history any activation ran on, replayed or live.
        self.last_task: Task | None = None
        self.live = False
        # When the run reached this worker: a workflow task's age is judged then, not after its
        # history is replayed, which takes as long as the history is long. Judged after, a replay
        # longer than the sticky timeout made its own task look stale, every attempt of it.
        self.arrived: float | None = None

    def activate(self, act: WorkflowActivation) -> WorkflowActivationCompletion:
        task = task_of(act)
        last = self.last_task
        if self.live and without_a_task(task, last):
            log.warning(
                "refused.events_without_a_workflow_task", workflow_id=self.workflow_id, run_id=act.run_id,
                history_length=act.history_length, last_history_length=last.length if last else None,
            )
            return self._refuse(act, REFUSED_EVENTS)
        if task is not None:
            self.last_task = task if last is None else Task(max(task.at, last.at), max(task.length, last.length))
        if not self.live:
            if self.arrived is None:
                self.arrived = time.time()
            if act.is_replaying:
                if act.HasField("timestamp") and act.timestamp.seconds:
                    self.last_replayed = _clock(act)
            elif stale(act, self.last_replayed, self.max_age, now=self.arrived):
                return self._refuse(act, REFUSED)
            else:
                self.live = True
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
