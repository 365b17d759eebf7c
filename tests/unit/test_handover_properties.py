"""A model of ClusterQueue homes and cohort trees handing states back and forth: hypothesis drives
the pure rules of admitflow/admission/cohort_tree.py (`Home`, `adopted`, `recalled`, `forwarded`,
`bounce`) through random interleavings of their messages, and checks invariants after every step.

The machine plays the workflows as workflows/cluster_queue.py and workflows/cohort_tree.py run them:
each has an inbox its signal handlers fill, and processing it is one workflow task (a home drains
its inbox, hears of notices that found no workload, then places its state; a tree drains its
inbox, then bounces such notices home). Their orders are carried out in order: a `Send` goes into
the channel from sender to receiver, an `Apply` or a `Resume` applies messages to the state with
the pure ClusterQueue rules. Channels are FIFO per sender and receiver, which is what the outbox
guarantees (one delivery activity at a time, each target's signals in order, different targets
concurrently): messages from one sender to two receivers may overtake each other, so every
interleaving of one FIFO per sender is among these. The catalog's views and the workloads'
enqueues and releases reach a home's inbox directly, or, once a home has named the tree holding its
state (the `holder` of its update's receipt, activities/mail.py), go straight to that tree, which
applies them or bounces them home (`forwarded`); a bounce makes the workers ask the home again. A
retried delivery may repeat a handover signal (adopt, recall, return_state) at any later time;
forwarded messages are not repeated, so that each can be counted.

Invariants, after every step:

1. Each queue's state is in exactly one place: its home, one tree's members, or one adopt or
   return_state on its way (in a channel or an inbox); a repeated handover changes nothing.
2. Every message (enqueue, release, forget) is applied to its queue's state at most once, and those
   that reached the queue's home are applied in the order they reached it.
3. The state, wherever it is, holds exactly what its applied messages leave pending: it travels
   whole, and nothing is applied to a copy. A release applied before its enqueue (one went straight
   to the tree, the other by the home) leaves the enqueue without effect, as the queue remembers it.
4. Once every channel and inbox is empty, every message sent was applied, each state is where its
   latest view says (home without a cohort, else its root's tree, not being recalled) and has that view.
   The `settle` rule delivers and processes until then, within a bound; every run ends with it.

Runs are derandomized and keep no example database, so CI sees the same examples every time.
"""

from __future__ import annotations

import sys
from collections import deque
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from admitflow import contract, ids
from admitflow.admission import cluster_queue as cq
from admitflow.admission import cohort_tree as tree
from admitflow.admission.cluster_queue import ClusterQueueState, ClusterQueueView
from admitflow.admission.cohort_tree import CohortTreeState, Forwarded, Handover, Home
from admitflow.admission.quota_tree import CohortInfo, CohortTree
from admitflow.api import ClusterQueueSpec
from admitflow.admission.protocol import ReleaseRequest
from admitflow.admission.queue_owner import MESSAGE_TYPES, Forget, signal_of
from tests.unit.test_cluster_queue import NOW
from tests.unit.test_cohort_scheduling import entry

HANDOVERS = (contract.ADOPT, contract.RECALL, contract.RETURN_STATE)
MOVING = (contract.ADOPT, contract.RETURN_STATE)  # a handover that carries the state
SETTLE_ROUNDS = 20


@dataclass
class Letter:
    """A signal on its way (`payload` as sent), or taken by its receiver's handler (parsed)."""

    signal: str
    payload: Any
    repeat: bool = False
    straight: bool = False  # a workload's message, sent straight to the tree its home named


class HandoverModel(RuleBasedStateMachine):
    """Two or three queues' homes and two or three trees, and the channels between them."""

    @initialize(queues=st.integers(2, 3), roots=st.integers(2, 3))
    def build(self, queues: int, roots: int) -> None:
        self.queues = ["a", "b", "c"][:queues]
        self.roots = ["r1", "r2", "r3"][:roots]
        self.homes = {q: Home(q, ClusterQueueState(name=q)) for q in self.queues}
        self.trees = {r: CohortTreeState(root=r) for r in self.roots}
        self.channels: dict[tuple[str, str], deque[Letter]] = {}
        self.inboxes: dict[str, list[Letter]] = {self.home_id(q): [] for q in self.queues} | {
            ids.cohort_id(r): [] for r in self.roots
        }
        self.delivered: list[tuple[str, str, Letter]] = []  # handovers that arrived, to repeat
        self.latest: dict[str, ClusterQueueView] = {}
        self.arrived: dict[str, list[tuple[str, str]]] = {q: [] for q in self.queues}
        self.applied: dict[str, list[tuple[str, str]]] = {q: [] for q in self.queues}
        self.sent: dict[str, list[tuple[str, str]]] = {q: [] for q in self.queues}  # every message, however it went
        self.named: dict[str, str] = {}  # queue -> the tree its home last named to the workers (their Mailer's)
        self.workloads: dict[str, str] = {}  # key -> its queue
        self.released: set[str] = set()
        self.forgotten: set[str] = set()
        self.trace: list[str] = [f"queues {self.queues}, roots {self.roots}"]

    @staticmethod
    def home_id(q: str) -> str:
        return ids.cluster_queue_id(q)

    # --- what the rest of the system sends to a home ---------------------------------------------------

    @rule(q=st.integers(0, 2), where=st.integers(0, 4))
    def new_view(self, q: int, where: int) -> None:
        """The catalog's next view: in one of the trees, in none, or deleted."""
        name = self.queues[q % len(self.queues)]
        choices = [*self.roots, None, "deleted"]
        root = choices[where % len(choices)]
        revision = self.latest[name].revision + 1 if name in self.latest else 1
        view = ClusterQueueView(
            name=name, revision=revision, spec=None if root == "deleted" else ClusterQueueSpec(),
            cohort_tree=CohortTree(root=root, cohorts={root: CohortInfo(name=root)}) if root in self.roots else None,
        )
        self.latest[name] = view
        self.take(name, contract.SET_VIEW, view)

    @rule(q=st.integers(0, 2), release=st.none() | st.integers(0, 50), straight=st.booleans())
    def workload(self, q: int, release: int | None, straight: bool) -> None:
        """A new workload's enqueue, or a release by one that has not released yet: to the queue's
        home, or (`straight`, when its home has named a tree) to that tree."""
        keys = sorted(set(self.workloads) - self.released)
        if release is None or not keys:
            name = self.queues[q % len(self.queues)]
            w = f"w{len(self.workloads)}"
            self.workloads[f"default/{w}"] = name
            signal, m = contract.ENQUEUE, entry(w, name)
        else:
            key = keys[release % len(keys)]
            self.released.add(key)
            name, signal, m = self.workloads[key], contract.RELEASE, ReleaseRequest(key=key, uid=self.uid(key), ticket=1)
        self.sent[name].append(self.ident(m))
        if straight and name in self.named:
            f = Forwarded(cluster_queue=name, signal=signal, payload=m.to_wire())
            self.channels.setdefault(("worker", ids.cohort_id(self.named[name])), deque()).append(
                Letter(contract.FORWARD, f.to_wire(), straight=True)
            )
            self.trace.append(f"worker -> {self.named[name]}: {signal} {m.key} for {name}, straight")
        else:
            self.take(name, signal, m, from_workload=True)

    @staticmethod
    def uid(key: str) -> str:
        return f"uid-{key.split('/')[1]}"

    def take(self, q: str, signal: str, m: Any, from_workload: bool = False) -> None:
        """A home's signal handler: into the inbox, in the order it came."""
        self.inboxes[self.home_id(q)].append(Letter(signal, m, straight=from_workload))
        if not isinstance(m, ClusterQueueView):
            self.arrived[q].append(self.ident(m))
        self.trace.append(f"{q} takes {signal} {self.ident(m)}")

    @staticmethod
    def ident(m: Any) -> tuple[str, str]:
        if isinstance(m, ClusterQueueView):
            return "view", f"{m.revision} {tree.tree_root(m)}"
        return signal_of(m), m.key

    # --- channels -----------------------------------------------------------------------------------------

    @rule(i=st.integers(0, 50))
    def deliver(self, i: int) -> None:
        """The next signal from one sender to one receiver arrives."""
        busy = sorted(k for k, ch in self.channels.items() if ch)
        if not busy:
            return
        sender, receiver = busy[i % len(busy)]
        self.arrive(sender, receiver, self.channels[sender, receiver].popleft())

    @rule(signal=st.sampled_from(HANDOVERS), i=st.integers(0, 50))
    def repeat(self, signal: str, i: int) -> None:
        """A retried delivery sends a handover signal again (of the kind asked for, if any came)."""
        delivered = [d for d in self.delivered if d[2].signal == signal] or self.delivered
        if not delivered:
            return
        sender, receiver, letter = delivered[-1 - i % len(delivered)]  # the latest first
        self.channels.setdefault((sender, receiver), deque()).append(Letter(letter.signal, letter.payload, repeat=True))
        self.trace.append(f"{sender} -> {receiver}: {letter.signal} repeated")

    def arrive(self, sender: str, receiver: str, letter: Letter) -> None:
        self.trace.append(f"{sender} -> {receiver}: {letter.signal}{' (repeat)' if letter.repeat else ''}")
        if letter.signal in HANDOVERS and not letter.repeat:
            self.delivered.append((sender, receiver, letter))
        if letter.signal == contract.FORWARD:
            m = Forwarded.model_validate(letter.payload)
            if receiver.startswith(ids.COHORT_PREFIX):
                self.inboxes[receiver].append(Letter(contract.FORWARD, m, straight=letter.straight))
            elif m.cluster_queue == receiver.removeprefix(ids.CLUSTER_QUEUE_PREFIX) and m.signal in MESSAGE_TYPES:
                self.take(m.cluster_queue, m.signal, MESSAGE_TYPES[m.signal].model_validate(m.payload))
        else:
            self.inboxes[receiver].append(Letter(letter.signal, Handover.model_validate(letter.payload), letter.repeat))

    def send(self, sender: str, c: tree.Send) -> None:
        if c.signal == contract.ADOPT:
            assert c.start_cohort is not None and c.workflow_id == ids.cohort_id(c.start_cohort), self.failure(
                f"an adopt that does not start its tree: {c}"
            )
        self.channels.setdefault((sender, c.workflow_id), deque()).append(Letter(c.signal, c.payload))

    # --- workflow tasks ---------------------------------------------------------------------------------

    @rule(w=st.integers(0, 5), missing=st.none() | st.integers(0, 50))
    def task(self, w: int, missing: int | None) -> None:
        """One workflow task of a home or a tree; `missing`: a notice it sent found no workload."""
        workflows = [*self.queues, *self.roots]
        name = workflows[w % len(workflows)]
        if name in self.homes:
            self.run_home(name, missing)
        else:
            self.run_tree(name, missing)

    def run_home(self, q: str, missing: int | None = None) -> None:
        """ClusterQueueWorkflow's loop: drain the inbox, hear of a notice that found no workload
        (a workload of this queue), place the state."""
        home, me = self.homes[q], self.home_id(q)
        letters, self.inboxes[me] = self.inboxes[me], []
        for letter in letters:
            if letter.signal == contract.RETURN_STATE:
                commands = home.returned(letter.payload)
                assert not (letter.repeat and commands), self.failure(f"{q} took a repeated return_state: {letter.payload.number}")
            else:
                commands = home.receive(signal_of(letter.payload), letter.payload, NOW)
            self.execute_home(q, commands)
            if letter.straight:
                # Its receipt names the tree holding the state, if one does: the workers go there next.
                if home.away is not None and not home.away.recalling:
                    self.named[q] = home.away.root
                else:
                    self.named.pop(q, None)
        mine = sorted(k for k, name in self.workloads.items() if name == q and k not in self.forgotten)
        if missing is not None and mine:
            key = mine[missing % len(mine)]
            forget = Forget(key=key, uid=self.uid(key), cluster_queue=q)
            commands = home.gone([forget])
            if home.away is None:
                assert commands == [], self.failure(f"{q} at home sent a forget elsewhere: {commands}")
            else:
                self.forgotten.add(key)
                self.arrived[q].append(self.ident(forget))
                self.sent[q].append(self.ident(forget))
                self.trace.append(f"{q} hears {key} is gone")
            self.execute_home(q, commands)
        self.execute_home(q, home.place())

    def execute_home(self, q: str, commands: list) -> None:
        """ClusterQueueWorkflow._execute, with the Owner's scheduling left out."""
        home = self.homes[q]
        for c in commands:
            self.trace.append(f"  {q}: {type(c).__name__} {getattr(c, 'signal', '')}")
            if isinstance(c, tree.Send):
                self.send(self.home_id(q), c)
            elif isinstance(c, tree.Apply):
                self.apply(q, home.state, c.message)
            elif isinstance(c, tree.Resume):
                assert c.state is home.state and home.away is None, self.failure(f"{q} resumed a state it does not hold")
                if c.view is not None:
                    self.apply(q, c.state, c.view)
                for f in c.held:
                    self.apply(q, c.state, MESSAGE_TYPES[f.signal].model_validate(f.payload))
            else:
                assert isinstance(c, tree.Suspend) and home.away is not None, self.failure(f"{q}: {c} at home")

    def run_tree(self, r: str, missing: int | None = None) -> None:
        """CohortWorkflow's loop: drain the inbox, then bounce home a notice that found no workload
        (a workload of a queue the tree held once)."""
        state, me = self.trees[r], ids.cohort_id(r)
        letters, self.inboxes[me] = self.inboxes[me], []
        for letter in letters:
            if letter.signal == contract.ADOPT:
                commands = tree.adopted(state, letter.payload)
            elif letter.signal == contract.RECALL:
                commands = tree.recalled(state, letter.payload)
            else:
                commands = tree.forwarded(state, letter.payload)
                if letter.straight and not any(isinstance(c, tree.Apply) for c in commands):
                    self.named.pop(letter.payload.cluster_queue, None)  # bounced: the receipt says so
            assert not (letter.repeat and commands), self.failure(f"{r} acted on a repeated {letter.signal}: {commands}")
            self.execute_tree(r, commands)
        held_once = sorted(k for k, q in self.workloads.items() if q in state.handovers and k not in self.forgotten)
        if missing is not None and held_once:
            key = held_once[missing % len(held_once)]
            q = self.workloads[key]
            self.forgotten.add(key)
            self.sent[q].append(("forget", key))
            self.trace.append(f"{r} hears {key} of {q} is gone")
            forget = Forget(key=key, uid=self.uid(key), cluster_queue=q)
            self.send(me, tree.bounce(Forwarded(cluster_queue=q, signal=contract.FORGET, payload=forget.to_wire())))

    def execute_tree(self, r: str, commands: list) -> None:
        """CohortWorkflow._execute, with the Owner's scheduling left out."""
        for c in commands:
            self.trace.append(f"  {r}: {type(c).__name__} {getattr(c, 'signal', '')}")
            if isinstance(c, tree.Send):
                self.send(ids.cohort_id(r), c)
            elif isinstance(c, tree.Apply):
                f = c.message
                self.apply(f.cluster_queue, self.trees[r].members[f.cluster_queue], MESSAGE_TYPES[f.signal].model_validate(f.payload))

    def apply(self, q: str, state: ClusterQueueState, m: Any) -> None:
        """What the Owner does with a message, minus scheduling."""
        assert state.name == q, self.failure(f"a message for {q} applied to {state.name}'s state")
        if isinstance(m, ClusterQueueView):
            cq.set_view(state, m, NOW)
            return
        self.applied[q].append(self.ident(m))
        if isinstance(m, Forget):
            cq.forget(state, m.key, m.uid)
        elif signal_of(m) == contract.ENQUEUE:
            cq.enqueue(state, m)
        else:
            cq.release(state, m.key, m.uid, m.ticket)

    @rule()
    def settle(self) -> None:
        """Deliver everything and let every workflow work, until nothing moves."""
        for _ in range(SETTLE_ROUNDS):
            if self.quiet():
                return
            for (sender, receiver), channel in sorted(self.channels.items()):
                while channel:
                    self.arrive(sender, receiver, channel.popleft())
            for q in self.queues:
                self.run_home(q)
            for r in self.roots:
                self.run_tree(r)
        assert self.quiet(), self.failure(f"still moving after {SETTLE_ROUNDS} rounds")

    def quiet(self) -> bool:
        return not any(self.channels.values()) and not any(self.inboxes.values())

    # --- what must hold -------------------------------------------------------------------------------

    def places(self, q: str) -> list[tuple[str, ClusterQueueState]]:
        """Everywhere q's state is: its home, a tree, or a handover on its way that will be taken."""
        found = [("home", self.homes[q].state)] if self.homes[q].away is None else []
        found += [(f"tree {r}", t.members[q]) for r, t in self.trees.items() if q in t.members]
        on_the_way = [
            (f"{letter.signal} {s}->{d}", Handover.model_validate(letter.payload))
            for (s, d), ch in self.channels.items() for letter in ch if letter.signal in MOVING and not letter.repeat
        ] + [
            (f"{letter.signal} in {d}'s inbox", letter.payload)
            for d, inbox in self.inboxes.items() for letter in inbox if letter.signal in MOVING and not letter.repeat
        ]
        found += [(where, h.state) for where, h in on_the_way if h.cluster_queue == q]
        return found

    @invariant()
    def each_state_is_in_one_place_and_holds_what_was_applied(self) -> None:
        for q in self.queues:
            places = self.places(q)
            assert len(places) == 1, self.failure(f"{q}'s state is in {[w for w, _ in places] or 'no place'}")
            where, state = places[0]
            assert state is not None and state.name == q, self.failure(f"{q}'s state at {where} is {state}")
            pending: list[str] = []
            gone: set[str] = set()  # released (or forgotten) before its enqueue arrived: the queue remembers
            for kind, key in self.applied[q]:
                if kind == contract.ENQUEUE:
                    if key not in gone:
                        pending.append(key)
                elif key in pending:
                    pending.remove(key)
                elif kind == contract.RELEASE:
                    gone.add(key)
            assert sorted(e.key for e in state.pending) == sorted(pending), self.failure(
                f"{q}'s state at {where} holds {sorted(e.key for e in state.pending)}, its messages leave {sorted(pending)}"
            )

    @invariant()
    def messages_are_applied_once_in_order(self) -> None:
        for q in self.queues:
            applied, arrived = self.applied[q], self.arrived[q]
            assert len(set(applied)) == len(applied), self.failure(f"{q}: applied twice, in {applied}")
            at_home = [m for m in applied if m in set(arrived)]
            assert at_home == arrived[: len(at_home)], self.failure(f"{q}: applied {applied}, arrived at its home {arrived}")

    @invariant()
    def at_rest_each_state_is_where_its_view_says(self) -> None:
        if not self.quiet():
            return
        for q in self.queues:
            home, view = self.homes[q], self.latest.get(q)
            assert sorted(self.applied[q]) == sorted(self.sent[q]), self.failure(f"{q}: applied {self.applied[q]}, sent {self.sent[q]}")
            root = tree.tree_root(view)
            if root is None:
                assert home.away is None, self.failure(f"{q} has no cohort, its state is in {home.away}")
            else:
                assert home.away is not None and home.away.root == root and not home.away.recalling and not home.away.held, (
                    self.failure(f"{q} belongs in {root}, its home says {home.away}")
                )
                assert q in self.trees[root].members, self.failure(f"{q} belongs in {root}, which does not hold it")
            _, state = self.places(q)[0]
            assert state.view == view, self.failure(f"{q}'s state has view {state.view and state.view.revision}, the latest is {view and view.revision}")

    def teardown(self) -> None:
        """Every run ends at rest, so what is on its way (a state coming home to the messages held
        for it) arrives and is checked. Not after a failed step: its error is the one to see."""
        if sys.exc_info()[0] is None and hasattr(self, "homes"):
            self.settle()
            self.each_state_is_in_one_place_and_holds_what_was_applied()
            self.messages_are_applied_once_in_order()
            self.at_rest_each_state_is_where_its_view_says()

    def failure(self, message: str) -> str:
        tail = "\n  ".join(self.trace[-40:])
        return f"{message}\n  last steps:\n  {tail}"


# Long runs rather than many: a stale handover does harm only in a later round trip of the same
# state, and with 40 steps a broken `take_back` went unnoticed.
HandoverModel.TestCase.settings = settings(
    max_examples=150, stateful_step_count=100, deadline=None, derandomize=True, database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
TestHandoverModel = HandoverModel.TestCase
