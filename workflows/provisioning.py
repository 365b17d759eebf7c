"""ProvisioningCheckWorkflow (`provisioning/<namespace>/<workload>/<check>/<attempt>`): one
ProvisioningRequest attempt, from creation to deletion.

It creates the PodTemplates and the request through the configured backend, then tells its
workload every change of the request's status, which it learns from the backend's pushes (the
simulated autoscaler signals it) or by watching (Kubernetes). The workload decides what the
conditions mean (admitflow.admission.provisioning); this workflow only carries them, and deletes
the request when the workload says so or is gone.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from admitflow import contract
    from admitflow.admission import provisioning
    from admitflow.api.provisioning_request import ProvisioningRequest
    from admitflow.messages import (
        CreatedProvisioningRequest,
        CreateProvisioningRequest,
        ProvisioningNotice,
        ProvisioningCheckInput,
        ProvisioningRequestRef,
        ProvisioningUpdate,
        WatchedProvisioningRequest,
        WatchProvisioningRequest,
    )

# Transient backend errors are retried for as long as it takes; a permanent one (the API server
# refuses the object) is reported on the check and tried again after this long, as Kueue's
# reconcile does.
_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(minutes=1))
_AFTER_REFUSAL = timedelta(minutes=1)
_DELETE_BOUND = timedelta(minutes=10)


@workflow.defn(name=contract.PROVISIONING_CHECK_WORKFLOW)
class ProvisioningCheckWorkflow:
    @workflow.init
    def __init__(self, input: ProvisioningCheckInput) -> None:
        self.pushed: list[ProvisioningRequest] = []
        self.deleting = False
        self.scheduled = input.scheduled
        self.told_scheduled = input.scheduled

    @workflow.signal(name=contract.PROVISIONING_REQUEST_STATUS)
    def provisioning_request_status(self, request: ProvisioningRequest) -> None:
        """From a push backend (the simulated autoscaler)."""
        self.pushed.append(request)

    @workflow.signal(name=contract.PROVISIONING_CHECK_DELETE)
    def delete_provisioning_request(self, request: ProvisioningNotice) -> None:
        self.deleting = True

    @workflow.signal(name=contract.PROVISIONING_CHECK_PROBE)
    def probe(self, request: ProvisioningNotice | None = None) -> None:
        """The workload checks that this attempt still runs (a signal to a run that ended fails)."""

    @workflow.signal(name=contract.PROVISIONING_CHECK_PODS_SCHEDULED)
    def pods_scheduled(self, request: ProvisioningNotice | None = None) -> None:
        """The workload was admitted: its pods go onto the provisioned capacity."""
        self.scheduled = True

    @workflow.run
    async def run(self, input: ProvisioningCheckInput) -> None:
        self.input = input
        meta = input.request.metadata
        self.ref = ProvisioningRequestRef(namespace=meta.namespace, name=meta.name)
        latest, push = input.latest, input.push
        if latest is None:
            created = await self._create()
            if created is None:
                await self._delete()
                return
            latest, push = created.request, created.push
            if not await self._report(latest):
                await self._delete()
                return
        watch = None
        while not self.deleting:
            if self.scheduled and not self.told_scheduled:
                await workflow.execute_activity(
                    contract.PROVISIONING_PODS_SCHEDULED, self.ref, start_to_close_timeout=timedelta(minutes=1), retry_policy=_RETRY,
                    summary=f"pods of {meta.name} scheduled",
                )
                self.told_scheduled = True
            if workflow.info().is_continue_as_new_suggested() and watch is None:
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(input.model_copy(update={"latest": latest, "push": push, "scheduled": self.scheduled}))
            if push:
                await workflow.wait_condition(
                    lambda: bool(self.pushed) or self.deleting or (self.scheduled and not self.told_scheduled)
                    or workflow.info().is_continue_as_new_suggested()
                )
                changes, self.pushed = self.pushed, []
                fresh = [r for r in changes if provisioning.newer(r, latest)]
                if fresh:
                    latest = fresh[-1]
                    if not await self._report(latest):
                        break
                continue
            if watch is None:
                watch = workflow.start_activity(
                    contract.WATCH_PROVISIONING_REQUEST,
                    WatchProvisioningRequest(namespace=meta.namespace, name=meta.name, resource_version=latest.metadata.resource_version or ""),
                    result_type=WatchedProvisioningRequest,
                    start_to_close_timeout=timedelta(minutes=2),
                    heartbeat_timeout=timedelta(seconds=30),
                    retry_policy=_RETRY,
                    summary=f"watch ProvisioningRequest {meta.name}",
                )
            await workflow.wait_condition(lambda: watch.done() or self.deleting or (self.scheduled and not self.told_scheduled))
            if not watch.done():
                continue
            found = watch.result().request
            watch = None
            if found is None:
                # Deleted by someone else: the workload makes a new one if it still needs it.
                await self._report(None)
                return
            if found.metadata.resource_version != latest.metadata.resource_version:
                latest = found
                if not await self._report(latest):
                    break
        if watch is not None:
            watch.cancel()
            try:
                await watch
            except ActivityError:
                pass  # cancelled, as asked
        await self._delete()

    async def _create(self) -> CreatedProvisioningRequest | None:
        """Create the request; None if the workload said to delete it meanwhile."""
        input = self.input
        while not self.deleting:
            try:
                return await workflow.execute_activity(
                    contract.CREATE_PROVISIONING_REQUEST,
                    CreateProvisioningRequest(request=input.request, pod_templates=input.pod_templates, watcher=workflow.info().workflow_id),
                    result_type=CreatedProvisioningRequest,
                    start_to_close_timeout=timedelta(minutes=1),
                    retry_policy=_RETRY,
                    summary=f"create ProvisioningRequest {input.request.metadata.name}",
                )
            except ActivityError as err:
                cause = err.cause
                message = cause.message if isinstance(cause, ApplicationError) else str(cause or err)
                if not await self._report(None, error=f'Error creating ProvisioningRequest "{input.request.metadata.name}": {message}'):
                    return None
                await workflow.wait_condition(lambda: self.deleting, timeout=_AFTER_REFUSAL, timeout_summary="create again")
        return None

    async def _report(self, request: ProvisioningRequest | None, error: str = "") -> bool:
        """Tell the workload; False when it is gone (then the request goes too)."""
        handle = workflow.get_external_workflow_handle(self.input.parent)
        signal = contract.PROVISIONING_REQUEST_UPDATED if request is not None or error else contract.PROVISIONING_REQUEST_DELETED
        try:
            await handle.signal(signal, ProvisioningUpdate(check=self.input.check, attempt=self.input.attempt, request=request, error=error))
        except ApplicationError as err:
            if "NotFound" in (err.type or ""):
                return False
            raise
        return True

    async def _delete(self) -> None:
        """Delete the request, then tell the workload the attempt is over. A backend that keeps
        failing is given up on after _DELETE_BOUND (the request may be left behind, as the Warning
        says): the workload waits for this report before it can start the attempt again."""
        try:
            await workflow.execute_activity(
                contract.DELETE_PROVISIONING_REQUEST, self.ref, start_to_close_timeout=timedelta(minutes=1), schedule_to_close_timeout=_DELETE_BOUND,
                retry_policy=_RETRY, summary=f"delete ProvisioningRequest {self.ref.name}",
            )
        except ActivityError as err:
            workflow.logger.warning("delete_given_up", extra={"request": self.ref.name, "error": str(err.cause or err)})
        await self._report(None)
