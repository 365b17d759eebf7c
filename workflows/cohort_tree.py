"""CohortWorkflow (`cohort/<root>`): the one writer of a cohort tree's scheduling.

Every ClusterQueue of the tree hands its state here (admitflow/admission/cohort_tree.py); one pass
schedules them together against their shared quota, so no two decisions about the tree's quota
race. The queues' homes forward their messages here (several at once, as the update
`take_messages`: activities/mail.py); notices go straight to the workloads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from admitflow import contract, ids
    from admitflow.admission import cluster_queue as cq
    from admitflow.admission import cohort_tree as tree
    from admitflow.admission import metrics
    from admitflow.admission.cluster_queue import ForceReleaseOutcome
    from admitflow.admission.cohort_tree import CohortTreeState, Forwarded, Handover
    from admitflow.api.cohort import CohortStatus, FairSharingStatus
    from admitflow.messages import ClusterQueueRef, CohortInput, CohortRef
    from admitflow.admission.protocol import ClusterQueueReport, Delivery, ForceRelease, Messages, Receipt, StatusQuery

    from admitflow.workflows import arguments
    from admitflow.workflows.memo import Memo
    from admitflow.workflows.outbox import Outbox, in_task_signals
    from admitflow.workflows.versions import Movable, continue_as_new, continue_as_new_due
    from admitflow.admission.queue_owner import MESSAGE_TYPES, Asked, ForceReleaseCall, Owner, Taking, receipt_for, report
    from admitflow.workflows.queue_owner import MEMO_EVERY, Retelling, force_release_answered, memo_of, run_pass


@dataclass
class _Recall:
    handover: Handover


@workflow.defn(name=contract.COHORT_WORKFLOW)
class CohortWorkflow(Movable):
    @workflow.init
    def __init__(self, input: CohortInput) -> None:
        self.state = input.state or CohortTreeState(root=input.root)
        self.inbox: list[Handover | _Recall | Forwarded | ForceReleaseCall | Taking] = []
        self.outbox = Outbox(input.undelivered)
        self.owner = Owner(self.outbox, self.state.members, self.state.root)
        self.retelling = Retelling()
        self.memo = Memo(every=MEMO_EVERY)

    @workflow.signal(name=contract.ADOPT)
    def adopt(self, *payload: Any) -> None:
        handover = arguments.signal(contract.ADOPT, payload, Handover)
        if handover is not None:
            self.inbox.append(handover)

    @workflow.signal(name=contract.RECALL)
    def recall(self, *payload: Any) -> None:
        handover = arguments.signal(contract.RECALL, payload, Handover)
        if handover is not None:
            self.inbox.append(_Recall(handover))

    @workflow.signal(name=contract.FORWARD)
    def forward(self, *payload: Any) -> None:
        m = arguments.signal(contract.FORWARD, payload, Forwarded)
        if m is not None and m.signal in MESSAGE_TYPES:
            self.inbox.append(m)

    @workflow.update(name=contract.TAKE_MESSAGES)
    async def take_messages(self, *payload: Any) -> Receipt:
        """What the queues' homes forward, and what workloads send their queue straight here once
        its home named this tree (activities/mail.py), several at once, each taken as its `forward`
        signal would be. An update, not signals, for the reason a ClusterQueue takes its workloads'
        messages so (workflows/cluster_queue.py): a stream of signals keeps a run from continuing
        as new, and every queue of the tree speaks through this one workflow. The receipt names the
        messages for a queue this tree does not hold (they go on to its home); when an enqueue asked
        for its answer, it comes once the pass that takes it has run, in this workflow task."""
        forwards = [(i, m, arguments.signal(contract.FORWARD, (m.payload,), Forwarded))
                    for i, m in arguments.messages(payload, contract.FORWARDED_SIGNALS)]
        forwards = [(i, m, f) for i, m, f in forwards if f is not None and f.signal in MESSAGE_TYPES]
        if not any(m.answer for _, m, _ in forwards):
            for _, _, f in forwards:
                self.inbox.append(f)
            return Receipt(bounced=[i for i, _, f in forwards if f.cluster_queue not in self.state.members])
        asked = Asked(receipt=receipt_for([(i, m) for i, m, _ in forwards]))
        for i, m, f in forwards:
            self.inbox.append(Taking(message=f, asked=asked, index=i, answer=m.answer))
        self.owner.wait_for(asked)
        await workflow.wait_condition(lambda: asked.done)
        return asked.receipt

    @take_messages.validator
    def _refuse_what_is_not_messages(self, *payload: Any) -> None:
        arguments.update(contract.TAKE_MESSAGES, payload, Messages)

    @workflow.update(name=contract.FORCE_RELEASE)
    async def force_release(self, *payload: Any) -> ForceReleaseOutcome:
        return await force_release_answered(self.inbox, payload)

    @force_release.validator
    def _refuse_what_is_not_a_force_release(self, *payload: Any) -> None:
        arguments.update(contract.FORCE_RELEASE, payload, ForceRelease)

    @workflow.query(name=contract.CLUSTER_QUEUE_STATUS)
    def status(self, *payload: Any) -> ClusterQueueReport:
        query = arguments.query(contract.CLUSTER_QUEUE_STATUS, payload, StatusQuery, optional=True)
        state = self.state.members.get(query.cluster_queue or "")
        if state is None:
            # Not here (given back, or not handed over yet): its home knows.
            return ClusterQueueReport(
                name=query.cluster_queue or "", status=cq.cluster_queue_status(cq.ClusterQueueState(name=query.cluster_queue or "")),
                moved_to=ids.cluster_queue_id(query.cluster_queue or ""),
            )
        return report(state, query, self.owner)

    @workflow.query(name=contract.CLUSTER_QUEUE_GAUGES)
    def gauges(self, *payload: Any) -> metrics.Gauges:
        ref = arguments.query(contract.CLUSTER_QUEUE_GAUGES, payload, ClusterQueueRef)
        state = self.state.members.get(ref.name)
        if state is None:
            return metrics.Gauges(cluster_queue=ref.name, observations=[], moved_to=ids.cluster_queue_id(ref.name))
        return metrics.Gauges(cluster_queue=ref.name, observations=metrics.cluster_queue_gauges(state))

    @workflow.query(name=contract.COHORT_STATUS)
    def cohort_status(self, *payload: Any) -> CohortStatus:
        """Kueue's Cohort status: `fairSharing.weightedShare` with fair sharing on, else nothing."""
        ref = arguments.query(contract.COHORT_STATUS, payload, CohortRef)
        share = self.owner.weighted_share(ref.name, kind="cohort")
        return CohortStatus(fair_sharing=FairSharingStatus(weighted_share=share) if share is not None else None)

    @workflow.run
    async def run(self, input: CohortInput) -> None:
        while True:
            await workflow.wait_condition(
                lambda: bool(self.inbox)
                or self.outbox.needs_attention(holding=self._ending())
                or (self._quiet() and self._ending())
                or self.retelling.woke()
                or self.memo.woke()
            )
            self._drain_inbox()
            delivered = self.outbox.step(holding=self._ending(), in_task=in_task_signals)
            if delivered is not None:
                for forget in self.owner.forget_missing(delivered):
                    # Its queue left this tree after the notice went out: its home passes it on.
                    if forget.cluster_queue:
                        self._bounce(Forwarded(cluster_queue=forget.cluster_queue, signal=contract.FORGET, payload=forget.to_wire()))
            if self.owner.pass_due(self.outbox):
                run_pass(self.owner)
                self.outbox.step(holding=self._ending(), in_task=in_task_signals)
            self.owner.answer_all()
            # After the pass, which may have answered reservations; what it tells again goes out with
            # the next round of the loop (the outbox then needs attention).
            self.retelling.step(self.owner)
            self.memo.publish(lambda: memo_of(self.owner))
            workflow.set_current_details(tree.current_details(self.state))
            if self._ending() and self._quiet():
                # An update that waits for its answer (take_messages, force_release) finishes only once
                # the loop has taken what it brought: go round again then.
                await workflow.wait_condition(lambda: workflow.all_handlers_finished() or bool(self.inbox))
                if self._quiet():
                    continue_as_new(
                        CohortInput(root=self.state.root, state=self.state, undelivered=self.outbox.undelivered())
                    )

    def _ending(self) -> bool:
        """Time to continue as new: when the server suggests it. Not sooner: under a dense stream of
        forwarded messages the server refuses a continue-as-new while signals keep arriving, and
        the outbox is held meanwhile (measured: a bound on this run's passes made the tree stall)."""
        return continue_as_new_due()

    def _quiet(self) -> bool:
        return not self.inbox and not self.outbox.in_flight and not self.owner.pass_due(self.outbox)

    def _drain_inbox(self) -> None:
        now = workflow.now()
        messages, self.inbox = self.inbox, []
        for m in messages:
            if isinstance(m, Handover):
                self._execute(tree.adopted(self.state, m), now)
            elif isinstance(m, _Recall):
                self._execute(tree.recalled(self.state, m.handover), now)
            elif isinstance(m, ForceReleaseCall):
                name = m.request.cluster_queue or ""
                if name in self.state.members:
                    m.outcome = self.owner.force_release(name, m.request, now)
                else:
                    m.outcome = ForceReleaseOutcome(moved_to=ids.cluster_queue_id(name))
            elif isinstance(m, Taking):
                self.owner.wait_for(m.asked)
                f = m.message
                if f.cluster_queue not in self.state.members:
                    m.asked.receipt.bounced.append(m.index)
                elif m.answer and f.signal == contract.ENQUEUE:
                    entry = arguments.signal(contract.ENQUEUE, (f.payload,), MESSAGE_TYPES[contract.ENQUEUE])
                    if entry is not None:
                        self.owner.answer(m.asked, m.index, entry)
                self._execute(tree.forwarded(self.state, f), now)
            else:
                self._execute(tree.forwarded(self.state, m), now)

    def _execute(self, commands: list[tree.TreeCommand], now) -> None:
        """Carry out the tree's orders, in order: sends go to the outbox, messages to the Owner."""
        for c in commands:
            if isinstance(c, tree.Send):
                self._send(c.workflow_id, c.signal, c.payload)
            elif isinstance(c, tree.Apply):
                m = c.message
                self.owner.apply(m.cluster_queue, MESSAGE_TYPES[m.signal].model_validate(m.payload), now)
            else:
                self.owner.needs_pass = True
                self.owner.requeue_all()

    def _bounce(self, m: Forwarded) -> None:
        """A message for a queue this tree does not hold (it was given back): to its home."""
        home = tree.bounce(m)
        self._send(home.workflow_id, home.signal, home.payload)

    def _send(self, workflow_id: str, signal: str, payload: dict) -> None:
        self.outbox.add(Delivery(workflow_id=workflow_id, signal=signal, payload=payload))
