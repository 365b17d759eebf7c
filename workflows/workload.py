"""WorkloadWorkflow (`workload/<namespace>/<name>`): the single writer of one workload's status.

Decide, then execute: every handler only turns its message into an event; the loop steps the
events through `admitflow.admission.lifecycle.step`, which owns every rule, and carries out the
commands it returns. The workflow has no rule of its own: what it does is in the commands.

Histories written before this loop replay through `admitflow.workflows.workload_legacy`, chosen by
`workflow.patched(LIFECYCLE_STEP)`.
"""

import asyncio
import logging
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributePair, TypedSearchAttributes
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, TimeoutType, WorkflowAlreadyStartedError
from temporalio.exceptions import TimeoutError as TemporalTimeout
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from admitflow import contract
    from admitflow import search_attributes as sa
    from admitflow.admission import admission_gates, checks, explain, priority
    from admitflow.admission import lifecycle as lc
    from admitflow.admission import metrics
    from admitflow.admission import workload as wl
    from admitflow.admission.catalog import QueueResolution
    from admitflow.admission.checks import WrongArguments
    from admitflow.admission.workload import WorkloadReport
    from admitflow.api import WorkloadStatus
    from admitflow.messages import Delivery, DeliveryBatch, DeliveryReport, ProvisioningCheckInput, ProvisioningNotice, WorkloadInput
    from admitflow.wire import Undecodable, after

    from admitflow.workflows.metrics import emit
    from admitflow.workflows.timer import Timer
    from admitflow.workflows.workload_legacy import LegacyLoop

# workflow.patched: the loop over lifecycle.step (histories before ran workflows.workload_legacy).
LIFECYCLE_STEP = "lifecycle-step"
# workflow.patched: a notice to the ClusterQueue (`admitted`, `release`) goes out by local activity,
# in the workflow task that decides it. As a SignalExternalWorkflowExecution it cost a second
# workflow task (its completion) before anything after it, so `Admitted` took two tasks.
TELL_QUEUE_IN_TASK = "tell-queue-in-task"
# workflow.patched: `admitted` goes out as a signal that the deciding task does not wait for, so
# that one task applies the last `Ready`, publishes `Admitted` and answers the verdict's update
# (the local activity kept that task open for its delivery). Its delivery costs a workflow task
# later, off the verdict's path; the next notice to a queue waits for it, which keeps their order.
ADMITTED_WITHOUT_WAITING = "admitted-without-waiting"
# workflow.patched: the local activity of a notice (TELL_QUEUE_IN_TASK) is started, not awaited, in
# `_settle`: the task still waits for it, but what the same step decides next (a runner's stop, the
# published status) is carried out before its result comes. Awaited, that code ran once the result
# came, which the SDK may deliver in the next workflow task, after events that arrived meanwhile (the
# runner's activity completing): on replay it ran before them, and cancelled a runner that had ended.
NOTICE_NOT_AWAITED = "notice-not-awaited"
# workflow.patched: a workload whose kueue.x-k8s.io/admission-gated-by annotation names gates stays out
# of its queue until they are removed. Asked only for such a workload, when its run starts: a run
# that replays a history from before keeps queueing it as it did.
ADMISSION_GATED_BY = "admission-gated-by"
# workflow.patched: a refused start of a ProvisioningRequest attempt probes the run holding its ID
# in seconds, not minutes (that run may have reported its end before it closed, and say no more).
REFUSED_START_PROBE = "refused-start-probe"
# workflow.patched: a runner whose `start_workload` failed (cut off by a server restart, say) may still
# run the command; it is told to stop when the admission is over. Asked only when a run fails.
STOP_LOST_RUNNER = "stop-lost-runner"
# workflow.patched, asked first in every run: the run takes every patch of TAKEN_TOGETHER without asking
# for each. The Python SDK records each patch a run takes as a marker and an upsert of the
# TemporalChangeVersion search attribute, in the task that first asks: three of each per workload
# (two in the task that finishes it), each upsert one more visibility write on the server. A run that
# recorded this marker was started by code that took all of them; histories from before it ask one
# by one, as they did. A patch added later is asked for itself (it is not in TAKEN_TOGETHER).
PATCHES_OF_2026_11 = "patches-of-2026-11"
TAKEN_TOGETHER = frozenset({
    LIFECYCLE_STEP, TELL_QUEUE_IN_TASK, ADMITTED_WITHOUT_WAITING, NOTICE_NOT_AWAITED, ADMISSION_GATED_BY,
    REFUSED_START_PROBE, STOP_LOST_RUNNER,
})
# workflow.patched: a runner's own `finish` (about the admission it runs) ends its run: no
# `stop_workload` for it, and the workflow completes once that `start_workload` has returned. Before,
# the finish cancelled the activity and sent `stop_workload`, and the workflow completed in the
# finish's task, which Temporal refused (UnhandledCommand; the run then replayed from its start)
# whenever the activity's completion arrived during that task.
RUNNER_FINISH_ENDS_RUN = "runner-finish-ends-run"
# workflow.patched: a queue notice about the ticket being enqueued that comes before the enqueue's
# answer waits for it (lifecycle's `early_notices`). It comes first when the task that ran the enqueue
# timed out or failed after the queue took it (its next attempt gets the signal, then runs the local
# activity again), or finished before a slow local activity did: the reservation was dropped, and the
# queue held its quota for a workload that waited in the queue for good (seen in kueue_baseline).
EARLY_NOTICES = "early-notices"
# workflow.patched, asked first in every run: as PATCHES_OF_2026_11, for TAKEN_TOGETHER and the patches
# after it. A run that recorded it asks for none of them; one that did not asks PATCHES_OF_2026_11.
PATCHES_OF_2026_12 = "patches-of-2026-12"
TAKEN_TOGETHER_12 = TAKEN_TOGETHER | {RUNNER_FINISH_ENDS_RUN, EARLY_NOTICES}
# workflow.patched: what `start_workload` returns is its finish (lifecycle's `runner_ended`): a runner
# that runs the workload inside the activity ends it with its completion, in that one workflow task,
# instead of a `finish` signal and a task of its own before the completion. Before, the value was
# not read. Asked only when a run returns a value.
RUNNER_RETURNS_FINISH = "runner-returns-finish"
# workflow.patched, asked first in every run: as PATCHES_OF_2026_12, for TAKEN_TOGETHER_12 and the
# patches after it. A run that recorded it asks for none of them; one that did not asks the one before.
PATCHES_OF_2026_12_2 = "patches-of-2026-12.2"
TAKEN_TOGETHER_12_2 = TAKEN_TOGETHER_12 | {RUNNER_RETURNS_FINISH}
# workflow.patched: a queue notice about the next ticket that comes before the run has decided to
# enqueue it waits for that enqueue's answer too (lifecycle's `early_notices`, EARLY_NOTICES). It comes
# so when the task that took an eviction timed out after its local activity had enqueued the next
# ticket and the queue reserved it: the next attempt gets the eviction and the reservation in one
# batch, before the Settle that enqueues again; dropped, the reservation left the quota held and the
# workload pending for good (seen in bench/kueue_baseline.py, 2026-12-02).
NEXT_TICKET_NOTICES = "next-ticket-notices"
# workflow.patched, asked first in every run: as PATCHES_OF_2026_12_2, for TAKEN_TOGETHER_12_2 and the
# patches after it. A run that recorded it asks for none of them; one that did not asks the one before.
PATCHES_OF_2026_12_3 = "patches-of-2026-12.3"
TAKEN_TOGETHER_12_3 = TAKEN_TOGETHER_12_2 | {NEXT_TICKET_NOTICES}
# workflow.patched: a next ticket its queue has and the run decided not to enqueue (an attempt of an
# earlier task enqueued it and timed out; the attempt that counted saw a deactivation or a backoff in
# the same batch) is taken and released when the queue's notice about it comes (lifecycle
# `_give_back_unasked_ticket`); kept, it held the queue's quota for a workload that did not want it.
GIVES_BACK_UNASKED_TICKETS = "gives-back-unasked-tickets"
# workflow.patched, asked first in every run: as PATCHES_OF_2026_12_3, for TAKEN_TOGETHER_12_3 and the
# patches after it.
PATCHES_OF_2026_12_4 = "patches-of-2026-12.4"
TAKEN_TOGETHER_12_4 = TAKEN_TOGETHER_12_3 | {GIVES_BACK_UNASKED_TICKETS}
# workflow.patched: such a ticket goes back to the ClusterQueue its notice names (the queue's notices
# name it since this release), also when the run never learned its ClusterQueue because the enqueue
# it never heard back from was its very first; before, that run kept the notice, and the queue the
# quota of an inactive workload, until it was activated again.
UNASKED_TICKETS_TO_THEIR_QUEUE = "unasked-tickets-to-their-queue"
# workflow.patched, asked first in every run: as PATCHES_OF_2026_12_4, for TAKEN_TOGETHER_12_4 and the
# patches after it.
PATCHES_OF_2026_12_5 = "patches-of-2026-12.5"
TAKEN_TOGETHER_12_5 = TAKEN_TOGETHER_12_4 | {UNASKED_TICKETS_TO_THEIR_QUEUE}
# workflow.patched: an eviction of the ticket the run is queued with counts though the run never
# heard of its reservation (lifecycle `_apply_notice`): its ClusterQueue tells a reservation that
# fits at once in the enqueue's answer, which a failed workflow task (or a reset to before it) loses;
# the enqueue sent again then finds it evicted or released, and the eviction's signal was ignored,
# leaving the run queued with a ticket its queue no longer has.
EVICTS_UNHEARD_RESERVATIONS = "evicts-unheard-reservations"
# workflow.patched, asked first in every run: as PATCHES_OF_2026_12_5, for TAKEN_TOGETHER_12_5 and the
# patches after it.
PATCHES_OF_2026_12_6 = "patches-of-2026-12.6"
TAKEN_TOGETHER_12_6 = TAKEN_TOGETHER_12_5 | {EVICTS_UNHEARD_RESERVATIONS}
# workflow.patched: `admitted` goes out with the workload's next workflow task (a message, a timer)
# or ADMITTED_DELAY after the task that decides it, whichever comes first; at once when the workload
# has another notice for a queue, continues as new or ends. Sent from that task, its delivery
# (recorded in the workload's history) gave the workload a second workflow task right behind it,
# which a query asking for `Admitted` waited for too.
ADMITTED_AFTER_A_MOMENT = "admitted-after-a-moment"
ADMITTED_DELAY = timedelta(seconds=1)
# workflow.patched, asked first in every run: as PATCHES_OF_2026_12_6, for TAKEN_TOGETHER_12_6 and the
# patches after it.
PATCHES_OF_2026_12_7 = "patches-of-2026-12.7"
TAKEN_TOGETHER_12_7 = TAKEN_TOGETHER_12_6 | {ADMITTED_AFTER_A_MOMENT}
# The patch sets, newest first: run() asks each marker in turn until one was recorded (a new run
# records the first), and the run takes that set's patches without asking for each. A new set goes
# on top, holding the one before it.
PATCH_SETS = (
    (PATCHES_OF_2026_12_7, TAKEN_TOGETHER_12_7),
    (PATCHES_OF_2026_12_6, TAKEN_TOGETHER_12_6),
    (PATCHES_OF_2026_12_5, TAKEN_TOGETHER_12_5),
    (PATCHES_OF_2026_12_4, TAKEN_TOGETHER_12_4),
    (PATCHES_OF_2026_12_3, TAKEN_TOGETHER_12_3),
    (PATCHES_OF_2026_12_2, TAKEN_TOGETHER_12_2),
    (PATCHES_OF_2026_12, TAKEN_TOGETHER_12),
    (PATCHES_OF_2026_11, TAKEN_TOGETHER),
)
# workflow.patched: a `start_workload` whose heartbeats stopped (its runner died, or its task was lost
# with the poll that took it in a server restart) is started again for the same admission (lifecycle
# RUNNER_RESTARTS). Before, the workload held its quota until a PodsReady timeout evicted it, and for
# good without WaitForPodsReady. Asked only when a run is lost so, by itself (in no patch set).
RESTART_LOST_RUNNER = "restart-lost-runner"
# workflow.patched: a `start_workload` that its runner's own shutdown ended (the SDK's `WorkerShutdown`
# failure: the runner was stopped, drained, rolled to a new version) is started again the same way,
# as a Job's controller replaces the pods of a drained node. Before, it held its quota as a lost one
# did. Asked only when a run ends so, by itself.
RESTART_DRAINED_RUNNER = "restart-drained-runner"
# The type of the failure the Temporal SDKs give an activity that their worker's shutdown cut short.
WORKER_SHUTDOWN = "WorkerShutdown"
NOTICE_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(minutes=1), maximum_attempts=0)
# A controller's transient errors are retried for as long as it takes, at most this far apart; the
# attempts cost no history (only the last one is recorded). A non-retryable error comes back as a
# failed answer, which lifecycle backs off from.
CHECK_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(minutes=1), maximum_attempts=0)
# A call taken by a controller that died, or lost with its poll in a server restart, is tried again
# after this; the call has no heartbeat, so nothing tells sooner. A controller answers quickly (its
# first verdict, or Pending and the verdict later by signal): a minute is ample, and it bounds what
# a lost call costs a workload holding quota (5 minutes before).
CHECK_TIMEOUT = timedelta(minutes=1)
# A runner that keeps `start_workload` running must heartbeat this often; when it stops (the runner
# died), the workload's pods count as failed.
RUNNER_HEARTBEAT_TIMEOUT = timedelta(seconds=10)
RUNNER_RUN_TIMEOUT = timedelta(days=365)
# Follow-up events (an enqueue's answer, a child found gone) settle again; this many rounds in one
# batch at most, the rest waits for the next message or timer.
MAX_ROUNDS = 20


@workflow.defn(name=contract.WORKLOAD_WORKFLOW)
class WorkloadWorkflow(LegacyLoop):
    @workflow.init
    def __init__(self, input: WorkloadInput) -> None:
        self.state = input.state or wl.new_state(input.workload, str(workflow.uuid4()), workflow.now())
        self.inbox: list[Any] = []
        self.published: TypedSearchAttributes | None = None
        self.taken_together: frozenset[str] = frozenset()  # run() asks first (PATCH_SETS)
        self.handled = 0  # events taken from the inbox and settled, for updates waiting on theirs
        self.taken = 0
        # What is under way in this run (never carried: lifecycle's Started asks again).
        self.asking: dict[str, workflow.ActivityHandle] = {}
        self.runner: workflow.ActivityHandle | None = None
        # A notice on its way to the ClusterQueue (ADMITTED_WITHOUT_WAITING, NOTICE_NOT_AWAITED), and
        # whether it is wanted out now rather than after its moment (ADMITTED_AFTER_A_MOMENT).
        self.telling: asyncio.Task | None = None
        self.hurry = False
        self.moment: lc.TellQueue | None = None  # the `admitted` notice `telling` holds until it goes
        # The run of each attempt's workflow started by this run (an ID is reused when an attempt
        # starts again): only the latest one's end is news.
        self.children: dict[str, Any] = {}
        self.timer = Timer()
        # What the metrics already counted (what a carried state holds counts as counted).
        self.seen = metrics.snapshot(self.state)
        # The last event and verdict written to the log (a carried state's were logged by its run).
        self.logged = (self.state.events[-1] if self.state.events else None,
                       self.state.verdicts[-1] if self.state.verdicts else None)
        self._v0_init()

    # --- messages: each one an event -------------------------------------------------------------
    # Every handler takes any number of arguments of any shape: `lifecycle.step` parses them, so a
    # malformed message is refused and recorded instead of failing the workflow task. Untyped, an
    # argument the worker cannot decode arrives as an Undecodable (admitflow.codec.for_workers),
    # and the message is refused with its reason too.

    @workflow.signal(name=contract.QUOTA_RESERVED)
    def quota_reserved(self, *payload: Any) -> None:
        self.inbox.append(lc.QueueNoticed(signal=contract.QUOTA_RESERVED, payload=_one(payload)))

    @workflow.signal(name=contract.PENDING_STATUS)
    def pending_status(self, *payload: Any) -> None:
        self.inbox.append(lc.QueueNoticed(signal=contract.PENDING_STATUS, payload=_one(payload)))

    @workflow.signal(name=contract.DEQUEUED)
    def dequeued(self, *payload: Any) -> None:
        self.inbox.append(lc.QueueNoticed(signal=contract.DEQUEUED, payload=_one(payload)))

    @workflow.signal(name=contract.EVICTED)
    def evicted(self, *payload: Any) -> None:
        self.inbox.append(lc.QueueNoticed(signal=contract.EVICTED, payload=_one(payload)))

    @workflow.signal(name=contract.ADMISSION_CHECKS_CHANGED)
    def admission_checks_changed(self, *payload: Any) -> None:
        self.inbox.append(lc.QueueNoticed(signal=contract.ADMISSION_CHECKS_CHANGED, payload=_one(payload)))

    @workflow.signal(name=contract.QUEUE_AVAILABLE)
    def queue_available(self, *payload: Any) -> None:
        self.inbox.append(lc.QueueAppeared(payload=_undecodable(payload)))

    @workflow.signal(name=contract.FINISH)
    def finish(self, *payload: Any) -> None:
        self.inbox.append(lc.FinishRequested(payload=_one(payload)))

    @workflow.signal(name=contract.DELETE)
    def delete(self, *payload: Any) -> None:
        self.inbox.append(lc.DeleteRequested(payload=_one(payload)))

    @workflow.signal(name=contract.SET_ADMISSION_CHECK_STATE)
    def set_admission_check_state(self, *payload: Any) -> None:
        """Any payload is taken: one that is not a valid verdict is recorded as rejected."""
        self.inbox.append(lc.VerdictReceived(payload=_one(payload)))

    @workflow.update(name=contract.APPLY_ADMISSION_CHECK_STATE)
    async def apply_admission_check_state(self, *payload: Any) -> WorkloadStatus:
        await self._applied(lc.VerdictReceived(payload=_one(payload)))
        return self.state.status

    @apply_admission_check_state.validator
    def _validate_verdict(self, *payload: Any) -> None:
        try:
            checks.validate(self.state, checks.parse(_one(payload)))
        except checks.VerdictError as err:
            raise ApplicationError(str(err), type="InvalidVerdict", non_retryable=True) from None

    @workflow.signal(name=contract.REMOVE_ADMISSION_GATES)
    def remove_admission_gates(self, *payload: Any) -> None:
        """Any payload is taken: one that cannot be applied is recorded as a Warning event."""
        self.inbox.append(lc.AdmissionGatesRemoved(payload=_one(payload)))

    @workflow.update(name=contract.APPLY_ADMISSION_GATE_REMOVAL)
    async def apply_admission_gate_removal(self, *payload: Any) -> admission_gates.AdmissionGates:
        await self._applied(lc.AdmissionGatesRemoved(payload=_one(payload)))
        return admission_gates.AdmissionGates(gates=admission_gates.gates(self.state.workload))

    @apply_admission_gate_removal.validator
    def _validate_gate_removal(self, *payload: Any) -> None:
        try:
            admission_gates.validate(self.state, admission_gates.parse(_one(payload)))
        except admission_gates.GateError as err:
            raise ApplicationError(str(err), type="InvalidAdmissionGateRemoval", non_retryable=True) from None

    @workflow.update(name=contract.APPLY_PRIORITY)
    async def apply_priority(self, *payload: Any) -> priority.PriorityChange:
        """A change of its priority (`admitflow apply`), answered with the priority it has then."""
        await self._applied(lc.PriorityChangeRequested(payload=_one(payload)))
        spec = self.state.workload.spec
        return priority.PriorityChange(priority=spec.priority or 0, priority_class_ref=spec.priority_class_ref)

    @apply_priority.validator
    def _validate_priority(self, *payload: Any) -> None:
        try:
            priority.validate(self.state, priority.parse(_one(payload)))
        except priority.PriorityError as err:
            raise ApplicationError(str(err), type="InvalidPriorityChange", non_retryable=True) from None

    @workflow.signal(name=contract.PROVISIONING_REQUEST_UPDATED)
    def provisioning_request_updated(self, *payload: Any) -> None:
        self.inbox.append(lc.ProvisioningReported(payload=_one(payload)))

    @workflow.signal(name=contract.PROVISIONING_REQUEST_DELETED)
    def provisioning_request_deleted(self, *payload: Any) -> None:
        self.inbox.append(lc.ProvisioningEnded(payload=_one(payload)))

    @workflow.signal(name=contract.SET_PODS_READY)
    def set_pods_ready(self, *payload: Any) -> None:
        """Any payload is taken: one that is not a valid report is recorded and changes nothing."""
        self.inbox.append(lc.PodsReadyReported(payload=_one(payload)))

    @workflow.signal(name=contract.DEACTIVATE)
    def deactivate(self, *payload: Any) -> None:
        self.inbox.append(lc.Deactivated(payload=_undecodable(payload)))

    @workflow.signal(name=contract.ACTIVATE)
    def activate(self, *payload: Any) -> None:
        self.inbox.append(lc.Activated(payload=_undecodable(payload)))

    async def _applied(self, event: Any) -> None:
        """An update's event, in the inbox in order with every message; back once the loop has applied it."""
        self.inbox.append(event)
        mine = self.taken + len(self.inbox)
        await workflow.wait_condition(lambda: self.handled >= mine)

    @workflow.query(name=contract.WORKLOAD_QUERY)
    def workload(self) -> WorkloadReport:
        return self.state.report()

    # --- the loop ----------------------------------------------------------------------------------

    @workflow.run
    async def run(self, input: WorkloadInput) -> WorkloadReport:
        self.taken_together = next((taken for marker, taken in PATCH_SETS if workflow.patched(marker)), frozenset())
        if not self._patched(LIFECYCLE_STEP):
            return await self._v0_run(input)
        if input.state is None:
            wl.stamp_submission(self.state, input.workload, workflow.info().workflow_start_time)
        gated = not admission_gates.may_enter_admission(self.state.workload)
        await self._settle([lc.Started(
            honours_gates=not gated or self._patched(ADMISSION_GATED_BY), runner_finish_ends_run=self._patched(RUNNER_FINISH_ENDS_RUN),
            keeps_early_notices=self._patched(EARLY_NOTICES), keeps_next_ticket_notices=self._patched(NEXT_TICKET_NOTICES),
            gives_back_unasked_tickets=self._patched(GIVES_BACK_UNASKED_TICKETS),
            unasked_tickets_to_their_queue=self._patched(UNASKED_TICKETS_TO_THEIR_QUEUE),
            evicts_unheard_reservations=self._patched(EVICTS_UNHEARD_RESERVATIONS),
        )])
        while not (wl.is_finished(self.state) or self.state.deleted):
            self.timer.set(lc.next_wake(self.state))
            await workflow.wait_condition(
                lambda: bool(self.inbox) or self.timer.fired is not None
                or (workflow.info().is_continue_as_new_suggested() and lc.may_continue_as_new(self.state))
            )
            if self.inbox or self.timer.fired is not None:
                self.hurry = True  # a notice waiting for its moment goes in this task, which runs anyway
                events, self.inbox = self.inbox, []
                self.taken += len(events)
                fired = self.timer.take()
                if fired is not None:
                    events.append(lc.TimerFired(at=fired))
                await self._settle(events)
                self.handled = self.taken
                continue
            await self._told()
            await workflow.wait_condition(workflow.all_handlers_finished)
            if not self.inbox:
                workflow.continue_as_new(WorkloadInput(workload=input.workload, state=self.state))
        self.timer.set(None)
        if self.runner is not None and self._patched(RUNNER_FINISH_ENDS_RUN):
            # Its runner finished it and is returning from `start_workload`: completing before that
            # completion arrives would have the task refused when it arrives meanwhile.
            await workflow.wait_condition(lambda: self.runner is None)
        await self._told()
        await workflow.wait_condition(workflow.all_handlers_finished)
        return self.state.report()

    def _patched(self, patch_id: str) -> bool:
        """`workflow.patched(patch_id)`, taken without its own marker by a run that took a patch set
        holding it (PATCH_SETS)."""
        return patch_id in self.taken_together or workflow.patched(patch_id)

    async def _settle(self, events: list[Any]) -> None:
        """Step the events and a Settle, carrying out each step's commands; what those commands
        answer at once (an enqueue's resolution, a child found gone) is stepped next, then settled."""
        pending = [*events, lc.Settle()]
        rounds = 0
        while pending:
            event = pending.pop(0)
            self.state, commands = lc.step(self.state, event, workflow.now(), workflow.random().random())
            answers: list[Any] = []
            for command in commands:
                answers += await self._execute(command)
            if answers:
                pending[0:0] = answers
                if isinstance(event, lc.Settle) and rounds < MAX_ROUNDS:
                    rounds += 1
                    pending.append(lc.Settle())
        self._publish()

    async def _execute(self, c: Any) -> list[Any]:
        """Carry out one command; returns the events it answered with at once."""
        if isinstance(c, lc.Enqueue):
            # A local activity: no extra round trip through the server before the workload is queued.
            resolution = await workflow.execute_local_activity(
                contract.ENQUEUE_WORKLOAD, c.request, result_type=QueueResolution,
                start_to_close_timeout=timedelta(seconds=30), retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=10)),
                summary=f"enqueue in LocalQueue {c.request.local_queue}",
            )
            # What its queue answered in the same task (the entry's first pending reason, or the
            # reservation it holds for that ticket already) comes after the resolution, as the signal
            # it stands for would have; a notice is applied by its kind.
            return [lc.EnqueueResolved(ticket=c.request.entry.ticket, resolution=resolution),
                    *(lc.QueueNoticed(signal=contract.PENDING_STATUS, payload=n) for n in resolution.notices)]
        if isinstance(c, lc.TellQueue):
            await self._told(c)
            queue = contract.cluster_queue_id(c.cluster_queue)
            if c.signal == contract.ADMITTED and self._patched(ADMITTED_WITHOUT_WAITING):
                if self._patched(ADMITTED_AFTER_A_MOMENT):
                    self.hurry = False  # here, not in the task: a notice decided next in this step hurries it
                    self.moment = c
                    self.telling = asyncio.create_task(self._after_a_moment(c))
                else:
                    self.telling = asyncio.create_task(_signal(queue, c.signal, c.request))
            elif self._patched(TELL_QUEUE_IN_TASK):
                # Sent again if the task is retried: the ClusterQueue ignores a notice it has had. The
                # activity sends it in its worker's next `take_messages` update (activities/mail.py); a
                # refusal is tried again for as long as it takes, as before: in the task for a few
                # seconds, then after durable timers.
                notice = Delivery(workflow_id=queue, signal=c.signal, payload=c.request.to_wire())
                sending = workflow.start_local_activity(
                    contract.DELIVER_SIGNALS, DeliveryBatch(deliveries=[notice]), result_type=DeliveryReport,
                    start_to_close_timeout=timedelta(seconds=30), retry_policy=NOTICE_RETRY,
                    local_retry_threshold=timedelta(seconds=5), summary=f"{c.signal} to ClusterQueue {c.cluster_queue}",
                )
                if self._patched(NOTICE_NOT_AWAITED):
                    self.telling = sending
                else:
                    await sending
            else:
                await _signal(queue, c.signal, c.request)
        elif isinstance(c, lc.AskController):
            self._ask(c)
        elif isinstance(c, lc.StopAsking):
            handle = self.asking.pop(c.check, None)
            if handle is not None:
                handle.cancel()
        elif isinstance(c, lc.StartProvisioning):
            return await self._start_provisioning(c)
        elif isinstance(c, lc.TellProvisioning):
            if not await _signal(c.workflow_id, c.signal, ProvisioningNotice(reason=c.reason)):
                return [lc.ProvisioningEnded(workflow_id=c.workflow_id)]
        elif isinstance(c, lc.StartRunner):
            self._start_runner(c)
        elif isinstance(c, lc.StopRunner):
            self._stop_runner(c)
        elif isinstance(c, lc.TellGate):
            await _signal(contract.PODS_READY_GATE_ID, c.signal, c.request)
        return []

    async def _told(self, then: lc.TellQueue | None = None) -> None:
        """The notice sent without waiting has reached its queue (at once when it already has); one
        still waiting for its moment goes now, unless the notice to send `then` replaces it
        (`lifecycle.replaces`): it is then not sent."""
        if self.telling is not None:
            telling, self.telling = self.telling, None
            moment, self.moment = self.moment, None
            if moment is not None and then is not None and lc.replaces(then, moment):
                telling.cancel()
                return
            self.hurry = True
            await telling

    async def _after_a_moment(self, c: lc.TellQueue) -> bool:
        """Send a notice after ADMITTED_DELAY, or as soon as the workload's next workflow task or
        `_told` wants it out."""
        try:
            await workflow.wait_condition(lambda: self.hurry, timeout=ADMITTED_DELAY, timeout_summary=f"{c.signal} to ClusterQueue {c.cluster_queue}")
        except asyncio.TimeoutError:
            pass
        self.moment = None
        return await _signal(contract.cluster_queue_id(c.cluster_queue), c.signal, c.request)

    def _ask(self, c: lc.AskController) -> None:
        req = c.request
        name = req.admission_check
        handle = workflow.start_activity(
            contract.ADMISSION_CHECK, req, task_queue=c.task_queue, start_to_close_timeout=CHECK_TIMEOUT,
            retry_policy=CHECK_RETRY, summary=f"check {name} (attempt {req.attempt})",
        )
        self.asking[name] = handle

        def done(task: Any) -> None:
            result, error = None, ""
            try:
                result = task.result()
            except ActivityError as err:
                if isinstance(err.cause, CancelledError):
                    return
                error = _message(err)  # only a non-retryable error ends the retries
            except asyncio.CancelledError:
                return
            if self.asking.get(name) is handle:  # else it was stopped: answered, evicted, finished
                del self.asking[name]
                self.inbox.append(lc.ControllerAnswered(check=name, attempt=req.attempt, result=result, error=error))

        handle.add_done_callback(done)

    async def _start_provisioning(self, c: lc.StartProvisioning) -> list[Any]:
        a = c.plan.attempt
        self.children[a.workflow_id] = None  # an earlier run's end, heard from now on, is old news
        try:
            child = await workflow.start_child_workflow(
                contract.PROVISIONING_CHECK_WORKFLOW,
                ProvisioningCheckInput(
                    parent=workflow.info().workflow_id, check=a.check, attempt=a.attempt,
                    request=c.plan.request, pod_templates=c.plan.pod_templates,
                ),
                id=a.workflow_id,
                # It outlives a continue-as-new of this workflow; the workload ends it itself.
                parent_close_policy=ParentClosePolicy.ABANDON,
                static_summary=f"ProvisioningRequest {a.name}",
            )
        except WorkflowAlreadyStartedError:
            del self.children[a.workflow_id]
            return [lc.ProvisioningStartRefused(
                check=a.check, attempt=a.attempt, workflow_id=a.workflow_id, probe_soon=self._patched(REFUSED_START_PROBE),
            )]
        def ended(task: Any) -> None:
            # However it ends (deleted as asked, terminated by an operator), the workload hears of it.
            if not task.cancelled():
                task.exception()
            if self.children.get(a.workflow_id) is task:
                del self.children[a.workflow_id]
                self.inbox.append(lc.ProvisioningEnded(workflow_id=a.workflow_id))

        self.children[a.workflow_id] = child
        child.add_done_callback(ended)
        return []

    def _start_runner(self, c: lc.StartRunner) -> None:
        admission = c.request.admission
        handle = workflow.start_activity(
            contract.START_WORKLOAD, c.request, task_queue=c.task_queue, start_to_close_timeout=RUNNER_RUN_TIMEOUT,
            heartbeat_timeout=RUNNER_HEARTBEAT_TIMEOUT, retry_policy=RetryPolicy(maximum_attempts=1),
            summary=f"start on runner {c.task_queue} (admission {admission})",
        )
        self.runner = handle

        def done(task: Any) -> None:
            error, result, lost, drained = "", None, False, False
            try:
                result = task.result()
            except ActivityError as err:
                error = _message(err)
                lost = isinstance(err.cause, TemporalTimeout) and err.cause.type == TimeoutType.HEARTBEAT
                drained = isinstance(err.cause, ApplicationError) and err.cause.type == WORKER_SHUTDOWN
            except asyncio.CancelledError:
                error = "cancelled"
            if self.runner is not handle:
                return  # stopped by this workflow: the admission is over
            self.runner = None
            # It stopped on its own: the runner died, shut down, gave up, or the run is over (with
            # its finish, when it returned one).
            self.inbox.extend(lc.runner_ended(
                admission, result, error,
                returns_finish=lambda: self._patched(RUNNER_RETURNS_FINISH),
                stop_when_over=bool(error) and self._patched(STOP_LOST_RUNNER),
                restart=(lost and self._patched(RESTART_LOST_RUNNER)) or (drained and self._patched(RESTART_DRAINED_RUNNER)),
            ))

        handle.add_done_callback(done)

    def _stop_runner(self, c: lc.StopRunner) -> None:
        if self.runner is not None:
            self.runner.cancel()
            self.runner = None
        stopping = workflow.start_activity(
            contract.STOP_WORKLOAD, c.request, task_queue=c.task_queue, schedule_to_close_timeout=timedelta(minutes=5),
            summary=f"stop on runner {c.task_queue} (admission {c.request.admission})",
        )
        # Nothing waits for it: a runner that cannot be reached has had its run cancelled already.
        stopping.add_done_callback(lambda task: task.cancelled() or task.exception())

    def _log(self) -> None:
        """Each new event and verdict, as a log line with the workload, its ClusterQueue, and the
        check and attempt it is about. `workflow.logger` writes nothing while replaying."""
        st = self.state
        last_event, last_verdict = self.logged
        base = {"workload": st.key, "cluster_queue": st.cluster_queue or ""}
        for e in after(st.events, last_event):
            workflow.logger.log(logging.WARNING if e.type == "Warning" else logging.INFO, e.reason,
                                extra={**base, "reason": e.reason, "detail": e.message})
        for v in after(st.verdicts, last_verdict):
            workflow.logger.info("verdict", extra={
                **base, "check": v.check, "attempt": wl.current_attempt(st, v.check), "state": v.state,
                "outcome": v.outcome, "detail": v.detail,
            })
        self.logged = (st.events[-1] if st.events else None, st.verdicts[-1] if st.verdicts else None)

    def _publish(self) -> None:
        """Search attributes and current details follow the state (current details also after replay
        and continue-as-new, where they start empty). Only attributes that differ from what this
        run already has are upserted: the client sets most of them at start."""
        st = self.state
        self.seen, observations = metrics.workload_observations(self.seen, st)
        emit(observations)
        self._log()
        workflow.set_current_details(explain.current_details(st))
        wanted = wl.search_attributes(st)
        have = workflow.info().typed_search_attributes if self.published is None else self.published
        changes = [k.value_set(v) for k, v in wanted.items() if have.get(k) != v]
        changes += [k.value_unset() for k in sa.MANAGED if k not in wanted and have.get(k) is not None]
        if changes:
            # The same upsert says when: `get -w` asks visibility only for workloads changed since.
            workflow.upsert_search_attributes([*changes, sa.UPDATED.value_set(workflow.now())])
        self.published = TypedSearchAttributes([SearchAttributePair(k, v) for k, v in wanted.items()])


async def _signal(workflow_id: str, signal: str, payload: Any) -> bool:
    """Signal another workflow; False when it has ended. A refusal (the server's per-run signal
    limit, while the target continues as new) is tried again, with backoff, for as long as it
    takes: dropping it could leave quota held for good."""
    delay = timedelta(seconds=1)
    while True:
        try:
            await workflow.get_external_workflow_handle(workflow_id).signal(signal, payload)
            return True
        except ApplicationError as err:
            if "NotFound" in (err.type or ""):
                return False
            workflow.logger.warning("signal_refused", extra={"workflow_id": workflow_id, "signal": signal, "error": str(err)})
        await workflow.sleep(delay, summary=f"retry {signal} to {workflow_id}")
        delay = min(delay * 2, timedelta(minutes=1))


def _one(payload: tuple) -> Any:
    """The single argument of a message, or what stands for a wrong count: validation then says
    `... got 2 arguments`. An argument that could not be decoded stands for the whole message."""
    undecodable = _undecodable(payload)
    if undecodable is not None:
        return undecodable
    return payload[0] if len(payload) == 1 else WrongArguments(count=len(payload))


def _undecodable(payload: tuple) -> Undecodable | None:
    return next((p for p in payload if isinstance(p, Undecodable)), None)


def _message(err: ActivityError) -> str:
    cause = err.cause
    return (cause.message if isinstance(cause, ApplicationError) else str(cause or err)) or type(cause).__name__

