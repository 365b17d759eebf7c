"""Metrics: what a workload's or a ClusterQueue's change adds to Kueue's metrics (docs/metrics.md),
under the prefix `admitflow_` and with Kueue's labels, plus what Kueue lacks (KEP-3258's beta
item, kueue#10620, #1994): admission check retries, the requeue delays set, verdicts by check,
state and outcome, and how long each check was asked before its verdict.

Pure: a workload workflow keeps a `Seen` snapshot and, after each change, asks
`workload_observations` what happened since; it emits those counters and histograms through
Temporal's workflow metric meter, which records nothing while a history is replayed, so every event
is counted once by the worker that ran it and the sum over workers is right. A counter series
appears in a scrape when it is first added to; `rate` and `increase` need a sample before an event
to see it, so the series a workload may add to later are added 0 first, as soon as their labels
are known: its ClusterQueue's when it learns it, its checks' and evictions' when it reserves quota
(as Kueue reports every status of a ClusterQueue, 0 for all but one). Gauges are not emitted
by workflow code: a worker that stops running a ClusterQueue would go on exporting the last value it
set. A ClusterQueue answers `cluster_queue_gauges` of its current state when asked (query
`gauges`), and one process, admitflow's exporter (admitflow/gauges.py), asks each ClusterQueue of
the catalog at scrape time and serves the answers.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from datetime import datetime
from typing import Literal

from pydantic import Field

from admitflow.admission import conditions as cond
from admitflow.admission import pods_ready, priority
from admitflow.admission import workload as wl
from admitflow.admission.cluster_queue import (
    FORCE_RELEASED,
    ClusterQueueState,
    Reservation,
    active_condition,
    local_queue_status,
    usage,
)
from admitflow.admission.pending_queue import QueueEntry
from admitflow.admission.workload import VerdictRecord, WorkloadState
from admitflow.wire import WireModel, after

PREFIX = "admitflow_"


def _buckets(count: int) -> list[float]:
    """Kueue's generateExponentialBuckets: 1, then 2.5 doubling."""
    return [1.0] + [2.5 * 2**i for i in range(count - 1)]


# name -> (kind, description); every histogram also has its buckets in BUCKETS (the worker's
# Prometheus config): without them the SDK's would apply, made for milliseconds.
METRICS: dict[str, tuple[str, str]] = {
    "quota_reserved_workloads_total": ("counter", "Workloads that got quota reserved, per ClusterQueue"),
    "quota_reserved_wait_time_seconds": ("histogram", "Time from creation or the last requeue to quota reservation"),
    "admitted_workloads_total": ("counter", "Workloads admitted, per ClusterQueue"),
    "admission_wait_time_seconds": ("histogram", "Time from creation or the last requeue to admission"),
    "admission_checks_wait_time_seconds": ("histogram", "Time from quota reservation to admission"),
    "evicted_workloads_total": ("counter", "Evictions, per ClusterQueue, reason and underlying cause"),
    "finished_workloads_total": ("counter", "Workloads finished, per ClusterQueue"),
    "evicted_workloads_once_total": ("counter", "Workloads evicted at least once, per ClusterQueue, reason and underlying cause"),
    "ready_wait_time_seconds": ("histogram", "Time from creation or the last requeue until the pods are ready"),
    "admitted_until_ready_wait_time_seconds": ("histogram", "Time from admission until the pods are ready"),
    "admission_check_retries_total": ("counter", "Retries of an admission check (beyond Kueue: KEP-3258's metrics)"),
    "admission_check_verdicts_total": ("counter", "Check verdicts received, per check, state and outcome (beyond Kueue)"),
    "admission_check_wait_time_seconds": ("histogram", "Time from a check's request until its verdict, per check and state (beyond Kueue)"),
    "requeue_delay_seconds": ("histogram", "Delays set before a workload goes back to its queue, per reason"),
    "pending_workloads": ("gauge", "Pending workloads, per ClusterQueue and status (active, inadmissible)"),
    "reserving_active_workloads": ("gauge", "Workloads holding quota in a ClusterQueue"),
    "admitted_active_workloads": ("gauge", "Admitted workloads in a ClusterQueue"),
    "cluster_queue_status": ("gauge", "1 for the ClusterQueue's status (pending, active, terminating), else 0"),
    "cluster_queue_resource_reservation": ("gauge", "Quota reserved in the ClusterQueue, per flavor and resource"),
    "cluster_queue_resource_usage": ("gauge", "Quota used by admitted workloads in the ClusterQueue, per flavor and resource"),
    "admission_attempts_total": ("counter", "Scheduling passes that had workloads to try, by result (success: at least one got quota)"),
    "admission_attempt_duration_seconds": ("histogram", "How long the scheduling passes counted by admission_attempts_total took to compute, by result"),
    "unadmitted_workloads": ("gauge", "Workloads in the ClusterQueue not admitted, per Admitted reason and QuotaReserved reason"),
    "local_queue_pending_workloads": ("gauge", "Pending workloads, per LocalQueue and status (active, inadmissible)"),
    "local_queue_reserving_active_workloads": ("gauge", "Workloads holding quota, per LocalQueue"),
    "local_queue_admitted_active_workloads": ("gauge", "Admitted workloads, per LocalQueue"),
    "local_queue_status": ("gauge", "1 for the LocalQueue's Active status (True, False, Unknown), else 0"),
    "local_queue_unadmitted_workloads": ("gauge", "Workloads not admitted, per LocalQueue, Admitted reason and QuotaReserved reason"),
    "local_queue_resource_reservation": ("gauge", "Quota reserved by the LocalQueue's workloads, per flavor and resource"),
    "local_queue_resource_usage": ("gauge", "Quota used by the LocalQueue's admitted workloads, per flavor and resource"),
}
# Kueue's LocalQueue variants: the same observation, labelled by the workload's LocalQueue (`name`,
# `namespace`) instead of its ClusterQueue.
LOCAL_QUEUE_TWINS = (
    "quota_reserved_workloads_total", "quota_reserved_wait_time_seconds", "admitted_workloads_total",
    "admission_wait_time_seconds", "admission_checks_wait_time_seconds", "evicted_workloads_total",
    "finished_workloads_total", "ready_wait_time_seconds", "admitted_until_ready_wait_time_seconds",
)
METRICS.update({
    "local_queue_" + name: (kind, what.replace("per ClusterQueue", "per LocalQueue") if "per ClusterQueue" in what else what + ", per LocalQueue")
    for name, (kind, what) in ((n, METRICS[n]) for n in LOCAL_QUEUE_TWINS)
})
# Prometheus' default buckets (client_golang's DefBuckets), which Kueue's scheduler histogram keeps.
DEFAULT_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0]
BUCKETS: dict[str, list[float]] = {
    PREFIX + "admission_attempt_duration_seconds": DEFAULT_BUCKETS,
    PREFIX + "quota_reserved_wait_time_seconds": _buckets(14),
    PREFIX + "admission_wait_time_seconds": _buckets(16),
    PREFIX + "admission_checks_wait_time_seconds": _buckets(14),
    PREFIX + "requeue_delay_seconds": _buckets(14),
    PREFIX + "ready_wait_time_seconds": _buckets(14),
    PREFIX + "admitted_until_ready_wait_time_seconds": _buckets(14),
    PREFIX + "admission_check_wait_time_seconds": _buckets(14),
}
BUCKETS.update({PREFIX + "local_queue_" + n.removeprefix(PREFIX): b for n, b in list(BUCKETS.items())
                if n.removeprefix(PREFIX) in LOCAL_QUEUE_TWINS})
CHECK_STATES = ("Pending", "Ready", "Retry", "Rejected")
ANY, CHECKS, PODS_READY, MAX_EXECUTION = "any", "checks", "pods-ready", "max-execution"
# Every (reason, underlying_cause) an eviction is counted under (schedulingStats.evictions), and
# which workloads it can happen to: any, one with admission checks, one under waitForPodsReady, one
# with a maximum execution time.
EVICTIONS: tuple[tuple[str, str, str], ...] = (
    (wl.PREEMPTED, "", ANY),
    ("ClusterQueueStopped", "", ANY),
    ("LocalQueueStopped", "", ANY),
    ("Deactivated", "", ANY),
    (FORCE_RELEASED, "", ANY),
    ("AdmissionCheck", "", CHECKS),
    ("Deactivated", "AdmissionCheck", CHECKS),
    (pods_ready.TIMEOUT_REASON, wl.WAIT_FOR_START, PODS_READY),
    (pods_ready.TIMEOUT_REASON, pods_ready.WAIT_FOR_RECOVERY, PODS_READY),
    ("Deactivated", pods_ready.LIMIT_CAUSE, PODS_READY),
    ("Deactivated", "MaximumExecutionTimeExceeded", MAX_EXECUTION),
)


class Observation(WireModel):
    kind: Literal["counter", "histogram", "gauge"]
    name: str = Field(description="Full metric name, with the prefix.")
    value: float
    labels: dict[str, str] = Field(default_factory=dict)


class Gauges(WireModel):
    """A ClusterQueue's gauges as they stand (the answer to query `gauges`)."""

    cluster_queue: str
    observations: list[Observation] = Field(description="`cluster_queue_gauges` of its current state.")
    moved_to: str = Field(default="", description="Its cohort tree's workflow ID, which holds its state: ask there.")


class Seen(WireModel):
    """What was already counted for one workload (kept by its workflow run, not in its state)."""

    cluster_queue: str = Field(default="", description="The ClusterQueue whose series were set up at 0")
    reserved: datetime | None = None
    admitted: datetime | None = None
    finished: bool = False
    evictions: dict[str, int] = Field(default_factory=dict, description="reason/cause -> count")
    retries: dict[str, int] = Field(default_factory=dict, description="check -> retryCount")
    requeue_at: datetime | None = None
    ready: datetime | None = Field(default=None, description="PodsReady=True's lastTransitionTime, once counted")
    verdict: VerdictRecord | None = Field(default=None, description="The last verdict counted")


def _ltt(state: WorkloadState, type_: str) -> datetime | None:
    c = cond.find(state.status.conditions, type_)
    return c.last_transition_time if c is not None and c.status == "True" else None


def snapshot(state: WorkloadState) -> Seen:
    """What a new run (after continue-as-new, or a replay) takes as already counted."""
    return workload_observations(Seen(), state, emit=False)[0]


def _queued_since(state: WorkloadState) -> datetime:
    """Kueue's wait times count from creation, or from the last requeue."""
    requeued = cond.find(state.status.conditions, wl.REQUEUED)
    if requeued is not None and requeued.status == "True" and requeued.last_transition_time:
        return max(requeued.last_transition_time, state.created)
    return state.created


def workload_observations(seen: Seen, state: WorkloadState, emit: bool = True) -> tuple[Seen, list[Observation]]:
    """What changed since `seen`, as metric observations, and the new snapshot. Kueue's workload
    metrics also come as their LocalQueue variants (`local_queue_*`, labelled `name`, `namespace`)."""
    cq = state.cluster_queue or ""
    # Kueue labels them with the name of the priority class the workload refers to, of either kind.
    pc = {"priority_class": priority.class_name(state.workload.spec)}
    base = {"cluster_queue": cq, **pc}
    lq = {"name": state.workload.spec.queue_name or "", "namespace": state.workload.metadata.namespace, **pc}
    out: list[Observation] = []
    now_seen = seen.model_copy(deep=True)

    def kueue(kind: Literal["counter", "histogram"], name: str, value: float, **labels: str) -> None:
        out.append(Observation(kind=kind, name=PREFIX + name, value=value, labels={**base, **labels}))
        out.append(Observation(kind=kind, name=PREFIX + "local_queue_" + name, value=value, labels={**lq, **labels}))

    def since(start: datetime, end: datetime) -> float:
        return max(0.0, (end - start).total_seconds())

    if cq and cq != seen.cluster_queue:
        now_seen.cluster_queue = cq
        for name in ("quota_reserved_workloads_total", "admitted_workloads_total", "finished_workloads_total"):
            kueue("counter", name, 0)
    reserved = _ltt(state, wl.QUOTA_RESERVED)
    if reserved is not None and reserved != seen.reserved:
        now_seen.reserved = reserved
        out += _ahead_of_events(state, base, lq)
        kueue("counter", "quota_reserved_workloads_total", 1)
        kueue("histogram", "quota_reserved_wait_time_seconds", since(_queued_since(state), reserved))
    admitted = _ltt(state, wl.ADMITTED)
    if admitted is not None and admitted != seen.admitted:
        now_seen.admitted = admitted
        kueue("counter", "admitted_workloads_total", 1)
        kueue("histogram", "admission_wait_time_seconds", since(_queued_since(state), admitted))
        kueue("histogram", "admission_checks_wait_time_seconds", since(reserved or admitted, admitted))
    ready = _ltt(state, wl.PODS_READY)
    if ready is not None and ready != seen.ready and admitted is not None:
        # Once per admission, when its pods are first ready.
        now_seen.ready = ready
        kueue("histogram", "ready_wait_time_seconds", since(_queued_since(state), ready))
        kueue("histogram", "admitted_until_ready_wait_time_seconds", since(admitted, ready))
    stats = state.status.scheduling_stats
    for ev in (stats.evictions if stats else None) or ():
        key = f"{ev.reason}/{ev.underlying_cause}"
        before = seen.evictions.get(key, 0)
        now_seen.evictions[key] = ev.count
        if ev.count > before:
            cause = {"reason": ev.reason, "underlying_cause": ev.underlying_cause}
            kueue("counter", "evicted_workloads_total", ev.count - before, **cause)
            if before == 0:  # Kueue's "once": this workload's first eviction for this reason and cause
                out.append(Observation(kind="counter", name=PREFIX + "evicted_workloads_once_total", value=1,
                                       labels={**base, **cause}))
    for check in state.status.admission_checks or ():
        count = check.retry_count or 0
        added = count - seen.retries.get(check.name, 0)
        now_seen.retries[check.name] = count
        if added > 0:
            labels = {"cluster_queue": cq, "admission_check": check.name}
            out.append(Observation(kind="counter", name=PREFIX + "admission_check_retries_total", value=added, labels=labels))
    out += _verdicts(seen, now_seen, state)
    rs = state.status.requeue_state
    requeue_at = rs.requeue_at if rs is not None else None
    if requeue_at is not None and requeue_at != seen.requeue_at:
        evicted = cond.find(state.status.conditions, wl.EVICTED)
        start = evicted.last_transition_time if evicted is not None and evicted.last_transition_time else requeue_at
        reason = evicted.reason if evicted is not None else ""
        out.append(Observation(
            kind="histogram", name=PREFIX + "requeue_delay_seconds",
            value=since(start, requeue_at), labels={"cluster_queue": cq, "reason": reason},
        ))
    now_seen.requeue_at = requeue_at
    if wl.is_finished(state) and not seen.finished:
        now_seen.finished = True
        kueue("counter", "finished_workloads_total", 1)
    return now_seen, (out if emit else [])


def _ahead_of_events(state: WorkloadState, base: dict[str, str], lq: dict[str, str]) -> list[Observation]:
    """At 0, the counters a reserved workload may add to later: its evictions of every reason and
    cause it can have (with their LocalQueue variants, and once), its checks' retries and applied
    verdicts."""
    can = {ANY}
    if state.status.admission_checks:
        can.add(CHECKS)
    if state.wait_for_pods_ready is not None:
        can.add(PODS_READY)
    if state.workload.spec.maximum_execution_time_seconds:
        can.add(MAX_EXECUTION)
    out = []
    for reason, cause, who in EVICTIONS:
        if who in can:
            labels = {"reason": reason, "underlying_cause": cause}
            for name, owner in (("evicted_workloads_total", base), ("local_queue_evicted_workloads_total", lq),
                                ("evicted_workloads_once_total", base)):
                out.append(Observation(kind="counter", name=PREFIX + name, value=0, labels={**owner, **labels}))
    cq = state.cluster_queue or ""
    for check in state.status.admission_checks or ():
        labels = {"cluster_queue": cq, "admission_check": check.name}
        out.append(Observation(kind="counter", name=PREFIX + "admission_check_retries_total", value=0, labels=labels))
        out += [
            Observation(kind="counter", name=PREFIX + "admission_check_verdicts_total", value=0,
                        labels={**labels, "state": s, "outcome": "applied"})
            for s in CHECK_STATES
        ]
    return out


def _verdicts(seen: Seen, now_seen: Seen, state: WorkloadState) -> list[Observation]:
    """Beyond Kueue: each verdict received (by check, state and outcome: applied, ignored as stale,
    or rejected as invalid), and for each applied one that ended a check's Pending, how long the
    check had been asked (`VerdictRecord.waited`). A verdict naming no check of the workload, or no
    valid state, is labelled `""` and `Invalid`, so junk cannot add series. Two identical verdicts
    in the same second count once (they are told apart by content)."""
    cq = state.cluster_queue or ""
    known = {c.name for c in state.status.admission_checks or ()}
    out: list[Observation] = []
    for v in after(state.verdicts, seen.verdict):
        labels = {
            "cluster_queue": cq,
            "admission_check": v.check if v.check in known else "",
            "state": v.state if v.state in CHECK_STATES else "Invalid",
        }
        out.append(Observation(kind="counter", name=PREFIX + "admission_check_verdicts_total", value=1,
                               labels={**labels, "outcome": v.outcome}))
        if v.waited is not None:
            out.append(Observation(kind="histogram", name=PREFIX + "admission_check_wait_time_seconds",
                                   value=v.waited, labels=labels))
    now_seen.verdict = state.verdicts[-1] if state.verdicts else None
    return out


def has_workloads_to_try(states: Iterable[ClusterQueueState]) -> bool:
    """Whether a scheduling pass over these queues is an admission attempt: some workload is queued
    and not set aside as inadmissible. Asked before the pass."""
    return any(not e.inadmissible for state in states for e in state.pending)


def admission_attempt(had_heads: bool, reserved: int, took: float) -> list[Observation]:
    """Kueue's admission_attempts_total and admission_attempt_duration_seconds for one scheduling
    pass (a ClusterQueue's, or its cohort tree's for all its queues) that took `took` seconds:
    `success` when it reserved quota for at least one workload, `inadmissible` when it had
    workloads to try and reserved none; a pass with nothing to try (no workload queued, or only ones
    set aside as inadmissible) is no attempt. The other result's counter is added 0, so that its
    series is there before its first attempt."""
    if not had_heads:
        return []
    result, other = ("success", "inadmissible") if reserved else ("inadmissible", "success")
    return [
        Observation(kind="counter", name=PREFIX + "admission_attempts_total", value=1, labels={"result": result}),
        Observation(kind="histogram", name=PREFIX + "admission_attempt_duration_seconds", value=took, labels={"result": result}),
        Observation(kind="counter", name=PREFIX + "admission_attempts_total", value=0, labels={"result": other}),
    ]


def pass_clock() -> float:
    """Seconds on the worker's monotonic clock, to time a scheduling pass for
    admission_attempt_duration_seconds, as Kueue times its scheduling cycle. Workflow code cannot
    read a clock that moves during a task (`workflow.now()` stands still); this one is read in a
    module passed through the sandbox. The value goes to the metric meter only, which records
    nothing while a history is replayed: it never reaches the state or a command."""
    return time.perf_counter()


def cluster_queue_gauges(state: ClusterQueueState) -> list[Observation]:
    """Kueue's per-ClusterQueue gauges, as they stand now."""
    labels = {"cluster_queue": state.name}
    reserving = list(state.reservations.values())
    if state.view is None:
        status = "pending"
    elif state.view.spec is None:
        status = "terminating"
    else:
        status = "active" if active_condition(state.view)[0] else "pending"
    out = _workload_gauges("", labels, list(state.pending), reserving)
    out += [
        Observation(kind="gauge", name=PREFIX + "cluster_queue_status", value=float(s == status),
                    labels={**labels, "status": s})
        for s in ("pending", "active", "terminating")
    ]
    out += _resource_gauges(state, reserving)
    out += _unadmitted(state, reserving)
    out += _local_queue_gauges(state, reserving)
    return out


def _quantity(resource: str, value: int) -> float:
    """Kueue's float of a resource amount: cores for cpu (held in milli-units), units otherwise."""
    return value / 1000 if resource == "cpu" else float(value)


def _resource_gauges(
    state: ClusterQueueState, reserving: list[Reservation], prefix: str = "cluster_queue_", owner: dict[str, str] | None = None
) -> list[Observation]:
    """Kueue's cluster_queue_resource_reservation and _usage (or, with a LocalQueue's `owner`
    labels, the local_queue_ ones): every flavor and resource of the queue's spec, reserved by the
    workloads holding quota, used by the admitted ones."""
    spec = state.view.spec if state.view else None
    if spec is None:
        return []
    owner = owner if owner is not None else {"cohort": spec.cohort_name or "", "cluster_queue": state.name}
    reserved, used = usage(reserving), usage(reserving, admitted_only=True)
    out = []
    for rg in spec.resource_groups or ():
        for fq in rg.flavors:
            for r in fq.resources:
                labels = {**owner, "flavor": fq.name, "resource": r.name}
                for name, amounts in ((prefix + "resource_reservation", reserved), (prefix + "resource_usage", used)):
                    out.append(Observation(kind="gauge", name=PREFIX + name, value=_quantity(r.name, amounts.get((fq.name, r.name), 0)),
                                           labels=labels))
    return out


def _unadmitted(state: ClusterQueueState, reserving: list[Reservation]) -> list[Observation]:
    """Kueue's unadmitted_workloads (v0.19) for the workloads the queue knows, and its LocalQueue
    variant: pending ones are `NoReservation` with their last pending reason as the cause
    (`PendingEvaluation` before the first pass); reserved ones waiting for checks are
    `UnsatisfiedAdmissionChecks`."""
    counts: dict[tuple[str, str, str], int] = {}  # (LocalQueue key, reason, cause) -> workloads
    for e in state.pending:
        key = (e.local_queue_key, "NoReservation", e.notice[0] if e.notice else "PendingEvaluation")
        counts[key] = counts.get(key, 0) + 1
    for r in reserving:
        if not r.admitted:
            key = (r.local_queue_key, "UnsatisfiedAdmissionChecks", "")
            counts[key] = counts.get(key, 0) + 1
    by_queue: dict[tuple[str, str], int] = {}
    for (_, reason, cause), n in counts.items():
        by_queue[(reason, cause)] = by_queue.get((reason, cause), 0) + n
    out = [
        Observation(kind="gauge", name=PREFIX + "unadmitted_workloads", value=n,
                    labels={"cluster_queue": state.name, "reason": reason, "underlying_cause": cause})
        for (reason, cause), n in sorted(by_queue.items())
    ]
    for (lq, reason, cause), n in sorted(counts.items()):
        namespace, name = lq.split("/", 1)
        out.append(Observation(
            kind="gauge", name=PREFIX + "local_queue_unadmitted_workloads", value=n,
            labels={"name": name, "namespace": namespace, "cluster_queue": state.name, "reason": reason, "underlying_cause": cause},
        ))
    return out


def _local_queue_gauges(state: ClusterQueueState, reserving: list[Reservation]) -> list[Observation]:
    """Kueue's LocalQueue gauges, for every LocalQueue pointing at this ClusterQueue."""
    out = []
    for key in sorted(state.view.local_queues if state.view else ()):
        namespace, name = key.split("/", 1)
        labels = {"name": name, "namespace": namespace}
        pending = [e for e in state.pending if e.local_queue_key == key]
        held = [r for r in reserving if r.local_queue_key == key]
        active = local_queue_status(state, key).conditions[0].status
        out += [
            Observation(kind="gauge", name=PREFIX + "local_queue_status", value=float(s == active), labels={**labels, "active": s})
            for s in ("True", "False", "Unknown")
        ]
        out += _resource_gauges(state, held, "local_queue_", labels)
        out += _workload_gauges("local_queue_", labels, pending, held)
    return out


def _workload_gauges(prefix: str, labels: dict[str, str], pending: list[QueueEntry], held: list[Reservation]) -> list[Observation]:
    """Kueue's pending (active, inadmissible), reserving and admitted counts of a ClusterQueue
    (`prefix` "") or of one of its LocalQueues ("local_queue_")."""
    inadmissible = sum(1 for e in pending if e.inadmissible)
    return [
        Observation(kind="gauge", name=PREFIX + prefix + "pending_workloads", value=len(pending) - inadmissible,
                    labels={**labels, "status": "active"}),
        Observation(kind="gauge", name=PREFIX + prefix + "pending_workloads", value=inadmissible,
                    labels={**labels, "status": "inadmissible"}),
        Observation(kind="gauge", name=PREFIX + prefix + "reserving_active_workloads", value=len(held), labels=labels),
        Observation(kind="gauge", name=PREFIX + prefix + "admitted_active_workloads", value=sum(r.admitted for r in held),
                    labels=labels),
    ]
