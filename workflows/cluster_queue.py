"""ClusterQueueWorkflow (`clusterqueue/<name>`): a ClusterQueue's address, and its scheduler while it
has no cohort.

Handlers only put messages in the inbox; `run` takes everything buffered in one workflow task,
runs one scheduling pass and hands the resulting notices to the outbox. When the queue's view names
a cohort, its state moves to the tree's entity (workflows/cohort_tree.py) and this workflow forwards its
messages there, in order: `cohort_tree.Home` decides where messages and the state go, and this
workflow carries out its orders.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from admitflow import contract, ids, memos
    from admitflow.admission import cluster_queue as cq
    from admitflow.admission import cohort_tree as tree
    from admitflow.admission import metrics
    from admitflow.admission.cluster_queue import (
        ClusterQueueState,
        ClusterQueueView,
        ForceReleaseOutcome,
        QueueEntry,
    )
    from admitflow.admission.cohort_tree import Forwarded, Handover, Home
    from admitflow.messages import ClusterQueueInput, ClusterQueueRef
    from admitflow.admission.protocol import ClusterQueueReport, Delivery, ForceRelease, Messages, Receipt, StatusQuery

    from admitflow.workflows import arguments
    from admitflow.workflows.memo import Memo
    from admitflow.workflows.outbox import Outbox, in_task_signals
    from admitflow.workflows.versions import Movable, continue_as_new, continue_as_new_due
    from admitflow.admission.queue_owner import (
        MESSAGE_TYPES,
        Asked,
        ForceReleaseCall,
        Owner,
        QueueMessage,
        Taking,
        receipt_for,
        report,
        signal_of,
    )
    from admitflow.workflows.queue_owner import MEMO_EVERY, Retelling, force_release_answered, memo_of, run_pass


@workflow.defn(name=contract.CLUSTER_QUEUE_WORKFLOW)
class ClusterQueueWorkflow(Movable):
    @workflow.init
    def __init__(self, input: ClusterQueueInput) -> None:
        self.name = input.name
        self.home = Home(input.name, input.state or ClusterQueueState(name=input.name), input.away, input.handovers)
        self.inbox: list[QueueMessage | ForceReleaseCall | Handover | Taking] = []
        self.outbox = Outbox(input.undelivered)
        self.owner = Owner(self.outbox, {self.name: self.home.state} if self.home.away is None else {})
        self.retelling = Retelling()
        self.memo = Memo(every=MEMO_EVERY)
        self.looping = False  # run() has its view and takes its inbox

    # --- messages -----------------------------------------------------------------------------
    # Each takes `*payload` and parses it (workflows/arguments.py): a message that is not what its
    # handler takes is refused with one line, never put in the inbox, where it would fail every
    # workflow task after it.

    @workflow.signal(name=contract.SET_VIEW)
    def set_view(self, *payload: Any) -> None:
        self._take(contract.SET_VIEW, payload)

    @workflow.signal(name=contract.ENQUEUE)
    def enqueue(self, *payload: Any) -> None:
        self._take(contract.ENQUEUE, payload)

    @workflow.signal(name=contract.RELEASE)
    def release(self, *payload: Any) -> None:
        self._take(contract.RELEASE, payload)

    @workflow.signal(name=contract.ADMITTED)
    def admitted(self, *payload: Any) -> None:
        self._take(contract.ADMITTED, payload)

    @workflow.signal(name=contract.REPRIORITIZE)
    def reprioritize(self, *payload: Any) -> None:
        self._take(contract.REPRIORITIZE, payload)

    @workflow.signal(name=contract.CLUSTER_QUEUE_GATE_ANSWER)
    def pods_ready_gate(self, *payload: Any) -> None:
        self._take(contract.CLUSTER_QUEUE_GATE_ANSWER, payload)

    @workflow.signal(name=contract.FORWARD)
    def forward(self, *payload: Any) -> None:
        """What reached the cohort tree after it gave this queue's state back."""
        m = arguments.signal(contract.FORWARD, payload, Forwarded)
        if m is not None and m.cluster_queue == self.name and m.signal in MESSAGE_TYPES:
            self._take(m.signal, (m.payload,))

    @workflow.signal(name=contract.RETURN_STATE)
    def return_state(self, *payload: Any) -> None:
        handover = arguments.signal(contract.RETURN_STATE, payload, Handover)
        if handover is not None:
            self.inbox.append(handover)

    def _take(self, signal: str, payload: tuple[Any, ...]) -> None:
        m = arguments.signal(signal, payload, MESSAGE_TYPES[signal])
        if m is not None:
            self.inbox.append(m)

    @workflow.update(name=contract.TAKE_MESSAGES)
    async def take_messages(self, *payload: Any) -> Receipt:
        """Workloads' messages, several at once (activities/mail.py). An update, not signals: the
        server holds back the updates that reach a run while it continues as new and gives them to
        the next, where signals arriving then refuse its continue-as-new (temporal#1289) and stall
        the queue for as long as they keep coming. Each is taken as the signal it names would be.
        The receipt names the cohort tree holding the state, if one does; when an enqueue asked for
        its answer, it comes once the pass that takes it has run, in this workflow task."""
        messages = arguments.messages(payload, contract.MAILED_SIGNALS)
        if not self.looping or not any(m.answer for _, m in messages):
            # Before its loop runs, the queue is fetching its view, which asks the catalog: a workflow
            # task on the engine's task queue, whose slots the waiting senders may hold.
            for _, m in messages:
                self._take(m.signal, (m.payload,))
            return Receipt(holder=self._holder())
        asked = Asked(receipt=receipt_for(messages))
        for i, m in messages:
            parsed = arguments.signal(m.signal, (m.payload,), MESSAGE_TYPES[m.signal])
            if parsed is not None:
                self.inbox.append(Taking(message=parsed, asked=asked, index=i, answer=m.answer))
        self.owner.wait_for(asked)
        await workflow.wait_condition(lambda: asked.done)
        return asked.receipt

    @take_messages.validator
    def _refuse_what_is_not_messages(self, *payload: Any) -> None:
        arguments.update(contract.TAKE_MESSAGES, payload, Messages)

    @workflow.update(name=contract.FORCE_RELEASE)
    async def force_release(self, *payload: Any) -> ForceReleaseOutcome:
        """An update rather than a signal: the operator learns what was given back (or that nothing
        was held, when it is repeated). It waits in the inbox like every message, in order. While
        the cohort tree holds the queue, the answer says where to ask."""
        return await force_release_answered(self.inbox, payload)

    @force_release.validator
    def _refuse_what_is_not_a_force_release(self, *payload: Any) -> None:
        arguments.update(contract.FORCE_RELEASE, payload, ForceRelease)

    @workflow.query(name=contract.CLUSTER_QUEUE_STATUS)
    def status(self, *payload: Any) -> ClusterQueueReport:
        query = arguments.query(contract.CLUSTER_QUEUE_STATUS, payload, StatusQuery, optional=True)
        if self.home.away is not None:
            return ClusterQueueReport(
                name=self.name, status=cq.cluster_queue_status(self.home.state), moved_to=ids.cohort_id(self.home.away.root)
            )
        return report(self.home.state, query, self.owner)

    @workflow.query(name=contract.CLUSTER_QUEUE_GAUGES)
    def gauges(self, *payload: Any) -> metrics.Gauges:
        """Answered, not emitted: a gauge set from workflow code stays exported by a worker that no
        longer runs this queue. admitflow's one exporter asks at scrape time (admitflow/gauges.py)."""
        arguments.no_argument(contract.CLUSTER_QUEUE_GAUGES, payload)
        if self.home.away is not None:
            return metrics.Gauges(cluster_queue=self.name, observations=[], moved_to=ids.cohort_id(self.home.away.root))
        return metrics.Gauges(cluster_queue=self.name, observations=metrics.cluster_queue_gauges(self.home.state))

    # --- the loop -----------------------------------------------------------------------------

    @workflow.run
    async def run(self, input: ClusterQueueInput) -> None:
        if self.home.state.view is None and not any(isinstance(m, ClusterQueueView) for m in self.inbox):
            # Started by a workload's enqueue before the catalog's first view arrived (a queue the
            # catalog starts gets its view with the start). Until the view comes, the queue takes
            # enqueues without answering them (`looping`).
            view = await workflow.execute_activity(
                contract.FETCH_CLUSTER_QUEUE_VIEW,
                ClusterQueueRef(name=self.name),
                result_type=ClusterQueueView,
                start_to_close_timeout=timedelta(seconds=30),
                summary=f"fetch view of ClusterQueue {self.name}",
            )
            self.inbox.insert(0, view)
        self.looping = True
        while True:
            # Once continue-as-new is suggested no new delivery starts (the undelivered ones are
            # carried over), so the queue continues within a delivery's time even under a steady
            # stream of messages, long before Temporal's 10,000-signals-per-run limit.
            await workflow.wait_condition(
                lambda: bool(self.inbox)
                or self.outbox.needs_attention(holding=continue_as_new_due())
                or (self._quiet() and continue_as_new_due())
                or self.retelling.woke()
                or self.memo.woke()
            )
            now = workflow.now()
            self._drain_inbox(now)
            delivered = self.outbox.step(holding=continue_as_new_due(), in_task=self._in_task)
            if delivered is not None:
                self._execute(self.home.gone(self.owner.forget_missing(delivered)), now)
            self._execute(self.home.place(), now)
            if self.owner.pass_due(self.outbox):
                run_pass(self.owner)
                self.outbox.step(holding=continue_as_new_due(), in_task=self._in_task)
            self.owner.answer_all(self._holder())
            # After the pass, which may have answered reservations; what it tells again goes out with
            # the next round of the loop (the outbox then needs attention).
            self.retelling.step(self.owner)
            self.memo.publish(self._memo)
            if self.home.away is None:
                workflow.set_current_details(cq.current_details(self.home.state))
            else:
                root = self.home.away.root
                workflow.set_current_details(f"in cohort tree {root}: its queue is scheduled by `{ids.cohort_id(root)}`")
            if continue_as_new_due() and self._quiet():
                # An update that waits for its answer (take_messages, force_release) finishes only once
                # the loop has taken what it brought: go round again then.
                await workflow.wait_condition(lambda: workflow.all_handlers_finished() or bool(self.inbox))
                if self._quiet():
                    continue_as_new(
                        ClusterQueueInput(
                            name=self.name, state=self.home.state, undelivered=self.outbox.undelivered(),
                            away=self.home.away, handovers=self.home.handovers,
                        )
                    )

    def _in_task(self, batch: list[Delivery]) -> bool:
        return self._forwarding() or in_task_signals(batch)

    def _forwarding(self) -> bool:
        """While its state is in a cohort tree, the home's deliveries are a few messages forwarded to
        the tree: they go in the task that decides them (Outbox.step), not by an activity of their own."""
        return self.home.away is not None

    def _memo(self) -> dict[str, Any]:
        """Its queue's status, LocalQueues and gauges, or, while its cohort tree holds its state,
        where they are."""
        if self.home.away is not None:
            return {memos.MOVED_TO: ids.cohort_id(self.home.away.root)}
        return memo_of(self.owner)

    def _holder(self) -> str | None:
        """The cohort tree that holds this queue's state and takes its messages itself, if one does."""
        away = self.home.away
        return ids.cohort_id(away.root) if away is not None and not away.recalling else None

    def _quiet(self) -> bool:
        """Nothing half-done: the inbox is empty, the pass is run, and no delivery is in flight."""
        return not self.inbox and not self.outbox.in_flight and not self.owner.pass_due(self.outbox)

    def _drain_inbox(self, now: datetime) -> None:
        messages, self.inbox = self.inbox, []
        for m in messages:
            if isinstance(m, Handover):
                self._execute(self.home.returned(m), now)
            elif isinstance(m, ForceReleaseCall):
                if self.home.away is None:
                    m.outcome = self.owner.force_release(self.name, m.request, now)
                else:
                    m.outcome = ForceReleaseOutcome(moved_to=ids.cohort_id(self.home.away.root))
            elif isinstance(m, Taking):
                self.owner.wait_for(m.asked)
                if m.answer and isinstance(m.message, QueueEntry) and self.home.away is None:
                    self.owner.answer(m.asked, m.index, m.message)  # else its tree tells it, by signal
                self._execute(self.home.receive(signal_of(m.message), m.message, now), now)
            else:
                self._execute(self.home.receive(signal_of(m), m, now), now)

    def _execute(self, commands: list[tree.HomeCommand], now: datetime) -> None:
        """Carry out the home's orders, in order: sends go to the outbox, the state to the Owner."""
        for c in commands:
            if isinstance(c, tree.Send):
                self.outbox.add(Delivery(workflow_id=c.workflow_id, signal=c.signal, payload=c.payload, start_cohort=c.start_cohort))
            elif isinstance(c, tree.Apply):
                self.owner.apply(self.name, c.message, now)
            elif isinstance(c, tree.Resume):
                self.owner.members[self.name] = c.state
                if c.view is not None:
                    self.owner.apply(self.name, c.view, now)
                for f in c.held:
                    self.owner.apply(self.name, MESSAGE_TYPES[f.signal].model_validate(f.payload), now)
                self.owner.needs_pass = True
            else:
                self.owner.members.clear()
                self.owner.needs_pass = False
