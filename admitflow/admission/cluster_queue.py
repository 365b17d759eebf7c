"""A ClusterQueue: its resolved view of the catalog, its state, and the rules that change them.

The catalog resolves what a ClusterQueue references (flavors, admission checks, the LocalQueues
pointing at it) into a `ClusterQueueView`; the ClusterQueue workflow keeps a `ClusterQueueState` and
changes it only through the functions here.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from functools import cached_property
from typing import Any, Literal

from pydantic import Field

from admitflow.wire import CarriedState, WireModel

from admitflow.admission import conditions as cond
from admitflow.admission.flavor_assignment import (
    Assignment,
    FlavorInfo,
    FlavorQuota,
    ResourceGroupQuota,
    Usage,
)
from admitflow.admission.pending_queue import PendingQueue, QueueEntry
from admitflow.admission.quota_tree import CohortTree
from admitflow.admission.requests import format_requests
from admitflow.admission.selectors import Requirement, Taint, Toleration, namespace_labels, selector_matches
from admitflow.api.admission_check import AdmissionCheckRetryStrategy, PendingTimeout
from admitflow.api.cluster_queue import ClusterQueueReference
from admitflow.api.configuration import WaitForPodsReady, WorkloadRetentionPolicy
from admitflow.api import (
    ClusterQueueSpec,
    ClusterQueueStatus,
    Condition,
    LocalQueueStatus,
    ResourceFlavorSpec,
    format_resource,
    resource_value,
)

ACTIVE = "Active"

# How many released (key, uid, ticket) triples a queue remembers, so that a late duplicate enqueue of
# a workload that already left is not taken for a new one. Duplicates arrive within seconds; this
# bounds the memory carried across continue-as-new.
RELEASED_MEMORY = 1000

# Events a ClusterQueue keeps for `describe clusterqueue`; its workflow history has all of them.
MAX_QUEUE_EVENTS = 50
# The reason of the event, and of the eviction its workload is told of, when an operator gives back
# what a workload holds without its workflow's cooperation.
FORCE_RELEASED = "QuotaForceReleased"


class AdmissionCheckInfo(WireModel):
    """What the engine needs of an AdmissionCheck: who answers it, whether it is active, its retry
    strategy, and the `spec` of the object its `parameters` refer to (None without one, or when
    that object does not exist)."""

    controller_name: str
    active: bool = False
    retry_strategy: AdmissionCheckRetryStrategy | None = None
    parameters: dict[str, Any] | None = None
    pending_timeout: PendingTimeout | None = None


class LocalQueueInfo(WireModel):
    stop_policy: str = "None"
    runner: str = Field(default="", description="Its `admitflow.io/runner` annotation: the task queue that runs admitted workloads.")


class ClusterQueueView(WireModel):
    """What a ClusterQueue needs from the catalog. `spec` is None once the ClusterQueue is deleted."""

    name: str
    revision: int = Field(description="Catalog revision that produced this view; older views are ignored.")
    spec: ClusterQueueSpec | None = None
    flavors: dict[str, ResourceFlavorSpec] = Field(default_factory=dict)
    admission_checks: dict[str, AdmissionCheckInfo] = Field(default_factory=dict)
    local_queues: dict[str, LocalQueueInfo] = Field(
        default_factory=dict, description="LocalQueues pointing at this ClusterQueue, by namespace/name."
    )
    wait_for_pods_ready: WaitForPodsReady | None = Field(
        default=None, description="The Configuration's waitForPodsReady; None when it is off."
    )
    workload_retention: WorkloadRetentionPolicy | None = Field(
        default=None, description="The Configuration's objectRetentionPolicies.workloads; None: workloads are kept."
    )
    cohort_tree: CohortTree | None = Field(
        default=None,
        description="Every Cohort of the tree its spec.cohortName belongs to; None when it has no cohort.",
    )
    fair_sharing: list[str] | None = Field(
        default=None,
        description="The Configuration's fairSharing preemptionStrategies when fair sharing is on; None when off.",
    )

    @property
    def block_admission(self) -> bool:
        return self.wait_for_pods_ready is not None and self.wait_for_pods_ready.block_admission


class Reservation(WireModel):
    key: str
    uid: str
    ticket: int
    local_queue: str
    priority: int = 0
    timestamp: datetime = Field(description="The queue order timestamp it was admitted with.")
    assignment: Assignment
    reserved_at: datetime
    admitted: bool = False
    checks: list[str] = Field(default_factory=list, description="The admission checks the workload was told it has.")
    evicting: bool = Field(default=False, description="Told to leave (preempted); holds quota until it does.")
    gated: bool = Field(default=False, description="Reserved with a grant of the blockAdmission gate.")
    answered_at: datetime | None = Field(
        default=None,
        description="Told only in the answer to its enqueue, at this time, and not heard of from its workload since: "
        "told again by signal once scheduler.RETELL_AFTER has passed (scheduler.retell_answered).",
    )
    answer_unread: bool | None = Field(
        default=None,
        description="True: its ticket's enqueue came again as a signal because its sender stopped waiting for the "
        "answer: a reservation told only in an answer is told again by signal at once (scheduler.retell_answered).",
    )

    @property
    def local_queue_key(self) -> str:
        return f"{self.key.split('/', 1)[0]}/{self.local_queue}"

    def totals(self) -> dict[str, int]:
        """Quota held per resource, whatever the flavor."""
        out: dict[str, int] = {}
        for (_, res), v in self.assignment.usage().items():
            out[res] = out.get(res, 0) + v
        return out


class Notice(WireModel):
    """What the ClusterQueue tells one workload; delivered in batches by an activity."""

    key: str
    uid: str
    ticket: int
    kind: Literal["reserved", "pending", "dequeued", "evicted", "checks"]
    reason: str = ""
    message: str = ""
    assignment: Assignment | None = None
    admission_checks: list[str] = Field(
        default_factory=list, description="With reserved, pending and checks: the checks the workload has."
    )
    checks_info: dict[str, AdmissionCheckInfo] = Field(
        default_factory=dict, description="With reserved and checks: those checks' controllers, parameters and retry strategies."
    )
    flavors: dict[str, ResourceFlavorSpec] = Field(
        default_factory=dict, description="With reserved: the assigned flavors, for the pods' node selectors."
    )
    preemption_reason: str = Field(default="", description="With kind evicted and reason Preempted: why.")
    wait_for_pods_ready: WaitForPodsReady | None = Field(
        default=None, description="With reserved and checks: the waitForPodsReady settings in force (None: off)."
    )
    workload_retention: WorkloadRetentionPolicy | None = Field(
        default=None, description="With reserved and checks: the workload retention policy in force (None: kept)."
    )
    runner: str = Field(default="", description="With reserved: its LocalQueue's runner task queue, if any.")
    gated: bool = Field(
        default=False, description="With reserved: reserved with a grant of the blockAdmission gate; tell it when ready."
    )
    cluster_queue: ClusterQueueReference | None = Field(
        default=None, description="The ClusterQueue that sends it (set on the way out; None from a queue of an "
        "earlier release). A workload that gives back a ticket it never took releases it there.",
    )
    reserved_at: datetime | None = Field(
        default=None, description="With reserved: when the queue reserved it (to the second), whenever and however "
        "it is told: how long a workload held quota before it heard of it reads from its own history.",
    )


class QueueEvent(WireModel):
    """A Kubernetes-style event on the ClusterQueue (events.k8s.io: type, reason, note)."""

    type: Literal["Normal", "Warning"] = "Normal"
    reason: str
    message: str
    time: datetime


class ForceReleaseOutcome(WireModel):
    """What a force-release gave back: `quota` (the workload's reservation), `place` (its entry in
    the queue), or `""`: it held nothing here, so a repeated force-release changes nothing."""

    released: Literal["quota", "place", ""] = ""
    uid: str = ""
    ticket: int = 0
    usage: dict[str, str] = Field(default_factory=dict, description="With quota: resource -> total quantity given back.")
    gated: bool = Field(default=False, description="The reservation held a grant of the blockAdmission gate.")
    moved_to: str = Field(default="", description="Its cohort tree's workflow ID, which holds the queue's state: ask there.")


class ClusterQueueState(CarriedState):
    name: str
    view: ClusterQueueView | None = None
    conditions: list[Condition] = Field(default_factory=list)
    pending: PendingQueue = Field(default_factory=PendingQueue, description="In queue order.")
    reservations: dict[str, Reservation] = Field(default_factory=dict)
    released: list[tuple[str, str, int]] = Field(
        default_factory=list, description="The last released (key, uid, ticket), oldest first."
    )
    reparameterized: list[str] = Field(
        default_factory=list, description="Checks whose parameters changed since workloads holding quota were told."
    )
    pods_ready_changed: bool = Field(
        default=False, description="The waitForPodsReady settings changed since workloads holding quota were told."
    )
    events: list[QueueEvent] = Field(
        default_factory=list, description=f"The last {MAX_QUEUE_EVENTS} events, oldest first (`describe clusterqueue`)."
    )
    gate: Literal["none", "asked", "waiting", "granted"] = Field(
        default="none",
        description="With blockAdmission: asked the gate for a grant, told to wait, or holding one (used or "
        "handed back by the next pass).",
    )

    @cached_property
    def released_index(self) -> set[tuple[str, str, int]]:
        """`released` as a set, built on first use and kept with it (`_remember_released`). Like a
        pending entry's shape, it is not part of the state: not on the wire, not in its equality."""
        return {tuple(r) for r in self.released}

    def was_released(self, key: str, uid: str, ticket: int) -> bool:
        return (key, uid, ticket) in self.released_index


# --- the view ----------------------------------------------------------------------------------


def quota_groups(spec: ClusterQueueSpec) -> list[ResourceGroupQuota]:
    return [
        ResourceGroupQuota(
            covered=tuple(rg.covered_resources),
            flavors=tuple(
                FlavorQuota(
                    name=fq.name,
                    nominal={r.name: resource_value(r.name, str(r.nominal_quota)) for r in fq.resources},
                    borrowing_limit={
                        r.name: resource_value(r.name, str(r.borrowing_limit)) for r in fq.resources if r.borrowing_limit is not None
                    },
                    lending_limit={
                        r.name: resource_value(r.name, str(r.lending_limit)) for r in fq.resources if r.lending_limit is not None
                    },
                )
                for fq in rg.flavors
            ),
        )
        for rg in spec.resource_groups or ()
    ]


def flavor_infos(view: ClusterQueueView) -> dict[str, FlavorInfo]:
    out: dict[str, FlavorInfo] = {}
    for name, rf in view.flavors.items():
        data = rf.to_wire()
        out[name] = FlavorInfo(
            node_labels=dict(data.get("nodeLabels") or {}),
            node_taints=tuple(Taint(**{k: t[k] for k in ("key", "value", "effect") if k in t}) for t in data.get("nodeTaints") or ()),
            tolerations=tuple(
                Toleration(**{k: t[k] for k in ("key", "operator", "value", "effect") if t.get(k) is not None})
                for t in data.get("tolerations") or ()
            ),
        )
    return out


def flavor_names(spec: ClusterQueueSpec) -> list[str]:
    seen: list[str] = []
    for rg in spec.resource_groups or ():
        for fq in rg.flavors:
            if fq.name not in seen:
                seen.append(fq.name)
    return seen


def check_rules(spec: ClusterQueueSpec) -> dict[str, set[str]]:
    """Check name -> flavors it applies to; an empty onFlavors means every flavor of the queue."""
    rules: dict[str, set[str]] = {}
    strategy = spec.admission_checks_strategy
    for rule in (strategy.admission_checks if strategy else None) or ():
        rules[rule.name] = set(rule.on_flavors or ()) or set(flavor_names(spec))
    return rules


def checks_for(spec: ClusterQueueSpec, used_flavors: Iterable[str] | None) -> list[str]:
    """Which checks a workload gets (Kueue's AdmissionChecksForWorkload), sorted by name.

    Before quota is reserved (`used_flavors` None) only checks that apply to every flavor count;
    after, a check applies when its flavors meet the flavors the workload was assigned."""
    rules = check_rules(spec)
    if used_flavors is None:
        every = set(flavor_names(spec))
        return sorted(n for n, fl in rules.items() if fl >= every)
    used = set(used_flavors)
    return sorted(n for n, fl in rules.items() if fl & used)


def active_condition(view: ClusterQueueView) -> tuple[bool, str, str]:
    """Kueue's ClusterQueue `Active` condition: status, reason, message."""
    spec = view.spec
    if spec is None:
        return False, "Terminating", "Can't admit new workloads; clusterQueue is terminating"
    reasons: list[str] = []
    messages: list[str] = []
    if spec.stop_policy not in (None, "None"):
        reasons.append("Stopped")
        messages.append("is stopped")
    missing_flavors = [f for f in flavor_names(spec) if f not in view.flavors]
    if missing_flavors:
        reasons.append("FlavorNotFound")
        messages.append(f"references missing ResourceFlavor(s): {','.join(missing_flavors)}")
    rules = check_rules(spec)
    missing_checks = sorted(n for n in rules if n not in view.admission_checks)
    if missing_checks:
        reasons.append("AdmissionCheckNotFound")
        messages.append(f"references missing AdmissionCheck(s): {','.join(missing_checks)}")
    inactive = sorted(n for n in rules if n in view.admission_checks and not view.admission_checks[n].active)
    if inactive:
        reasons.append("AdmissionCheckInactive")
        messages.append(f"references inactive AdmissionCheck(s): {','.join(inactive)}")
    if not reasons:
        return True, "Ready", "Can admit new workloads"
    return False, reasons[0], f"Can't admit new workloads: {', '.join(messages)}."


def namespace_allowed(spec: ClusterQueueSpec, namespace: str) -> bool:
    sel = spec.namespace_selector
    if sel is None:
        return True
    return selector_matches(
        sel.match_labels,
        [Requirement(key=e.key, operator=e.operator, values=tuple(e.values or ())) for e in sel.match_expressions or ()],
        namespace_labels(namespace),
    )


# --- state transitions --------------------------------------------------------------------------


def set_view(state: ClusterQueueState, view: ClusterQueueView, now: datetime) -> bool:
    """Take a newer view; returns whether it was taken. Everything set aside is looked at again."""
    if state.view is not None and view.revision <= state.view.revision:
        return False
    state.view = view
    active, reason, message = active_condition(view)
    state.conditions = cond.set_condition(state.conditions, ACTIVE, active, reason, message, now)
    requeue_inadmissible(state)
    return True


def notices_outdated(state: ClusterQueueState) -> None:
    """The queue's configuration changed: what its pending workloads were told about quota, and
    what the scheduler knows of why they wait, may no longer hold (the capacity named in
    ExceedsMaxQuota grows when the queue joins a cohort). Each is evaluated afresh and told again
    if the message differs."""
    for e in state.pending:
        if e.notice is not None or e.evaluated is not None:
            e.retell, e.evaluated = e.notice is not None, None


def changed_parameters(old: ClusterQueueView | None, new: ClusterQueueView) -> list[str]:
    """Checks whose parameters object changed (or appeared, or went) between two views: workloads
    holding quota must hear of it (a ProvisioningRequestConfig change remakes their requests)."""
    if old is None:
        return []
    return sorted(
        n for n, info in new.admission_checks.items() if n in old.admission_checks and old.admission_checks[n].parameters != info.parameters
    )


def changed_pods_ready(old: ClusterQueueView | None, new: ClusterQueueView) -> bool:
    """The waitForPodsReady settings changed: workloads holding quota must hear of it (their
    timeouts follow the settings in force, as Kueue's do after its manager restarts)."""
    return old is not None and old.wait_for_pods_ready != new.wait_for_pods_ready


def send_back_strangers(state: ClusterQueueState) -> list[Notice]:
    """Workloads whose LocalQueue does not lead here (it was deleted, or they were routed with an
    outdated lookup) leave the queue and are told so; they look their queue up again and wait for
    it if it is gone."""
    view = state.view
    if view is None or view.spec is None:
        return []
    notices: list[Notice] = []
    for e in state.pending:
        if e.local_queue_key in view.local_queues:
            continue
        state.pending.remove(e.key)
        notices.append(
            Notice(
                key=e.key, uid=e.uid, ticket=e.ticket, kind="dequeued", reason="Misconfigured",
                message=f"LocalQueue {e.local_queue} is terminating or missing",
            )
        )
    return notices


def enqueue(state: ClusterQueueState, entry: QueueEntry) -> None:
    """Add a workload; safe to repeat. A newer ticket or another run of the same workload replaces
    what the queue held for that key, quota included, since only one run of a workflow ID can live.
    The same ticket again, sent as a signal after its answer went unread (`answer_unread`), marks
    what the queue holds for it: what it decided, or decides, for that ticket is told by signal."""
    if state.was_released(entry.key, entry.uid, entry.ticket):
        return
    held = state.reservations.get(entry.key)
    if held is not None:
        if held.uid == entry.uid and held.ticket >= entry.ticket:
            if entry.answer_unread and held.ticket == entry.ticket:
                held.answer_unread = True
            return
        del state.reservations[entry.key]
        requeue_inadmissible(state)
    queued = state.pending.get(entry.key)
    if queued is not None and queued.uid == entry.uid and queued.ticket >= entry.ticket:
        if entry.answer_unread and queued.ticket == entry.ticket:
            queued.answer_unread = True
        return
    state.pending.add(entry)


def release(state: ClusterQueueState, key: str, uid: str, ticket: int) -> bool:
    """The workload left (finished, deleted, evicted): drop its entry or give its quota back.
    Returns whether quota was freed."""
    _remember_released(state, key, uid, ticket)
    held = state.reservations.get(key)
    if held is not None and held.uid == uid and held.ticket == ticket:
        del state.reservations[key]
        requeue_inadmissible(state)
        return True
    queued = state.pending.get(key)
    if queued is not None and queued.uid == uid and queued.ticket == ticket:
        state.pending.remove(key)
    return False


def grant_freed(state: ClusterQueueState, held: Reservation | None) -> bool:
    """`held`, what the queue held for its key before a release or an enqueue, was reserved with the
    blockAdmission gate's grant and that message freed it: the gate must be told it settled. The
    workload may never have taken it (its release crossed the reservation's notice; a new run took
    its place after the one before ended without a word), and the gate would count it for good."""
    return held is not None and held.gated and state.reservations.get(held.key) is not held


def forget(state: ClusterQueueState, key: str, uid: str) -> bool:
    """That run of the workload no longer runs: nothing will ever release for it. Returns whether
    quota was freed."""
    queued = state.pending.get(key)
    if queued is not None and queued.uid == uid:
        state.pending.remove(key)
    held = state.reservations.get(key)
    if held is not None and held.uid == uid:
        del state.reservations[key]
        requeue_inadmissible(state)
        return True
    return False


def force_release(state: ClusterQueueState, key: str, message: str, now: datetime) -> tuple[ForceReleaseOutcome, list[Notice]]:
    """An operator gives back what a workload holds here without its workflow's cooperation (its
    workflow task fails, so it cannot send `release`): its reservation, or its place in the queue.
    That run and ticket count as released, so nothing it sent before is taken for new; the event is
    kept; and the workload is told, as if evicted (or sent back), so that once its workflow runs
    again it queues afresh instead of believing it still holds the quota. Safe to repeat: a
    workload that holds nothing here changes nothing."""
    held = state.reservations.get(key)
    if held is not None:
        del state.reservations[key]
        _remember_released(state, key, held.uid, held.ticket)
        requeue_inadmissible(state)
        usage = format_requests(held.totals())
        what = ",".join(f"{r}={q}" for r, q in usage.items())
        note = f"Quota of workload {key} ({what}) released by an operator: {message}"
        _record(state, FORCE_RELEASED, note, now)
        outcome = ForceReleaseOutcome(released="quota", uid=held.uid, ticket=held.ticket, usage=usage, gated=held.gated)
        notice = Notice(key=key, uid=held.uid, ticket=held.ticket, kind="evicted", reason=FORCE_RELEASED, message=note)
        return outcome, [notice]
    queued = state.pending.get(key)
    if queued is not None:
        state.pending.remove(key)
        _remember_released(state, key, queued.uid, queued.ticket)
        note = f"Workload {key} taken out of the queue by an operator: {message}"
        _record(state, FORCE_RELEASED, note, now)
        outcome = ForceReleaseOutcome(released="place", uid=queued.uid, ticket=queued.ticket)
        notice = Notice(key=key, uid=queued.uid, ticket=queued.ticket, kind="dequeued", reason=FORCE_RELEASED, message=note)
        return outcome, [notice]
    return ForceReleaseOutcome(), []


def _record(state: ClusterQueueState, reason: str, message: str, now: datetime, type_: str = "Warning") -> None:
    state.events.append(QueueEvent(type=type_, reason=reason, message=cond.truncate(message, cond.MAX_EVENT_MESSAGE), time=cond.second(now)))
    del state.events[:-MAX_QUEUE_EVENTS]


def mark_admitted(state: ClusterQueueState, key: str, uid: str, ticket: int) -> bool:
    """The workload passed its checks: its reservation now counts as admitted."""
    held = state.reservations.get(key)
    if held is None or held.uid != uid or held.ticket != ticket:
        return False
    held.answered_at = None  # word from the workload about it: it has the reservation
    if held.admitted:
        return False
    held.admitted = True
    return True


def reprioritize(state: ClusterQueueState, key: str, uid: str, ticket: int, priority: int) -> bool:
    """The workload's priority changed. Its queue entry moves to its new place and leaves the
    inadmissible set (Kueue's queue takes a changed spec back into the active heap); a reservation
    takes the new priority, which preemption compares, and what was set aside is tried again (as
    Kueue requeues the inadmissible workloads when an admitted one changes). Returns whether
    anything changed."""
    held = state.reservations.get(key)
    if held is not None and held.uid == uid and held.ticket == ticket:
        held.answered_at = None  # word from the workload about it: it has the reservation
        if held.priority == priority:
            return False
        held.priority = priority
        requeue_inadmissible(state)  # what could not preempt it may now
        return True
    queued = state.pending.get(key)
    if queued is None or queued.uid != uid or queued.ticket != ticket or queued.priority == priority:
        return False
    state.pending.add(queued.model_copy(update={"priority": priority, "inadmissible": False}))
    return True


def checks_info(view: ClusterQueueView, checks: Iterable[str]) -> dict[str, AdmissionCheckInfo]:
    return {n: view.admission_checks[n] for n in checks if n in view.admission_checks}


def sync_reservation_checks(state: ClusterQueueState) -> list[Notice]:
    """The queue's checks, or their parameters, changed: each workload holding quota is told the
    checks it now has (Kueue's syncAdmissionCheckConditions reaches workloads with a reservation)."""
    view = state.view
    if view is None or view.spec is None:
        return []
    notices = []
    changed, state.reparameterized = set(state.reparameterized), []
    settings_changed, state.pods_ready_changed = state.pods_ready_changed, False
    for r in state.reservations.values():
        wanted = checks_for(view.spec, {f for ps in r.assignment.pod_sets for f in ps.flavors.values()})
        if wanted == r.checks and not changed & set(wanted) and not settings_changed:
            continue
        r.checks = wanted
        notices.append(
            Notice(
                key=r.key, uid=r.uid, ticket=r.ticket, kind="checks", admission_checks=wanted,
                checks_info=checks_info(view, wanted), wait_for_pods_ready=view.wait_for_pods_ready,
                workload_retention=view.workload_retention,
            )
        )
    return notices


def gate_answer(state: ClusterQueueState, granted: bool) -> None:
    """The blockAdmission gate answered: a grant is held until the next pass uses it or hands it
    back; a refusal turns an ask into a wait (the next pass tells the workload why)."""
    if granted:
        state.gate = "granted"
    elif state.gate == "asked":
        state.gate = "waiting"


def requeue_inadmissible(state: ClusterQueueState) -> None:
    for e in state.pending:
        if e.inadmissible:  # reading is cheap; a model's assignment is not, at 10,000 entries per release
            e.inadmissible = False


def _remember_released(state: ClusterQueueState, key: str, uid: str, ticket: int) -> None:
    state.released.append((key, uid, ticket))
    state.released_index.add((key, uid, ticket))
    if len(state.released) > RELEASED_MEMORY:
        for old in state.released[:-RELEASED_MEMORY]:
            state.released_index.discard(tuple(old))
        del state.released[:-RELEASED_MEMORY]


def usage(reservations: Iterable[Reservation], admitted_only: bool = False) -> Usage:
    out: Usage = {}
    for r in reservations:
        if admitted_only and not r.admitted:
            continue
        for fr, v in r.assignment.usage().items():
            out[fr] = out.get(fr, 0) + v
    return out


# --- status -------------------------------------------------------------------------------------


def _flavors_usage(spec: ClusterQueueSpec | None, used: Usage) -> list[dict]:
    """Kueue's flavorsReservation / flavorsUsage: per flavor and resource, the total and the part
    past the nominal quota, which only a ClusterQueue in a cohort can use (borrowed)."""
    if spec is None:
        return []
    out = []
    for rg in spec.resource_groups or ():
        for fq in rg.flavors:
            resources = []
            for r in fq.resources:
                total = used.get((fq.name, r.name), 0)
                borrowed = max(0, total - resource_value(r.name, str(r.nominal_quota))) if spec.cohort_name else 0
                resources.append(
                    {"name": r.name, "total": format_resource(r.name, total), "borrowed": format_resource(r.name, borrowed)}
                )
            out.append({"name": fq.name, "resources": resources})
    return out


def cluster_queue_status(state: ClusterQueueState, weighted_share: int | None = None) -> ClusterQueueStatus:
    """Kueue's ClusterQueue status; `weighted_share` (fair sharing on) is its tree's to say."""
    spec = state.view.spec if state.view else None
    reserved = list(state.reservations.values())
    status = {
        "conditions": [c.to_wire() for c in state.conditions],
        "flavorsReservation": _flavors_usage(spec, usage(reserved)),
        "flavorsUsage": _flavors_usage(spec, usage(reserved, admitted_only=True)),
        "pendingWorkloads": len(state.pending),
        "reservingWorkloads": len(reserved),
        "admittedWorkloads": sum(1 for r in reserved if r.admitted),
    }
    if weighted_share is not None:
        status["fairSharing"] = {"weightedShare": weighted_share}
    return ClusterQueueStatus.model_validate(status)


def current_details(state: ClusterQueueState, head: int = 10) -> str:
    """The UI's current details of a ClusterQueue (markdown): counts, then the head of its queue
    with each workload's position (where a waiting workload stands)."""
    reserving = state.reservations.values()
    admitted = sum(1 for r in reserving if r.admitted)
    lines = [f"pending {len(state.pending)}, reserving {len(reserving)}, admitted {admitted}"]
    for position, e in enumerate(state.pending):
        if position == head:
            lines.append(f"... {len(state.pending) - head} more (`admitflow get pending-workloads {state.name}`)")
            break
        lines.append(f"{position}. {e.key} (priority {e.priority})")
    return "\n\n".join(lines)


def local_queue_statuses(state: ClusterQueueState) -> dict[str, LocalQueueStatus]:
    """The status of each LocalQueue that leads to the queue, by namespace/name."""
    keys = sorted(set(state.view.local_queues) if state.view else set())
    return {k: local_queue_status(state, k) for k in keys}


def local_queue_status(state: ClusterQueueState, lq_key: str) -> LocalQueueStatus:
    spec = state.view.spec if state.view else None
    reserved = [r for r in state.reservations.values() if r.local_queue_key == lq_key]
    lq = state.view.local_queues.get(lq_key) if state.view else None
    if lq is None:
        active = (False, "ClusterQueueDoesNotExist", "Can't submit new workloads to clusterQueue")
    elif lq.stop_policy not in (None, "None"):
        active = (False, "Stopped", "LocalQueue is stopped")
    elif spec is None or not cond.is_true(state.conditions, ACTIVE):
        active = (False, "ClusterQueueIsInactive", "Can't submit new workloads to clusterQueue")
    else:
        active = (True, "Ready", "Can submit new workloads to localQueue")
    conditions = cond.set_condition([], ACTIVE, *active, now=_latest_transition(state))

    def by_flavor(used: Usage) -> list[dict]:
        rows = _flavors_usage(spec, used)
        return [{"name": r["name"], "resources": [{"name": x["name"], "total": x["total"]} for x in r["resources"]]} for r in rows]

    return LocalQueueStatus.model_validate(
        {
            "conditions": [c.to_wire() for c in conditions],
            "pendingWorkloads": sum(1 for e in state.pending if e.local_queue_key == lq_key),
            "reservingWorkloads": len(reserved),
            "admittedWorkloads": sum(1 for r in reserved if r.admitted),
            "flavorsReservation": by_flavor(usage(reserved)),
            "flavorsUsage": by_flavor(usage(reserved, admitted_only=True)),
        }
    )


def _latest_transition(state: ClusterQueueState) -> datetime:
    c = cond.find(state.conditions, ACTIVE)
    return c.last_transition_time if c and c.last_transition_time else datetime(1970, 1, 1, tzinfo=UTC)
