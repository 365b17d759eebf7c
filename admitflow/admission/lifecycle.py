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

Events are typed: each message is parsed once, at the workflow's edge (admitflow.admission.intake),
and what does not parse arrives as a `Refused` event, which `step` records. `step` never raises:
an event it cannot apply leaves the state as it was and is recorded as a Warning event
(`EventNotApplied`), so no message can fail a workflow task. `Driver` is the loop that steps a batch
and carries out its commands, for the workflow and its tests alike.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Annotated, Literal, Union

from pydantic import Field

from admitflow import contract, ids
from admitflow.admission import admission_gates, check_timeouts, checks, pod_set_updates, pods_ready, priority, provisioning, retention
from admitflow.admission import conditions as cond
from admitflow.admission import workload as wl
from admitflow.admission.admission_gates import GateRemoval
from admitflow.admission.catalog import QueueResolution
from admitflow.admission.checks import CheckRequest, Verdict
from admitflow.admission.cluster_queue import Notice
from admitflow.admission.conditions import second
from admitflow.admission.pending_queue import QueueEntry
from admitflow.admission.pods_ready import PodsReadyReport
from admitflow.admission.priority import PriorityChange
from admitflow.admission.provisioning import Plan
from admitflow.admission.workload import WorkloadState
from admitflow.admission.protocol import (
    EnqueueRequest,
    FinishRequest,
    GateSettled,
    ProvisioningUpdate,
    ReleaseRequest,
    Reprioritize,
    StartWorkload,
    StopWorkload,
)
from admitflow.wire import Fact

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
# `admitted` goes out to the ClusterQueue with the workload's next workflow task (a message, a timer),
# or this long after the task that decides it, whichever comes first; at once when the workload tells
# its queue something else, and not at all when what it tells is the release of that reservation.
# Sent from the deciding task, its delivery (recorded in the workload's history) would give the
# workload a second workflow task right behind it.
ADMITTED_DELAY = timedelta(seconds=1)
# Follow-up events (an enqueue's answer, a child found gone) settle again; this many rounds in one
# batch at most, the rest waits for the next message or timer.
MAX_ROUNDS = 20


# --- events: everything that can happen to a workload ---------------------------------------------


class Started(Fact):
    """A run begins (the first, or after continue-as-new): nothing of an earlier run is under way."""

    kind: Literal["Started"] = "Started"


class QueueNoticed(Fact):
    """Its ClusterQueue said something (`quota_reserved`, `pending_status`, `dequeued`, `evicted`,
    `admission_checks_changed`, or a notice carried in an enqueue's answer)."""

    kind: Literal["QueueNoticed"] = "QueueNoticed"
    notice: Notice


class QueueAppeared(Fact):
    """The catalog: its LocalQueue now leads somewhere."""

    kind: Literal["QueueAppeared"] = "QueueAppeared"


class EnqueueResolved(Fact):
    kind: Literal["EnqueueResolved"] = "EnqueueResolved"
    ticket: int
    resolution: QueueResolution


class VerdictReceived(Fact):
    """`set_admission_check_state` (signal) or `apply_admission_check_state` (update)."""

    kind: Literal["VerdictReceived"] = "VerdictReceived"
    verdict: Verdict


class ControllerAnswered(Fact):
    """A controller's `admission_check` activity came back: a verdict, or why it is none (`error`);
    `said` is the state it answered, as it said it."""

    kind: Literal["ControllerAnswered"] = "ControllerAnswered"
    check: str
    attempt: int
    verdict: Verdict | None = None
    said: str = ""
    error: str = ""


class ProvisioningReported(Fact):
    """An attempt's workflow says how its request is now (`provisioning_request_updated`)."""

    kind: Literal["ProvisioningReported"] = "ProvisioningReported"
    update: ProvisioningUpdate


class ProvisioningEnded(Fact):
    """An attempt's workflow is gone: it said so (`provisioning_request_deleted`, with its `update`),
    it ended, or signalling it found nothing (by `workflow_id`)."""

    kind: Literal["ProvisioningEnded"] = "ProvisioningEnded"
    update: ProvisioningUpdate | None = None
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
    report: PodsReadyReport


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
    """`remove_admission_gates` (signal) or `apply_admission_gate_removal` (update)."""

    kind: Literal["AdmissionGatesRemoved"] = "AdmissionGatesRemoved"
    removal: GateRemoval


class PriorityChangeRequested(Fact):
    """`apply_priority` (update)."""

    kind: Literal["PriorityChangeRequested"] = "PriorityChangeRequested"
    change: PriorityChange


class Deactivated(Fact):
    kind: Literal["Deactivated"] = "Deactivated"


class Activated(Fact):
    kind: Literal["Activated"] = "Activated"


class FinishRequested(Fact):
    kind: Literal["FinishRequested"] = "FinishRequested"
    request: FinishRequest


class DeleteRequested(Fact):
    kind: Literal["DeleteRequested"] = "DeleteRequested"


class Refused(Fact):
    """A message that does not parse (admission.intake): recorded, and nothing else changes. A
    verdict's goes to the verdict log with the `check` and `state` it named; any other message's is
    a Warning event `reason` with the one-line `detail`."""

    kind: Literal["Refused"] = "Refused"
    message: str = Field(description="The message refused: its signal or update name, or its event's.")
    reason: str
    detail: str
    check: str = ""
    state: str = ""


class TimerFired(Fact):
    """The time `next_wake` named has come. Every decision that depends on time is made here, on
    `at` (the deadline the timer was set for), never on the clock of whichever workflow task runs
    it: a replay that reads another clock (a task that timed out while its worker died) still takes
    the same branches."""

    kind: Literal["TimerFired"] = "TimerFired"
    at: datetime | None = Field(default=None, description="The deadline it was set for; None: `now`.")


class Settle(Fact):
    """A batch of messages, or a timer, has been stepped: order what the state now calls for. `first`
    is the batch's own Settle; the ones after it settle what its commands answered at once."""

    kind: Literal["Settle"] = "Settle"
    first: bool = True


Event = Annotated[
    Union[
        Started, QueueNoticed, QueueAppeared, EnqueueResolved, VerdictReceived, ControllerAnswered,
        ProvisioningReported, ProvisioningEnded, ProvisioningStartRefused, PodsReadyReported, RunnerStopped,
        AdmissionGatesRemoved, PriorityChangeRequested, Deactivated, Activated, FinishRequested, DeleteRequested, Refused,
        TimerFired, Settle,
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


def step(state: WorkloadState, event: Event, now: datetime, random: float) -> tuple[WorkloadState, list[Command]]:
    """The state after `event` at `now`, and what to do. `random` in [0, 1) draws the jitter of
    backoffs. Total: any event in any state returns; one it cannot apply leaves the state as it
    was, with a Warning event saying why."""
    new = _copy(state)
    try:
        return new, _apply(new, event, now, random)
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


class Driver:
    """Steps one batch of events (all that one workflow task brought), then a `Settle`, handing out
    each command to carry out; what a command answers at once (an enqueue's resolution, a child found
    gone) is stepped next and settled again, at most MAX_ROUNDS times (the rest waits for the next
    message or timer). The workload workflow carries out the commands; the tests answer them:

        driver = Driver(state, events, now, random)
        while (command := driver.next()) is not None:
            driver.answer(carry_out(command))
        state = driver.state

    `stepper` is `step`, or a stand-in that calls it (the lifecycle model checks its invariants after
    every step)."""

    def __init__(
        self, state: WorkloadState, events: list[Event], now: datetime, random: Callable[[], float],
        stepper: Callable[[WorkloadState, Event, datetime, float], tuple[WorkloadState, list[Command]]] | None = None,
    ) -> None:
        self.state = state
        self.now = now
        self._random = random
        self._step = stepper or step
        self._pending: list[Event] = [*events, Settle()]
        self._commands: list[Command] = []
        self._answers: list[Event] = []
        self._rounds = 0
        self._settling = False

    def next(self) -> Command | None:
        """The next command to carry out, or None once the batch is settled."""
        while not self._commands:
            if self._answers:
                self._pending[0:0] = self._answers
                if self._settling and self._rounds < MAX_ROUNDS:
                    self._rounds += 1
                    self._pending.append(Settle(first=False))
                self._answers = []
            if not self._pending:
                return None
            event = self._pending.pop(0)
            self._settling = isinstance(event, Settle)
            self.state, self._commands = self._step(self.state, event, self.now, self._random())
        return self._commands.pop(0)

    def answer(self, events: list[Event]) -> None:
        """What the command just handed out answered at once."""
        self._answers += events


def workflow_id(state: WorkloadState) -> str:
    return ids.workload_id(state.key)


def _started(st: WorkloadState, now: datetime) -> list[Command]:
    # What an earlier run had under way did not come along; Settle asks again.
    st.asks.asking = {}
    st.claim.enqueuing = None
    st.run.running = None
    return _probes(st, now)


def _probes(st: WorkloadState, now: datetime) -> list[Command]:
    """Check that every attempt's workflow is alive (a gone one is reported as ended)."""
    ids_ = [a.workflow_id for a in st.provisioning.current.values()] + list(st.provisioning.stopping)
    st.provisioning.probe_at = second(now) + PROBE_INTERVAL if ids_ else None
    return [TellProvisioning(workflow_id=i, signal="probe") for i in ids_]


def _queue_noticed(st: WorkloadState, ev: QueueNoticed, now: datetime) -> list[Command]:
    n = ev.notice
    # The queue took the enqueue and answered before the enqueue's own answer reached this run: its
    # workflow task timed out or failed after the local activity, and the next attempt gets the
    # queue's signal first, even before it decides to enqueue that ticket again (when the signal
    # comes in the batch that makes it enqueue: an eviction, say). Dropped, a reservation would leave
    # the quota held for good.
    awaited = n.ticket == (st.claim.enqueuing if st.claim.enqueuing is not None else st.claim.ticket + 1)
    if awaited and n.uid == st.workload.metadata.uid:
        st.claim.early_notices.append(n)
        return []
    return _apply_notice(st, n, now)


def _apply_notice(st: WorkloadState, n: Notice, now: datetime) -> list[Command]:
    if n.kind == "reserved" and wl.accepts(st, n) and n.assignment is not None:
        wl.reserve_quota(st, n, now)
        st.asks.asked_now = {}
        st.gate_member = n.gated
        if not n.admission_checks:
            st.claim.told_admitted = st.claim.ticket  # its queue counts it admitted along with the reservation
    elif n.kind == "pending" and wl.accepts(st, n):
        wl.set_pending(st, n.reason, n.message, now)
        wl.take_checks_before_reservation(st, n.admission_checks, now)
    elif n.kind == "checks" and wl.accepts_eviction(st, n):
        wl.take_checks(st, n, now)
        checks.reconcile(st, now)
    elif n.kind == "dequeued" and wl.accepts(st, n):
        wl.sent_back(st, n.reason, n.message, now)
        st.claim.holder = None  # the queue let it go itself
    elif n.kind == "evicted" and wl.accepts_eviction(st, n):
        wl.evict(st, n.reason, n.message, now, preemption_reason=n.preemption_reason)
    elif n.kind == "evicted" and wl.accepts(st, n):
        # Its queue reserved the ticket this run is queued with and told it only in the enqueue's
        # answer, which this run never got (the workflow task that had it failed, or a reset went back
        # before it, and the enqueue sent again found the reservation evicted or released), then
        # evicted it: evicted all the same, and the ticket given back (an eviction waits for it).
        wl.evict(st, n.reason, n.message, now, preemption_reason=n.preemption_reason, unheard=True)
        st.claim.queued = False
        st.claim.holder, st.claim.holder_queue = st.claim.ticket, n.cluster_queue or st.cluster_queue or ""
    return []


def _queue_appeared(st: WorkloadState) -> list[Command]:
    st.claim.waiting_for_queue = False
    return []


def _enqueue_resolved(st: WorkloadState, ev: EnqueueResolved, now: datetime) -> list[Command]:
    if ev.ticket != st.claim.enqueuing:
        return []
    st.claim.enqueuing = None
    r = ev.resolution
    if r.reason:
        st.claim.early_notices = []
        # The catalog now knows to wake this workload when the queue exists.
        st.claim.waiting_for_queue = True
        if r.cluster_queue:
            st.cluster_queue = r.cluster_queue
        wl.set_pending(st, r.reason, r.message, now)
        return []
    st.cluster_queue = r.cluster_queue
    st.claim.holder, st.claim.holder_queue = ev.ticket, r.cluster_queue or ""
    st.claim.sent_back = False
    # Queued, unless something it heard meanwhile keeps it out (Settle then gives the place back).
    st.claim.queued = _wants_queue(st)
    early, st.claim.early_notices = st.claim.early_notices, []
    for n in early:
        _queue_noticed(st, QueueNoticed(notice=n), now)
    return []


def _answered(st: WorkloadState, ev: ControllerAnswered, now: datetime, random: float) -> list[Command]:
    if st.asks.asking.get(ev.check) == ev.attempt:
        del st.asks.asking[ev.check]
    checks.answer(st, ev.check, ev.attempt, ev.verdict, ev.said, ev.error, now, random)
    return []


def _provisioning_reported(st: WorkloadState, ev: ProvisioningReported, now: datetime, random: float) -> list[Command]:
    u = ev.update
    provisioning.report(st, u.check, u.attempt, u.request, u.error, now, random)
    return []


def _provisioning_ended(st: WorkloadState, ev: ProvisioningEnded) -> list[Command]:
    if ev.update is not None:
        provisioning.stopped(st, ev.update.check, ev.update.attempt)
        return []
    for check, a in list(st.provisioning.current.items()):
        if a.workflow_id == ev.workflow_id:
            provisioning.stopped(st, check, a.attempt)
    st.provisioning.stopping = [w for w in st.provisioning.stopping if w != ev.workflow_id]
    return []


def _provisioning_refused(st: WorkloadState, ev: ProvisioningStartRefused, now: datetime) -> list[Command]:
    current = provisioning.attempt_for(st, ev.check, ev.attempt)
    if current is not None:
        del st.provisioning.current[ev.check]
    # It starts again once the run holding the ID has ended (it reports so, or the probe finds it gone).
    if ev.workflow_id not in st.provisioning.stopping:
        st.provisioning.stopping.append(ev.workflow_id)
    soon = second(now) + REFUSED_PROBE
    st.provisioning.probe_at = soon if st.provisioning.probe_at is None else min(st.provisioning.probe_at, soon)
    return [TellProvisioning(workflow_id=ev.workflow_id, signal="delete_provisioning_request", reason="restart")]


def _runner_stopped(st: WorkloadState, ev: RunnerStopped, now: datetime) -> list[Command]:
    if st.run.running != ev.admission:
        return []  # this workload stopped it: that admission is over
    st.run.running = None
    if ev.ending != "returned" and ev.admission == st.claim.ticket:
        pods_ready.runner_lost(st, ev.error or ev.ending, now)
        # A runner cut off from Temporal may still run the command (as a node's pods run on when
        # the node loses the API server): when the admission ends, it is told to stop.
        st.run.lost = ev.admission
        if ev.ending in ("lost", "drained") and st.run.restarts < RUNNER_RESTARTS:
            st.run.restart = ev.admission  # `_runner` starts it again while the admission wants it
    return []


def _priority_changed(st: WorkloadState, ev: PriorityChangeRequested, now: datetime) -> list[Command]:
    if not priority.receive(st, ev.change, now) or st.claim.holder is None:
        return []
    # Its ClusterQueue holds its place or its quota: the entry or the reservation takes the new
    # priority, after the `admitted` notice still held for it.
    return [*_admitted_notice(st), _tell_queue(st, "reprioritize")]


def _deactivated(st: WorkloadState, now: datetime) -> list[Command]:
    if st.workload.spec.active is not False and not wl.is_finished(st) and not st.deleted:
        checks.deactivate(st, now)
    return []


def _activated(st: WorkloadState, now: datetime) -> list[Command]:
    if not wl.is_finished(st) and not st.deleted:
        checks.activate(st, now)
    return []


def _finish(st: WorkloadState, ev: FinishRequested, now: datetime) -> list[Command]:
    r = ev.request
    if r.admission is not None and r.admission != st.claim.ticket:
        wl.record(st, STALE_REPORT, f"finish about admission {r.admission} ignored: the workload is at admission {st.claim.ticket}", now, "Warning")
        return []
    if r.admission is not None and r.admission == st.run.running:
        # Its runner's own report: the run ends by itself (`start_workload` returns), nothing to stop.
        st.run.running = None
    wl.finish(st, r.succeeded, r.message, now)
    return []


def step_refused(st: WorkloadState, ev: Refused, now: datetime) -> list[Command]:
    """A message that did not parse: a verdict goes to the verdict log, rejected; anything else is
    a Warning event. Nothing else changes."""
    if ev.message == contract.SET_ADMISSION_CHECK_STATE:
        checks.remember(st, None, ev.check, ev.state, "rejected", ev.detail, now)
    else:
        wl.record(st, ev.reason, ev.detail, now, "Warning")
    return []


def _timer(st: WorkloadState, ev: TimerFired, now: datetime, random: float) -> list[Command]:
    at = ev.at or now
    requeue_at = checks.requeue_at(st)  # set while in backoff
    if checks.in_backoff(st) and requeue_at is not None and requeue_at <= at:
        checks.finish_backoff_if_due(st, at)
    for name in [n for n, when in st.asks.ask_again_at.items() if when <= at]:
        del st.asks.ask_again_at[name]  # its controller is asked again (Settle)
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
    if st.provisioning.probe_at is not None and st.provisioning.probe_at <= at:
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


def _settle(st: WorkloadState, ev: Settle, now: datetime, random: float) -> list[Command]:
    out: list[Command] = _admitted_notice(st) if ev.first else []
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


def _provision(st: WorkloadState, now: datetime, random: float) -> list[Command]:
    """The built-in ProvisioningRequest check: attempts to start and delete, and the check states
    that need no request."""
    cmds, verdicts = provisioning.reconcile(st)
    for v in verdicts:
        checks.apply(st, v, now, random)
    out: list[Command] = [
        TellProvisioning(workflow_id=a.workflow_id, signal="delete_provisioning_request", reason=wl.phase(st)) for a in cmds.stop
    ]
    out += [StartProvisioning(plan=p) for p in cmds.start]
    if out and st.provisioning.probe_at is None:
        st.provisioning.probe_at = second(now) + PROBE_INTERVAL
    return out


def _admission(st: WorkloadState, now: datetime) -> list[Command]:
    """A newly admitted workload: what its pods start with, its queue told, its provisioned
    capacity told that the pods come."""
    if not (wl.is_admitted(st) and wl.has_quota(st)) or wl.is_finished(st) or st.deleted:
        return []
    out: list[Command] = []
    if st.claim.admission_done != st.claim.ticket:
        try:
            wl.set_pod_sets_info(st)
        except pod_set_updates.PodSetUpdateConflict as err:
            wl.finish(st, False, str(err), now, reason="FailedToStart")
            return []
        st.claim.admission_done = st.claim.ticket
        out += [TellProvisioning(workflow_id=a.workflow_id, signal="pods_scheduled", reason="Admitted") for a in st.provisioning.current.values()]
    if st.claim.told_admitted != st.claim.ticket and st.claim.holder == st.claim.ticket:
        st.claim.told_admitted = st.claim.ticket
        st.claim.admitted_due = now + ADMITTED_DELAY  # the notice waits for the next workflow task
    return out


def _admitted_notice(st: WorkloadState) -> list[Command]:
    """The `admitted` notice held since an earlier workflow task (ADMITTED_DELAY), now; none when
    the reservation it is about is over (its release, which `_release` sends, says all its queue
    needs)."""
    if st.claim.admitted_due is None:
        return []
    st.claim.admitted_due = None
    held = st.claim.holder == st.claim.told_admitted and wl.has_quota(st) and not wl.is_finished(st) and not st.deleted
    return [_tell_queue(st, "admitted")] if held else []


def _claims_queue(st: WorkloadState) -> bool:
    """It holds quota in its ClusterQueue, or a place there."""
    return (wl.has_quota(st) and not wl.is_finished(st) and not st.deleted) or st.claim.queued


def _release(st: WorkloadState) -> list[Command]:
    if st.claim.holder is None or _claims_queue(st) or st.claim.enqueuing is not None:
        return []
    command = _tell_queue(st, "release")
    st.claim.holder = None
    st.claim.admitted_due = None  # the release says all its queue needs: the reservation is gone
    return [command]


def _give_back_unasked_ticket(st: WorkloadState) -> list[Command]:
    """Its queue has the next ticket, which this run has decided not to enqueue: an attempt of an
    earlier workflow task enqueued it and timed out, and the attempt that counted, with more messages
    (a deactivation, a Retry's backoff), decided otherwise. The queue said so (the notice waits in
    `early_notices`); the run takes the ticket as its own and releases it to the ClusterQueue the
    notice names (that enqueue looked its LocalQueue up afresh, and when it was the run's very first,
    the run knows no other), and the queue settles the blockAdmission gate if it reserved the ticket
    with its grant. Kept, it would hold the queue's quota for a workload that does not want it; the
    next enqueue takes the ticket after it."""
    if st.claim.enqueuing is not None or not st.claim.early_notices:
        return []
    if st.claim.holder is not None or _claims_queue(st):
        return []
    unasked = [n for n in st.claim.early_notices if n.ticket == st.claim.ticket + 1]
    named = next((n.cluster_queue for n in unasked if n.cluster_queue), None)
    queue = named or st.cluster_queue
    if not unasked or not queue:
        return []
    st.claim.early_notices = []
    st.claim.ticket += 1
    st.claim.holder, st.claim.holder_queue = st.claim.ticket, queue
    return _release(st)


def _tell_queue(st: WorkloadState, signal: Literal["release", "admitted", "reprioritize"]) -> TellQueue:
    ticket = st.claim.holder if st.claim.holder is not None else st.claim.ticket
    request = ReleaseRequest(key=st.key, uid=st.uid, ticket=ticket)
    if signal == "reprioritize":
        request = Reprioritize(**request.model_dump(), priority=st.workload.spec.priority or 0)
    return TellQueue(signal=signal, cluster_queue=st.claim.holder_queue or st.cluster_queue or "", request=request)


def _runner(st: WorkloadState, now: datetime) -> list[Command]:
    """The runner starts an admitted workload once per admission, again when that run was lost or
    drained (up to RUNNER_RESTARTS times), and stops a run whose admission is over."""
    runner = wl.runner_of(st)
    wanted = bool(runner) and wl.is_admitted(st) and wl.has_quota(st) and not wl.is_finished(st) and not st.deleted
    restart = st.run.restart == st.claim.ticket  # set only for the admission its runner was asked to start
    if wanted and st.run.running is None and (st.run.started != st.claim.ticket or restart):
        if restart:
            st.run.restarts += 1  # runner_lost stays: a copy cut off elsewhere is told to stop too
            wl.record(st, RUNNER_RESTARTED, f"start_workload sent again for admission {st.claim.ticket} "
                      f"({st.run.restarts} of at most {RUNNER_RESTARTS})", now)
        else:
            st.run.restarts = 0
        st.run.restart = None
        st.run.started = st.run.running = st.claim.ticket
        return [StartRunner(task_queue=runner, request=StartWorkload(
            workflow_id=workflow_id(st), admission=st.claim.ticket, workload=st.workload.to_wire(), pod_sets_info=st.pod_sets_info or [],
        ))]
    if not wanted and (st.run.running is not None or st.run.lost is not None):
        st.run.running = st.run.lost = st.run.restart = None
        return [StopRunner(task_queue=runner, request=StopWorkload(
            workflow_id=workflow_id(st), admission=st.run.started, reason=wl.phase(st), message=wl.condition_summary(st),
        ))]
    return []


def _gate(st: WorkloadState) -> list[Command]:
    """blockAdmission: the gate counts a workload reserved with its grant whenever it holds quota
    and is not ready, as Kueue counts every admitted workload that is not ready."""
    holds = wl.has_quota(st) and not wl.is_finished(st) and not st.deleted
    if not holds:
        st.gate_member = False
    counted = st.gate_member and holds and not pods_ready.is_ready(st)
    if counted == st.gated:
        return []
    st.gated = counted
    request = GateSettled(key=st.key, uid=st.uid, ticket=st.claim.ticket)
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


def _enqueue(st: WorkloadState) -> list[Command]:
    if not _wants_queue(st) or st.claim.queued or st.claim.waiting_for_queue or st.claim.enqueuing is not None or st.claim.holder is not None:
        return []
    spec = st.workload.spec
    st.claim.ticket += 1
    st.claim.enqueuing = st.claim.ticket
    entry = QueueEntry(
        key=st.key, uid=st.uid, ticket=st.claim.ticket, local_queue=spec.queue_name or "",
        priority=spec.priority or 0, timestamp=wl.queue_timestamp(st), pod_sets=st.pod_set_requests(),
    )
    fresh, st.claim.sent_back = st.claim.sent_back, False
    return [Enqueue(request=EnqueueRequest(
        namespace=st.workload.metadata.namespace, local_queue=spec.queue_name or "", workflow_id=workflow_id(st),
        entry=entry, fresh=fresh, answer=True,
    ))]


def _ask(st: WorkloadState, now: datetime) -> list[Command]:
    """Ask the controllers of the checks that wait for them, and stop asking what is no longer
    needed (answered by a signal, quota lost, finished)."""
    wanted = checks.to_ask(st)
    out: list[Command] = []
    for name in list(st.asks.asking):
        if name not in wanted:
            del st.asks.asking[name]
            out.append(StopAsking(check=name))
    for name in wanted:
        if name not in st.asks.asking:
            attempt = checks.hand_out(st, name)
            st.asks.asking[name] = attempt
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
    requeue_at = checks.requeue_at(st)  # set while in backoff
    if checks.in_backoff(st) and requeue_at is not None:
        found.append((requeue_at, checks.backoff_summary(st)))
    due = pods_ready.deadline(st, st.wait_for_pods_ready)
    if due is not None and st.wait_for_pods_ready is not None:
        found.append((due[0], pods_ready.timer_summary(st.wait_for_pods_ready, due[1])))
    if wl.has_quota(st):
        for name, at in st.asks.ask_again_at.items():
            found.append((at, f"ask the controller of {name} again"))
    for due in (check_timeouts.next_deadline(st), retention.deletion_due(st)):
        if due is not None:
            found.append(due)
    limit = execution_deadline(st)
    if limit is not None:
        found.append((limit, f"maximum execution time {st.workload.spec.maximum_execution_time_seconds}s"))
    if st.provisioning.probe_at is not None:
        found.append((st.provisioning.probe_at, "check that its ProvisioningRequest workflows run"))
    return min(found, key=lambda f: f[0]) if found else None


def notice_due(st: WorkloadState) -> tuple[datetime, str] | None:
    """When the `admitted` notice held for the next workflow task goes if no task comes first, and
    the timer's summary: the workflow keeps a timer of its own for it, beside `next_wake`'s."""
    if st.claim.admitted_due is None:
        return None
    return st.claim.admitted_due, f"admitted to ClusterQueue {st.claim.holder_queue or st.cluster_queue}"


def may_continue_as_new(st: WorkloadState) -> bool:
    """Whether a run may end here for the next one (when the server suggests it): not while its
    runner runs it, since that run is tied to this workflow run, nor while its `admitted` notice is
    held. Few messages arrive meanwhile."""
    return st.run.running is None and st.claim.admitted_due is None


def way_forward(st: WorkloadState) -> str | None:
    """Why a workload that is not finished, deleted or inactive will move on, or None when nothing
    would ever move it (a wedge; the model test asserts this never happens)."""
    if wl.is_finished(st) or st.deleted or st.workload.spec.active is False:
        return "at rest"
    if st.claim.enqueuing is not None:
        return "being enqueued"
    if st.claim.queued:
        return "waiting in its queue for quota"
    if st.claim.waiting_for_queue:
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


def _apply(st: WorkloadState, ev: Event, now: datetime, random: float) -> list[Command]:
    match ev:
        case Started():
            return _started(st, now)
        case QueueNoticed():
            return _queue_noticed(st, ev, now)
        case QueueAppeared():
            return _queue_appeared(st)
        case EnqueueResolved():
            return _enqueue_resolved(st, ev, now)
        case VerdictReceived():
            checks.receive(st, ev.verdict, now, random)
            return []
        case ControllerAnswered():
            return _answered(st, ev, now, random)
        case ProvisioningReported():
            return _provisioning_reported(st, ev, now, random)
        case ProvisioningEnded():
            return _provisioning_ended(st, ev)
        case ProvisioningStartRefused():
            return _provisioning_refused(st, ev, now)
        case PodsReadyReported():
            pods_ready.report(st, ev.report, now)
            return []
        case RunnerStopped():
            return _runner_stopped(st, ev, now)
        case AdmissionGatesRemoved():
            admission_gates.receive(st, ev.removal, now)
            return []
        case PriorityChangeRequested():
            return _priority_changed(st, ev, now)
        case Deactivated():
            return _deactivated(st, now)
        case Activated():
            return _activated(st, now)
        case FinishRequested():
            return _finish(st, ev, now)
        case DeleteRequested():
            wl.delete(st)
            return []
        case Refused():
            return step_refused(st, ev, now)
        case TimerFired():
            return _timer(st, ev, now, random)
        case Settle():
            return _settle(st, ev, now, random)
