"""Who schedules a ClusterQueue: itself, or the one entity of its cohort tree.

Scheduling decisions that span ClusterQueues must not race, so one workflow owns a whole cohort
tree (`cohort/<root>`) and schedules all of its ClusterQueues in one pass. A ClusterQueue's own
workflow (`clusterqueue/<name>`) stays its address: workloads, the catalog and the blockAdmission
gate keep signalling it. It is the queue's home:

- standalone (its view names no cohort), the home holds the queue's state and schedules it, a
  tree of one;
- in a cohort, the home hands its state to the tree (`adopt`, numbered), and from then on
  forwards every message to it (`forward`), in order, through its one outbox;
- when the view says the queue left that tree (another root, no cohort, deleted), the home asks
  for its state back (`recall`) and holds the messages that arrive meanwhile; the tree returns the
  state (`return_state`) and bounces home whatever reaches it for a queue it no longer holds; the
  home takes its state, works through what it held, and hands it on to the new tree, if any.

The state is in exactly one place at any time, so nothing held is lost or counted twice: a
handover is numbered, and a repeated or stale one is ignored.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from admitflow.wire import WireModel

from admitflow import contract
from admitflow.admission.cluster_queue import ClusterQueueState, ClusterQueueView

# Signals a home forwards to its tree (and a tree bounces home): each is what the queue's own
# workflow takes under that name.
FORWARDED_SIGNALS = (
    contract.SET_VIEW,
    contract.ENQUEUE,
    contract.RELEASE,
    contract.ADMITTED,
    contract.CLUSTER_QUEUE_GATE_ANSWER,
)


class Forwarded(WireModel):
    """A message for `cluster_queue`, passed between its home and its tree unchanged."""

    cluster_queue: str
    signal: str = Field(description="The signal it arrived as: one of set_view, enqueue, release, admitted, pods_ready_gate.")
    payload: Any = None


class Handover(WireModel):
    """A queue's state on its way to a tree (`adopt`) or back home (`return_state`); without a state,
    the home's request for it (`recall`)."""

    cluster_queue: str
    number: int = Field(ge=1, description="Counts the home's handovers; a repeated or older one is ignored.")
    state: ClusterQueueState | None = None


class Away(WireModel):
    """Where a home's state is while it is not at home."""

    root: str = Field(description="The root Cohort of the tree holding it.")
    number: int = Field(description="The handover that took it there.")
    recalling: bool = Field(default=False, description="Asked back; messages wait in `held`.")
    held: list[Forwarded] = Field(default_factory=list, description="Messages that came while recalling, in order.")


class CohortTreeState(WireModel):
    """The durable state of one tree's entity: its ClusterQueues' states, and the last handover
    each home made to it (a late repeat of an adopt or a recall is recognised)."""

    root: str
    members: dict[str, ClusterQueueState] = Field(default_factory=dict)
    handovers: dict[str, int] = Field(default_factory=dict)


def tree_root(view: ClusterQueueView | None) -> str | None:
    """The root Cohort of the tree that should schedule this queue, or None: the queue schedules
    itself (no cohort, deleted, or no view yet)."""
    if view is None or view.spec is None or view.cohort_tree is None:
        return None
    return view.cohort_tree.root


def adopt(tree: CohortTreeState, handover: Handover) -> bool:
    """A home hands its state over; False for a repeat or a stale one (ignored)."""
    if handover.state is None or handover.number <= tree.handovers.get(handover.cluster_queue, 0):
        return False
    tree.handovers[handover.cluster_queue] = handover.number
    tree.members[handover.cluster_queue] = handover.state
    return True


def recall(tree: CohortTreeState, handover: Handover) -> Handover | None:
    """A home asks for its state back: the state to return, or None when the tree does not hold
    that handover (a repeat, already answered)."""
    if tree.handovers.get(handover.cluster_queue) != handover.number or handover.cluster_queue not in tree.members:
        return None
    state = tree.members.pop(handover.cluster_queue)
    return Handover(cluster_queue=handover.cluster_queue, number=handover.number, state=state)


def take_back(away: Away | None, handover: Handover) -> bool:
    """Whether a returned state is the one this home is waiting for."""
    return away is not None and away.recalling and handover.number == away.number and handover.state is not None
