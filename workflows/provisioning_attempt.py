"""ProvisioningCheckWorkflow (`provisioning/<namespace>/<workload>/<check>/<attempt>`): one
ProvisioningRequest attempt, from creation to deletion.

It creates the PodTemplates and the request through the configured backend, then tells its
workload every change of the request's status, which it learns from the backend's pushes (the
simulated autoscaler signals it) or by watching (Kubernetes). The workload decides what the
conditions mean (admitflow.admission.provisioning); this workflow only carries them, and deletes
the request when the workload says so or is gone.

Decide, then execute: every handler only turns its message into an event; the loop steps the
events through `admitflow.admission.provisioning_attempt.step`, which owns every rule, and carries
out the commands it returns.

No `from __future__ import annotations` here (see workflows/lifecycle.py).
"""

import asyncio
import json
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from admitflow import contract
    from admitflow.admission import provisioning_attempt as pa
    from admitflow.api.provisioning_request import ProvisioningRequest
    from admitflow.messages import (
        CreatedProvisioningRequest,
        CreateProvisioningRequest,
        ProvisioningCheckInput,
        ProvisioningNotice,
        ProvisioningRequestRef,
        WatchedProvisioningRequest,
        WatchProvisioningRequest,
    )
    from admitflow.admission.protocol import ProvisioningUpdate

    from admitflow.workflows import arguments
    from admitflow.wire import after
    from admitflow.workflows.timer import Timer

# Transient backend errors are retried for as long as it takes; a permanent one (the API server
# refuses the object) comes back as `CreateFailed`, which the attempt tries again after a minute.
_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(minutes=1))
_DELETE_BOUND = timedelta(minutes=10)
# Create, delete and pods_scheduled heartbeat while they run (activities/heartbeat.py): a worker that
# dies in one is noticed after this, not after their start-to-close (a minute), and the call goes to
# another worker. 10 s as the delivery's (workflows/outbox.py), for the same reasons.
_LOST_WORKER = timedelta(seconds=10)
# Follow-up events (an activity's answer, the workload found gone) settle again; this many rounds
# in one batch at most, the rest waits for the next message or timer.
MAX_ROUNDS = 20


@workflow.defn(name=contract.PROVISIONING_CHECK_WORKFLOW)
class ProvisioningCheckWorkflow:
    @workflow.init
    def __init__(self, input: ProvisioningCheckInput) -> None:
        self.input = input
        self.state = _state_of(input)
        self.inbox: list[Any] = []
        # What is under way in this run (never carried: Started orders it again).
        self.watch: workflow.ActivityHandle | None = None
        self.watch_error: BaseException | None = None
        self.timer = Timer()
        self.noted = self.state.not_applied[-1] if self.state.not_applied else None  # logged by its run

    # --- messages: each one an event -------------------------------------------------------------
    # Each takes `*payload` and parses it (workflows/arguments.py): a message that is not what it
    # takes is dropped with a logged one-line reason instead of failing the workflow task. The
    # notices' `{reason}` is optional: null (which the SDK always passed through) or nothing is `{}`.

    @workflow.signal(name=contract.PROVISIONING_REQUEST_STATUS)
    def provisioning_request_status(self, *payload: Any) -> None:
        """From a push backend (the simulated autoscaler)."""
        request = arguments.signal(contract.PROVISIONING_REQUEST_STATUS, payload, ProvisioningRequest)
        if request is not None:
            self.inbox.append(pa.Pushed(request=request))

    @workflow.signal(name=contract.PROVISIONING_CHECK_DELETE)
    def delete_provisioning_request(self, *payload: Any) -> None:
        if arguments.signal(contract.PROVISIONING_CHECK_DELETE, payload, ProvisioningNotice, optional=True) is not None:
            self.inbox.append(pa.DeleteAsked())

    @workflow.signal(name=contract.PROVISIONING_CHECK_PROBE)
    def probe(self, *payload: Any) -> None:
        """The workload checks that this attempt still runs (a signal to a run that ended fails)."""
        arguments.signal(contract.PROVISIONING_CHECK_PROBE, payload, ProvisioningNotice, optional=True)

    @workflow.signal(name=contract.PROVISIONING_CHECK_PODS_SCHEDULED)
    def pods_scheduled(self, *payload: Any) -> None:
        """The workload was admitted: its pods go onto the provisioned capacity."""
        if arguments.signal(contract.PROVISIONING_CHECK_PODS_SCHEDULED, payload, ProvisioningNotice, optional=True) is not None:
            self.inbox.append(pa.PodsScheduledAsked())

    # --- the loop ----------------------------------------------------------------------------------

    @workflow.run
    async def run(self, input: ProvisioningCheckInput) -> None:
        await self._settle([pa.Started()])
        while not self.state.done:
            self.timer.set(pa.next_wake(self.state))
            await workflow.wait_condition(
                lambda: bool(self.inbox) or self.timer.fired is not None
                or (workflow.info().is_continue_as_new_suggested() and pa.may_continue_as_new(self.state))
            )
            events, self.inbox = self.inbox, []
            fired = self.timer.take()
            if fired is not None:
                events.append(pa.TimerFired(at=fired))
            await self._settle(events)
        self.timer.set(None)

    async def _settle(self, events: list[Any]) -> None:
        """Step the events and a Settle, carrying out each step's commands; what those commands
        answer (an activity's result, the workload found gone) is stepped next, then settled."""
        pending = [*events, None]  # None: a Settle, made when its turn comes
        rounds = 0
        while pending:
            event = pending.pop(0)
            if event is None:
                event = pa.Settle(continue_as_new_suggested=workflow.info().is_continue_as_new_suggested())
            self.state, commands = pa.step(self.state, event, workflow.now(), workflow.random().random())
            self._log()
            answers: list[Any] = []
            for command in commands:
                answers += await self._execute(command)
            if answers:
                pending[0:0] = answers
                if isinstance(event, pa.Settle) and rounds < MAX_ROUNDS:
                    rounds += 1
                    pending.append(None)

    async def _execute(self, c: Any) -> list[Any]:
        """Carry out one command; returns the events it answered with."""
        st = self.state
        name = st.request.metadata.name
        ref = ProvisioningRequestRef(namespace=st.request.metadata.namespace, name=name)
        if isinstance(c, pa.Create):
            try:
                created = await workflow.execute_activity(
                    contract.CREATE_PROVISIONING_REQUEST,
                    CreateProvisioningRequest(request=c.request, pod_templates=c.pod_templates, watcher=workflow.info().workflow_id),
                    result_type=CreatedProvisioningRequest,
                    start_to_close_timeout=timedelta(minutes=1),
                    heartbeat_timeout=_LOST_WORKER,
                    retry_policy=_RETRY,
                    summary=f"create ProvisioningRequest {name}",
                )
            except ActivityError as err:
                return [pa.CreateFailed(error=_message(err))]
            return [pa.Created(request=created.request, push=created.push)]
        if isinstance(c, pa.Report):
            return await self._report(c)
        if isinstance(c, pa.Watch):
            self._watch(c, ref)
        elif isinstance(c, pa.StopWatching):
            handle, self.watch = self.watch, None
            if handle is not None:
                handle.cancel()
                try:
                    await handle
                except ActivityError:
                    pass  # cancelled, as asked
        elif isinstance(c, pa.TellPodsScheduled):
            await workflow.execute_activity(
                contract.PROVISIONING_PODS_SCHEDULED, ref, start_to_close_timeout=timedelta(minutes=1), heartbeat_timeout=_LOST_WORKER,
                retry_policy=_RETRY, summary=f"pods of {name} scheduled",
            )
            return [pa.PodsScheduledTold()]
        elif isinstance(c, pa.Delete):
            # A backend that keeps failing is given up on after _DELETE_BOUND (the request may be
            # left behind, as the Warning says): the workload waits for the report that follows
            # before it can start the attempt again.
            try:
                await workflow.execute_activity(
                    contract.DELETE_PROVISIONING_REQUEST, ref, start_to_close_timeout=timedelta(minutes=1), schedule_to_close_timeout=_DELETE_BOUND,
                    heartbeat_timeout=_LOST_WORKER, retry_policy=_RETRY, summary=f"delete ProvisioningRequest {name}",
                )
            except ActivityError as err:
                workflow.logger.warning("delete_given_up", extra={"request": name, "error": str(err.cause or err)})
                return [pa.Deleted(error=str(err.cause or err))]
            return [pa.Deleted()]
        elif isinstance(c, pa.ContinueAsNew):
            await workflow.wait_condition(workflow.all_handlers_finished)
            if not self.inbox:
                workflow.continue_as_new(self.input.model_copy(update={
                    "state": st.to_wire(), "latest": st.latest, "push": st.push, "scheduled": st.scheduled_told,
                }))
        elif isinstance(c, pa.Finish):
            self.timer.set(None)
            if c.error:
                # A watch that failed for good fails the run, as it always has.
                raise self.watch_error if self.watch_error is not None else ApplicationError(c.error)
        return []

    async def _report(self, c: pa.Report) -> list[Any]:
        """Tell the workload; it answers ParentGone when the workload is gone."""
        st = self.state
        handle = workflow.get_external_workflow_handle(st.parent)
        signal = contract.PROVISIONING_REQUEST_DELETED if c.deleted else contract.PROVISIONING_REQUEST_UPDATED
        try:
            await handle.signal(signal, ProvisioningUpdate(check=st.check, attempt=st.attempt, request=c.request, error=c.error))
        except ApplicationError as err:
            if "NotFound" in (err.type or ""):
                return [pa.ParentGone()]
            raise
        return []

    def _watch(self, c: pa.Watch, ref: ProvisioningRequestRef) -> None:
        handle = workflow.start_activity(
            contract.WATCH_PROVISIONING_REQUEST,
            WatchProvisioningRequest(namespace=ref.namespace, name=ref.name, resource_version=c.resource_version),
            result_type=WatchedProvisioningRequest,
            start_to_close_timeout=timedelta(minutes=2),
            heartbeat_timeout=timedelta(seconds=30),
            retry_policy=_RETRY,
            summary=f"watch ProvisioningRequest {ref.name}",
        )
        self.watch = handle

        def done(task: Any) -> None:
            if self.watch is not handle:
                return  # stopped by this workflow: its result is no news
            self.watch = None
            try:
                found = task.result().request
            except ActivityError as err:
                self.watch_error = err
                self.inbox.append(pa.WatchFailed(error=_message(err)))
                return
            except asyncio.CancelledError:
                self.inbox.append(pa.WatchFailed(error="watch cancelled"))
                return
            self.inbox.append(pa.Watched(request=found))

        handle.add_done_callback(done)

    def _log(self) -> None:
        """Each event step could not apply, as a Warning log line. `workflow.logger` writes nothing
        while replaying."""
        notes = self.state.not_applied
        for note in after(notes, self.noted):
            workflow.logger.warning("event_not_applied", extra={"workflow_id": workflow.info().workflow_id, "detail": note})
        self.noted = notes[-1] if notes else None


def _state_of(input: ProvisioningCheckInput) -> pa.AttemptState:
    """The carried state, or a new one (from what a run of the loop before `step` carried)."""
    if input.state is not None:
        # As JSON, the way it travelled: the Kubernetes objects in it validate strictly.
        return pa.AttemptState.model_validate_json(json.dumps(input.state))
    return pa.new_state(
        input.parent, input.check, input.attempt, input.request, input.pod_templates,
        latest=input.latest, push=input.push, scheduled=input.scheduled,
    )


def _message(err: ActivityError) -> str:
    cause = err.cause
    return cause.message if isinstance(cause, ApplicationError) else str(cause or err)


