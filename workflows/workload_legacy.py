"""The workload loop as it was before `admitflow.admission.lifecycle.step`, kept only so that
histories it wrote replay and their runs carry on until they end or continue as new (the new loop
takes their state over). `WorkloadWorkflow` runs it when `workflow.patched(LIFECYCLE_STEP)` says
the history predates the new loop. Do not change what it does: delete it once no run that started
before the change is left (docs/operations.md says how to tell).

It takes the same events as the new loop (the workflow's handlers are shared) and turns them back
into the messages it used to read.
"""

import asyncio
from datetime import timedelta
from typing import Any

from pydantic import ValidationError

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, WorkflowAlreadyStartedError
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from admitflow import ids
    from admitflow.admission import checks
    from admitflow.admission import lifecycle as lc
    from admitflow.admission import pod_set_updates
    from admitflow.admission import pods_ready
    from admitflow.admission import provisioning
    from admitflow.admission import workload as wl
    from admitflow.admission.catalog import QueueResolution
    from admitflow.admission.cluster_queue import Notice, QueueEntry
    from admitflow.admission.workload import WorkloadReport
    from admitflow.messages import (
        DeleteWorkload,
        EnqueueRequest,
        FinishRequest,
        GateSettled,
        ProvisioningCheckInput,
        ProvisioningNotice,
        ProvisioningUpdate,
        QueueAvailable,
        ReleaseRequest,
        StartWorkload,
        StopWorkload,
        WorkloadInput,
    )

ENQUEUE = "enqueue_workload"
ADMISSION_CHECK = "admission_check"
CHECK_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(minutes=1), maximum_attempts=0)
CHECK_TIMEOUT = timedelta(minutes=5)
START_AGAIN = timedelta(seconds=2)
START_WORKLOAD = "start_workload"
STOP_WORKLOAD = "stop_workload"
NO_EVICTION_AFTER_FINISH = "no-eviction-after-finish"
CREATED_AT_SUBMISSION = "created-at-submission"
LIMITED_ATTEMPT_IDS = "limited-attempt-ids"
RUNNER_HEARTBEAT_TIMEOUT = timedelta(seconds=10)
RUNNER_RUN_TIMEOUT = timedelta(days=365)

_QUEUE_KINDS = {
    "quota_reserved": "reserved", "pending_status": "pending", "dequeued": "dequeued", "evicted": "evicted",
    "admission_checks_changed": "checks",
}


def _message(event: Any) -> tuple[str, Any]:
    """An event as the message this loop read before; one it could not have decoded is dropped,
    as the SDK dropped it then."""
    try:
        return _decoded(event)
    except ValidationError:
        return "unknown", None


def _decoded(event: Any) -> tuple[str, Any]:
    if isinstance(event, lc.QueueNoticed):
        return _QUEUE_KINDS[event.signal], Notice.model_validate(event.payload)
    if isinstance(event, lc.QueueAppeared):
        return "queue_available", QueueAvailable()
    if isinstance(event, lc.VerdictReceived):
        return "verdict", event.payload
    if isinstance(event, lc.ControllerAnswered):
        return "answer", (event.check, event.attempt, event.result, event.error)
    if isinstance(event, lc.ProvisioningReported):
        return "provreq", ProvisioningUpdate.model_validate(event.payload)
    if isinstance(event, lc.ProvisioningEnded):
        return "provreq_deleted", ProvisioningUpdate.model_validate(event.payload)
    if isinstance(event, lc.PodsReadyReported):
        return "pods_ready", event.payload
    if isinstance(event, lc.RunnerStopped):
        return "runner_lost", (event.admission, event.error)
    if isinstance(event, lc.Deactivated):
        return "deactivate", None
    if isinstance(event, lc.Activated):
        return "activate", None
    if isinstance(event, lc.FinishRequested):
        return "finish", FinishRequest.model_validate(event.payload)
    if isinstance(event, lc.DeleteRequested):
        return "delete", DeleteWorkload.model_validate(event.payload or {})
    return "unknown", event


class LegacyLoop:
    """Mixed into WorkloadWorkflow: the loop, with its own in-flight bookkeeping."""

    def _v0_init(self) -> None:
        self.v0_asking: dict[str, tuple[int, workflow.ActivityHandle]] = {}
        self.v0_start_again = False
        self.v0_running: workflow.ActivityHandle | None = None

    async def _v0_run(self, input: WorkloadInput) -> WorkloadReport:
        if input.state is None and workflow.patched(CREATED_AT_SUBMISSION):
            wl.stamp_submission(self.state, input.workload, workflow.info().workflow_start_time)
        self._publish()
        while not (wl.is_finished(self.state) or self.state.deleted):
            await self._v0_provision()
            self._v0_ask_controllers()
            await self._v0_settle_pods()
            if checks.finish_backoff_if_due(self.state, workflow.now()):
                self._publish()
            if self._v0_needs_enqueue():
                await self._v0_enqueue()
                self._publish()
                continue
            timeout, summary = self._v0_next_timer()
            try:
                await workflow.wait_condition(
                    # A workload running on a runner does not continue as new: its run is tied to this
                    # workflow run. Few messages arrive while it runs.
                    lambda: bool(self.inbox) or (workflow.info().is_continue_as_new_suggested() and self.v0_running is None),
                    timeout=timeout,
                    timeout_summary=summary,
                )
            except asyncio.TimeoutError:
                await self._v0_time_out_pods()
                continue  # the backoff is over, an attempt can be started again, or pods timed out
            if not self.inbox:
                await workflow.wait_condition(workflow.all_handlers_finished)
                if not self.inbox:
                    workflow.continue_as_new(WorkloadInput(workload=input.workload, state=self.state))
            await self._v0_drain_inbox()
            self._publish()
        await self._v0_provision()
        self._v0_ask_controllers()
        await self._v0_settle_pods()
        return self.state.report()

    def _v0_next_timer(self) -> tuple[timedelta | None, str | None]:
        """The first of: the end of the backoff, the PodsReady timeout, starting a ProvisioningRequest
        attempt again."""
        st = self.state
        now = workflow.now()
        timers: list[tuple[timedelta, str]] = []
        if checks.in_backoff(st):
            timers.append((checks.requeue_at(st) - now, checks.backoff_summary(st)))
        due = pods_ready.deadline(st, st.wait_for_pods_ready)
        if due is not None:
            timers.append((due[0] - now, pods_ready.timer_summary(st.wait_for_pods_ready, due[1])))
        if self.v0_start_again:
            timers.append((START_AGAIN, "start the ProvisioningRequest attempt again"))
        self.v0_start_again = False
        if not timers:
            return None, None
        timeout, summary = min(timers, key=lambda t: t[0])
        return max(timeout, timedelta(milliseconds=1)), summary

    async def _v0_time_out_pods(self) -> None:
        """The PodsReady timeout, if it is the timer that fired: evict or deactivate (Kueue's rules)."""
        st = self.state
        now = workflow.now()
        due = pods_ready.deadline(st, st.wait_for_pods_ready)
        if due is None or due[0] > now:
            return
        if pods_ready.time_out(st, st.wait_for_pods_ready, due[1], now, workflow.random().random()):
            await self._v0_release()
        self._publish()

    async def _v0_settle_pods(self) -> None:
        """Carry out what the workload's pods call for: the runner starts an admitted workload and
        stops one that is no longer admitted; the blockAdmission gate hears when a workload it
        counted as not ready is ready or gave its quota back."""
        st = self.state
        runner = wl.runner_of(st)
        command = pods_ready.runner_command(st, running=self.v0_running is not None)
        if command == "start":
            self._v0_start_runner(runner)
        elif command == "stop" and self.v0_running is not None:
            self.v0_running.cancel()
            self.v0_running = None
            stopping = workflow.start_activity(
                STOP_WORKLOAD,
                StopWorkload(workflow_id=workflow.info().workflow_id, admission=st.runner_started, reason=wl.phase(st),
                             message=wl.condition_summary(st)),
                task_queue=runner,
                schedule_to_close_timeout=timedelta(minutes=5),
                summary=f"stop on runner {runner} (admission {st.runner_started})",
            )
            # Nothing waits for it: a runner that cannot be reached has had its run cancelled already.
            stopping.add_done_callback(lambda task: task.cancelled() or task.exception())
        if pods_ready.leaves_gate(st):
            st.gated = False
            try:
                await workflow.get_external_workflow_handle(ids.PODS_READY_GATE_ID).signal(
                    "settled", GateSettled(key=st.key, uid=st.workload.metadata.uid, ticket=st.ticket)
                )
            except ApplicationError as err:
                if "NotFound" not in (err.type or ""):
                    raise

    def _v0_start_runner(self, runner: str) -> None:
        st = self.state
        st.runner_started = st.ticket
        handle = workflow.start_activity(
            START_WORKLOAD,
            StartWorkload(
                workflow_id=workflow.info().workflow_id, admission=st.ticket, workload=st.workload.to_wire(),
                pod_sets_info=st.pod_sets_info or [],
            ),
            task_queue=runner,
            start_to_close_timeout=RUNNER_RUN_TIMEOUT,
            heartbeat_timeout=RUNNER_HEARTBEAT_TIMEOUT,
            retry_policy=RetryPolicy(maximum_attempts=1),
            summary=f"start on runner {runner} (admission {st.ticket})",
        )
        self.v0_running = handle
        admission = st.ticket

        def done(task: Any) -> None:
            error = None
            try:
                task.result()
            except ActivityError as err:
                error = _message_of(err)
            except asyncio.CancelledError:
                error = "cancelled"
            if self.v0_running is not handle:
                return  # this workflow cancelled it: the admission is over
            self.v0_running = None
            if error is not None:
                # It stopped on its own: the runner died, shut down, or gave up.
                self.inbox.append(lc.RunnerStopped(admission=admission, error=error))

        handle.add_done_callback(done)

    async def _v0_provision(self) -> None:
        """The built-in ProvisioningRequest check: start and delete attempts as the pure reconcile
        says, and apply the check states that need no request."""
        st = self.state
        held, queued, admitted = wl.has_quota(st), st.queued, wl.is_admitted(st)
        cmds, verdicts = provisioning.reconcile(st)
        now = workflow.now()
        for v in verdicts:
            checks.apply(st, v, now, workflow.random().random())
        for attempt in cmds.stop:
            if not await self._v0_signal_child(attempt.workflow_id, "delete_provisioning_request", ProvisioningNotice(reason=wl.phase(st))):
                provisioning.stopped(st, attempt.check, attempt.attempt)  # it had ended already
        for plan in cmds.start:
            a = plan.attempt
            meta = st.workload.metadata
            uncut = provisioning.workflow_id(meta.namespace, meta.name, a.check, a.attempt, limited=False)
            if a.workflow_id != uncut and not workflow.patched(LIMITED_ATTEMPT_IDS):
                a.workflow_id = st.provisioning[a.check].workflow_id = uncut
            try:
                await workflow.start_child_workflow(
                    "ProvisioningCheckWorkflow",
                    ProvisioningCheckInput(
                        parent=workflow.info().workflow_id, check=a.check, attempt=a.attempt,
                        request=plan.request, pod_templates=plan.pod_templates,
                    ),
                    id=a.workflow_id,
                    # It outlives a continue-as-new of this workflow; the workload ends it itself.
                    parent_close_policy=ParentClosePolicy.ABANDON,
                    static_summary=f"ProvisioningRequest {a.name}",
                )
            except WorkflowAlreadyStartedError:
                # An earlier run of this attempt (its request was deleted by someone else, and it
                # is ending) still holds the ID: tell it to go, and try again shortly.
                st.provisioning.pop(a.check, None)
                await self._v0_signal_child(a.workflow_id, "delete_provisioning_request", ProvisioningNotice(reason="restart"))
                self.v0_start_again = True
        if verdicts:
            await self._v0_settle(held, queued, admitted)

    def _v0_ask_controllers(self) -> None:
        """Ask the controllers of the checks that wait for them, and cancel what is no longer
        needed: the check was answered by a signal, or the workload lost its quota or finished."""
        wanted = checks.to_ask(self.state)
        for name, (_, handle) in list(self.v0_asking.items()):
            if name not in wanted:
                del self.v0_asking[name]
                handle.cancel()
        for name in wanted:
            if name not in self.v0_asking:
                self._v0_ask(name)

    def _v0_ask(self, name: str) -> None:
        req = checks.request(self.state, name, workflow.info().workflow_id)
        handle = workflow.start_activity(
            ADMISSION_CHECK,
            req,
            task_queue=self.state.checks_info[name].controller_name,
            start_to_close_timeout=CHECK_TIMEOUT,
            retry_policy=CHECK_RETRY,
            summary=f"check {name} (attempt {req.attempt})",
        )
        self.v0_asking[name] = (req.attempt, handle)

        def done(task: Any) -> None:
            result, error = None, ""
            try:
                result = task.result()
            except ActivityError as err:
                if isinstance(err.cause, CancelledError):
                    return
                error = _message_of(err)  # only a non-retryable error ends the retries: it counts as Retry
            except asyncio.CancelledError:
                return
            if self.v0_asking.get(name, (0, None))[1] is handle:  # else a verdict, an eviction or the finish came first
                self.inbox.append(lc.ControllerAnswered(check=name, attempt=req.attempt, result=result, error=error))

        handle.add_done_callback(done)

    def _v0_needs_enqueue(self) -> bool:
        st = self.state
        return (
            st.workload.spec.active is not False
            and not wl.has_quota(st)
            and not st.queued
            and not st.waiting_for_queue
            and not checks.in_backoff(st)
        )

    async def _v0_enqueue(self) -> None:
        st = self.state
        spec = st.workload.spec
        st.ticket += 1
        entry = QueueEntry(
            key=st.key,
            uid=st.workload.metadata.uid,
            ticket=st.ticket,
            local_queue=spec.queue_name or "",
            priority=spec.priority or 0,
            timestamp=wl.queue_timestamp(st),
            pod_sets=st.pod_set_requests(),
        )
        # A local activity: no extra round trip through the server before the workload is queued.
        resolution: QueueResolution = await workflow.execute_local_activity(
            ENQUEUE,
            EnqueueRequest(
                namespace=st.workload.metadata.namespace,
                local_queue=spec.queue_name or "",
                workflow_id=workflow.info().workflow_id,
                entry=entry,
                fresh=st.sent_back,
            ),
            result_type=QueueResolution,
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=RetryPolicy(maximum_interval=timedelta(seconds=10)),
            summary=f"enqueue in LocalQueue {spec.queue_name}",
        )
        now = workflow.now()
        if resolution.reason:
            # The catalog now knows to wake this workload when the queue exists.
            st.waiting_for_queue = True
            if resolution.cluster_queue:
                st.cluster_queue = resolution.cluster_queue
            wl.set_pending(st, resolution.reason, resolution.message, now)
            return
        st.cluster_queue = resolution.cluster_queue
        st.queued = True
        st.sent_back = False

    async def _v0_drain_inbox(self) -> None:
        now = workflow.now()
        events, self.inbox = self.inbox, []
        self.taken += len(events)
        for kind, m in map(_message, events):
            st = self.state
            held, queued, admitted = wl.has_quota(st), st.queued, wl.is_admitted(st)
            if kind == "reserved" and wl.accepts(st, m):
                wl.reserve_quota(st, m, now)
            elif kind == "pending" and wl.accepts(st, m):
                wl.set_pending(st, m.reason, m.message, now)
                wl.take_checks_before_reservation(st, m.admission_checks, now)
            elif kind == "checks" and self._v0_accepts_eviction(st, m):
                wl.take_checks(st, m, now)
                checks.reconcile(st, now)
            elif kind == "verdict":
                checks.receive(st, m, now, workflow.random().random())
            elif kind == "answer":
                name, attempt, result, error = m
                if self.v0_asking.get(name, (0, None))[0] == attempt:
                    del self.v0_asking[name]
                checks.answer(st, name, attempt, result, error, now, workflow.random().random())
            elif kind == "provreq":
                provisioning.report(st, m.check, m.attempt, m.request, m.error, now, workflow.random().random())
            elif kind == "provreq_deleted":
                provisioning.stopped(st, m.check, m.attempt)
            elif kind == "pods_ready":
                try:
                    pods_ready.report(st, m, now)
                except pods_ready.PodsReadyError as err:
                    wl.record(st, "InvalidPodsReadyReport", str(err), now, "Warning")
            elif kind == "runner_lost":
                admission, error = m
                if admission == st.ticket:
                    pods_ready.runner_lost(st, error, now)
            elif kind == "deactivate":
                if st.workload.spec.active is not False:
                    checks.deactivate(st, now)
            elif kind == "activate":
                checks.activate(st, now)
            elif kind == "dequeued" and wl.accepts(st, m):
                wl.sent_back(st, m.reason, m.message, now)
            elif kind == "evicted" and self._v0_accepts_eviction(st, m):
                if wl.evict(st, m.reason, m.message, now, preemption_reason=m.preemption_reason):
                    await self._v0_release()
            elif kind == "queue_available":
                st.waiting_for_queue = False
            elif kind == "finish":
                if wl.finish(st, m.succeeded, m.message, now):
                    await self._v0_release()
            elif kind == "delete":
                if wl.delete(st):
                    await self._v0_release()
            if kind in ("reserved", "checks", "verdict", "answer", "deactivate", "provreq"):
                # Admitted along with a reservation without checks: the queue already counts it.
                told = kind == "reserved" and not m.admission_checks
                await self._v0_settle(held, queued, admitted, queue_knows=told)
            self.handled += 1

    async def _v0_signal_child(self, workflow_id: str, signal: str, payload: Any) -> bool:
        """Signal a ProvisioningCheckWorkflow; False when it has ended."""
        try:
            await workflow.get_external_workflow_handle(workflow_id).signal(signal, payload)
        except ApplicationError as err:
            if "NotFound" not in (err.type or ""):
                raise
            return False
        return True

    async def _v0_settle(self, held: bool, queued: bool, admitted: bool, queue_knows: bool = False) -> None:
        """Carry out what a check-driven change calls for: a workload newly admitted gets its pods'
        start information and its queue is told; quota or a place given up is released."""
        st = self.state
        if not admitted and wl.is_admitted(st):
            try:
                wl.set_pod_sets_info(st)
            except pod_set_updates.PodSetUpdateConflict as err:
                if wl.finish(st, False, str(err), workflow.now(), reason="FailedToStart"):
                    await self._v0_release()
                return
            if not queue_knows:
                await self._v0_signal_queue("admitted")
            for a in list(st.provisioning.values()):
                await self._v0_signal_child(a.workflow_id, "pods_scheduled", ProvisioningNotice(reason="Admitted"))
        if (held or queued) and not (wl.has_quota(st) or st.queued):
            await self._v0_release()

    def _v0_accepts_eviction(self, st: wl.WorkloadState, m: Notice) -> bool:
        if wl.accepts_eviction(st, m):
            return True
        # A finished workload used to be evicted too; histories that did so replay it.
        return wl.evicts_reservation(st, m) and not workflow.patched(NO_EVICTION_AFTER_FINISH)

    async def _v0_release(self) -> None:
        """Tell the ClusterQueue to take back our quota or our place."""
        await self._v0_signal_queue("release")

    async def _v0_signal_queue(self, signal: str) -> None:
        """Tell the ClusterQueue about our ticket. Only a queue that is gone frees us from it; a
        refusal (its per-run signal limit, while it continues as new) is tried again, or the quota
        would stay held for good."""
        st = self.state
        handle = workflow.get_external_workflow_handle(ids.cluster_queue_id(st.cluster_queue))
        request = ReleaseRequest(key=st.key, uid=st.workload.metadata.uid, ticket=st.ticket)
        delay = timedelta(seconds=1)
        while True:
            try:
                await handle.signal(signal, request)
                return
            except ApplicationError as err:
                if "NotFound" in (err.type or ""):
                    return
                workflow.logger.warning("release_refused", extra={"cluster_queue": st.cluster_queue, "error": str(err)})
            await workflow.sleep(delay, summary=f"retry {signal} in ClusterQueue {st.cluster_queue}")
            delay = min(delay * 2, timedelta(minutes=1))


def _message_of(err: ActivityError) -> str:
    cause = err.cause
    return (cause.message if isinstance(cause, ApplicationError) else str(cause or err)) or type(cause).__name__
