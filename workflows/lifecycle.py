"""WorkloadWorkflow (`workload/<namespace>/<name>`): the single writer of one workload's status.

Decide, then execute: every handler only turns its message into an event; the loop steps the
events through `admitflow.admission.lifecycle.step`, which owns every rule, and carries out the
commands it returns. The workflow has no rule of its own: what it does is in the commands.
"""

import asyncio
import logging
from datetime import timedelta
from typing import Any, Literal

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributePair, TypedSearchAttributes
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, TimeoutType, WorkflowAlreadyStartedError
from temporalio.exceptions import TimeoutError as TemporalTimeout
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from admitflow import contract, memos
    from admitflow import search_attributes as sa
    from admitflow.admission import admission_gates, checks, explain, intake, priority
    from admitflow.admission import lifecycle as lc
    from admitflow.admission import metrics
    from admitflow.admission import workload as wl
    from admitflow.admission.catalog import QueueResolution
    from admitflow.admission.workload import WorkloadReport
    from admitflow.api import WorkloadStatus
    from admitflow.messages import ProvisioningCheckInput, ProvisioningNotice, WorkloadInput
    from admitflow.admission.protocol import Delivery, DeliveryBatch, DeliveryReport
    from admitflow.wire import after

    from admitflow.workflows.memo import Memo
    from admitflow.workflows.metrics import emit
    from admitflow.workflows.timer import Timer
    from admitflow.workflows.versions import Movable, continue_as_new, continue_as_new_due

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


@workflow.defn(name=contract.WORKLOAD_WORKFLOW)
class WorkloadWorkflow(Movable):
    @workflow.init
    def __init__(self, input: WorkloadInput) -> None:
        self.state = input.state or wl.new_state(input.workload, str(workflow.uuid4()), workflow.now())
        self.inbox: list[lc.Event] = []
        self.published: TypedSearchAttributes | None = None
        self.memo = Memo()  # what machines read of it (admitflow/memos.py)
        self.handled = 0  # events taken from the inbox and settled, for updates waiting on theirs
        self.taken = 0
        # What is under way in this run (never carried: lifecycle's Started asks again).
        self.asking: dict[str, workflow.ActivityHandle] = {}
        self.runner: workflow.ActivityHandle | None = None
        # The notice on its way to the ClusterQueue, sent without waiting (the task goes on); the next
        # notice to a queue waits for it, which keeps their order.
        self.telling: asyncio.Future | None = None
        # The run of each attempt's workflow started by this run (an ID is reused when an attempt
        # starts again): only the latest one's end is news.
        self.children: dict[str, Any] = {}
        self.timer = Timer()
        self.moment = Timer()  # lifecycle.notice_due: the `admitted` notice held for the next task
        # What the metrics already counted (what a carried state holds counts as counted).
        self.seen = metrics.snapshot(self.state)
        # The last event and verdict written to the log (a carried state's were logged by its run).
        self.logged = (self.state.events[-1] if self.state.events else None,
                       self.state.verdicts[-1] if self.state.verdicts else None)

    # --- messages: each one an event -------------------------------------------------------------
    # Every handler takes any number of arguments of any shape, and admission.intake parses them into
    # the event lifecycle.step takes: a malformed message becomes a Refused event, recorded, instead of
    # failing the workflow task. Untyped, an argument the worker cannot decode arrives as an
    # Undecodable (admitflow.codec.for_workers), and the message is refused with its reason too.

    @workflow.signal(name=contract.QUOTA_RESERVED)
    def quota_reserved(self, *payload: Any) -> None:
        self.inbox.append(intake.notice(contract.QUOTA_RESERVED, *payload))

    @workflow.signal(name=contract.PENDING_STATUS)
    def pending_status(self, *payload: Any) -> None:
        self.inbox.append(intake.notice(contract.PENDING_STATUS, *payload))

    @workflow.signal(name=contract.DEQUEUED)
    def dequeued(self, *payload: Any) -> None:
        self.inbox.append(intake.notice(contract.DEQUEUED, *payload))

    @workflow.signal(name=contract.EVICTED)
    def evicted(self, *payload: Any) -> None:
        self.inbox.append(intake.notice(contract.EVICTED, *payload))

    @workflow.signal(name=contract.ADMISSION_CHECKS_CHANGED)
    def admission_checks_changed(self, *payload: Any) -> None:
        self.inbox.append(intake.notice(contract.ADMISSION_CHECKS_CHANGED, *payload))

    @workflow.signal(name=contract.QUEUE_AVAILABLE)
    def queue_available(self, *payload: Any) -> None:
        self.inbox.append(intake.queue_available(*payload))

    @workflow.signal(name=contract.FINISH)
    def finish(self, *payload: Any) -> None:
        self.inbox.append(intake.finish(*payload))

    @workflow.signal(name=contract.DELETE)
    def delete(self, *payload: Any) -> None:
        self.inbox.append(intake.deletion(*payload))

    @workflow.signal(name=contract.SET_ADMISSION_CHECK_STATE)
    def set_admission_check_state(self, *payload: Any) -> None:
        """Any payload is taken: one that is not a valid verdict is recorded as rejected."""
        self.inbox.append(intake.verdict(*payload))

    @workflow.update(name=contract.APPLY_ADMISSION_CHECK_STATE)
    async def apply_admission_check_state(self, *payload: Any) -> WorkloadStatus:
        await self._applied(intake.verdict(*payload))
        return self.state.status

    @apply_admission_check_state.validator
    def _validate_verdict(self, *payload: Any) -> None:
        event = intake.verdict(*payload)
        try:
            if isinstance(event, lc.Refused):
                raise checks.VerdictError(event.detail)
            checks.validate(self.state, event.verdict)
        except checks.VerdictError as err:
            raise ApplicationError(str(err), type="InvalidVerdict", non_retryable=True) from None

    @workflow.signal(name=contract.REMOVE_ADMISSION_GATES)
    def remove_admission_gates(self, *payload: Any) -> None:
        """Any payload is taken: one that cannot be applied is recorded as a Warning event."""
        self.inbox.append(intake.gate_removal(*payload))

    @workflow.update(name=contract.APPLY_ADMISSION_GATE_REMOVAL)
    async def apply_admission_gate_removal(self, *payload: Any) -> admission_gates.AdmissionGates:
        await self._applied(intake.gate_removal(*payload))
        return admission_gates.AdmissionGates(gates=admission_gates.gates(self.state.workload))

    @apply_admission_gate_removal.validator
    def _validate_gate_removal(self, *payload: Any) -> None:
        event = intake.gate_removal(*payload)
        try:
            if isinstance(event, lc.Refused):
                raise admission_gates.GateError(event.detail)
            admission_gates.validate(self.state, event.removal)
        except admission_gates.GateError as err:
            raise ApplicationError(str(err), type="InvalidAdmissionGateRemoval", non_retryable=True) from None

    @workflow.update(name=contract.APPLY_PRIORITY)
    async def apply_priority(self, *payload: Any) -> priority.PriorityChange:
        """A change of its priority (`admitflow apply`), answered with the priority it has then."""
        await self._applied(intake.priority_change(*payload))
        spec = self.state.workload.spec
        return priority.PriorityChange(priority=spec.priority or 0, priority_class_ref=spec.priority_class_ref)

    @apply_priority.validator
    def _validate_priority(self, *payload: Any) -> None:
        event = intake.priority_change(*payload)
        try:
            if isinstance(event, lc.Refused):
                raise priority.PriorityError(event.detail)
            priority.validate(self.state, event.change)
        except priority.PriorityError as err:
            raise ApplicationError(str(err), type="InvalidPriorityChange", non_retryable=True) from None

    @workflow.signal(name=contract.PROVISIONING_REQUEST_UPDATED)
    def provisioning_request_updated(self, *payload: Any) -> None:
        self.inbox.append(intake.provisioning_report(*payload))

    @workflow.signal(name=contract.PROVISIONING_REQUEST_DELETED)
    def provisioning_request_deleted(self, *payload: Any) -> None:
        self.inbox.append(intake.provisioning_deleted(*payload))

    @workflow.signal(name=contract.SET_PODS_READY)
    def set_pods_ready(self, *payload: Any) -> None:
        """Any payload is taken: one that is not a valid report is recorded and changes nothing."""
        self.inbox.append(intake.pods_ready_report(*payload))

    @workflow.signal(name=contract.DEACTIVATE)
    def deactivate(self, *payload: Any) -> None:
        self.inbox.append(intake.deactivation(*payload))

    @workflow.signal(name=contract.ACTIVATE)
    def activate(self, *payload: Any) -> None:
        self.inbox.append(intake.activation(*payload))

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
        if input.state is None:
            wl.stamp_submission(self.state, input.workload, workflow.info().workflow_start_time)
        await self._settle([lc.Started()])
        while not (wl.is_finished(self.state) or self.state.deleted):
            self.timer.set(lc.next_wake(self.state))
            self.moment.set(lc.notice_due(self.state))
            await workflow.wait_condition(
                lambda: bool(self.inbox) or self.timer.fired is not None or self.moment.fired is not None
                or (continue_as_new_due() and lc.may_continue_as_new(self.state))
            )
            fired, moment = self.timer.take(), self.moment.take()
            if self.inbox or fired is not None or moment is not None:
                events, self.inbox = self.inbox, []
                self.taken += len(events)
                if fired is not None or moment is not None:
                    events.append(lc.TimerFired(at=fired or moment))
                await self._settle(events)
                self.handled = self.taken
                continue
            await self._told()
            await workflow.wait_condition(workflow.all_handlers_finished)
            if not self.inbox:
                continue_as_new(WorkloadInput(workload=input.workload, state=self.state))
        self.timer.set(None)
        self.moment.set(None)
        if self.runner is not None:
            # Its runner finished it and is returning from `start_workload`: completing before that
            # completion arrives would have the task refused when it arrives meanwhile.
            await workflow.wait_condition(lambda: self.runner is None)
        await self._told()
        await workflow.wait_condition(workflow.all_handlers_finished)
        return self.state.report()

    async def _settle(self, events: list[lc.Event]) -> None:
        """Step the events through lifecycle's Driver, carrying out each command it hands out."""
        driver = lc.Driver(self.state, events, workflow.now(), workflow.random().random)
        while (command := driver.next()) is not None:
            driver.answer(await self._execute(command))
        self.state = driver.state
        self._publish()

    async def _execute(self, c: lc.Command) -> list[lc.Event]:
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
            # it stands for would have.
            return [lc.EnqueueResolved(ticket=c.request.entry.ticket, resolution=resolution),
                    *(intake.notice(contract.PENDING_STATUS, n) for n in resolution.notices)]
        if isinstance(c, lc.TellQueue):
            await self._told()
            queue = contract.cluster_queue_id(c.cluster_queue)
            if c.signal == contract.ADMITTED:
                # A signal the task does not wait for: the task that sends it completes at once.
                self.telling = asyncio.ensure_future(_signal(queue, c.signal, c.request))
            else:
                # By local activity, in the task that decides it, started and not awaited: what the
                # same step decides next (a runner's stop, the published status) is carried out before
                # its result comes, which the SDK may deliver in a later task, after events that came
                # meanwhile. Sent again if the task is retried (the ClusterQueue ignores a notice it
                # has had); the activity sends it in its worker's next `take_messages` update
                # (activities/mail.py), and a refusal is tried again for as long as it takes: in the
                # task for a few seconds, then after durable timers.
                notice = Delivery(workflow_id=queue, signal=c.signal, payload=c.request.to_wire())
                self.telling = workflow.start_local_activity(
                    contract.DELIVER_SIGNALS, DeliveryBatch(deliveries=[notice]), result_type=DeliveryReport,
                    start_to_close_timeout=timedelta(seconds=30), retry_policy=NOTICE_RETRY,
                    local_retry_threshold=timedelta(seconds=5), summary=f"{c.signal} to ClusterQueue {c.cluster_queue}",
                )
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

    async def _told(self) -> None:
        """The notice sent without waiting has reached its queue (at once when it already has)."""
        if self.telling is not None:
            telling, self.telling = self.telling, None
            await telling

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
                self.inbox.append(intake.controller_answer(name, req.attempt, result, error))

        handle.add_done_callback(done)

    async def _start_provisioning(self, c: lc.StartProvisioning) -> list[lc.Event]:
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
                check=a.check, attempt=a.attempt, workflow_id=a.workflow_id,
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
            result, error, ending = None, "", "returned"
            try:
                result = task.result()
            except ActivityError as err:
                error, ending = _message(err), _runner_ending(err)
            except asyncio.CancelledError:
                error, ending = "cancelled", "failed"
            if self.runner is not handle:
                return  # stopped by this workflow: the admission is over
            self.runner = None
            # It stopped on its own: the runner died, shut down, gave up, or the run is over (with
            # its finish, when it returned one).
            self.inbox.extend(intake.runner_ended(admission, result, ending, error))

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
        """Search attributes, the memo and current details follow the state (current details also
        after replay and continue-as-new, where they start empty). Only attributes and memo keys
        that differ from what this run already has are upserted: the client sets most attributes
        at start."""
        st = self.state
        self.memo.publish(lambda: memos.workload(st))
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


def _runner_ending(err: ActivityError) -> Literal["failed", "lost", "drained"]:
    """How a failed `start_workload` ended, in lifecycle's terms: `lost` when its heartbeats stopped,
    `drained` when its runner's own shutdown ended it (the SDKs' `WorkerShutdown` failure)."""
    cause = err.cause
    if isinstance(cause, TemporalTimeout) and cause.type == TimeoutType.HEARTBEAT:
        return "lost"
    if isinstance(cause, ApplicationError) and cause.type == WORKER_SHUTDOWN:
        return "drained"
    return "failed"


def _message(err: ActivityError) -> str:
    cause = err.cause
    return (cause.message if isinstance(cause, ApplicationError) else str(cause or err)) or type(cause).__name__

