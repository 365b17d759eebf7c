"""Metrics: what a workload's or a ClusterQueue's change adds to Kueue's metrics (docs/metrics.md),
under the prefix `admitflow_` and with Kueue's labels, plus what Kueue lacks (KEP-3258's beta
item): admission check retries and the requeue delays set.

Pure: a workload workflow keeps a `Seen` snapshot and, after each change, asks
`workload_observations` what happened since; it emits those counters and histograms through
Temporal's workflow metric meter, which records nothing while a history is replayed, so every event
is counted once by the worker that ran it and the sum over workers is right. Gauges are not emitted
by workflow code: a worker that stops running a ClusterQueue would go on exporting the last value it
set. A ClusterQueue answers `cluster_queue_gauges` of its current state when asked (query
`gauges`), and one process, admitflow's exporter (admitflow/gauges.py), asks each ClusterQueue of
the catalog at scrape time and serves the answers.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from admitflow.admission import conditions as cond
from admitflow.admission import priority
from admitflow.admission import workload as wl
from admitflow.admission.cluster_queue import ClusterQueueState, active_condition
from admitflow.admission.workload import WorkloadState
from admitflow.wire import WireModel

PREFIX = "admitflow_"


def _buckets(count: int) -> list[float]:
    """Kueue's generateExponentialBuckets: 1, then 2.5 doubling."""
    return [1.0] + [2.5 * 2**i for i in range(count - 1)]


# name -> (kind, description); histograms also get their buckets (the worker's Prometheus config).
METRICS: dict[str, tuple[str, str]] = {
    "quota_reserved_workloads_total": ("counter", "Workloads that got quota reserved, per ClusterQueue"),
    "quota_reserved_wait_time_seconds": ("histogram", "Time from creation or the last requeue to quota reservation"),
    "admitted_workloads_total": ("counter", "Workloads admitted, per ClusterQueue"),
    "admission_wait_time_seconds": ("histogram", "Time from creation or the last requeue to admission"),
    "admission_checks_wait_time_seconds": ("histogram", "Time from quota reservation to admission"),
    "evicted_workloads_total": ("counter", "Evictions, per ClusterQueue, reason and underlying cause"),
    "finished_workloads_total": ("counter", "Workloads finished, per ClusterQueue"),
    "admission_check_retries_total": ("counter", "Retries of an admission check (beyond Kueue: KEP-3258's metrics)"),
    "requeue_delay_seconds": ("histogram", "Delays set before a workload goes back to its queue, per reason"),
    "pending_workloads": ("gauge", "Pending workloads, per ClusterQueue and status (active, inadmissible)"),
    "reserving_active_workloads": ("gauge", "Workloads holding quota in a ClusterQueue"),
    "admitted_active_workloads": ("gauge", "Admitted workloads in a ClusterQueue"),
    "cluster_queue_status": ("gauge", "1 for the ClusterQueue's status (pending, active, terminating), else 0"),
}
BUCKETS: dict[str, list[float]] = {
    PREFIX + "quota_reserved_wait_time_seconds": _buckets(14),
    PREFIX + "admission_wait_time_seconds": _buckets(16),
    PREFIX + "admission_checks_wait_time_seconds": _buckets(14),
    PREFIX + "requeue_delay_seconds": _buckets(14),
}


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

    reserved: datetime | None = None
    admitted: datetime | None = None
    finished: bool = False
    evictions: dict[str, int] = Field(default_factory=dict, description="reason/cause -> count")
    retries: dict[str, int] = Field(default_factory=dict, description="check -> retryCount")
    requeue_at: datetime | None = None


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
        return max(requeued.last_transition_time, state.workload.metadata.creation_timestamp)
    return state.workload.metadata.creation_timestamp


def workload_observations(seen: Seen, state: WorkloadState, emit: bool = True) -> tuple[Seen, list[Observation]]:
    """What changed since `seen`, as metric observations, and the new snapshot."""
    cq = state.cluster_queue or ""
    # Kueue labels them with the name of the priority class the workload refers to, of either kind.
    base = {"cluster_queue": cq, "priority_class": priority.class_name(state.workload.spec)}
    out: list[Observation] = []
    now_seen = seen.model_copy(deep=True)

    reserved = _ltt(state, wl.QUOTA_RESERVED)
    if reserved is not None and reserved != seen.reserved:
        now_seen.reserved = reserved
        out.append(Observation(kind="counter", name=PREFIX + "quota_reserved_workloads_total", value=1, labels=base))
        out.append(Observation(
            kind="histogram", name=PREFIX + "quota_reserved_wait_time_seconds",
            value=max(0.0, (reserved - _queued_since(state)).total_seconds()), labels=base,
        ))
    admitted = _ltt(state, wl.ADMITTED)
    if admitted is not None and admitted != seen.admitted:
        now_seen.admitted = admitted
        out.append(Observation(kind="counter", name=PREFIX + "admitted_workloads_total", value=1, labels=base))
        out.append(Observation(
            kind="histogram", name=PREFIX + "admission_wait_time_seconds",
            value=max(0.0, (admitted - _queued_since(state)).total_seconds()), labels=base,
        ))
        since = reserved or admitted
        out.append(Observation(
            kind="histogram", name=PREFIX + "admission_checks_wait_time_seconds",
            value=max(0.0, (admitted - since).total_seconds()), labels=base,
        ))
    stats = state.status.scheduling_stats
    for ev in (stats.evictions if stats else None) or ():
        key = f"{ev.reason}/{ev.underlying_cause}"
        added = ev.count - seen.evictions.get(key, 0)
        now_seen.evictions[key] = ev.count
        if added > 0:
            labels = {**base, "reason": ev.reason, "underlying_cause": ev.underlying_cause}
            out.append(Observation(kind="counter", name=PREFIX + "evicted_workloads_total", value=added, labels=labels))
    for check in state.status.admission_checks or ():
        count = check.retry_count or 0
        added = count - seen.retries.get(check.name, 0)
        now_seen.retries[check.name] = count
        if added > 0:
            labels = {"cluster_queue": cq, "admission_check": check.name}
            out.append(Observation(kind="counter", name=PREFIX + "admission_check_retries_total", value=added, labels=labels))
    rs = state.status.requeue_state
    requeue_at = rs.requeue_at if rs is not None else None
    if requeue_at is not None and requeue_at != seen.requeue_at:
        evicted = cond.find(state.status.conditions, wl.EVICTED)
        start = evicted.last_transition_time if evicted is not None and evicted.last_transition_time else requeue_at
        reason = evicted.reason if evicted is not None else ""
        out.append(Observation(
            kind="histogram", name=PREFIX + "requeue_delay_seconds",
            value=max(0.0, (requeue_at - start).total_seconds()), labels={"cluster_queue": cq, "reason": reason},
        ))
    now_seen.requeue_at = requeue_at
    if wl.is_finished(state) and not seen.finished:
        now_seen.finished = True
        out.append(Observation(kind="counter", name=PREFIX + "finished_workloads_total", value=1, labels=base))
    return now_seen, (out if emit else [])


def cluster_queue_gauges(state: ClusterQueueState) -> list[Observation]:
    """Kueue's per-ClusterQueue gauges, as they stand now."""
    labels = {"cluster_queue": state.name}
    inadmissible = sum(1 for e in state.pending if e.inadmissible)
    reserving = list(state.reservations.values())
    if state.view is None:
        status = "pending"
    elif state.view.spec is None:
        status = "terminating"
    else:
        status = "active" if active_condition(state.view)[0] else "pending"
    out = [
        Observation(kind="gauge", name=PREFIX + "pending_workloads", value=len(state.pending) - inadmissible,
                    labels={**labels, "status": "active"}),
        Observation(kind="gauge", name=PREFIX + "pending_workloads", value=inadmissible,
                    labels={**labels, "status": "inadmissible"}),
        Observation(kind="gauge", name=PREFIX + "reserving_active_workloads", value=len(reserving), labels=labels),
        Observation(kind="gauge", name=PREFIX + "admitted_active_workloads", value=sum(r.admitted for r in reserving),
                    labels=labels),
    ]
    out += [
        Observation(kind="gauge", name=PREFIX + "cluster_queue_status", value=float(s == status),
                    labels={**labels, "status": s})
        for s in ("pending", "active", "terminating")
    ]
    return out
