"""The ClusterQueues one scheduling entity holds, and what it tells their workloads and the gate.

A ClusterQueue's home (`clusterqueue/<name>`) owns its own queue while it has no cohort; a cohort
tree's entity (`cohort/<root>`) owns every queue of its tree (`admission.cohort_tree`). Both apply the
queues' messages, run one scheduling pass over all they own, and hand the notices to their outbox,
through this one class, `Owner`; the workflows (workflows/cluster_queue.py, workflows/cohort_tree.py,
workflows/queue_owner.py) carry out what it decides: they deliver what it puts in their outbox and
emit what it measured.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from admitflow import contract, ids
from admitflow.admission import cluster_queue as cq
from admitflow.admission import fair_sharing, metrics, scheduler
from admitflow.admission.cluster_queue import ClusterQueueState, ClusterQueueView, ForceReleaseOutcome, Notice, QueueEntry, Reservation
from admitflow.admission.pods_ready_gate import GateAnswer
from admitflow.admission.protocol import (
    Admitted,
    GateRequest,
    GateSettled,
    GateUse,
    PendingWorkload,
    ReleaseRequest,
    Reprioritize,
    ReservingWorkload,
)
from admitflow.admission.requests import format_requests
from admitflow.admission.protocol import (
    ClusterQueueReport,
    Delivery,
    DeliveryReport,
    ForceRelease,
    Message,
    Receipt,
    StatusQuery,
)
from admitflow.wire import WireModel


class Sink(Protocol):
    """Where the Owner puts what is to be sent (the workflow's outbox)."""

    def add(self, delivery: Delivery) -> None: ...

    @property
    def undelivered_or_in_flight(self) -> bool: ...


# Signal names a notice is delivered under, chosen to read well in a workload's history.
NOTICE_SIGNALS = {
    "reserved": contract.QUOTA_RESERVED,
    "pending": contract.PENDING_STATUS,
    "dequeued": contract.DEQUEUED,
    "evicted": contract.EVICTED,
    "checks": contract.ADMISSION_CHECKS_CHANGED,
}


class Forget(WireModel):
    """That run of a workload no longer runs (a notice found no workflow): nothing will release for it."""

    key: str
    uid: str
    cluster_queue: str = ""


# What each message a queue takes is, by the signal it came as (forwarded between home and tree).
MESSAGE_TYPES: dict[str, type[WireModel]] = {
    contract.SET_VIEW: ClusterQueueView,
    contract.ENQUEUE: QueueEntry,
    contract.RELEASE: ReleaseRequest,
    contract.ADMITTED: Admitted,
    contract.REPRIORITIZE: Reprioritize,
    contract.CLUSTER_QUEUE_GATE_ANSWER: GateAnswer,
    contract.FORGET: Forget,
}
QueueMessage = ClusterQueueView | QueueEntry | ReleaseRequest | Admitted | Reprioritize | GateAnswer | Forget


def signal_of(m: QueueMessage) -> str:
    return next(name for name, t in MESSAGE_TYPES.items() if type(m) is t)


@dataclass
class ForceReleaseCall:
    """An operator's force-release waiting in the inbox; the loop writes its outcome."""

    request: ForceRelease
    outcome: ForceReleaseOutcome | None = None


@dataclass
class Asked:
    """A `take_messages` update whose enqueues asked for their answer (`Message.answer`), waiting
    until the loop that takes its messages has run its pass: `waiting` names the entries it answers,
    by their place in the update, and the loop fills in the receipt."""

    receipt: Receipt
    waiting: dict[tuple[str, str, int], int] = field(default_factory=dict)
    done: bool = False


@dataclass
class Taking:
    """One message of such an update, in the inbox in its turn (a tree's: the `Forwarded` one)."""

    message: Any
    asked: Asked
    index: int
    answer: bool


def receipt_for(messages: list[tuple[int, Any]]) -> Receipt:
    """An empty receipt with room for an answer to each message."""
    return Receipt(answers=[[] for _ in range(max((i for i, _ in messages), default=-1) + 1)])


class Owner:
    def __init__(self, outbox: Sink, members: dict[str, ClusterQueueState], root: str | None = None) -> None:
        self.outbox = outbox
        self.members = members
        self.root = root
        self.needs_pass = True
        # The last pass stopped at scheduler.MAX_RESERVATIONS: the next one waits until the outbox
        # has sent what it decided (`pass_due`), so each task stays short and a continue-as-new
        # never carries more than about that many notices.
        self.cut_short = False
        self.requeue = False
        # The tree's set of queues changed since the last pass: what pending workloads were told of
        # the quota they could ever have (ExceedsMaxQuota) may no longer hold.
        self.members_changed = False
        # Entries whose enqueue asked for its answer in this task: the pending notices the next pass
        # decides for them go in the answer, not to the outbox (as does the reservation a queue here
        # already holds for that ticket: `answer`).
        self.answering: dict[tuple[str, str, int], list[Notice]] = {}
        self.asked: list[Asked] = []
        # What its passes measured (metrics.admission_attempt), for the workflow to emit.
        self.observed: list[metrics.Observation] = []

    def apply(self, name: str, m: QueueMessage, now: datetime) -> None:
        state = self.members[name]
        if isinstance(m, ClusterQueueView):
            old = state.view
            if cq.set_view(state, m, now):
                state.reparameterized = sorted({*state.reparameterized, *cq.changed_parameters(old, m)})
                state.pods_ready_changed = state.pods_ready_changed or cq.changed_pods_ready(old, m)
                cq.notices_outdated(state)
            self._freed()
        elif isinstance(m, QueueEntry):
            held = state.reservations.get(m.key)
            cq.enqueue(state, m)
            self.settle_freed_grant(state, held)
        elif isinstance(m, Admitted):
            cq.mark_admitted(state, m.key, m.uid, m.ticket)
            return  # usage for the scheduler is unchanged
        elif isinstance(m, Reprioritize):
            if not cq.reprioritize(state, m.key, m.uid, m.ticket, m.priority):
                return
        elif isinstance(m, GateAnswer):
            cq.gate_answer(state, m.granted)
        elif isinstance(m, Forget):
            if cq.forget(state, m.key, m.uid):
                self._freed()
        else:
            held = state.reservations.get(m.key)
            if cq.release(state, m.key, m.uid, m.ticket):
                self.settle_freed_grant(state, held)
                self._freed()
        self.needs_pass = True

    def settle_freed_grant(self, state: ClusterQueueState, held: Reservation | None) -> None:
        """Tell the gate of a reservation made with its grant that a release or an enqueue freed
        (`cluster_queue.grant_freed`)."""
        if cq.grant_freed(state, held):
            self.tell_gate(contract.GATE_SETTLED, GateSettled(key=held.key, uid=held.uid, ticket=held.ticket))

    def force_release(self, name: str, request: ForceRelease, now: datetime) -> ForceReleaseOutcome:
        outcome, notices = cq.force_release(self.members[name], request.key, request.message, now)
        if outcome.released:
            if outcome.gated:
                self.tell_gate(contract.GATE_SETTLED, GateSettled(key=request.key, uid=outcome.uid, ticket=outcome.ticket))
            self.notify(notices, name, now)
            self._freed()
            self.needs_pass = True
        return outcome

    def forget_missing(self, report: DeliveryReport) -> list[Forget]:
        """A workload that no longer runs cannot give its quota back itself. Only the run the
        notice was for is forgotten: a new run of the same name may have enqueued meanwhile.
        Returns what no queue here holds (its queue's state is elsewhere)."""
        elsewhere = []
        for d in report.missing:
            key, uid = ids.workload_key(d.workflow_id), d.payload.get("uid")
            if key is None or uid is None:
                continue
            self.needs_pass = True
            name = self.holder(key, uid)
            if name is None:
                elsewhere.append(Forget(key=key, uid=uid, cluster_queue=d.cluster_queue or ""))
                continue
            held = self.members[name].reservations.get(key)
            if held is not None and held.uid == uid and held.gated:
                self.tell_gate(contract.GATE_SETTLED, GateSettled(key=key, uid=uid, ticket=held.ticket))
            if cq.forget(self.members[name], key, uid):
                self._freed()
        return elsewhere

    def weighted_share(self, name: str, kind: str = "cq") -> int | None:
        """Kueue's `status.fairSharing.weightedShare` of a ClusterQueue held here (`kind` "cq") or
        a Cohort of this tree ("cohort") when fair sharing is on, else None."""
        tree, groups, strategies = scheduler.quota_tree(list(self.members.values()), self.root)
        if strategies is None or (kind == "cq" and name not in groups):
            return None
        return fair_sharing.weighted_share(tree, name, kind)

    def weighted_shares(self) -> tuple[dict[str, int], dict[str, int]] | None:
        """With fair sharing on, the weighted share of each ClusterQueue held here that is in the
        tree and of each Cohort of the tree, from one walk of it; else None."""
        tree, groups, strategies = scheduler.quota_tree(list(self.members.values()), self.root)
        if strategies is None:
            return None
        queues = {name: fair_sharing.weighted_share(tree, name, "cq") for name in self.members if name in groups}
        return queues, {cohort: fair_sharing.weighted_share(tree, cohort, "cohort") for cohort in tree.cohorts}

    def holder(self, key: str, uid: str) -> str | None:
        for name, state in self.members.items():
            held = state.reservations.get(key)
            queued = state.pending.get(key)
            if (held is not None and held.uid == uid) or (queued is not None and queued.uid == uid):
                return name
        return None

    def pass_due(self, outbox: Sink) -> bool:
        """A pass is needed and may run now."""
        return self.needs_pass and not (self.cut_short and outbox.undelivered_or_in_flight)

    def run_pass(self, now: datetime) -> None:
        self.needs_pass = False
        if self.requeue:
            self.requeue = False
            for state in self.members.values():
                cq.requeue_inadmissible(state)
        if self.members_changed:
            self.members_changed = False
            for state in self.members.values():
                cq.notices_outdated(state)
        had_heads = metrics.has_workloads_to_try(self.members.values())
        started = metrics.pass_clock()
        results = scheduler.schedule(list(self.members.values()), now, self.root)
        took = metrics.pass_clock() - started
        self.cut_short = self.needs_pass = any(r.cut_short for r in results.values())
        self.observed += metrics.admission_attempt(had_heads, sum(len(r.reserved) for r in results.values()), took)
        for name, result in results.items():
            self.notify(result.notices, name, now)
            self._gate(name, result)

    def _freed(self) -> None:
        """Quota or configuration changed: in a cohort, every queue's set-aside workloads may now fit
        (one queue's own rules already look at its own again). Done once, before the next pass, not
        once per message: a task may bring hundreds of releases."""
        if len(self.members) > 1:
            self.requeue = True

    def requeue_all(self) -> None:
        """The tree's set of queues changed (a queue adopted or given back): every queue's set-aside
        workloads are looked at again, and what each was told is evaluated afresh, since a queue's
        maximum capacity in its cohort moved with the lending limits of the others (Kueue requeues a
        cohort's inadmissible workloads when a ClusterQueue joins or leaves it)."""
        self.requeue = True
        self.members_changed = True

    def _gate(self, name: str, result: scheduler.PassResult) -> None:
        """blockAdmission: tell the gate whom its grant went to, ask for the next, or hand one back."""
        if result.gate_used is not None:  # before a new request: the gate frees the grant first
            r = result.gate_used
            self.tell_gate(contract.GATE_USED, GateUse(cluster_queue=name, key=r.key, uid=r.uid, ticket=r.ticket))
        if result.ask_gate:
            self.tell_gate(contract.GATE_REQUEST, GateRequest(cluster_queue=name))
        if result.return_grant:
            self.tell_gate(contract.GATE_RETURNED, GateRequest(cluster_queue=name))

    def tell_gate(self, signal: str, payload: WireModel) -> None:
        self.outbox.add(
            Delivery(workflow_id=ids.PODS_READY_GATE_ID, signal=signal, payload=payload.to_wire(), start_pods_ready_gate=True)
        )

    def answer(self, asked: Asked, index: int, entry: QueueEntry) -> None:
        """`entry`, applied here, asked for its answer: its pending reason from the next pass goes to
        `asked`; or, when a queue here has reserved that ticket already (the run was reset in Temporal
        to before its reservation notice, and enqueues the ticket again), that reservation's notice."""
        key = (entry.key, entry.uid, entry.ticket)
        self.answering[key] = self._told_before(scheduler.reservation_told, *key)
        asked.waiting[key] = index

    def _told_before(self, told: Callable[[ClusterQueueState, str, str, int], Notice | None], key: str, uid: str, ticket: int) -> list[Notice]:
        """What the queues here told that ticket before (`scheduler.reservation_told`, `pending_told`),
        each notice naming its queue, as `notify` names it."""
        return [
            n.model_copy(update={"cluster_queue": name})
            for name, n in ((name, told(s, key, uid, ticket)) for name, s in self.members.items()) if n is not None
        ]

    def wait_for(self, asked: Asked) -> None:
        if asked not in self.asked:
            self.asked.append(asked)

    def answer_all(self, holder: str | None = None) -> None:
        """After the pass (or in a task without one): every update waiting here gets its receipt, with
        the pending notices of its entries (or the reservation held for one already), or what an entry
        was told before (its enqueue came again)."""
        for asked in self.asked:
            for (key, uid, ticket), index in asked.waiting.items():
                notices = self.answering.get((key, uid, ticket)) or self._told_before(scheduler.pending_told, key, uid, ticket)
                asked.receipt.answers[index] = [Message(signal=NOTICE_SIGNALS[n.kind], payload=n.to_wire()) for n in notices]
            asked.receipt.holder = holder
            asked.done = True
        self.asked, self.answering = [], {}

    def notify(self, notices: list[Notice], cluster_queue: str, now: datetime) -> None:
        for n in notices:
            # It names the queue: a workload that never heard back from its very first enqueue (the
            # task that ran it timed out) has no other way to know where to give that ticket back.
            n = n.model_copy(update={"cluster_queue": cluster_queue})
            answering = self.answering.get((n.key, n.uid, n.ticket))
            if answering is not None and scheduler.answered(self.members[cluster_queue], n, now):
                answering.append(n)
                continue
            self.outbox.add(
                Delivery(
                    workflow_id=ids.workload_id(n.key), signal=NOTICE_SIGNALS[n.kind], payload=n.to_wire(),
                    cluster_queue=cluster_queue,
                )
            )

    def retell(self, now: datetime) -> None:
        """Reservations told only in an enqueue's answer whose workload has said nothing of them for
        scheduler.RETELL_AFTER are told again, by signal (`scheduler.retell_answered`). Only once the
        outbox has sent what came before, and at most scheduler.MAX_RESERVATIONS at a time, as a pass
        reserves: a continue-as-new never carries many more notices than that (the rest stay due)."""
        if self.outbox.undelivered_or_in_flight:
            return
        room = scheduler.MAX_RESERVATIONS
        for name, state in self.members.items():
            told = scheduler.retell_answered(state, now, room)
            room -= len(told)
            self.notify(told, name, now)

    def next_retell(self) -> datetime | None:
        return min((t for t in (scheduler.next_retell(s) for s in self.members.values()) if t is not None), default=None)


def report(state: ClusterQueueState, query: StatusQuery, owner: Owner | None = None) -> ClusterQueueReport:
    """The answer to a ClusterQueue's status query: its status, the page of pending workloads asked
    for, what holds quota, its LocalQueues and its events. With fair sharing on, its weighted share
    in the tree of the `owner` holding it."""
    per_lq: dict[str, int] = {}
    pending = []
    for position, e in enumerate(state.pending):
        lq_position = per_lq.get(e.local_queue_key, 0)
        per_lq[e.local_queue_key] = lq_position + 1
        if query.workload is not None:
            if e.key != query.workload:
                continue
        elif not query.offset <= position < query.offset + query.limit:
            continue
        ns, name = e.key.split("/", 1)
        pending.append(
            PendingWorkload(
                name=name, namespace=ns, local_queue_name=e.local_queue, priority=e.priority,
                position_in_cluster_queue=position, position_in_local_queue=lq_position,
                queued_since=e.timestamp,
            )
        )
    reserving = [
        ReservingWorkload(
            name=r.key.split("/", 1)[1], namespace=r.key.split("/", 1)[0], local_queue_name=r.local_queue,
            priority=r.priority, admitted=r.admitted, reserved_since=r.reserved_at,
            flavors={ps.name: ps.flavors for ps in r.assignment.pod_sets},
            usage=format_requests(r.totals()),
        )
        for r in sorted(state.reservations.values(), key=lambda r: r.key)
    ]
    return ClusterQueueReport(
        name=state.name,
        status=cq.cluster_queue_status(state, owner.weighted_share(state.name) if owner is not None else None),
        pending=pending,
        reserving=reserving,
        local_queues=cq.local_queue_statuses(state),
        events=list(state.events),
    )

