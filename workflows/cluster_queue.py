"""ClusterQueueWorkflow (`clusterqueue/<name>`): the one place where workloads compete for quota.

Handlers only put messages in the inbox; `run` takes everything buffered in one workflow task,
runs one scheduling pass and hands the resulting notices to the outbox.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from admitflow import contract, ids
    from admitflow.admission import cluster_queue as cq
    from admitflow.admission import metrics
    from admitflow.admission import scheduler
    from admitflow.admission.cluster_queue import (
        ClusterQueueState,
        ClusterQueueView,
        ForceReleaseOutcome,
        Notice,
        QueueEntry,
    )
    from admitflow.messages import (
        Admitted,
        ClusterQueueInput,
        ClusterQueueRef,
        ClusterQueueReport,
        Delivery,
        DeliveryReport,
        ForceRelease,
        GateRequest,
        GateSettled,
        GateUse,
        PendingWorkload,
        ReleaseRequest,
        ReservingWorkload,
        StatusQuery,
    )
    from admitflow.admission.pods_ready import GateAnswer
    from admitflow.admission.requests import format_requests
    from admitflow.wire import WireModel

    from admitflow.workflows import arguments
    from admitflow.workflows.outbox import Outbox, continue_as_new_suggested

# Signal names a notice is delivered under, chosen to read well in a workload's history.
NOTICE_SIGNALS = {
    "reserved": contract.QUOTA_RESERVED,
    "pending": contract.PENDING_STATUS,
    "dequeued": contract.DEQUEUED,
    "evicted": contract.EVICTED,
    "checks": contract.ADMISSION_CHECKS_CHANGED,
}


@dataclass
class _ForceReleaseCall:
    """An operator's force-release waiting in the inbox; the loop writes its outcome."""

    request: ForceRelease
    outcome: ForceReleaseOutcome | None = None


@workflow.defn(name=contract.CLUSTER_QUEUE_WORKFLOW)
class ClusterQueueWorkflow:
    @workflow.init
    def __init__(self, input: ClusterQueueInput) -> None:
        self.state = input.state or ClusterQueueState(name=input.name)
        self.inbox: list[ClusterQueueView | QueueEntry | ReleaseRequest | Admitted | GateAnswer | _ForceReleaseCall] = []
        self.outbox = Outbox(input.undelivered)
        self.needs_pass = True

    # --- messages -----------------------------------------------------------------------------
    # Each takes `*payload` and parses it (workflows/arguments.py): a message that is not what its
    # handler takes is refused with one line, never put in the inbox, where it would fail every
    # workflow task after it.

    @workflow.signal(name=contract.SET_VIEW)
    def set_view(self, *payload: Any) -> None:
        view = arguments.signal(contract.SET_VIEW, payload, ClusterQueueView)
        if view is not None:
            self.inbox.append(view)

    @workflow.signal(name=contract.ENQUEUE)
    def enqueue(self, *payload: Any) -> None:
        entry = arguments.signal(contract.ENQUEUE, payload, QueueEntry)
        if entry is not None:
            self.inbox.append(entry)

    @workflow.signal(name=contract.RELEASE)
    def release(self, *payload: Any) -> None:
        request = arguments.signal(contract.RELEASE, payload, ReleaseRequest)
        if request is not None:
            self.inbox.append(request)

    @workflow.signal(name=contract.ADMITTED)
    def admitted(self, *payload: Any) -> None:
        request = arguments.signal(contract.ADMITTED, payload, ReleaseRequest)
        if request is not None:
            self.inbox.append(Admitted(key=request.key, uid=request.uid, ticket=request.ticket))

    @workflow.signal(name=contract.CLUSTER_QUEUE_GATE_ANSWER)
    def pods_ready_gate(self, *payload: Any) -> None:
        answer = arguments.signal(contract.CLUSTER_QUEUE_GATE_ANSWER, payload, GateAnswer)
        if answer is not None:
            self.inbox.append(answer)

    @workflow.update(name=contract.FORCE_RELEASE)
    async def force_release(self, *payload: Any) -> ForceReleaseOutcome:
        """An update rather than a signal: the operator learns what was given back (or that nothing
        was held, when it is repeated). It waits in the inbox like every message, in order."""
        call = _ForceReleaseCall(arguments.update(contract.FORCE_RELEASE, payload, ForceRelease))
        self.inbox.append(call)
        await workflow.wait_condition(lambda: call.outcome is not None)
        assert call.outcome is not None
        return call.outcome

    @force_release.validator
    def _refuse_what_is_not_a_force_release(self, *payload: Any) -> None:
        arguments.update(contract.FORCE_RELEASE, payload, ForceRelease)

    @workflow.query(name=contract.CLUSTER_QUEUE_STATUS)
    def status(self, *payload: Any) -> ClusterQueueReport:
        query = arguments.query(contract.CLUSTER_QUEUE_STATUS, payload, StatusQuery, optional=True)
        per_lq: dict[str, int] = {}
        pending = []
        for position, e in enumerate(self.state.pending):
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
            for r in sorted(self.state.reservations.values(), key=lambda r: r.key)
        ]
        lqs = sorted(set(self.state.view.local_queues) if self.state.view else set())
        return ClusterQueueReport(
            name=self.state.name,
            status=cq.cluster_queue_status(self.state),
            pending=pending,
            reserving=reserving,
            local_queues={k: cq.local_queue_status(self.state, k) for k in lqs},
            events=list(self.state.events),
        )

    @workflow.query(name=contract.CLUSTER_QUEUE_GAUGES)
    def gauges(self, *payload: Any) -> metrics.Gauges:
        """Answered, not emitted: a gauge set from workflow code stays exported by a worker that no
        longer runs this queue. admitflow's one exporter asks at scrape time (admitflow/gauges.py)."""
        arguments.no_argument(contract.CLUSTER_QUEUE_GAUGES, payload)
        return metrics.Gauges(cluster_queue=self.state.name, observations=metrics.cluster_queue_gauges(self.state))

    # --- the loop -----------------------------------------------------------------------------

    @workflow.run
    async def run(self, input: ClusterQueueInput) -> None:
        if self.state.view is None:
            # Started by a workload's enqueue before the catalog's first view arrived.
            view = await workflow.execute_activity(
                contract.FETCH_CLUSTER_QUEUE_VIEW,
                ClusterQueueRef(name=self.state.name),
                result_type=ClusterQueueView,
                start_to_close_timeout=timedelta(seconds=30),
                summary=f"fetch view of ClusterQueue {self.state.name}",
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
            report = self.outbox.step(holding=continue_as_new_suggested())
            if report is not None:
                self._forget_missing(report)
            if self.needs_pass:
                self.needs_pass = False
                result = scheduler.schedule([self.state], workflow.now(), _preemptor_holds_its_queue)[self.state.name]
                self._notify(result.notices)
                self._gate(result)
                self.outbox.step(holding=continue_as_new_suggested())
            workflow.set_current_details(cq.current_details(self.state))
            if continue_as_new_suggested() and self._quiet():
                await workflow.wait_condition(workflow.all_handlers_finished)
                if self._quiet():
                    workflow.continue_as_new(
                        ClusterQueueInput(name=self.state.name, state=self.state, undelivered=self.outbox.undelivered())
                    )

    def _quiet(self) -> bool:
        """Nothing half-done: the inbox is empty, the pass is run, and no delivery is in flight."""
        return not self.inbox and not self.outbox.in_flight and not self.needs_pass

    def _drain_inbox(self) -> None:
        now = workflow.now()
        messages, self.inbox = self.inbox, []
        for m in messages:
            if isinstance(m, ClusterQueueView):
                old = self.state.view
                if cq.set_view(self.state, m, now) and workflow.patched("tell-holders-of-changed-check-parameters"):
                    self.state.reparameterized = sorted({*self.state.reparameterized, *cq.changed_parameters(old, m)})
                    self.state.pods_ready_changed = self.state.pods_ready_changed or cq.changed_pods_ready(old, m)
            elif isinstance(m, QueueEntry):
                cq.enqueue(self.state, m)
            elif isinstance(m, Admitted):
                cq.mark_admitted(self.state, m.key, m.uid, m.ticket)
                continue  # usage for the scheduler is unchanged
            elif isinstance(m, GateAnswer):
                cq.gate_answer(self.state, m.granted)
            elif isinstance(m, _ForceReleaseCall):
                m.outcome, notices = cq.force_release(self.state, m.request.key, m.request.message, now)
                if not m.outcome.released:
                    continue  # it held nothing here: nothing changed
                if m.outcome.gated:
                    self._tell_gate(contract.GATE_SETTLED, GateSettled(key=m.request.key, uid=m.outcome.uid, ticket=m.outcome.ticket))
                self._notify(notices)
            else:
                cq.release(self.state, m.key, m.uid, m.ticket)
            self.needs_pass = True

    def _forget_missing(self, report: DeliveryReport) -> None:
        """A workload that no longer runs cannot give its quota back itself. Only the run the
        notice was for is forgotten: a new run of the same name may have enqueued meanwhile."""
        for d in report.missing:
            key, uid = ids.workload_key(d.workflow_id), d.payload.get("uid")
            if key is not None and uid is not None:
                held = self.state.reservations.get(key)
                if held is not None and held.uid == uid and held.gated:
                    self._tell_gate(contract.GATE_SETTLED, GateSettled(key=key, uid=uid, ticket=held.ticket))
                cq.forget(self.state, key, uid)
                self.needs_pass = True

    def _gate(self, result: scheduler.PassResult) -> None:
        """blockAdmission: tell the gate whom its grant went to, ask for the next, or hand one back."""
        if result.gate_used is not None:  # before a new request: the gate frees the grant first
            r = result.gate_used
            self._tell_gate(contract.GATE_USED, GateUse(cluster_queue=self.state.name, key=r.key, uid=r.uid, ticket=r.ticket))
        if result.ask_gate:
            self._tell_gate(contract.GATE_REQUEST, GateRequest(cluster_queue=self.state.name))
        if result.return_grant:
            self._tell_gate(contract.GATE_RETURNED, GateRequest(cluster_queue=self.state.name))

    def _tell_gate(self, signal: str, payload: WireModel) -> None:
        self.outbox.add(
            Delivery(workflow_id=ids.PODS_READY_GATE_ID, signal=signal, payload=payload.to_wire(), start_pods_ready_gate=True)
        )

    def _notify(self, notices: list[Notice]) -> None:
        for n in notices:
            self.outbox.add(
                Delivery(workflow_id=ids.workload_id(n.key), signal=NOTICE_SIGNALS[n.kind], payload=n.to_wire())
            )


def _preemptor_holds_its_queue() -> bool:
    """Runs recorded before a waiting preemptor kept its queue's head reserved the quota its victims
    freed for the workloads behind it; they replay that way (scheduler.schedule asks only then)."""
    return workflow.patched("preemptor-holds-its-queue")
