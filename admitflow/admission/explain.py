"""Why a workload is not admitted now, as one cause; when it could be, as an estimate; and a
ClusterQueue's waiting workloads counted by cause (`admitflow explain`, and the line "why not
admitted" of a workload's current details in the Temporal UI).

`cause` reads what Kueue's conditions say (and, given the workflow's own state, what only it knows)
and names exactly one cause from a closed, ordered list: the first that holds wins (`CAUSES`, in
that order). What the workload's rules in `lifecycle.way_forward` call "what moves it on" is the
other side of the same coin: a cause says what it waits for, in Kueue's words, and each one names
the message or the person that ends the wait.

`estimate` is a small model of the queue, not a promise (its assumptions are `ASSUMPTIONS`): from
the workloads ahead in the ClusterQueue and the running ones with their maximum execution times,
the earliest moment when enough of the queue's nominal quota could be free for it.

Pure: no I/O, no clock (`now` is passed in; without it, only absolute times are given, which is
what the workflow's current details need to stay deterministic).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal, TypedDict, get_args

from pydantic import Field

from admitflow.admission import admission_gates, checks, lifecycle, pods_ready
from admitflow.admission import conditions as cond
from admitflow.admission import workload as wl
from admitflow.admission.requests import PODS, add, pod_set_request, total_requests
from admitflow.admission.workload import WorkloadState
from admitflow.api import Workload, format_resource, resource_value
from admitflow.api.cluster_queue import ClusterQueueSpec
from admitflow.api.duration import format_duration_nanos
from admitflow.admission.protocol import PendingWorkload, ReservingWorkload
from admitflow.wire import WireModel

CauseName = Literal[
    "NotAnswering",
    "Deleted",
    "Finished",
    "Inactive",
    "Admitted",
    "WaitingForChecks",
    "AdmissionGated",
    "Backoff",
    "QueueMissing",
    "WaitingForPodsReady",
    "Inadmissible",
    "NoQuota",
    "Queued",
]
# The causes in the order they are tried: the first that holds is the cause.
CAUSES: tuple[str, ...] = get_args(CauseName)
# Not waiting for admission: nothing to explain, and not counted as pending.
NOT_WAITING = frozenset({"Deleted", "Finished", "Admitted"})
# Waiting in its ClusterQueue's queue for quota: what `estimate` models.
QUEUE_CAUSES = frozenset({"NoQuota", "Queued"})

# QuotaReserved=False reasons the ClusterQueue's scheduler writes (Kueue's words).
NO_QUOTA_REASONS = frozenset({"WaitingForQuota", "WaitingForPreemptedWorkloads"})
# Reasons that say the workload cannot be admitted as things stand, whatever is freed: it asks for
# more than the queue has, no flavor matches, the queue is stopped or inactive, or misconfigured.
INADMISSIBLE_REASONS = frozenset({"ExceedsMaxQuota", "NoMatchingFlavor", "Suspended", "Misconfigured", "TopologyPlacementFailed"})
# What the catalog, and a ClusterQueue that no longer exists, tell a workload whose queue is gone.
_MISSING = re.compile(r"^(LocalQueue|ClusterQueue) (\S+) is terminating or missing$")
# The flavor assigner's reasons (flavor_assignment._try_flavor), per pod set.
_POD_SET = re.compile(r"couldn't assign flavors to pod set (\S+): ")
_OVER_CAPACITY = re.compile(
    r"insufficient quota for (\S+) in flavor (\S+), previously considered podsets requests \(([^)]*)\) "
    r"\+ current podset request \(([^)]*)\) > maximum capacity \(([^)]*)\)"
)
_OVER_UNUSED = re.compile(r"insufficient unused quota for (\S+) in flavor (\S+), (\S+) more needed")

ASSUMPTIONS = (
    "an estimate, not a promise: it counts the ClusterQueue's own nominal quota (no borrowing from its "
    "cohort, no preemption), one pool per resource whatever the flavor; the workloads ahead are admitted "
    "first, in queue order, and each workload runs for its whole maximumExecutionTimeSeconds; checks "
    "answer at once and nothing new arrives ahead of it"
)
# The workloads ahead that `explain` reads to estimate; beyond this many the estimate is unknown.
MAX_AHEAD = 200


class CheckWait(WireModel):
    """An AdmissionCheck of the workload that is not Ready."""

    name: str
    state: str
    message: str = ""
    since: datetime | None = Field(default=None, description="Waited for since: its lastTransitionTime, or the reservation if later.")


class Shortfall(WireModel):
    """What one flavor lacks for one pod set, as the ClusterQueue's flavor assigner wrote it."""

    pod_set: str
    flavor: str
    resource: str
    kind: Literal["capacity", "unused"] = Field(
        description="capacity: it asks for more than the flavor's maximum capacity (it never fits there); "
        "unused: more than is unused now."
    )
    requested: str = Field(default="", description="capacity: what it asks for, with what earlier pod sets asked of that flavor.")
    capacity: str = Field(default="", description="capacity: the most the flavor can give.")
    more_needed: str = Field(default="", description="unused: how much more must be freed.")

    def words(self) -> str:
        if self.kind == "capacity":
            return f"flavor {self.flavor} lacks {self.resource}: {self.requested} asked, {self.capacity} at most"
        return f"flavor {self.flavor} lacks {self.more_needed} more {self.resource}"


class Cause(WireModel):
    """The one reason a workload is not admitted now, with what says so."""

    cause: CauseName
    summary: str = Field(default="", description="One line, for people.")
    phase: str = Field(default="", description="The workload's phase (its last known one when its workflow does not answer).")
    condition: str = Field(default="", description="The Kueue condition that says it, e.g. QuotaReserved=False.")
    reason: str = ""
    message: str = ""
    since: datetime | None = Field(default=None, description="Since when: when that condition (or check) last changed status.")
    cluster_queue: str = ""
    local_queue: str = ""
    gates: list[str] = Field(default_factory=list)
    checks: list[CheckWait] = Field(default_factory=list)
    requeue_at: datetime | None = None
    remaining_seconds: int | None = Field(default=None, description="Until requeueAt, when `now` was given.")
    shortfalls: list[Shortfall] = Field(default_factory=list)
    position: int | None = Field(default=None, description="In its ClusterQueue's queue (0: the head).")
    position_in_local_queue: int | None = None

    @property
    def waiting(self) -> bool:
        """It waits for admission (a pending workload of its ClusterQueue)."""
        return self.cause not in NOT_WAITING and self.phase not in ("Admitted", "Finished")


class Contender(WireModel):
    """A workload that waits in the queue, as the estimate sees it."""

    key: str
    requests: dict[str, int] = Field(default_factory=dict, description="Resource -> amount (Kueue's integer units).")
    runs_for: int | None = Field(default=None, description="Seconds it may run once admitted; None: no limit.")


class Running(WireModel):
    """A workload that holds quota in the queue, as the estimate sees it."""

    key: str
    usage: dict[str, int] = Field(default_factory=dict)
    ends_by: datetime | None = Field(default=None, description="When its maximumExecutionTimeSeconds is up; None: no limit known.")


class Estimate(WireModel):
    at: datetime | None = Field(default=None, description="The earliest time it could be admitted.")
    unknown: str = Field(default="", description="Why there is no time.")
    basis: str = Field(default="", description="What the time rests on.")

    def words(self, now: datetime | None = None) -> str:
        if self.at is None:
            return f"unknown: {self.unknown}" if self.unknown else "unknown"
        when = _when(self.at) + (f" (in {_duration(self.at - now)})" if now is not None and self.at > now else "")
        return f"{when}: {self.basis}" if self.basis else when


class Explanation(WireModel):
    """`admitflow explain workload`: its cause, and when it could be admitted."""

    workload: str
    cause: Cause
    estimate: Estimate
    assumptions: str = ASSUMPTIONS


class CauseCount(WireModel):
    cause: str
    count: int
    workloads: list[str] = Field(default_factory=list)


class WaitingWorkload(WireModel):
    workload: str
    cause: str
    summary: str


class QueueExplanation(WireModel):
    """`admitflow explain clusterqueue`: every waiting workload of the queue, once, by cause."""

    cluster_queue: str
    total: int
    causes: list[CauseCount] = Field(default_factory=list, description="In CAUSES order; only causes that occur.")
    workloads: list[WaitingWorkload] = Field(default_factory=list)


# --- the cause ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Seen:
    st: WorkloadState
    now: datetime | None
    position: PendingWorkload | None
    trouble: str
    last_phase: str
    cluster_queue: str


def cause(
    subject: WorkloadState | Workload,
    now: datetime | None = None,
    position: PendingWorkload | None = None,
    not_answering: str = "",
    last_phase: str = "",
    cluster_queue: str = "",
) -> Cause:
    """The one cause of a workload not being admitted now (or of its rest: Admitted, Finished,
    Deleted). `subject` is the workflow's state, or a Workload as the `workload` query reports it.
    `position` is where it waits in its ClusterQueue, if it does; `not_answering` says why its
    workflow does not answer (then its status is unknown, and `last_phase` is what its search
    attributes last said); `cluster_queue` is where its LocalQueue leads, when the caller knows."""
    seen = _Seen(_state(subject), now, position, not_answering, last_phase, cluster_queue)
    for rule in _RULES.values():
        found = rule(seen)
        if found is not None:
            return found.model_copy(update=_common(seen, found))
    raise AssertionError("unreachable: the last rule always holds")


def _state(subject: WorkloadState | Workload) -> WorkloadState:
    if isinstance(subject, WorkloadState):
        return subject
    return WorkloadState(workload=subject, deleted=bool(getattr(subject, "deleted", None)))


def _common(seen: _Seen, found: Cause) -> dict[str, str]:
    st = seen.st
    admission = st.status.admission
    holder = admission.cluster_queue if admission is not None and wl.has_quota(st) else ""
    return {
        "phase": found.phase or (seen.last_phase if seen.trouble else wl.phase(st)),
        "local_queue": st.workload.spec.queue_name or "",
        "cluster_queue": found.cluster_queue or holder or st.cluster_queue or seen.cluster_queue,
    }


def _quota_reserved(st: WorkloadState) -> tuple[str, str, str, datetime | None]:
    c = cond.find(st.status.conditions, wl.QUOTA_RESERVED)
    if c is None:
        return "", "", "", None
    return f"QuotaReserved={c.status}", c.reason or "", c.message or "", c.last_transition_time


def _not_answering(seen: _Seen) -> Cause | None:
    if not seen.trouble:
        return None
    return Cause(
        cause="NotAnswering", phase=seen.last_phase or "Pending",
        summary=f"its workflow does not answer, so its status is unknown: {seen.trouble}",
        message=seen.trouble,
    )


def _deleted(seen: _Seen) -> Cause | None:
    return Cause(cause="Deleted", summary="deleted") if seen.st.deleted else None


def _finished(seen: _Seen) -> Cause | None:
    c = cond.find(seen.st.status.conditions, wl.FINISHED)
    if c is None or c.status != "True":
        return None
    return Cause(
        cause="Finished", summary=f"finished ({c.reason}): {c.message}", condition="Finished=True",
        reason=c.reason, message=c.message, since=c.last_transition_time,
    )


def _inactive(seen: _Seen) -> Cause | None:
    st = seen.st
    if st.workload.spec.active is not False:
        return None
    # Requeued=False says why it was deactivated (an earlier eviction keeps Evicted's reason).
    said = next(
        (c for c in (cond.find(st.status.conditions, t) for t in (wl.REQUEUED, wl.EVICTED))
         if c is not None and (c.reason or "").startswith("Deactivated")),
        None,
    )
    reason = said.reason if said is not None else "Deactivated"
    message = said.message if said is not None else "The workload is deactivated"
    condition, _, _, since = _quota_reserved(st)
    if said is not None:
        condition, since = f"{said.type}={said.status}", said.last_transition_time
    return Cause(
        cause="Inactive", condition=condition, reason=reason, message=message, since=since,
        summary=f"deactivated ({reason}): {message}; `admitflow activate {st.key}` puts it back in its queue",
    )


def _admitted(seen: _Seen) -> Cause | None:
    st = seen.st
    c = cond.find(st.status.conditions, wl.ADMITTED)
    if c is None or c.status != "True":
        return None
    where = st.status.admission.cluster_queue if st.status.admission is not None else st.cluster_queue
    return Cause(
        cause="Admitted", condition="Admitted=True", reason=c.reason, message=c.message, since=c.last_transition_time,
        summary=f"admitted in ClusterQueue {where}" if where else "admitted",
    )


def _waiting_for_checks(seen: _Seen) -> Cause | None:
    st = seen.st
    if not wl.has_quota(st):
        return None
    reserved = cond.find(st.status.conditions, wl.QUOTA_RESERVED)
    at = reserved.last_transition_time if reserved is not None else None
    waits = [
        CheckWait(name=c.name, state=c.state, message=c.message or "", since=checks.waited_since(st, c))
        for c in st.status.admission_checks or ()
        if c.state != "Ready"
    ]
    where = st.status.admission.cluster_queue if st.status.admission is not None else st.cluster_queue
    admitted = cond.find(st.status.conditions, wl.ADMITTED)
    base = Cause(
        cause="WaitingForChecks", checks=waits, condition="Admitted=False",
        reason=admitted.reason if admitted is not None else "", message=admitted.message if admitted is not None else "",
        since=waits[0].since if waits else at, cluster_queue=where or "",
    )
    if not waits:
        return base.model_copy(update={"summary": f"quota reserved in ClusterQueue {where}; its admission is being recorded"})
    first = waits[0]
    said = f" ({first.state}: {first.message})" if first.message else f" ({first.state})"
    more = f", and {len(waits) - 1} more check(s)" if len(waits) > 1 else ""
    since = f" since {_when(first.since)}" if first.since else ""
    return base.model_copy(update={
        "summary": f"quota reserved in ClusterQueue {where}; waits for AdmissionCheck {first.name}{said}{since}{more}",
    })


def _gated(seen: _Seen) -> Cause | None:
    st = seen.st
    if not admission_gates.holds_back(st):
        return None
    left = admission_gates.gates(st.workload)
    condition, reason, message, since = _quota_reserved(st)
    return Cause(
        cause="AdmissionGated", gates=left, condition=condition, reason=reason, message=message, since=since,
        summary=f"admission gated by {', '.join(left)}: `admitflow ungate workload {st.key} GATE` "
        "or the signal remove_admission_gates removes them",
    )


def _backoff(seen: _Seen) -> Cause | None:
    st = seen.st
    at = checks.requeue_at(st)  # set while in backoff
    if not checks.in_backoff(st) or at is None:
        return None
    evicted = cond.find(st.status.conditions, wl.EVICTED)
    reason = evicted.reason if evicted is not None else ""
    remaining = max(0, int((at - seen.now).total_seconds())) if seen.now is not None else None
    still = f" (in {_duration(timedelta(seconds=remaining))})" if remaining else (" (now)" if remaining == 0 else "")
    return Cause(
        cause="Backoff", condition="Requeued=False", reason=reason, message=evicted.message if evicted is not None else "",
        since=evicted.last_transition_time if evicted is not None else None, requeue_at=at, remaining_seconds=remaining,
        summary=f"in backoff after {reason or 'an eviction'}: back in its queue at {_when(at)}{still}",
    )


def _queue_missing(seen: _Seen) -> Cause | None:
    st = seen.st
    condition, reason, message, since = _quota_reserved(st)
    m = _MISSING.match(message) if reason == "Misconfigured" else None
    # The message stays until the queue says something else: once the workload is back in its
    # queue (its state or its position says so), the queue is there again.
    if not st.claim.waiting_for_queue and (m is None or st.claim.queued or seen.position is not None):
        return None
    cq = m.group(2) if m is not None and m.group(1) == "ClusterQueue" else ""
    return Cause(
        cause="QueueMissing", condition=condition, reason=reason, message=message, since=since, cluster_queue=cq,
        summary=f"{message or 'its queue is missing'}: it enters its queue once that exists",
    )


def _pending(seen: _Seen, name: CauseName, summary: str) -> Cause:
    condition, reason, message, since = _quota_reserved(seen.st)
    return Cause(cause=name, condition=condition, reason=reason, message=message, since=since, summary=summary, **_place(seen))


class _Place(TypedDict, total=False):
    position: int
    position_in_local_queue: int


def _place(seen: _Seen) -> _Place:
    p = seen.position
    if p is None:
        return {}
    return {"position": p.position_in_cluster_queue, "position_in_local_queue": p.position_in_local_queue}


def _where(seen: _Seen) -> str:
    p = seen.position
    return f" (position {p.position_in_cluster_queue} in its ClusterQueue)" if p is not None else ""


def _waiting_for_pods_ready(seen: _Seen) -> Cause | None:
    _, reason, message, _ = _quota_reserved(seen.st)
    if reason != pods_ready.WAITING_REASON:
        return None
    return _pending(seen, "WaitingForPodsReady", f"{message or reason} (waitForPodsReady.blockAdmission){_where(seen)}")


def _inadmissible(seen: _Seen) -> Cause | None:
    _, _, message, _ = _quota_reserved(seen.st)
    if _MISSING.match(message):
        return None  # a queue missing that is there again: its message is stale, it waits its turn
    return _told(seen, "Inadmissible", INADMISSIBLE_REASONS)


def _no_quota(seen: _Seen) -> Cause | None:
    return _told(seen, "NoQuota", NO_QUOTA_REASONS)


def _told(seen: _Seen, name: CauseName, reasons: frozenset[str]) -> Cause | None:
    """What the ClusterQueue's scheduler told it, if one of `reasons`: with what each flavor lacks."""
    _, reason, message, _ = _quota_reserved(seen.st)
    if reason not in reasons:
        return None
    lacks = shortfalls(message)
    said = "; ".join(s.words() for s in lacks[:3]) if lacks else message
    return _pending(seen, name, f"{reason}: {said}{_where(seen)}").model_copy(update={"shortfalls": lacks})


def _queued(seen: _Seen) -> Cause:
    p = seen.position
    if p is not None:
        ahead = p.position_in_cluster_queue
        summary = f"waits its turn in its ClusterQueue: position {ahead}, {ahead} workload(s) ahead"
    else:
        summary = "waits for its ClusterQueue to evaluate it"
    return _pending(seen, "Queued", summary)


# Tried in this order (CAUSES; tests/unit/test_explain.py holds the two equal): the first that holds
# is the cause. The last always holds, so every workload gets exactly one.
_RULES = {
    "NotAnswering": _not_answering,
    "Deleted": _deleted,
    "Finished": _finished,
    "Inactive": _inactive,
    "Admitted": _admitted,
    "WaitingForChecks": _waiting_for_checks,
    "AdmissionGated": _gated,
    "Backoff": _backoff,
    "QueueMissing": _queue_missing,
    "WaitingForPodsReady": _waiting_for_pods_ready,
    "Inadmissible": _inadmissible,
    "NoQuota": _no_quota,
    "Queued": _queued,
}


def shortfalls(message: str) -> list[Shortfall]:
    """What each flavor lacks, read from the QuotaReserved=False message the ClusterQueue's flavor
    assigner wrote (`couldn't assign flavors to pod set main: insufficient quota for cpu in flavor
    default, ...`); empty when the message says nothing of the kind."""
    out: list[Shortfall] = []
    starts = list(_POD_SET.finditer(message))
    for i, start in enumerate(starts):
        end = starts[i + 1].start() if i + 1 < len(starts) else len(message)
        part, pod_set = message[start.end() : end], start.group(1)
        for m in _OVER_CAPACITY.finditer(part):
            before, request, capacity = m.group(3), m.group(4), m.group(5)
            asked = request if before in ("", "0") else f"{before} + {request}"
            out.append(Shortfall(
                pod_set=pod_set, resource=m.group(1), flavor=m.group(2).rstrip(","), kind="capacity",
                requested=asked, capacity=capacity,
            ))
        for m in _OVER_UNUSED.finditer(part):
            out.append(Shortfall(
                pod_set=pod_set, resource=m.group(1), flavor=m.group(2).rstrip(","), kind="unused", more_needed=m.group(3),
            ))
    return out


def current_details(state: WorkloadState) -> str:
    """What the workflow shows in the UI: `workload.current_details`, with the line on why it is
    not admitted second, after the phase, and the line on its admission gates last."""
    lines = wl.current_details(state).split("\n\n")
    why = details_line(state)
    gated = admission_gates.details(state)
    return "\n\n".join(lines[:1] + ([why] if why else []) + lines[1:] + ([gated] if gated else []))


def details_line(state: WorkloadState) -> str | None:
    """The UI's line on why a workload is not admitted (None once admitted, finished or deleted):
    only what the state says, with absolute times, so that it is the same whenever it is computed."""
    try:
        c = cause(state)
    except Exception as err:  # noqa: BLE001 - what the UI shows must never fail a workflow task
        return f"why not admitted: unknown ({type(err).__name__}: {err})"
    if not c.waiting:
        return None
    return f"why not admitted ({c.cause}): {c.summary}"


# --- the estimate ---------------------------------------------------------------------------------


def capacity(spec: ClusterQueueSpec) -> dict[str, int]:
    """The queue's nominal quota per resource, summed over its flavors."""
    out: dict[str, int] = {}
    for group in spec.resource_groups:
        for flavor in group.flavors:
            for r in flavor.resources:
                out[r.name] = out.get(r.name, 0) + resource_value(r.name, str(r.nominal_quota))
    return out


def contender(workload: Workload, quota: Collection[str] = ()) -> Contender:
    """A workload as the estimate sees it: its requests (with `pods` where the queue counts pods),
    and how long it may run (its maximumExecutionTimeSeconds less what earlier admissions used)."""
    pod_sets = [pod_set_request(ps.to_wire()) for ps in workload.spec.pod_sets]
    requests = total_requests(pod_sets)
    if PODS in quota:
        requests = add(requests, {PODS: sum(ps.count for ps in pod_sets)})
    limit = workload.spec.maximum_execution_time_seconds
    spent = workload.status.accumulated_past_execution_time_seconds or 0
    return Contender(key=workload.key, requests=requests, runs_for=max(0, limit - spent) if limit is not None else None)


def running(reserving: ReservingWorkload, workload: Workload | None) -> Running:
    """A workload holding quota, as the estimate sees it: what it holds, and when its maximum
    execution time is up (unknown until it is admitted, or without a limit)."""
    key = f"{reserving.namespace}/{reserving.name}"
    usage = {r: resource_value(r, q) for r, q in reserving.usage.items()}
    ends_by = None
    if workload is not None:
        # The same deadline the workload's own timer deactivates it at.
        ends_by = lifecycle.execution_deadline(_state(workload))
    return Running(key=key, usage=usage, ends_by=ends_by)


def estimate(
    me: Contender,
    ahead: Sequence[Contender],
    holding: Sequence[Running],
    quota: Mapping[str, int],
    now: datetime,
) -> Estimate:
    """The earliest time `me` could be admitted, by a model of its ClusterQueue (ASSUMPTIONS): the
    quota not held by `holding` is free now; the workloads `ahead` (in queue order) and then `me` are
    admitted one by one, each as soon as what it asks for is free; each running workload gives its
    quota back when its maximum execution time is up. A workload ahead that asks for more than the
    whole quota is left out (it never fits, so it never goes first). Unknown when it never fits, or
    when the quota it waits for is held by workloads without a maximum execution time."""
    over = _over(me.requests, quota)
    if over:
        return Estimate(unknown=f"it asks for more than the ClusterQueue's nominal quota ({over}): it never fits on its own")
    free = {r: quota.get(r, 0) for r in set(quota) | set(me.requests)}
    ends: list[tuple[datetime, str, dict[str, int]]] = []
    unbounded: list[str] = []
    for h in holding:
        free = _minus(free, h.usage)
        if h.ends_by is None:
            unbounded.append(h.key)
        else:
            ends.append((h.ends_by, h.key, h.usage))
    queue = [a for a in ahead if not _over(a.requests, quota)] + [me]
    t, last = now, ""
    while True:
        while _fits(queue[0].requests, free):
            head = queue.pop(0)
            if head is me:
                if not last:
                    return Estimate(at=now, basis="the quota it asks for is free now: its ClusterQueue's next scheduling pass")
                return Estimate(at=t, basis=f"once {last} has given its quota back (its maximum execution time is up)")
            free = _minus(free, head.requests)
            if head.runs_for is None:
                unbounded.append(head.key)
            else:
                ends.append((t + timedelta(seconds=head.runs_for), head.key, head.requests))
        if not ends:
            waiting = "it" if queue[0] is me else f"{queue[0].key}, ahead of it,"
            held = ", ".join(sorted(unbounded)) or "nothing"
            return Estimate(unknown=f"{waiting} waits for quota held by {held}, with no maximumExecutionTimeSeconds")
        ends.sort(key=lambda e: (e[0], e[1]))
        at, last, usage = ends.pop(0)
        t = max(t, at)
        free = {r: free.get(r, 0) + usage.get(r, 0) for r in set(free) | set(usage)}


def no_estimate(c: Cause) -> Estimate:
    """What can be said of when a workload that does not wait in its queue for quota is admitted."""
    if c.cause == "Backoff" and c.requeue_at is not None:
        return Estimate(at=c.requeue_at, basis="not before its backoff ends and it is back in its queue")
    why = {
        "NotAnswering": "its workflow does not answer",
        "Deleted": "not waiting: deleted",
        "Finished": "not waiting: finished",
        "Admitted": "not waiting: admitted",
        "Inactive": "it stays out of admission until it is activated",
        "WaitingForChecks": "it waits for a verdict from " + ", ".join(ch.name for ch in c.checks)
        if c.checks else "its admission is being recorded",
        "AdmissionGated": f"it waits for its admission gates to be removed ({', '.join(c.gates)})",
        "QueueMissing": "its queue must be created first",
        "WaitingForPodsReady": "it waits for the admitted workloads' pods to be ready (blockAdmission)",
        "Inadmissible": f"{c.reason}: the ClusterQueue or the workload must change first",
        "NoQuota": "not in its ClusterQueue's queue now",
        "Queued": "not in its ClusterQueue's queue now",
    }
    return Estimate(unknown=why.get(c.cause, c.cause))


def _over(requests: Mapping[str, int], quota: Mapping[str, int]) -> str:
    for r, v in sorted(requests.items()):
        if v > quota.get(r, 0):
            return f"{format_resource(r, v)} {r}, of {format_resource(r, quota.get(r, 0))}"
    return ""


def _fits(requests: Mapping[str, int], free: Mapping[str, int]) -> bool:
    return all(v <= free.get(r, 0) for r, v in requests.items() if v)


def _minus(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, int]:
    return {r: a.get(r, 0) - b.get(r, 0) for r in set(a) | set(b)}


# --- a ClusterQueue -------------------------------------------------------------------------------


def cluster_queue_of(workload: Workload, routes: Mapping[str, str], reserved_in: str = "") -> str:
    """The ClusterQueue a workload belongs to now: where it holds quota, else where its LocalQueue
    leads (`routes`: LocalQueue key -> ClusterQueue); "" when its LocalQueue does not exist.
    `reserved_in`: where it holds quota when its status cannot be read (its workflow does not answer)."""
    admission = workload.status.admission
    if admission is not None and workload.status.has_condition(wl.QUOTA_RESERVED) and not workload.status.has_condition(wl.FINISHED):
        return admission.cluster_queue
    if reserved_in:
        return reserved_in
    return routes.get(f"{workload.metadata.namespace}/{workload.spec.queue_name or ''}", "")


def tally(cluster_queue: str, causes: Mapping[str, Cause]) -> QueueExplanation:
    """Every waiting workload (`causes`: key -> its cause) counted once, under its one cause."""
    waiting = sorted((key, c) for key, c in causes.items() if c.waiting)
    counts = []
    for name in CAUSES:
        keys = [key for key, c in waiting if c.cause == name]
        if keys:
            counts.append(CauseCount(cause=name, count=len(keys), workloads=keys))
    return QueueExplanation(
        cluster_queue=cluster_queue, total=len(waiting), causes=counts,
        workloads=[WaitingWorkload(workload=key, cause=c.cause, summary=c.summary) for key, c in waiting],
    )


# --- words ----------------------------------------------------------------------------------------


def _when(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ") if t.utcoffset() in (None, timedelta(0)) else t.isoformat()


def _duration(d: timedelta) -> str:
    return format_duration_nanos(max(0, int(d.total_seconds())) * 10**9)

