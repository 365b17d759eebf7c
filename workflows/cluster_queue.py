"""ClusterQueueWorkflow (`clusterqueue/<name>`): a ClusterQueue's address, and its scheduler while it
has no cohort.

Handlers only put messages in the inbox; `run` takes everything buffered in one workflow task,
runs one scheduling pass and hands the resulting notices to the outbox. When the queue's view names
a cohort, its state moves to the tree's entity (workflows/cohort.py) and this workflow forwards its
messages there, in order (admitflow/admission/cohort_tree.py).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from admitflow import contract, ids
    from admitflow.admission import cluster_queue as cq
    from admitflow.admission import cohort_tree as tree
    from admitflow.admission import metrics
    from admitflow.admission.cluster_queue import (
        ClusterQueueState,
        ClusterQueueView,
        ForceReleaseOutcome,
    )
    from admitflow.admission.cohort_tree import Away, Forwarded, Handover
    from admitflow.messages import (
        ClusterQueueInput,
        ClusterQueueRef,
        ClusterQueueReport,
        Delivery,
        ForceRelease,
        StatusQuery,
    )

    from admitflow.workflows import arguments
    from admitflow.workflows.outbox import Outbox, continue_as_new_suggested
    from admitflow.workflows.queue_owner import (
        MESSAGE_TYPES,
        ForceReleaseCall,
        force_release_answered,
        Forget,
        Owner,
        QueueMessage,
        preemptor_holds_its_queue,
        report,
        signal_of,
    )



@workflow.defn(name=contract.CLUSTER_QUEUE_WORKFLOW)
class ClusterQueueWorkflow:
    @workflow.init
    def __init__(self, input: ClusterQueueInput) -> None:
        self.name = input.name
        # At home, the queue's state; while a tree holds it, a stand-in that keeps the latest view.
        self.state = input.state or ClusterQueueState(name=input.name)
        self.away: Away | None = input.away
        self.handovers = input.handovers
        self.inbox: list[QueueMessage | ForceReleaseCall | Handover] = []
        self.outbox = Outbox(input.undelivered)
        self.owner = Owner(self.outbox, {self.name: self.state} if self.away is None else {})

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
        if self.away is not None:
            return ClusterQueueReport(name=self.name, status=cq.cluster_queue_status(self.state), moved_to=ids.cohort_id(self.away.root))
        return report(self.state, query, self.owner)

    @workflow.query(name=contract.CLUSTER_QUEUE_GAUGES)
    def gauges(self, *payload: Any) -> metrics.Gauges:
        """Answered, not emitted: a gauge set from workflow code stays exported by a worker that no
        longer runs this queue. admitflow's one exporter asks at scrape time (admitflow/gauges.py)."""
        arguments.no_argument(contract.CLUSTER_QUEUE_GAUGES, payload)
        if self.away is not None:
            return metrics.Gauges(cluster_queue=self.name, observations=[], moved_to=ids.cohort_id(self.away.root))
        return metrics.Gauges(cluster_queue=self.name, observations=metrics.cluster_queue_gauges(self.state))

    # --- the loop -----------------------------------------------------------------------------

    @workflow.run
    async def run(self, input: ClusterQueueInput) -> None:
        if self.state.view is None:
            # Started by a workload's enqueue before the catalog's first view arrived.
            view = await workflow.execute_activity(
                contract.FETCH_CLUSTER_QUEUE_VIEW,
                ClusterQueueRef(name=self.name),
                result_type=ClusterQueueView,
                start_to_close_timeout=timedelta(seconds=30),
                summary=f"fetch view of ClusterQueue {self.name}",
            )
            self.inbox.insert(0, view)
        while True:
            # Once continue-as-new is suggested no new delivery starts (the undelivered ones are
            # carried over), so the queue continues within a delivery's time even under a steady
            # stream of messages, long before Temporal's 10,000-signals-per-run limit.
            await workflow.wait_condition(
                lambda: bool(self.inbox)
                or self.outbox.needs_attention(holding=continue_as_new_suggested())
                or (self._quiet() and continue_as_new_suggested())
            )
            self._drain_inbox()
            delivered = self.outbox.step(holding=continue_as_new_suggested())
            if delivered is not None:
                elsewhere = self.owner.forget_missing(delivered)
                if self.away is not None:  # its state, and so the workload's reservation, is in the tree
                    for forget in elsewhere:
                        self._elsewhere(forget)
            self._place()
            if self.owner.needs_pass:
                self.owner.run_pass(preemptor_holds_its_queue)
                self.outbox.step(holding=continue_as_new_suggested())
            if self.away is None:
                workflow.set_current_details(cq.current_details(self.state))
            else:
                workflow.set_current_details(
                    f"in cohort tree {self.away.root}: its queue is scheduled by `{ids.cohort_id(self.away.root)}`"
                )
            if continue_as_new_suggested() and self._quiet():
                await workflow.wait_condition(workflow.all_handlers_finished)
                if self._quiet():
                    workflow.continue_as_new(
                        ClusterQueueInput(
                            name=self.name, state=self.state, undelivered=self.outbox.undelivered(),
                            away=self.away, handovers=self.handovers,
                        )
                    )

    def _quiet(self) -> bool:
        """Nothing half-done: the inbox is empty, the pass is run, and no delivery is in flight."""
        return not self.inbox and not self.outbox.in_flight and not self.owner.needs_pass

    def _drain_inbox(self) -> None:
        now = workflow.now()
        messages, self.inbox = self.inbox, []
        for m in messages:
            if isinstance(m, Handover):
                self._state_returned(m, now)
            elif isinstance(m, ForceReleaseCall):
                if self.away is None:
                    m.outcome = self.owner.force_release(self.name, m.request, now)
                else:
                    m.outcome = ForceReleaseOutcome(moved_to=ids.cohort_id(self.away.root))
            elif self.away is None:
                self.owner.apply(self.name, m, now)
            else:
                if isinstance(m, ClusterQueueView):
                    cq.set_view(self.state, m, now)  # the stand-in keeps the latest, to decide where the state belongs
                self._elsewhere(m)

    def _elsewhere(self, m: QueueMessage | Forget) -> None:
        """A message for the state while a tree holds it: forwarded, or held while it comes back."""
        assert self.away is not None
        forwarded = Forwarded(cluster_queue=self.name, signal=signal_of(m), payload=m.to_wire())
        if self.away.recalling:
            self.away.held.append(forwarded)
        else:
            self._send(contract.FORWARD, forwarded.to_wire())

    def _place(self) -> None:
        """Hand the state to the tree its view names, or ask for it back when the view no longer
        names that tree."""
        root = tree.tree_root(self.state.view)
        if self.away is None:
            if root is None or not workflow.patched("cohorts"):
                return
            self.handovers += 1
            self._send(contract.ADOPT, Handover(cluster_queue=self.name, number=self.handovers, state=self.state).to_wire(), start=root)
            self.away = Away(root=root, number=self.handovers)
            self.state = ClusterQueueState(name=self.name, view=self.state.view, conditions=self.state.conditions)
            self.owner.members.clear()
            self.owner.needs_pass = False
        elif not self.away.recalling and root != self.away.root:
            self._send(contract.RECALL, Handover(cluster_queue=self.name, number=self.away.number).to_wire())
            self.away.recalling = True

    def _state_returned(self, handover: Handover, now) -> None:
        """The tree gave the state back: take it, with the latest view, then what came meanwhile."""
        if not tree.take_back(self.away, handover):
            return
        assert self.away is not None and handover.state is not None
        latest, held = self.state.view, self.away.held
        self.state, self.away = handover.state, None
        self.owner.members[self.name] = self.state
        if latest is not None:
            self.owner.apply(self.name, latest, now)
        for f in held:
            self.owner.apply(self.name, MESSAGE_TYPES[f.signal].model_validate(f.payload), now)
        self.owner.needs_pass = True

    def _send(self, signal: str, payload: dict, start: str | None = None) -> None:
        root = start if start is not None else self.away.root  # type: ignore[union-attr]
        self.outbox.add(Delivery(workflow_id=ids.cohort_id(root), signal=signal, payload=payload, start_cohort=start))
