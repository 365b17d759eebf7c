"""Kueue's objectRetentionPolicies.workloads (KEP-1618) for admitflow's workloads.

`afterDeactivatedByKueue`: a workload the engine deactivated (a Rejected check, the requeuing
limit, the maximum execution time: `Evicted` with a `DeactivatedDueTo...` reason) is deleted that
long after, so its workflow ends instead of running, inactive, for ever; reactivated before, it is
kept. `afterFinished` is accepted and has nothing to do: a finished workload's workflow completes
at once, and the Temporal namespace's retention period says how long its history stays.

Pure: the deadline comes from the state (the policy its ClusterQueue last gave it, and the
deactivation's time), and the workflow's one timer waits for it.
"""

from __future__ import annotations

from datetime import datetime

from admitflow.admission import conditions as cond
from admitflow.admission import workload as wl
from admitflow.admission.workload import WorkloadState
from admitflow.api.duration import parse_duration

REASON = "DeletedByRetentionPolicy"


def deactivated_by_the_engine(state: WorkloadState) -> datetime | None:
    """When the engine deactivated it, or None (active, deactivated by a person, finished, deleted)."""
    if state.workload.spec.active is not False or wl.is_finished(state) or state.deleted:
        return None
    evicted = cond.find(state.status.conditions, wl.EVICTED)
    if evicted is None or evicted.status != "True" or not evicted.reason.startswith("DeactivatedDueTo"):
        return None
    return evicted.last_transition_time


def _after_deactivated(state: WorkloadState) -> str | None:
    """The afterDeactivatedByKueue its ClusterQueue last gave it, or None (kept)."""
    policy = state.workload_retention
    return policy.after_deactivated_by_kueue if policy is not None else None


def deletion_due(state: WorkloadState) -> tuple[datetime, str] | None:
    """When its retention runs out, with the timer's summary."""
    after = _after_deactivated(state)
    since = deactivated_by_the_engine(state) if after is not None else None
    if after is None or since is None:
        return None
    return since + parse_duration(after), f"delete: deactivated {after} ago (afterDeactivatedByKueue)"


def delete_if_due(state: WorkloadState, at: datetime, now: datetime) -> bool:
    """Delete the workload if its retention ran out by `at`; returns whether it did."""
    due = deletion_due(state)
    if due is None or due[0] > at:
        return False
    after = _after_deactivated(state)
    wl.record(state, REASON, f"Deleted {after} after it was deactivated (objectRetentionPolicies.workloads.afterDeactivatedByKueue)", now)
    wl.delete(state)
    return True
