"""blockAdmission's gate (KEP-1282): which workloads reserved under blockAdmission are not ready
yet, across every ClusterQueue; the pure rules of PodsReadyGateWorkflow (workflows/pods_ready_gate.py).

Kueue's scheduler, with blockAdmission, admits nothing while any workload holding quota lacks
PodsReady=True, across every ClusterQueue it schedules. admitflow's ClusterQueues are separate
workflows, so the one global fact (which workloads reserved under blockAdmission are not ready
yet) has one durable writer: the gate. A ClusterQueue that would reserve quota asks it first; the
gate grants one reservation at a time, and only while no granted workload is still unready. A
grant is used by the reservation it was asked for or handed back by the same pass; the workload
itself tells the gate when it is ready or gives its quota back. Nobody waits while holding
anything, so no crash or deletion can leave the rule stuck.
"""

from __future__ import annotations

from pydantic import Field

from admitflow.wire import CarriedState, WireModel

GATE_SUMMARY = "blockAdmission gate: which workloads admitted under blockAdmission are not ready yet"

# How many settled (key, uid, ticket) the gate remembers, so that a `used` arriving after its
# workload already settled is not taken for a new unready workload.
SETTLED_MEMORY = 1000


class GateState(CarriedState):
    not_ready: dict[str, tuple[str, int]] = Field(
        default_factory=dict, description="Workloads reserved with a grant and not ready yet: key -> (uid, ticket)."
    )
    holder: str | None = Field(default=None, description="The ClusterQueue holding the one outstanding grant.")
    waiting: list[str] = Field(default_factory=list, description="ClusterQueues asking for a grant, first come first.")
    settled: list[tuple[str, str, int]] = Field(default_factory=list, description="The last settled (key, uid, ticket).")


class GateAnswer(WireModel):
    """What the gate tells a ClusterQueue: granted, or wait (its head is told why)."""

    granted: bool


def request(gate: GateState, cluster_queue: str) -> dict[str, GateAnswer]:
    """A ClusterQueue has a workload that fits. Returns the answers to send, by ClusterQueue."""
    if gate.holder == cluster_queue:
        return {cluster_queue: GateAnswer(granted=True)}  # a repeated ask: the grant stands
    if cluster_queue not in gate.waiting:
        gate.waiting.append(cluster_queue)
    answers = _grant(gate)
    if cluster_queue not in answers:
        answers[cluster_queue] = GateAnswer(granted=False)
    return answers


def used(gate: GateState, cluster_queue: str, key: str, uid: str, ticket: int) -> dict[str, GateAnswer]:
    """The holder reserved quota for `key` with its grant."""
    if gate.holder == cluster_queue:
        gate.holder = None
    if (key, uid, ticket) not in {tuple(s) for s in gate.settled}:
        gate.not_ready[key] = (uid, ticket)
    return _grant(gate)


def returned(gate: GateState, cluster_queue: str) -> dict[str, GateAnswer]:
    """The holder had nothing left to reserve, or no longer runs."""
    if gate.holder == cluster_queue:
        gate.holder = None
    if cluster_queue in gate.waiting:
        gate.waiting.remove(cluster_queue)
    return _grant(gate)


def settled(gate: GateState, key: str, uid: str, ticket: int) -> dict[str, GateAnswer]:
    """A workload reserved with a grant is ready, or gave its quota back."""
    held = gate.not_ready.get(key)
    if held is not None and tuple(held) == (uid, ticket):
        del gate.not_ready[key]
    gate.settled.append((key, uid, ticket))
    del gate.settled[:-SETTLED_MEMORY]
    return _grant(gate)


def unsettled(gate: GateState, key: str, uid: str, ticket: int) -> dict[str, GateAnswer]:
    """A workload that settled as ready is no longer ready while it holds its quota (its pods wait
    for recovery): as in Kueue, nothing more is admitted until it is ready again or leaves."""
    gate.not_ready[key] = (uid, ticket)
    gate.settled = [s for s in gate.settled if tuple(s) != (key, uid, ticket)]
    return {}


def _grant(gate: GateState) -> dict[str, GateAnswer]:
    if gate.holder is not None or gate.not_ready or not gate.waiting:
        return {}
    gate.holder = gate.waiting.pop(0)
    return {gate.holder: GateAnswer(granted=True)}
