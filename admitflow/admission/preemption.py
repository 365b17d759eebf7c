"""Preemption within a ClusterQueue, at reservation time, as Kueue's classical preemptor does it.

`spec.preemption.withinClusterQueue` says who may be preempted: `Never`, `LowerPriority`, or
`LowerOrNewerEqualPriority` (also equal priority that entered the queue later). Candidates are the
workloads holding quota in the queue; they are taken in Kueue's order (already being evicted first,
then lowest priority, then the most recently reserved, then uid) until the preemptor fits, and
then every one that is not needed after all is given back, so the fewest and lowest-priority
workloads are preempted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from admitflow.admission.flavor_assignment import Usage
from admitflow.admission.pending_queue import QueueEntry

REASON_IN_CLUSTER_QUEUE = "InClusterQueue"
HUMAN_REASONS = {REASON_IN_CLUSTER_QUEUE: "prioritization in the ClusterQueue"}


def may_preempt(policy: str | None, preemptor: QueueEntry, candidate) -> bool:
    """Whether `policy` lets `preemptor` preempt `candidate` (a Reservation)."""
    if policy == "LowerPriority":
        return candidate.priority < preemptor.priority
    if policy == "LowerOrNewerEqualPriority":
        return candidate.priority < preemptor.priority or (
            candidate.priority == preemptor.priority and preemptor.timestamp < candidate.timestamp
        )
    return False


def candidates(policy: str | None, preemptor: QueueEntry, reservations: Iterable) -> list:
    """Who may be preempted, in the order Kueue considers them."""
    eligible = [r for r in reservations if r.key != preemptor.key and may_preempt(policy, preemptor, r)]
    # Kueue's CandidatesOrdering: evicted first, lower priority, newer reservation, then uid.
    return sorted(eligible, key=lambda r: (not r.evicting, r.priority, -r.reserved_at.timestamp(), r.uid))


def preemptible_usage(cands: Iterable) -> Usage:
    out: Usage = {}
    for r in cands:
        for fr, v in r.assignment.usage().items():
            out[fr] = out.get(fr, 0) + v
    return out


def select_victims(
    need: Mapping[tuple[str, str], int],
    used: Mapping[tuple[str, str], int],
    nominal: Mapping[tuple[str, str], int],
    cands: Sequence,
) -> list | None:
    """The fewest candidates whose quota lets `need` fit, or None if even all of them would not.

    Only candidates holding some of the flavors and resources the preemptor needs are considered."""
    freed: dict[tuple[str, str], int] = {}

    def fits() -> bool:
        return all(used.get(fr, 0) - freed.get(fr, 0) + v <= nominal.get(fr, 0) for fr, v in need.items())

    def take(r, sign: int) -> None:
        for fr, v in r.assignment.usage().items():
            freed[fr] = freed.get(fr, 0) + sign * v

    targets = []
    for r in cands:
        if not any(fr in need for fr in r.assignment.usage()):
            continue
        take(r, +1)
        targets.append(r)
        if fits():
            break
    else:
        return None
    # Give back every victim that turns out not to be needed, trying the last-chosen first.
    for r in reversed(targets[:-1]):
        take(r, -1)
        if fits():
            targets.remove(r)
        else:
            take(r, +1)
    return targets


def preemption_message(preemptor: QueueEntry, cluster_queue: str, reason: str = REASON_IN_CLUSTER_QUEUE) -> str:
    """Kueue's message on a victim's Evicted and Preempted conditions. A Workload applied directly
    has no owning Job, hence JobUID UNKNOWN; a standalone ClusterQueue's path is /<name>."""
    return (
        f"Preempted to accommodate a workload (UID: {preemptor.uid}, JobUID: UNKNOWN) due to "
        f"{HUMAN_REASONS[reason]}; preemptor path: /{cluster_queue}; preemptee path: /{cluster_queue}"
    )
