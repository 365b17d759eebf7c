"""A workload's whole lifecycle as one pure transition: decide, then execute.

`step(state, event, now, random) -> (state, [Command])` owns every rule of a workload: what each
message does to its status (through the rules in `workload`, `checks`, `pods_ready` and
`provisioning`), and what must be done about it. `WorkloadWorkflow` only turns messages into
events, runs `step`, and carries out the commands; so the same events always give the same
commands, and a property test can drive `step` through any interleaving.

Events change the state; most give no command. `Settle`, which the workflow steps after every
batch of messages (all that one workflow task brought) and every timer, compares what the state
calls for with what is under way and orders the difference: enqueue or release the workload,
tell its ClusterQueue it is admitted, ask controllers, start or stop ProvisioningRequest attempts
and the runner, tell the blockAdmission gate. Batching is why a `Retry` without delay and a
`Retry` with a delay in one workflow task wait for the longer one.

`step` never raises: an event it cannot apply leaves the state as it was and is recorded as a
Warning event (`EventNotApplied`), so no message can fail a workflow task. So is a message whose
payload the worker could not decode (an `Undecodable` payload, admitflow.codec), with the reason;
a verdict's goes to the verdict log instead, as any invalid verdict's does.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Any, Literal, Union

from pydantic import Field, ValidationError

from admitflow import ids
from admitflow.admission import admission_gates, check_timeouts, checks, pod_set_updates, pods_ready, priority, provisioning, retention
from admitflow.admission import conditions as cond
from admitflow.admission import workload as wl
from admitflow.admission.catalog import QueueResolution
from admitflow.admission.checks import CheckRequest
from admitflow.admission.cluster_queue import Notice, QueueEntry
from admitflow.admission.conditions import second
from admitflow.admission.provisioning import Plan
from admitflow.admission.workload import WorkloadState
from admitflow.messages import (
    DeleteWorkload,
    EnqueueRequest,
    FinishRequest,
    GateSettled,
    ProvisioningUpdate,
    ReleaseRequest,
    Reprioritize,
    StartWorkload,
    StopWorkload,
)
from admitflow.wire import Fact, Undecodable, first_error

# While a ProvisioningRequest attempt is current or being deleted, its workflow is checked this
# often for being alive (an operator may terminate it, and then nothing would report its end).
PROBE_INTERVAL = timedelta(minutes=5)
# After a refused start: the run holding the ID may have reported its end already and be closing
# (its report came first), so nothing else would say when it is gone.
REFUSED_PROBE = timedelta(seconds=5)
# The Warning event of a report (finish) about an admission that is over.
STALE_REPORT = "StaleRunnerReport"
# The Normal event of a `start_workload` sent again for the admission its runner lost.
RUNNER_RESTARTED = "RunnerRestarted"
# A `start_workload` whose heartbeats stopped (its runner died, or the task was lost on its way in a
# server restart), or that its runner's own shutdown ended, is started again for the same admission,
# as a Job's controller replaces a lost or drained pod; at most this many times per admission (a
# Job's default backoffLimit), so that a runner that loses every run cannot grow the history for
# ever. After that the PodsReady timeouts decide, as before.
RUNNER_RESTARTS = 6
# The Warning event of a check whose pendingTimeout ran out (admitflow.admission.check_timeouts).
PENDING_TIMEOUT_REASON = "AdmissionCheckPendingTimeout"
MAX_EXECUTION_CAUSE = "MaximumExecutionTimeExceeded"
MAX_EXECUTION_MESSAGE = "The workload is deactivated due to exceeding the maximum execution time"
NOT_APPLIED = "EventNotApplied"


# --- events: everything that can happen to a workload ---------------------------------------------


class Started(Fact):
    """A run begins (the first, or after continue-as-new): nothing of an earlier run is under way."""

    kind: Literal["Started"] = "Started"


class QueueNoticed(Fact):
    """Its ClusterQueue said something (`quota_reserved`, `pending_status`, `dequeued`, `evicted`,
    `admission_checks_changed`); the payload is parsed here, so a malformed one is refused."""

    kind: Literal["QueueNoticed"] = "QueueNoticed"
    signal: str
    payload: Any = None


class QueueAppeared(Fact):
    """The catalog: its LocalQueue now leads somewhere. (This and the other messages that need
    nothing from their payload carry it only when it could not be decoded: then they are refused.)"""

    kind: Literal["QueueAppeared"] = "QueueAppeared"
    payload: Any = None


class EnqueueResolved(Fact):
    kind: Literal["EnqueueResolved"] = "EnqueueResolved"
    ticket: int
    resolution: QueueResolution


class VerdictReceived(Fact):
    """`set_admission_check_state` (signal) or `apply_admission_check_state` (update), as sent."""

    kind: Literal["VerdictReceived"] = "VerdictReceived"
    payload: Any = None


class ControllerAnswered(Fact):
    """A controller's `admission_check` activity came back: a result, or the message of its error."""

    kind: Literal["ControllerAnswered"] = "ControllerAnswered"
    check: str
    attempt: int
    result: Any = None
    error: str = ""


class ProvisioningReported(Fact):
    """An attempt's workflow says how its request is now (`provisioning_request_updated`)."""

    kind: Literal["ProvisioningReported"] = "ProvisioningReported"
    payload: Any = None


class ProvisioningEnded(Fact):
    """An attempt's workflow is gone: it said so (`provisioning_request_deleted`), it ended, or
    signalling it found nothing."""

    kind: Literal["ProvisioningEnded"] = "ProvisioningEnded"
    payload: Any = None
    workflow_id: str = ""


class ProvisioningStartRefused(Fact):
    """An earlier run of the attempt still holds its workflow ID (its request was deleted by
    someone else and it is ending)."""

    kind: Literal["ProvisioningStartRefused"] = "ProvisioningStartRefused"
    check: str
    attempt: int
    workflow_id: str


class PodsReadyReported(Fact):
    kind: Literal["PodsReadyReported"] = "PodsReadyReported"
    payload: Any = None


class RunnerStopped(Fact):
    """The runner's `start_workload` for an admission ended on its own: it `returned`, or `failed`
    (`error` says why), was `lost` (its heartbeats stopped: the runner died, or its task was lost in
    a server restart) or `drained` (its runner's own shutdown ended it: stopped, drained, rolled to
    a new version)."""

    kind: Literal["RunnerStopped"] = "RunnerStopped"
    admission: int
    ending: Literal["returned", "failed", "lost", "drained"] = "returned"
    error: str = ""


class AdmissionGatesRemoved(Fact):
    """`remove_admission_gates` (signal) or `apply_admission_gate_removal` (update), as sent."""

    kind: Literal["AdmissionGatesRemoved"] = "AdmissionGatesRemoved"
    payload: Any = None


class PriorityChangeRequested(Fact):
    """`apply_priority` (update), as sent."""

    kind: Literal["PriorityChangeRequested"] = "PriorityChangeRequested"
    payload: Any = None


class Deactivated(Fact):
    kind: Literal["Deactivated"] = "Deactivated"
    payload: Any = None


class Activated(Fact):
    kind: Literal["Activated"] = "Activated"
    payload: Any = None


class FinishRequested(Fact):
    kind: Literal["FinishRequested"] = "FinishRequested"
    payload: Any = None


class DeleteRequested(Fact):
    kind: Literal["DeleteRequested"] = "DeleteRequested"
    payload: Any = None


class TimerFired(Fact):
    """The time `next_wake` named has come. Every decision that depends on time is made here, on
    `at` (the deadline the timer was set for), never on the clock of whichever workflow task runs
    it: a replay that reads another clock (a task that timed out while its worker died) still takes
    the same branches."""

    kind: Literal["TimerFired"] = "TimerFired"
    at: datetime | None = Field(default=None, description="The deadline it was set for; None: `now`.")


class Settle(Fact):
    """A batch of messages, or a timer, has been stepped: order what the state now calls for."""

    kind: Literal["Settle"] = "Settle"


Event = Annotated[
    Union[
        Started, QueueNoticed, QueueAppeared, EnqueueResolved, VerdictReceived, ControllerAnswered,
        ProvisioningReported, ProvisioningEnded, ProvisioningStartRefused, PodsReadyReported, RunnerStopped,
        AdmissionGatesRemoved, PriorityChangeRequested, Deactivated, Activated, FinishRequested, DeleteRequested, TimerFired, Settle,
    ],
    Field(discriminator="kind"),
]


# --- commands: everything a workload does ----------------------------------------------------------


class Enqueue(Fact):
    """Look its LocalQueue up and put the ticket in that ClusterQueue; answers `EnqueueResolved`."""

    kind: Literal["Enqueue"] = "Enqueue"
    request: EnqueueRequest


class TellQueue(Fact):
    """Signal its ClusterQueue: `release` (quota or place given back), `admitted`, or `reprioritize`."""

    kind: Literal["TellQueue"] = "TellQueue"
    signal: Literal["release", "admitted", "reprioritize"]
    cluster_queue: str
    request: Reprioritize | ReleaseRequest


class AskController(Fact):
    """Run activity `admission_check` on the controller's task queue; answers `ControllerAnswered`."""

    kind: Literal["AskController"] = "AskController"
    task_queue: str
    request: CheckRequest


class StopAsking(Fact):
    kind: Literal["StopAsking"] = "StopAsking"
    check: str


class StartProvisioning(Fact):
    """Start the attempt's ProvisioningCheckWorkflow; answers `ProvisioningStartRefused` if its ID
    is taken, and `ProvisioningEnded` when it ends."""

    kind: Literal["StartProvisioning"] = "StartProvisioning"
    plan: Plan


class TellProvisioning(Fact):
    """Signal an attempt's workflow; answers `ProvisioningEnded` when it is gone. `probe` only
    checks that it is alive."""

    kind: Literal["TellProvisioning"] = "TellProvisioning"
    workflow_id: str
    signal: Literal["delete_provisioning_request", "pods_scheduled", "probe"]
    reason: str = ""


class StartRunner(Fact):
    """Run `start_workload` on the runner's task queue; answers `RunnerStopped` when it ends."""

    kind: Literal["StartRunner"] = "StartRunner"
    task_queue: str
    request: StartWorkload


class StopRunner(Fact):
    """Cancel the running `start_workload` and run `stop_workload`."""

    kind: Literal["StopRunner"] = "StopRunner"
    task_queue: str
    request: StopWorkload


class TellGate(Fact):
    """Signal the blockAdmission gate: `settled` (ready, or gone) or `unsettled` (not ready again)."""

    kind: Literal["TellGate"] = "TellGate"
    signal: Literal["settled", "unsettled"]
    request: GateSettled


Command = Annotated[
    Union[Enqueue, TellQueue, AskController, StopAsking, StartProvisioning, TellProvisioning, StartRunner, StopRunner, TellGate],
    Field(discriminator="kind"),
]


# --- the transition -------------------------------------------------------------------------------


def step(state: WorkloadState, event: Any, now: datetime, random: float) -> tuple[WorkloadState, list[Any]]:
    """The state after `event` at `now`, and what to do. `random` in [0, 1) draws the jitter of
    backoffs. Total: any event in any state returns; one it cannot apply leaves the state as it
    was, with a Warning event saying why."""
    new = _copy(state)
    payload = getattr(event, "payload", None)
    if isinstance(payload, Undecodable) and not isinstance(event, VerdictReceived):
        wl.record(new, NOT_APPLIED, f"{type(event).__name__} not applied: {payload.reason}", now, "Warning")
        return new, []
    try:
        return new, _HANDLERS[type(event)](new, event, now, random)
    except Exception as err:  # noqa: BLE001 - no message may fail a workflow task
        kept = _copy(state)
        wl.record(kept, NOT_APPLIED, f"{type(event).__name__} not applied: {type(err).__name__}: {err}", now, "Warning")
        return kept, []


def _copy(state: WorkloadState) -> WorkloadState:
    """A copy `step` may change, leaving `state` as it was: the state dumped and validated again,
    which pydantic's core does in about a third of the time of a deep copy (the copy per event was 5 %
    of the engine worker's CPU in bench/kueue_baseline.py). The same round trip every continue-as-new
    makes of the state, in Python objects rather than JSON."""
    return WorkloadState.model_validate(state.model_dump(round_trip=True))


def runner_ended(admission: int, result: Any, ending: Literal["returned", "failed", "lost", "drained"], error: str = "") -> list[Any]:
    """The events the end of `start_workload` for `admission` stands for. A run that returned a value
    returned its finish (docs/runners.md: `succeeded`, `message`), about that admission whatever it
    names; a value that is no finish is refused as a `finish` signal would be."""
    events: list[Any] = []
    if ending == "returned" and result is not None:
        payload = {**result, "admission": admission} if isinstance(result, dict) else result
        events.append(FinishRequested(payload=payload))
    events.append(RunnerStopped(admission=admission, ending=ending, error=error))
    return events


def workflow_id(state: WorkloadState) -> str:
    return ids.workload_id(state.key)


def _started(st: WorkloadState, ev: Started, now: datetime, random: float) -> list[Any]:
    # What an earlier run had under way did not come along; Settle asks again.
    st.asking = {}
    st.enqueuing = None
    st.runner_running = None
    return _probes(st, now)


def _probes(st: WorkloadState, now: datetime) -> list[Any]:
    """Check that every attempt's workflow is alive (a gone one is reported as ended)."""
    ids_ = [a.workflow_id for a in st.provisioning.values()] + list(st.stopping)
    st.probe_at = second(now) + PROBE_INTERVAL if ids_ else None
    return [TellProvisioning(workflow_id=i, signal="probe") for i in ids_]


def _queue_noticed(st: WorkloadState, ev: QueueNoticed, now: datetime, random: float) -> list[Any]:
    try:
        n = Notice.model_validate(ev.payload)
    except ValidationError as err:
        wl.record(st, "InvalidQueueNotice", f"{ev.signal}: {first_error(err, 'notice')}", now, "Warning")
        return []
    # The queue took the enqueue and answered before the enqueue's own answer reached this run: its
    # workflow task timed out or failed after the local activity, and the next attempt gets the
    # queue's signal first, even before it decides to enqueue that ticket again (when the signal
    # comes in the batch that makes it enqueue: an eviction, say). Dropped, a reservation would leave
    # the quota held for good.
    awaited = n.ticket == (st.enqueuing if st.enqueuing is not None else st.ticket + 1)
    if awaited and n.uid == st.workload.metadata.uid:
        st.early_notices.append(QueueNoticed(signal=ev.signal, payload=ev.payload).model_dump(mode="json"))
        return []
    return _apply_notice(st, n, now)


def _apply_notice(st: WorkloadState, n: Notice, now: datetime) -> list[Any]:
    if n.kind == "reserved" and wl.accepts(st, n) and n.assignment is not None:
        wl.reserve_quota(st, n, now)
        st.asked_now = {}
        st.gate_member = n.gated
        if not n.admission_checks:
            st.told_admitted = st.ticket  # its queue counts it admitted along with the reservation
    elif n.kind == "pending" and wl.accepts(st, n):
        wl.set_pending(st, n.reason, n.message, now)
        wl.take_checks_before_reservation(st, n.admission_checks, now)
    elif n.kind == "checks" and wl.accepts_eviction(st, n):
        wl.take_checks(st, n, now)
        checks.reconcile(st, now)
    elif n.kind == "dequeued" and wl.accepts(st, n):
        wl.sent_back(st, n.reason, n.message, now)
        st.holder = None  # the queue let it go itself
    elif n.kind == "evicted" and wl.accepts_eviction(st, n):
        wl.evict(st, n.reason, n.message, now, preemption_reason=n.preemption_reason)
    elif n.kind == "evicted" and wl.accepts(st, n):
        # Its queue reserved the ticket this run is queued with and told it only in the enqueue's
        # answer, which this run never got (the workflow task that had it failed, or a reset went back
        # before it, and the enqueue sent again found the reservation evicted or released), then
        # evicted it: evicted all the same, and the ticket given back (an eviction waits for it).
        wl.evict(st, n.reason, n.message, now, preemption_reason=n.preemption_reason, unheard=True)
        st.queued = False
        st.holder, st.holder_queue = st.ticket, n.cluster_queue or st.cluster_queue
    return []


def _queue_appeared(st: WorkloadState, ev: QueueAppeared, now: datetime, random: float) -> list[Any]:
    st.waiting_for_queue = False
    return []


def _enqueue_resolved(st: WorkloadState, ev: EnqueueResolved, now: datetime, random: float) -> list[Any]:
    if ev.ticket != st.enqueuing:
        return []
    st.enqueuing = None
    r = ev.resolution
    if r.reason:
        st.early_notices = []
        # The catalog now knows to wake this workload when the queue exists.
        st.waiting_for_queue = True
        if r.cluster_queue:
            st.cluster_queue = r.cluster_queue
        wl.set_pending(st, r.reason, r.message, now)
        return []
    st.cluster_queue = r.cluster_queue
    st.holder, st.holder_queue = ev.ticket, r.cluster_queue or ""
    st.sent_back = False
    # Queued, unless something it heard meanwhile keeps it out (Settle then gives the place back).
    st.queued = _wants_queue(st)
    early, st.early_notices = st.early_notices, []
    for e in early:
        _queue_noticed(st, QueueNoticed.model_validate(e), now, random)
    return []


def _verdict(st: WorkloadState, ev: VerdictReceived, now: datetime, random: float) -> list[Any]:
    checks.receive(st, ev.payload, now, random)
    return []


def _answered(st: WorkloadState, ev: ControllerAnswered, now: datetime, random: float) -> list[Any]:
    if st.asking.get(ev.check) == ev.attempt:
        del st.asking[ev.check]
    checks.answer(st, ev.check, ev.attempt, ev.result, ev.error, now, random)
    return []


def _provisioning_reported(st: WorkloadState, ev: ProvisioningReported, now: datetime, random: float) -> list[Any]:
    try:
        u = ProvisioningUpdate.model_validate(ev.payload)
    except ValidationError as err:
        wl.record(st, "InvalidProvisioningReport", first_error(err, "report"), now, "Warning")
        return []
    provisioning.report(st, u.check, u.attempt, u.request, u.error, now, random)
    return []


def _provisioning_ended(st: WorkloadState, ev: ProvisioningEnded, now: datetime, random: float) -> list[Any]:
    if ev.workflow_id:
        for check, a in list(st.provisioning.items()):
            if a.workflow_id == ev.workflow_id:
                provisioning.stopped(st, check, a.attempt)
        st.stopping = [w for w in st.stopping if w != ev.workflow_id]
        return []
    try:
        u = ProvisioningUpdate.model_validate(ev.payload)
    except ValidationError as err:
        wl.record(st, "InvalidProvisioningReport", first_error(err, "report"), now, "Warning")
        return []
    provisioning.stopped(st, u.check, u.attempt)
    return []


def _provisioning_refused(st: WorkloadState, ev: ProvisioningStartRefused, now: datetime, random: float) -> list[Any]:
    current = provisioning.attempt_for(st, ev.check, ev.attempt)
    if current is not None:
        del st.provisioning[ev.check]
    # It starts again once the run holding the ID has ended (it reports so, or the probe finds it gone).
    if ev.workflow_id not in st.stopping:
        st.stopping.append(ev.workflow_id)
    soon = second(now) + REFUSED_PROBE
    st.probe_at = soon if st.probe_at is None else min(st.probe_at, soon)
    return [TellProvisioning(workflow_id=ev.workflow_id, signal="delete_provisioning_request", reason="restart")]


def _pods_ready(st: WorkloadState, ev: PodsReadyReported, now: datetime, random: float) -> list[Any]:
    try:
        pods_ready.report(st, ev.payload, now)
    except pods_ready.PodsReadyError as err:
        wl.record(st, "InvalidPodsReadyReport", str(err), now, "Warning")
    return []


def _runner_stopped(st: WorkloadState, ev: RunnerStopped, now: datetime, random: float) -> list[Any]:
    if st.runner_running != ev.admission:
        return []  # this workload stopped it: that admission is over
    st.runner_running = None
    if ev.ending != "returned" and ev.admission == st.ticket:
        pods_ready.runner_lost(st, ev.error or ev.ending, now)
        # A runner cut off from Temporal may still run the command (as a node's pods run on when
        # the node loses the API server): when the admission ends, it is told to stop.
        st.runner_lost = ev.admission
        if ev.ending in ("lost", "drained") and st.runner_restarts < RUNNER_RESTARTS:
            st.runner_restart = ev.admission  # `_runner` starts it again while the admission wants it
    return []


def _gates_removed(st: WorkloadState, ev: AdmissionGatesRemoved, now: datetime, random: float) -> list[Any]:
    admission_gates.receive(st, ev.payload, now)
    return []


def _priority_changed(st: WorkloadState, ev: PriorityChangeRequested, now: datetime, random: float) -> list[Any]:
    if not priority.receive(st, ev.payload, now) or st.holder is None:
        return []
    # Its ClusterQueue holds its place or its quota: the entry or the reservation takes the new priority.
    return [_tell_queue(st, "reprioritize")]


def _deactivated(st: WorkloadState, ev: Deactivated, now: datetime, random: float) -> list[Any]:
    if st.workload.spec.active is not False and not wl.is_finished(st) and not st.deleted:
        checks.deactivate(st, now)
    return []


def _activated(st: WorkloadState, ev: Activated, now: datetime, random: float) -> list[Any]:
    if not wl.is_finished(st) and not st.deleted:
        checks.activate(st, now)
    return []


def _finish(st: WorkloadState, ev: FinishRequested, now: datetime, random: float) -> list[Any]:
    try:
        r = FinishRequest.model_validate(ev.payload if ev.payload is not None else {})
    except ValidationError as err:
        wl.record(st, "InvalidFinishRequest", first_error(err, "finish"), now, "Warning")
        return []
    if r.admission is not None and r.admission != st.ticket:
        wl.record(st, STALE_REPORT, f"finish about admission {r.admission} ignored: the workload is at admission {st.ticket}", now, "Warning")
        return []
    if r.admission is not None and r.admission == st.runner_running:
        # Its runner's own report: the run ends by itself (`start_workload` returns), nothing to stop.
        st.runner_running = None
    wl.finish(st, r.succeeded, r.message, now)
    return []


def _delete(st: WorkloadState, ev: DeleteRequested, now: datetime, random: float) -> list[Any]:
    try:
        DeleteWorkload.model_validate(ev.payload if ev.payload is not None else {})
    except ValidationError:
        pass  # a deletion needs nothing from its payload
    wl.delete(st)
    return []


def _timer(st: WorkloadState, ev: TimerFired, now: datetime, random: float) -> list[Any]:
    at = ev.at or now
    if checks.in_backoff(st) and checks.requeue_at(st) <= at:
        checks.finish_backoff_if_due(st, at)
    for name in [n for n, when in st.ask_again_at.items() if when <= at]:
        del st.ask_again_at[name]  # its controller is asked again (Settle)
    settings = st.wait_for_pods_ready
    due = pods_ready.deadline(st, settings)
    if settings is not None and due is not None and due[0] <= at:
        pods_ready.time_out(st, settings, due[1], now, random)
    for v in check_timeouts.due(st, at, random):
        wl.record(st, PENDING_TIMEOUT_REASON, f"Admission check {v.name}: {v.message}", now, "Warning")
        checks.apply(st, v, now, random)
    limit = execution_deadline(st)
    if limit is not None and limit <= at:
        seconds = st.workload.spec.maximum_execution_time_seconds
        wl.record(st, MAX_EXECUTION_CAUSE, f"The maximum execution time ({seconds}s) exceeded", now, "Warning")
        checks.deactivate(st, now, cause=MAX_EXECUTION_CAUSE, message=MAX_EXECUTION_MESSAGE)
    if retention.delete_if_due(st, at, now):
        return []
    if st.probe_at is not None and st.probe_at <= at:
        return _probes(st, now)
    return []


def execution_deadline(st: WorkloadState) -> datetime | None:
    """When an admitted workload has run its `maximumExecutionTimeSeconds` (Kueue counts the time
    of earlier admissions too, in `accumulatedPastExecutionTimeSeconds`)."""
    limit = st.workload.spec.maximum_execution_time_seconds
    admitted = cond.find(st.status.conditions, wl.ADMITTED)
    if limit is None or not wl.is_admitted(st) or wl.is_finished(st) or admitted is None or admitted.last_transition_time is None:
        return None
    spent = st.status.accumulated_past_execution_time_seconds or 0
    return admitted.last_transition_time + timedelta(seconds=max(0, limit - spent))


# --- Settle: what the state calls for, against what is under way ----------------------------------


def _settle(st: WorkloadState, ev: Settle, now: datetime, random: float) -> list[Any]:
    out: list[Any] = []
    out += _provision(st, now, random)
    if checks.requeue_at(st) is None:
        checks.finish_backoff_if_due(st, now)  # requeued at once; a timed backoff ends on its timer
    out += _admission(st, now)
    out += _release(st)
    out += _runner(st, now)
    out += _gate(st)
    admission_gates.sync(st, now)
    out += _enqueue(st)
    out += _give_back_unasked_ticket(st)
    out += _ask(st, now)
    return out


def _provision(st: WorkloadState, now: datetime, random: float) -> list[Any]:
    """The built-in ProvisioningRequest check: attempts to start and delete, and the check states
    that need no request."""
    cmds, verdicts = provisioning.reconcile(st)
    for v in verdicts:
        checks.apply(st, v, now, random)
    out: list[Any] = [
        TellProvisioning(workflow_id=a.workflow_id, signal="delete_provisioning_request", reason=wl.phase(st)) for a in cmds.stop
    ]
    out += [StartProvisioning(plan=p) for p in cmds.start]
    if out and st.probe_at is None:
        st.probe_at = second(now) + PROBE_INTERVAL
    return out


def _admission(st: WorkloadState, now: datetime) -> list[Any]:
    """A newly admitted workload: what its pods start with, its queue told, its provisioned
    capacity told that the pods come."""
    if not (wl.is_admitted(st) and wl.has_quota(st)) or wl.is_finished(st) or st.deleted:
        return []
    out: list[Any] = []
    if st.admission_done != st.ticket:
        try:
            wl.set_pod_sets_info(st)
        except pod_set_updates.PodSetUpdateConflict as err:
            wl.finish(st, False, str(err), now, reason="FailedToStart")
            return []
        st.admission_done = st.ticket
        out += [TellProvisioning(workflow_id=a.workflow_id, signal="pods_scheduled", reason="Admitted") for a in st.provisioning.values()]
    if st.told_admitted != st.ticket and st.holder == st.ticket:
        st.told_admitted = st.ticket
        out.append(_tell_queue(st, "admitted"))
    return out


def _claims_queue(st: WorkloadState) -> bool:
    """It holds quota in its ClusterQueue, or a place there."""
    return (wl.has_quota(st) and not wl.is_finished(st) and not st.deleted) or st.queued


def _release(st: WorkloadState) -> list[Any]:
    if st.holder is None or _claims_queue(st) or st.enqueuing is not None:
        return []
    command = _tell_queue(st, "release")
    st.holder = None
    return [command]


def _give_back_unasked_ticket(st: WorkloadState) -> list[Any]:
    """Its queue has the next ticket, which this run has decided not to enqueue: an attempt of an
    earlier workflow task enqueued it and timed out, and the attempt that counted, with more messages
    (a deactivation, a Retry's backoff), decided otherwise. The queue said so (the notice waits in
    `early_notices`); the run takes the ticket as its own and releases it to the ClusterQueue the
    notice names (that enqueue looked its LocalQueue up afresh, and when it was the run's very first,
    the run knows no other), and the queue settles the blockAdmission gate if it reserved the ticket
    with its grant. Kept, it would hold the queue's quota for a workload that does not want it; the
    next enqueue takes the ticket after it."""
    if st.enqueuing is not None or not st.early_notices:
        return []
    if st.holder is not None or _claims_queue(st):
        return []
    unasked = [n for n in (Notice.model_validate(e["payload"]) for e in st.early_notices) if n.ticket == st.ticket + 1]
    named = next((n.cluster_queue for n in unasked if n.cluster_queue), None)
    queue = named or st.cluster_queue
    if not unasked or not queue:
        return []
    st.early_notices = []
    st.ticket += 1
    st.holder, st.holder_queue = st.ticket, queue
    return _release(st)


def replaces(then: TellQueue, waiting: TellQueue) -> bool:
    """Whether the notice `then` makes one still `waiting` to be sent needless: a `release` of the
    reservation an `admitted` notice is about says all its queue needs (the queue drops the
    reservation, admitted or not)."""
    return (
        waiting.signal == "admitted" and then.signal == "release"
        and (then.cluster_queue, then.request) == (waiting.cluster_queue, waiting.request)
    )


def _tell_queue(st: WorkloadState, signal: Literal["release", "admitted", "reprioritize"]) -> TellQueue:
    ticket = st.holder if st.holder is not None else st.ticket
    request = ReleaseRequest(key=st.key, uid=st.workload.metadata.uid, ticket=ticket)
    if signal == "reprioritize":
        request = Reprioritize(**request.model_dump(), priority=st.workload.spec.priority or 0)
    return TellQueue(signal=signal, cluster_queue=st.holder_queue or st.cluster_queue or "", request=request)


def _runner(st: WorkloadState, now: datetime) -> list[Any]:
    """The runner starts an admitted workload once per admission, again when that run was lost or
    drained (up to RUNNER_RESTARTS times), and stops a run whose admission is over."""
    runner = wl.runner_of(st)
    wanted = bool(runner) and wl.is_admitted(st) and wl.has_quota(st) and not wl.is_finished(st) and not st.deleted
    restart = st.runner_restart == st.ticket  # set only for the admission its runner was asked to start
    if wanted and st.runner_running is None and (st.runner_started != st.ticket or restart):
        if restart:
            st.runner_restarts += 1  # runner_lost stays: a copy cut off elsewhere is told to stop too
            wl.record(st, RUNNER_RESTARTED, f"start_workload sent again for admission {st.ticket} "
                      f"({st.runner_restarts} of at most {RUNNER_RESTARTS})", now)
        else:
            st.runner_restarts = 0
        st.runner_restart = None
        st.runner_started = st.runner_running = st.ticket
        return [StartRunner(task_queue=runner, request=StartWorkload(
            workflow_id=workflow_id(st), admission=st.ticket, workload=st.workload.to_wire(), pod_sets_info=st.pod_sets_info or [],
        ))]
    if not wanted and (st.runner_running is not None or st.runner_lost is not None):
        st.runner_running = st.runner_lost = st.runner_restart = None
        return [StopRunner(task_queue=runner, request=StopWorkload(
            workflow_id=workflow_id(st), admission=st.runner_started, reason=wl.phase(st), message=wl.condition_summary(st),
        ))]
    return []


def _gate(st: WorkloadState) -> list[Any]:
    """blockAdmission: the gate counts a workload reserved with its grant whenever it holds quota
    and is not ready, as Kueue counts every admitted workload that is not ready."""
    holds = wl.has_quota(st) and not wl.is_finished(st) and not st.deleted
    if not holds:
        st.gate_member = False
    counted = st.gate_member and holds and not pods_ready.is_ready(st)
    if counted == st.gated:
        return []
    st.gated = counted
    request = GateSettled(key=st.key, uid=st.workload.metadata.uid, ticket=st.ticket)
    return [TellGate(signal="unsettled" if counted else "settled", request=request)]


def _wants_queue(st: WorkloadState) -> bool:
    return (
        st.workload.spec.active is not False
        and not wl.is_finished(st)
        and not st.deleted
        and not wl.has_quota(st)
        and not checks.in_backoff(st)
        and not admission_gates.holds_back(st)
    )


def _enqueue(st: WorkloadState) -> list[Any]:
    if not _wants_queue(st) or st.queued or st.waiting_for_queue or st.enqueuing is not None or st.holder is not None:
        return []
    spec = st.workload.spec
    st.ticket += 1
    st.enqueuing = st.ticket
    entry = QueueEntry(
        key=st.key, uid=st.workload.metadata.uid, ticket=st.ticket, local_queue=spec.queue_name or "",
        priority=spec.priority or 0, timestamp=wl.queue_timestamp(st), pod_sets=st.pod_set_requests(),
    )
    fresh, st.sent_back = st.sent_back, False
    return [Enqueue(request=EnqueueRequest(
        namespace=st.workload.metadata.namespace, local_queue=spec.queue_name or "", workflow_id=workflow_id(st),
        entry=entry, fresh=fresh, answer=True,
    ))]


def _ask(st: WorkloadState, now: datetime) -> list[Any]:
    """Ask the controllers of the checks that wait for them, and stop asking what is no longer
    needed (answered by a signal, quota lost, finished)."""
    wanted = checks.to_ask(st)
    out: list[Any] = []
    for name in list(st.asking):
        if name not in wanted:
            del st.asking[name]
            out.append(StopAsking(check=name))
    for name in wanted:
        if name not in st.asking:
            attempt = checks.hand_out(st, name)
            st.asking[name] = attempt
            out.append(AskController(
                task_queue=st.checks_info[name].controller_name,
                request=checks.request(st, name, workflow_id(st), attempt),
            ))
    return out


# --- timers ---------------------------------------------------------------------------------------


def next_wake(st: WorkloadState) -> tuple[datetime, str] | None:
    """The one time the workload must wake up without a message, and why (the timer's summary in
    the UI): its backoff ends, its pods time out, a failed controller is asked again, its attempts'
    workflows are checked, its maximum execution time is up."""
    if wl.is_finished(st) or st.deleted:
        return None
    found: list[tuple[datetime, str]] = []
    if checks.in_backoff(st):
        found.append((checks.requeue_at(st), checks.backoff_summary(st)))
    due = pods_ready.deadline(st, st.wait_for_pods_ready)
    if due is not None and st.wait_for_pods_ready is not None:
        found.append((due[0], pods_ready.timer_summary(st.wait_for_pods_ready, due[1])))
    if wl.has_quota(st):
        for name, at in st.ask_again_at.items():
            found.append((at, f"ask the controller of {name} again"))
    for due in (check_timeouts.next_deadline(st), retention.deletion_due(st)):
        if due is not None:
            found.append(due)
    limit = execution_deadline(st)
    if limit is not None:
        found.append((limit, f"maximum execution time {st.workload.spec.maximum_execution_time_seconds}s"))
    if st.probe_at is not None:
        found.append((st.probe_at, "check that its ProvisioningRequest workflows run"))
    return min(found, key=lambda f: f[0]) if found else None


def may_continue_as_new(st: WorkloadState) -> bool:
    """Whether a run may end here for the next one (when the server suggests it): not while its
    runner runs it, since that run is tied to this workflow run. Few messages arrive meanwhile."""
    return st.runner_running is None


def way_forward(st: WorkloadState) -> str | None:
    """Why a workload that is not finished, deleted or inactive will move on, or None when nothing
    would ever move it (a wedge; the model test asserts this never happens)."""
    if wl.is_finished(st) or st.deleted or st.workload.spec.active is False:
        return "at rest"
    if st.enqueuing is not None:
        return "being enqueued"
    if st.queued:
        return "waiting in its queue for quota"
    if st.waiting_for_queue:
        return "waiting for its queue to exist"
    if admission_gates.holds_back(st):
        return "waiting for its admission gates to be removed"
    if next_wake(st) is not None:
        return "a timer"
    if wl.has_quota(st):
        if wl.is_admitted(st):
            return "admitted: its pods report"
        if any(c.state == "Pending" for c in st.status.admission_checks or ()):
            return "a verdict from a check it asked or is asking"
        return None
    return None


_HANDLERS: dict[type, Any] = {
    Started: _started,
    QueueNoticed: _queue_noticed,
    QueueAppeared: _queue_appeared,
    EnqueueResolved: _enqueue_resolved,
    VerdictReceived: _verdict,
    ControllerAnswered: _answered,
    ProvisioningReported: _provisioning_reported,
    ProvisioningEnded: _provisioning_ended,
    ProvisioningStartRefused: _provisioning_refused,
    PodsReadyReported: _pods_ready,
    RunnerStopped: _runner_stopped,
    AdmissionGatesRemoved: _gates_removed,
    PriorityChangeRequested: _priority_changed,
    Deactivated: _deactivated,
    Activated: _activated,
    FinishRequested: _finish,
    DeleteRequested: _delete,
    TimerFired: _timer,
    Settle: _settle,
}

