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

The home's decisions (`Home`) and the tree's (`adopted`, `recalled`, `forwarded`) are pure: they
return orders (`Send`, `Apply`, ...) that the workflows carry out, so a model of many homes and
trees can check every interleaving of their messages (tests/unit/test_handover_properties.py).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field

from admitflow.wire import CarriedState, Fact, WireModel

from admitflow import contract, ids
from admitflow.admission import cluster_queue as cq
from admitflow.admission.cluster_queue import ClusterQueueState, ClusterQueueView

# Signals a home forwards to its tree (and a tree bounces home): each is what the queue's own
# workflow takes under that name.
FORWARDED_SIGNALS = (
    contract.SET_VIEW,
    contract.ENQUEUE,
    contract.RELEASE,
    contract.ADMITTED,
    contract.REPRIORITIZE,
    contract.CLUSTER_QUEUE_GATE_ANSWER,
)


class Forwarded(WireModel):
    """A message for `cluster_queue`, passed between its home and its tree unchanged."""

    cluster_queue: str
    signal: str = Field(description="The signal it arrived as: one of FORWARDED_SIGNALS.")
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


class CohortTreeState(CarriedState):
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


# --- orders: what a home or a tree decided, carried out by its workflow in this order -------------


class Send(Fact):
    """Signal `workflow_id` through the outbox; with `start_cohort`, start that tree's entity if it
    does not run yet (an adopt may be the first it hears of)."""

    workflow_id: str
    signal: str
    payload: dict[str, Any]
    start_cohort: str | None = None


class Apply(Fact):
    """Apply a message to a queue's state, which is here: at a home the message as its handler
    parsed it, at a tree the `Forwarded` one, to the queue it names."""

    message: Any


class Resume(Fact):
    """The state is home again: schedule it here, after applying the latest view and then, in order,
    what was held while it came back."""

    state: ClusterQueueState
    view: ClusterQueueView | None = None
    held: list[Forwarded] = Field(default_factory=list)


class Suspend(Fact):
    """The state left for a tree: stop scheduling it here."""


class Reschedule(Fact):
    """The tree's set of queues changed: look at every queue's set-aside workloads again, then run a
    pass (the quota a queue lent or brought may change what fits)."""


HomeCommand = Send | Apply | Resume | Suspend
TreeCommand = Send | Apply | Reschedule


# --- the home ---------------------------------------------------------------------------------------


class Home:
    """Where a queue's messages and state go, decided at its home (`clusterqueue/<name>`). Its
    workflow keeps the scheduling (its Owner) and carries out the orders returned here; the three
    fields are what it carries when it continues as new."""

    def __init__(self, name: str, state: ClusterQueueState, away: Away | None = None, handovers: int = 0) -> None:
        self.name = name
        # At home, the queue's state; while a tree holds it, a stand-in that keeps the latest view.
        self.state = state
        self.away = away
        self.handovers = handovers

    def receive(self, signal: str, m: WireModel, now: datetime) -> list[Send | Apply]:
        """A message for the queue, taken as `signal`: applied here, or sent after the state."""
        if self.away is None:
            return [Apply(message=m)]
        if isinstance(m, ClusterQueueView):
            cq.set_view(self.state, m, now)  # the stand-in keeps the latest, to decide where the state belongs
        return self._elsewhere(Forwarded(cluster_queue=self.name, signal=signal, payload=m.to_wire()))

    def gone(self, forgets: list[WireModel]) -> list[Send]:
        """Workloads that no longer run and that the queue at home does not hold: while a tree holds
        the state, they hold quota there and are forgotten there; at home nothing is left to do."""
        if self.away is None:
            return []
        return [s for f in forgets for s in self._elsewhere(Forwarded(cluster_queue=self.name, signal=contract.FORGET, payload=f.to_wire()))]

    def place(self) -> list[Send | Suspend]:
        """Hand the state to the tree its view names, or ask for it back when the view no longer
        names that tree."""
        root = tree_root(self.state.view)
        if self.away is None:
            if root is None:
                return []
            self.handovers += 1
            adopt = Send(
                workflow_id=ids.cohort_id(root), signal=contract.ADOPT, start_cohort=root,
                payload=Handover(cluster_queue=self.name, number=self.handovers, state=self.state).to_wire(),
            )
            self.away = Away(root=root, number=self.handovers)
            self.state = ClusterQueueState(name=self.name, view=self.state.view, conditions=self.state.conditions)
            return [adopt, Suspend()]
        if not self.away.recalling and root != self.away.root:
            self.away.recalling = True
            return [self._to_tree(contract.RECALL, Handover(cluster_queue=self.name, number=self.away.number).to_wire())]
        return []

    def returned(self, handover: Handover) -> list[Resume]:
        """The tree gave a state back: taken if it is the one asked for."""
        if not take_back(self.away, handover):
            return []
        assert self.away is not None and handover.state is not None
        resume = Resume(state=handover.state, view=self.state.view, held=self.away.held)
        self.state, self.away = handover.state, None
        return [resume]

    def _elsewhere(self, forwarded: Forwarded) -> list[Send]:
        """To the tree holding the state, or held while it comes back."""
        assert self.away is not None
        if self.away.recalling:
            self.away.held.append(forwarded)
            return []
        return [self._to_tree(contract.FORWARD, forwarded.to_wire())]

    def _to_tree(self, signal: str, payload: dict[str, Any]) -> Send:
        assert self.away is not None
        return Send(workflow_id=ids.cohort_id(self.away.root), signal=signal, payload=payload)


# --- the tree ---------------------------------------------------------------------------------------


def adopted(tree: CohortTreeState, handover: Handover) -> list[Reschedule]:
    """A home's `adopt`: a new queue to schedule with the others, unless a repeat."""
    return [Reschedule()] if adopt(tree, handover) else []


def recalled(tree: CohortTreeState, handover: Handover) -> list[Send | Reschedule]:
    """A home's `recall`: its state goes back, unless already answered."""
    returned = recall(tree, handover)
    if returned is None:
        return []
    return [
        Send(workflow_id=ids.cluster_queue_id(returned.cluster_queue), signal=contract.RETURN_STATE, payload=returned.to_wire()),
        Reschedule(),
    ]


def forwarded(tree: CohortTreeState, m: Forwarded) -> list[Send | Apply]:
    """A home's `forward`: applied if the tree holds that queue, else bounced home."""
    return [Apply(message=m)] if m.cluster_queue in tree.members else [bounce(m)]


def bounce(m: Forwarded) -> Send:
    """A message for a queue this tree does not hold (it was given back): to its home, which applies
    it or passes it on to the tree holding the state now."""
    return Send(workflow_id=ids.cluster_queue_id(m.cluster_queue), signal=contract.FORWARD, payload=m.to_wire())


def current_details(tree: CohortTreeState) -> str:
    """The UI's current details of a tree's workflow (markdown): each ClusterQueue's counts and what
    it borrows."""
    lines = [f"cohort tree {tree.root}: {len(tree.members)} ClusterQueue(s)"]
    for name, state in sorted(tree.members.items()):
        reserving = state.reservations.values()
        admitted = sum(1 for r in reserving if r.admitted)
        borrowed = [
            f"{r.name} {r.borrowed} of {f.name}"
            for f in cq.cluster_queue_status(state).flavors_reservation
            for r in f.resources
            if str(r.borrowed) != "0"
        ]
        lending = f", borrowing {', '.join(borrowed)}" if borrowed else ""
        lines.append(f"- {name}: pending {len(state.pending)}, reserving {len(reserving)}, admitted {admitted}{lending}")
    return "\n\n".join(lines)
