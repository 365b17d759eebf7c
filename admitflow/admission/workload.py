"""A workload's lifecycle: Kueue's conditions, reasons, messages and events, as pure transitions.

`WorkloadState` is everything the workload workflow keeps; each function takes it with an event and
changes it the way Kueue's scheduler and workload controller would change the Workload object. The
workflow only carries out what a transition says must happen (enqueue, release, notify).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Literal, get_args

from pydantic import Field
from temporalio.common import SearchAttributeKey

from admitflow.wire import CarriedState, WireModel

from admitflow import search_attributes as sa
from admitflow.admission import conditions as cond
from admitflow.admission.cluster_queue import AdmissionCheckInfo, Notice
from admitflow.admission.conditions import MAX_EVENT_MESSAGE, second, truncate
from admitflow.admission.flavor_assignment import Assignment
from admitflow.admission.requests import PodSetRequest, format_requests, pod_set_request
from admitflow.api import Admission, AdmissionCheckState, ResourceFlavorSpec, Workload, WorkloadStatus
from admitflow.admission import pod_set_updates
from admitflow.admission.pod_set_updates import PodSetInfo
from admitflow.api.configuration import WaitForPodsReady, WorkloadRetentionPolicy
from admitflow.api.provisioning_request import ProvisioningRequest
from admitflow.api.admission_check import PROVISIONING_REQUEST_CONTROLLER_NAME
from admitflow.api.workload import RUNNER_ANNOTATION
from admitflow.api.workload import SchedulingStats, WorkloadSchedulingStatsEviction

QUOTA_RESERVED = "QuotaReserved"
ADMITTED = "Admitted"
FINISHED = "Finished"
EVICTED = "Evicted"
PREEMPTED = "Preempted"
REQUEUED = "Requeued"
PODS_READY = "PodsReady"
# The PodsReady condition as Kueue's job controller writes it (jobframework generatePodsReadyCondition).
WAIT_FOR_START = "WaitForStart"
NOT_READY_MESSAGE = "Not all pods are ready or succeeded"

Phase = Literal["Pending", "QuotaReserved", "Admitted", "Backoff", "Inactive", "Finished"]
PHASES: tuple[str, ...] = get_args(Phase)

# Events are kept for `describe`; the full story is the workflow history, so a bounded tail is enough.
MAX_EVENTS = 100


EventType = Literal["Normal", "Warning"]


class Event(WireModel):
    """A Kubernetes-style event on the workload (events.k8s.io: type, reason, note)."""

    type: EventType = "Normal"
    reason: str
    message: str
    time: datetime


VerdictOutcome = Literal["applied", "ignored", "rejected"]


class VerdictRecord(WireModel):
    """One check verdict as received, and what became of it."""

    time: datetime
    check: str
    state: str
    outcome: VerdictOutcome
    detail: str = ""
    waited: float | None = Field(
        default=None, description="Seconds the check had been asked (Pending, quota reserved) when this verdict ended that."
    )


class ProvisioningAttempt(WireModel):
    """One ProvisioningRequest attempt of a check (admitflow.admission.provisioning): what was asked
    for, and what the autoscaler said last."""

    check: str
    attempt: int
    name: str = Field(description="The ProvisioningRequest, `<workload>-<check>-<attempt>`.")
    workflow_id: str = Field(description="Its ProvisioningCheckWorkflow.")
    class_name: str
    parameters: dict[str, str] = Field(default_factory=dict)
    pod_sets: list[str] = Field(default_factory=list, description="The podSet each request podSet stands for.")
    request: ProvisioningRequest | None = Field(default=None, description="As last reported; None until created.")


class WorkloadReport(Workload):
    """The `workload` query: the Workload in Kueue's shape, plus its recent events, the verdicts it
    received, and what its pods start with once admitted (flavors and checks' podSetUpdates merged)."""

    events: list[Event] = Field(default_factory=list)
    verdicts: list[VerdictRecord] = Field(default_factory=list)
    pod_sets_info: list[PodSetInfo] | None = None
    provisioning_requests: list[ProvisioningAttempt] = Field(
        default_factory=list, description="The current ProvisioningRequest of each provisioning check, as last reported."
    )
    deleted: bool | None = Field(default=None, description="Set on the last report of a deleted workload.")
    check_attempts: dict[str, int] = Field(
        default_factory=dict,
        description="The attempt each admission check is at: a controller's verdict may carry it back as `attempt`.",
    )


class QueueClaim(WireModel):
    """What the workload's ClusterQueue holds for it, by ticket: its place in the queue or its
    reservation, and what the queue was told of it."""

    ticket: int = Field(default=0, description="Counts enqueues; the ClusterQueue answers per ticket.")
    queued: bool = Field(default=False, description="The current ticket sits in the ClusterQueue.")
    sent_back: bool = Field(default=False, description="The queue sent it back: look the queue up afresh.")
    waiting_for_queue: bool = Field(
        default=False, description="Its LocalQueue or ClusterQueue is missing; the catalog will wake it."
    )
    holder: int | None = Field(
        default=None, description="The ticket its ClusterQueue holds (queued or reserved) until it is released."
    )
    holder_queue: str = Field(default="", description="The ClusterQueue holding `holder`.")
    enqueuing: int | None = Field(default=None, description="The ticket being enqueued now.")
    told_admitted: int = Field(default=0, description="The ticket whose admission its ClusterQueue was told of.")
    admitted_due: datetime | None = Field(
        default=None,
        description="The `admitted` notice of `told_admitted` waits to go with the next workflow task, at the latest then.",
    )
    admission_done: int = Field(default=0, description="The ticket whose admission was carried out (pods' info).")
    early_notices: list[Notice] = Field(
        default_factory=list,
        description="Queue notices about the ticket being enqueued (or the next one) that came before the enqueue's "
        "answer, applied once it comes.",
    )


class CheckAsks(WireModel):
    """What the workload's admission check controllers were asked, and answered, by check name."""

    attempts: dict[str, int] = Field(
        default_factory=dict, description="The attempt each check is at (1 when absent); never goes back."
    )
    handed: dict[str, int] = Field(
        default_factory=dict, description="The highest attempt each check's controller has been asked about."
    )
    asked_now: dict[str, int] = Field(
        default_factory=dict, description="The attempt each check's controller was asked about in this reservation."
    )
    asking: dict[str, int] = Field(
        default_factory=dict, description="Controllers being asked now (check -> attempt); cleared when a run starts."
    )
    answered: dict[str, int] = Field(
        default_factory=dict,
        description="Checks whose controller has answered in this reservation, with the attempt it answered.",
    )
    controller_failures: dict[str, int] = Field(
        default_factory=dict, description="Failed or invalid controller answers in a row, by check."
    )
    ask_again_at: dict[str, datetime] = Field(
        default_factory=dict, description="When a check's controller that failed is asked again."
    )
    first_retry: dict[str, datetime] = Field(
        default_factory=dict,
        description="When each check's first Retry since the workload was last admitted was applied "
        "(its retryStrategy's backoffLimitTimeout counts from it).",
    )


class RunnerRun(WireModel):
    """The runner's `start_workload` for the workload's admissions (docs/runners.md), by admission."""

    task_queue: str = Field(default="", description="Its LocalQueue's runner task queue, as of its last reservation.")
    started: int = Field(default=0, description="The admission its runner was last asked to start.")
    running: int | None = Field(default=None, description="The admission whose `start_workload` runs on its runner now.")
    lost: int | None = Field(
        default=None, description="The admission whose `start_workload` failed (its runner may still run it): told to stop when it is over."
    )
    restart: int | None = Field(
        default=None, description="The admission whose `start_workload` its runner lost (its heartbeats stopped, or the runner shut down): started again."
    )
    restarts: int = Field(
        default=0, description="How many times `start_workload` was started again for the admission its runner was last asked to start."
    )


class ProvisioningAttempts(WireModel):
    """The built-in ProvisioningRequest check's attempts (admitflow.admission.provisioning)."""

    current: dict[str, ProvisioningAttempt] = Field(
        default_factory=dict, description="The current ProvisioningRequest attempt of each provisioning check."
    )
    stopping: list[str] = Field(
        default_factory=list, description="ProvisioningCheckWorkflows told to delete their request, not yet ended."
    )
    probe_at: datetime | None = Field(
        default=None, description="When its ProvisioningRequest attempts' workflows are next checked for being alive."
    )


class WorkloadState(CarriedState):
    """Everything the workload workflow keeps: the Workload in Kueue's shape, what its ClusterQueue gave
    it with its last reservation, and what is under way, grouped by what it is about."""

    workload: Workload
    events: list[Event] = Field(default_factory=list)
    verdicts: list[VerdictRecord] = Field(default_factory=list, description="The last check verdicts received.")
    deleted: bool = False
    cluster_queue: str | None = Field(default=None, description="Resolved from the LocalQueue.")
    checks_info: dict[str, AdmissionCheckInfo] = Field(
        default_factory=dict, description="Its checks' controllers, parameters and retry strategies, by check name."
    )
    flavors: dict[str, ResourceFlavorSpec] = Field(default_factory=dict, description="The flavors it was assigned.")
    pod_sets_info: list[PodSetInfo] | None = Field(default=None, description="Set when admitted.")
    wait_for_pods_ready: WaitForPodsReady | None = Field(
        default=None, description="The waitForPodsReady settings its ClusterQueue last gave it; None: off."
    )
    workload_retention: WorkloadRetentionPolicy | None = Field(
        default=None, description="The workload retention policy its ClusterQueue last gave it; None: kept."
    )
    gated: bool = Field(
        default=False, description="The blockAdmission gate counts it as not ready; it is told when it is ready or leaves."
    )
    gate_member: bool = Field(
        default=False, description="Reserved with a blockAdmission grant: the gate counts it whenever it is not ready."
    )
    claim: QueueClaim = Field(default_factory=QueueClaim)
    asks: CheckAsks = Field(default_factory=CheckAsks)
    run: RunnerRun = Field(default_factory=RunnerRun)
    provisioning: ProvisioningAttempts = Field(default_factory=ProvisioningAttempts)

    @property
    def key(self) -> str:
        return f"{self.workload.metadata.namespace}/{self.workload.metadata.name}"

    @property
    def status(self) -> WorkloadStatus:
        return self.workload.status

    @property
    def uid(self) -> str:
        """The workload's uid: new_state sets it, as Kubernetes' API server would."""
        uid = self.workload.metadata.uid
        assert uid is not None, f"workload {self.key} has no uid"
        return uid

    @property
    def created(self) -> datetime:
        """Its creationTimestamp: new_state sets it, as Kubernetes' API server would."""
        created = self.workload.metadata.creation_timestamp
        assert created is not None, f"workload {self.key} has no creationTimestamp"
        return created

    def pod_set_requests(self) -> list[PodSetRequest]:
        return [pod_set_request(ps.to_wire()) for ps in self.workload.spec.pod_sets]

    def report(self) -> WorkloadReport:
        return WorkloadReport.model_validate(
            {
                **self.workload.to_wire(),
                "events": [e.to_wire() for e in self.events],
                "verdicts": [v.to_wire() for v in self.verdicts],
                "podSetsInfo": [p.to_wire() for p in self.pod_sets_info] if self.pod_sets_info is not None else None,
                "provisioningRequests": [a.to_wire() for a in self.provisioning.current.values()],
                "deleted": True if self.deleted else None,
                "checkAttempts": {c.name: current_attempt(self, c.name) for c in self.status.admission_checks or ()},
            }
        )


def new_state(workload: Workload, uid: str, now: datetime) -> WorkloadState:
    """A workload as submitted: Kueue's initial pending conditions, uid and creation time set here,
    where Kubernetes' API server would set them."""
    wl = workload.model_copy(deep=True)
    wl.metadata.uid = wl.metadata.uid or uid
    wl.metadata.creation_timestamp = wl.metadata.creation_timestamp or second(now)
    wl.status = WorkloadStatus()
    state = WorkloadState(workload=wl)
    set_pending(state, "PendingEvaluation", "Workload is pending evaluation in the scheduling queue", now)
    return state


def stamp_submission(state: WorkloadState, submitted: Workload, accepted: datetime) -> None:
    """creationTimestamp is when the object was stored, as Kubernetes' API server sets it: here, when
    the Temporal server accepted the workflow's start, not when a worker first ran it (seconds later
    under load, and queue order goes by it). A timestamp in the manifest stays, as in new_state."""
    state.workload.metadata.creation_timestamp = submitted.metadata.creation_timestamp or second(accepted)


def record(state: WorkloadState, reason: str, message: str, now: datetime, type_: EventType = "Normal") -> None:
    state.events.append(Event(type=type_, reason=reason, message=truncate(message, MAX_EVENT_MESSAGE), time=second(now)))
    del state.events[:-MAX_EVENTS]


def runner_of(state: WorkloadState) -> str:
    """The task queue of the runner that starts it: its own annotation, else its LocalQueue's."""
    return (state.workload.metadata.annotations or {}).get(RUNNER_ANNOTATION) or state.run.task_queue


def current_attempt(state: WorkloadState, check: str) -> int:
    """The attempt a check is at: a verdict stamped with an older one is stale, with a later one
    premature. It is counted per check and never goes back, whatever evicted the workload; the
    built-in ProvisioningRequest check's is `retryCount + 1`, since its requests are named by it, as
    in Kueue."""
    info = state.checks_info.get(check)
    if not (info is not None and info.controller_name == PROVISIONING_REQUEST_CONTROLLER_NAME):
        return state.asks.attempts.get(check, 1)
    c = next((c for c in state.status.admission_checks or () if c.name == check), None)
    return (c.retry_count or 0) + 1 if c is not None else 1


def next_attempts(state: WorkloadState) -> None:
    """The reservation is over: an attempt a controller was asked about is never asked again, so
    each check so asked moves to the next one."""
    for check, handed in state.asks.handed.items():
        if handed >= state.asks.attempts.get(check, 1):
            state.asks.attempts[check] = handed + 1
    state.asks.asked_now = {}


def has_quota(state: WorkloadState) -> bool:
    return cond.is_true(state.status.conditions, QUOTA_RESERVED)


def holds_quota(status: WorkloadStatus) -> bool:
    """Quota is reserved and the workload has not finished: its checks' controllers are asked now
    (what clients read from a `workload` report, which carries no WorkloadState)."""
    return status.has_condition(QUOTA_RESERVED) and not status.has_condition(FINISHED)


def is_admitted(state: WorkloadState) -> bool:
    return cond.is_true(state.status.conditions, ADMITTED)


def is_finished(state: WorkloadState) -> bool:
    return cond.is_true(state.status.conditions, FINISHED)


def phase(state: WorkloadState) -> Phase:
    if is_finished(state):
        return "Finished"
    if state.workload.spec.active is False:
        return "Inactive"
    if is_admitted(state):
        return "Admitted"
    if has_quota(state):
        return "QuotaReserved"
    rs = state.status.requeue_state
    if rs is not None and rs.requeue_at is not None:
        return "Backoff"
    return "Pending"


# The keys of the attributes the workflow keeps current (search_attributes.MANAGED), and their values.
ManagedKey = SearchAttributeKey[str] | SearchAttributeKey[int] | SearchAttributeKey[Sequence[str]]
ManagedValue = str | int | list[str]


def search_attributes(state: WorkloadState) -> dict[ManagedKey, ManagedValue]:
    """The contract's search attributes for this workload (docs/contract.md), by key; an attribute with
    nothing to say is left out (unset)."""
    spec = state.workload.spec
    out: dict[ManagedKey, ManagedValue] = {sa.PHASE: phase(state), sa.LOCAL_QUEUE: spec.queue_name or "", sa.PRIORITY: spec.priority or 0}
    pending_checks = [c.name for c in state.status.admission_checks or () if c.state != "Ready"]
    if pending_checks:
        out[sa.PENDING_CHECKS] = pending_checks
    retries = sum(c.retry_count or 0 for c in state.status.admission_checks or ())
    if retries:
        out[sa.RETRY_COUNT] = retries
    if state.cluster_queue:
        out[sa.CLUSTER_QUEUE] = state.cluster_queue
    return out


def set_pending(state: WorkloadState, reason: str, message: str, now: datetime) -> None:
    """`QuotaReserved=False` with why; `Admitted` stays present, as Kueue keeps it."""
    st = state.status
    st.conditions = cond.set_condition(st.conditions, QUOTA_RESERVED, False, reason, message, now)
    st.conditions = cond.set_condition(st.conditions, ADMITTED, False, "NoReservation", "The workload has no reservation", now)


def to_admission(cluster_queue: str, assignment: Assignment) -> Admission:
    return Admission.model_validate(
        {
            "clusterQueue": cluster_queue,
            "podSetAssignments": [
                {
                    "name": ps.name,
                    "flavors": dict(sorted(ps.flavors.items())),
                    "resourceUsage": format_requests(ps.resource_usage),
                    "count": ps.count,
                }
                for ps in assignment.pod_sets
            ],
        }
    )


def sent_back(state: WorkloadState, reason: str, message: str, now: datetime) -> None:
    """The ClusterQueue does not take it (its LocalQueue does not lead there): pending with the
    reason, and the next enqueue looks the queue up afresh."""
    state.claim.queued = False
    state.claim.sent_back = True
    set_pending(state, reason, message, now)


def accepts_eviction(state: WorkloadState, notice: Notice) -> bool:
    """An eviction counts for the reservation this run holds now, unless the workload has finished
    (its quota is on its way back already: a finish and a preemption in one workflow task end as
    Finished, not Evicted)."""
    return (
        notice.uid == state.workload.metadata.uid and notice.ticket == state.claim.ticket and has_quota(state)
        and not is_finished(state)
    )


def reset_checks_on_eviction(checks: list[AdmissionCheckState] | None, now: datetime) -> list[AdmissionCheckState] | None:
    """Kueue's resetChecksOnEviction: every check not Pending goes back to Pending, keeping
    requeueAfterSeconds; a Retry check counts one more retry, the others keep their count (what
    Kueue's own tests expect under server-side apply)."""
    if not checks:
        return checks
    out = []
    for c in checks:
        if c.state == "Pending":
            out.append(c)
            continue
        out.append(
            c.model_copy(
                update={
                    "state": "Pending",
                    "message": f"Reset to Pending after eviction. Previously: {c.state}",
                    "last_transition_time": second(now),
                    "retry_count": (c.retry_count or 0) + 1 if c.state == "Retry" else c.retry_count,
                }
            )
        )
    return out


def evict(
    state: WorkloadState,
    reason: str,
    message: str,
    now: datetime,
    underlying_cause: str = "",
    preemption_reason: str = "",
    unheard: bool = False,
) -> bool:
    """Kueue's eviction of a workload that holds quota, with what its job controller does for a
    bare Workload: the quota is released and the workload goes back to the queue. With an
    underlying cause the condition reason is `<reason>DueTo<cause>`, as Kueue writes it. Returns
    whether its ClusterQueue must be told (it held quota there). `unheard`: the reservation was
    told only in an enqueue answer this run never got; evicted all the same."""
    if not has_quota(state) and not unheard:
        return False
    counted = reason
    # Only a deactivation names its cause in the reason (DeactivatedDueToAdmissionCheck); other
    # causes are kept in schedulingStats.evictions.
    reason = f"{reason}DueTo{underlying_cause}" if underlying_cause and reason == "Deactivated" else reason
    st = state.status
    admitted = cond.find(st.conditions, ADMITTED)
    if admitted is not None and admitted.status == "True" and admitted.last_transition_time:
        spent = int((second(now) - admitted.last_transition_time).total_seconds())
        st.accumulated_past_execution_time_seconds = (st.accumulated_past_execution_time_seconds or 0) + spent
    st.conditions = cond.set_condition(st.conditions, EVICTED, True, reason, message, now)
    if preemption_reason:
        st.conditions = cond.set_condition(st.conditions, PREEMPTED, True, preemption_reason, message, now)
        record(state, "Preempted", message, now)
    st.admission = None
    st.admission_checks = reset_checks_on_eviction(st.admission_checks, now)
    next_attempts(state)
    if cond.find(st.conditions, PODS_READY) is not None:
        # Its pods are gone: not admitted means waiting for start again.
        st.conditions = cond.set_condition(st.conditions, PODS_READY, False, WAIT_FOR_START, NOT_READY_MESSAGE, now)
    st.conditions = cond.set_condition(st.conditions, QUOTA_RESERVED, False, "PendingEvaluation", message, now)
    st.conditions = cond.set_condition(st.conditions, ADMITTED, False, "NoReservation", "The workload has no reservation", now)
    # A preempted workload is requeued at once; other evictions wait (backoff) before Requeued=True.
    requeued = reason in ("Preempted", "NodeFailures")
    st.conditions = cond.set_condition(st.conditions, REQUEUED, requeued, reason, message, now)
    _count_eviction(st, counted, underlying_cause)
    record(state, f"EvictedDueTo{reason}", message, now)
    return True


def _count_eviction(st: WorkloadStatus, reason: str, underlying_cause: str) -> None:
    stats = st.scheduling_stats or SchedulingStats()
    evictions = list(stats.evictions or [])
    for i, ev in enumerate(evictions):
        if ev.reason == reason and ev.underlying_cause == underlying_cause:
            evictions[i] = ev.model_copy(update={"count": ev.count + 1})
            break
    else:
        evictions.append(WorkloadSchedulingStatsEviction(reason=reason, underlying_cause=underlying_cause, count=1))
    st.scheduling_stats = stats.model_copy(update={"evictions": evictions})


def queue_timestamp(state: WorkloadState) -> datetime:
    """Kueue's GetQueueOrderTimestamp: the eviction time after an eviction by an admission check,
    or by a PodsReady timeout when the requeuing strategy says Eviction; else the creation time
    (so a preempted workload keeps its place)."""
    settings = state.wait_for_pods_ready
    requeuing_timestamp = settings.requeuing_strategy.timestamp if settings is not None else "Eviction"
    evicted = cond.find(state.status.conditions, EVICTED)
    if evicted is not None and evicted.status == "True" and evicted.last_transition_time:
        if evicted.reason == "AdmissionCheck" or (
            evicted.reason == "PodsReadyTimeout" and requeuing_timestamp == "Eviction"
        ):
            return evicted.last_transition_time
    return state.created


def accepts(state: WorkloadState, notice: Notice) -> bool:
    """A ClusterQueue notice counts only for this run and the ticket it is about."""
    return (
        notice.uid == state.workload.metadata.uid
        and notice.ticket == state.claim.ticket
        and state.claim.queued
        and not is_finished(state)
    )


def reserve_quota(state: WorkloadState, notice: Notice, now: datetime) -> None:
    """The scheduler's `SetQuotaReservation`, and admission in the same write when nothing is left
    to wait for (Kueue's `SyncAdmittedCondition`)."""
    assert notice.assignment is not None and state.cluster_queue is not None
    st = state.status
    cq = state.cluster_queue
    st.admission = to_admission(cq, notice.assignment)
    st.conditions = cond.set_condition(st.conditions, QUOTA_RESERVED, True, "QuotaReserved", f"Quota reserved in ClusterQueue {cq}", now)
    for type_ in (EVICTED, PREEMPTED):
        old = cond.find(st.conditions, type_)
        if old is not None and old.status == "True":
            st.conditions = cond.set_condition(st.conditions, type_, False, "QuotaReserved", f"Previously: {old.message}", now)
    st.admission_checks = sync_admission_checks(st.admission_checks, notice.admission_checks, now)
    state.checks_info = dict(notice.checks_info)
    state.asks.answered = {}
    state.flavors = dict(notice.flavors)
    state.wait_for_pods_ready = notice.wait_for_pods_ready
    state.workload_retention = notice.workload_retention
    state.run.task_queue = notice.runner
    state.gated = notice.gated
    record(
        state,
        "QuotaReserved",
        f"Quota reserved in ClusterQueue {cq}, wait time since queued was {_seconds(now - queued_since(state))}s",
        now,
    )
    state.claim.queued = False
    sync_admitted(state, now)


def queued_since(state: WorkloadState) -> datetime:
    """Kueue's queued wait time starts at creation (or at the last requeue, once there are any)."""
    return state.created


def sync_admission_checks(
    current: list[AdmissionCheckState] | None, wanted: list[str], now: datetime
) -> list[AdmissionCheckState] | None:
    """Kueue's syncAdmissionCheckConditions: add missing checks as Pending, drop the ones no longer
    applicable, sort by name, leave existing entries untouched."""
    if not wanted:
        return None
    by_name = {c.name: c for c in current or ()}
    out = [
        by_name.get(n) or AdmissionCheckState.model_validate({"name": n, "state": "Pending", "lastTransitionTime": second(now), "message": ""})
        for n in wanted
    ]
    return sorted(out, key=lambda c: c.name)


def take_checks_before_reservation(state: WorkloadState, wanted: list[str], now: datetime) -> None:
    """A waiting workload has the checks that apply to every flavor (Kueue adds them before quota
    is reserved), so that their verdicts can arrive early."""
    if not has_quota(state):
        state.status.admission_checks = sync_admission_checks(state.status.admission_checks, wanted, now)


def take_checks(state: WorkloadState, notice: Notice, now: datetime) -> None:
    """The ClusterQueue's checks changed while this workload holds quota there."""
    state.status.admission_checks = sync_admission_checks(state.status.admission_checks, notice.admission_checks, now)
    state.checks_info = dict(notice.checks_info)
    state.wait_for_pods_ready = notice.wait_for_pods_ready
    state.workload_retention = notice.workload_retention


def set_pod_sets_info(state: WorkloadState) -> None:
    """What the pods start with: the flavors' node labels and tolerations, then each check's
    podSetUpdates in check-name order. Raises PodSetUpdateConflict as Kueue's start would fail."""
    state.pod_sets_info = None
    admission = state.status.admission
    if admission is not None:
        state.pod_sets_info = pod_set_updates.merge(admission, state.flavors, state.status.admission_checks or [])


def sync_admitted(state: WorkloadState, now: datetime) -> None:
    """Kueue's SyncAdmittedCondition: runs only while the workload is not admitted, so a check
    added or turning Pending after admission does not take the admission back."""
    st = state.status
    if not has_quota(state) or is_admitted(state):
        return
    checks = st.admission_checks or []
    if all(c.state == "Ready" for c in checks):
        st.conditions = cond.set_condition(st.conditions, ADMITTED, True, "Admitted", "The workload is admitted", now)
        state.asks.first_retry = {}  # admitted: each check's retry time budget counts afresh
        if not cond.is_true(st.conditions, PODS_READY):
            # What Kueue's job controller writes for an admitted workload whose pods are not up yet.
            st.conditions = cond.set_condition(st.conditions, PODS_READY, False, WAIT_FOR_START, NOT_READY_MESSAGE, now)
        reserved = cond.find(st.conditions, QUOTA_RESERVED)
        since = reserved.last_transition_time if reserved and reserved.last_transition_time else second(now)
        record(state, "Admitted", f"Admitted by ClusterQueue {state.cluster_queue}, wait time since reservation was {_seconds(now - since)}s", now)
    else:
        st.conditions = cond.set_condition(
            st.conditions, ADMITTED, False, "UnsatisfiedAdmissionChecks", "The workload has not all checks ready", now
        )


def leaves_queue(state: WorkloadState) -> bool:
    """The workload stops waiting or holding quota; returns whether its ClusterQueue must be told
    (it held quota there, or a place in the queue)."""
    was_there = has_quota(state) or state.claim.queued
    state.claim.queued = False
    return was_there and state.cluster_queue is not None


def finish(state: WorkloadState, succeeded: bool, message: str, now: datetime, reason: str = "") -> bool:
    """Mark the workload finished; returns whether its ClusterQueue must be told, to free the quota
    or the place. Like Kueue, the last admission stays in the status for the record."""
    if is_finished(state):
        return False
    release = leaves_queue(state)
    st = state.status
    reason = reason or ("Succeeded" if succeeded else "Failed")
    st.conditions = cond.set_condition(st.conditions, FINISHED, True, reason, message or reason, now)
    record(state, "Finished", message or reason, now, "Normal" if succeeded else "Warning")
    return release


def delete(state: WorkloadState) -> bool:
    """The workload is deleted; returns whether its ClusterQueue must be told."""
    state.deleted = True
    return leaves_queue(state)


def current_details(state: WorkloadState) -> str:
    """The UI's current details (markdown): the phase and why, the checks still waited for, the
    backoff's end, and the PodsReady condition once admitted (`explain.current_details` adds the
    one cause of its not being admitted, and its admission gates)."""
    lines = [f"**{phase(state)}** {condition_summary(state)}"]
    if state.claim.queued and state.cluster_queue:
        lines.append(f"queued in ClusterQueue {state.cluster_queue}: its current details show the positions")
    waiting = [f"{c.name} ({c.state})" for c in state.status.admission_checks or () if c.state != "Ready"]
    if waiting and not is_finished(state):
        lines.append(f"checks not Ready: {', '.join(waiting)}")
    rs = state.status.requeue_state
    if rs is not None and rs.requeue_at is not None:
        lines.append(f"back in the queue at {rs.requeue_at.isoformat()}" + (f" (requeue {rs.count})" if rs.count else ""))
    pods = cond.find(state.status.conditions, PODS_READY)
    if pods is not None and is_admitted(state) and not is_finished(state):
        lines.append(f"PodsReady={pods.status} ({pods.reason})")
    return "\n\n".join(lines)


def static_summary(workload: Workload, cluster_queue: str | None) -> str:
    """The UI's summary of a workload's workflow: `<ns>/<name> → <clusterqueue>, priority N` (its
    LocalQueue when the ClusterQueue is not known at submission)."""
    spec = workload.spec
    where = cluster_queue or f"LocalQueue {spec.queue_name}"
    return f"{workload.key} → {where}, priority {spec.priority or 0}"


def static_details(workload: Workload, admission_checks: Sequence[str] = ()) -> str:
    """The UI's details of a workload's workflow (markdown): requests per podSet, and the
    AdmissionChecks of its ClusterQueue at submission (which apply depends on its flavors)."""
    rows = ["| podSet | count | requests per pod |", "|---|---|---|"]
    for ps in workload.spec.pod_sets:
        req = pod_set_request(ps.to_wire())
        per_pod = ", ".join(f"{k}: {v}" for k, v in sorted(format_requests(req.per_pod).items())) or "none"
        rows.append(f"| {ps.name} | {ps.count} | {per_pod} |")
    checks = ", ".join(f"`{c}`" for c in admission_checks) or "none"
    return f"LocalQueue `{workload.spec.queue_name}`; its ClusterQueue's AdmissionChecks: {checks}\n\n" + "\n".join(rows)


def condition_summary(state: WorkloadState) -> str:
    """One line for the UI's current details: the message of the condition that decides the phase."""
    for type_ in (FINISHED, ADMITTED, QUOTA_RESERVED):
        c = cond.find(state.status.conditions, type_)
        if c is not None and (c.status == "True" or type_ == QUOTA_RESERVED):
            return c.message or ""
    return ""


def _seconds(delta: timedelta) -> int:
    return max(0, int(delta.total_seconds()))
