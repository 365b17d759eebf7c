"""The ProvisioningRequest attempt loop as it was before `admitflow.admission.provisioning_attempt.step`,
kept only so that histories it wrote replay and their runs carry on until they end or continue as
new (the new loop takes their `latest`, `push` and `scheduled` over). `ProvisioningCheckWorkflow`
runs it when `workflow.patched(PROVISIONING_STEP)` says the history predates the new loop. Do not
change what it does: delete it once no run that started before the change is left.

It takes the same events as the new loop (the workflow's handlers are shared and only append to
`self.inbox`) and reads from them the flags it used to keep: `v0_pushed`, `v0_deleting`,
`v0_scheduled`.
"""

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from admitflow import contract
    from admitflow.admission import provisioning
    from admitflow.admission import provisioning_attempt as pa
    from admitflow.api.provisioning_request import ProvisioningRequest
    from admitflow.messages import (
        CreatedProvisioningRequest,
        CreateProvisioningRequest,
        ProvisioningCheckInput,
        ProvisioningRequestRef,
        ProvisioningUpdate,
        WatchedProvisioningRequest,
        WatchProvisioningRequest,
    )

_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(minutes=1))
_AFTER_REFUSAL = timedelta(minutes=1)
_DELETE_BOUND = timedelta(minutes=10)


class LegacyLoop:
    """Mixed into ProvisioningCheckWorkflow: the loop, with the flags it kept read from the inbox."""

    def _v0_init(self, input: ProvisioningCheckInput) -> None:
        self.v0_input_scheduled = input.scheduled
        self.told_scheduled = input.scheduled

    @property
    def v0_pushed(self) -> list[ProvisioningRequest]:
        return [e.request for e in self.inbox if isinstance(e, pa.Pushed)]

    @v0_pushed.setter
    def v0_pushed(self, value: list) -> None:
        assert not value
        self.inbox = [e for e in self.inbox if not isinstance(e, pa.Pushed)]

    @property
    def v0_deleting(self) -> bool:
        return any(isinstance(e, pa.DeleteAsked) for e in self.inbox)

    @property
    def v0_scheduled(self) -> bool:
        return self.v0_input_scheduled or any(isinstance(e, pa.PodsScheduledAsked) for e in self.inbox)

    async def _v0_run(self, input: ProvisioningCheckInput) -> None:
        self.input = input
        meta = input.request.metadata
        self.ref = ProvisioningRequestRef(namespace=meta.namespace, name=meta.name)
        latest, push = input.latest, input.push
        if latest is None:
            created = await self._v0_create()
            if created is None:
                await self._v0_delete()
                return
            latest, push = created.request, created.push
            if not await self._v0_report(latest):
                await self._v0_delete()
                return
        watch = None
        while not self.v0_deleting:
            if self.v0_scheduled and not self.told_scheduled:
                await workflow.execute_activity(
                    contract.PROVISIONING_PODS_SCHEDULED, self.ref, start_to_close_timeout=timedelta(minutes=1), retry_policy=_RETRY,
                    summary=f"pods of {meta.name} scheduled",
                )
                self.told_scheduled = True
            if workflow.info().is_continue_as_new_suggested() and watch is None:
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(input.model_copy(update={"latest": latest, "push": push, "scheduled": self.v0_scheduled}))
            if push:
                await workflow.wait_condition(
                    lambda: bool(self.v0_pushed) or self.v0_deleting or (self.v0_scheduled and not self.told_scheduled)
                    or workflow.info().is_continue_as_new_suggested()
                )
                changes, self.v0_pushed = self.v0_pushed, []
                fresh = [r for r in changes if provisioning.newer(r, latest)]
                if fresh:
                    latest = fresh[-1]
                    if not await self._v0_report(latest):
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
            await workflow.wait_condition(lambda: watch.done() or self.v0_deleting or (self.v0_scheduled and not self.told_scheduled))
            if not watch.done():
                continue
            found = watch.result().request
            watch = None
            if found is None:
                # Deleted by someone else: the workload makes a new one if it still needs it.
                await self._v0_report(None)
                return
            if found.metadata.resource_version != latest.metadata.resource_version:
                latest = found
                if not await self._v0_report(latest):
                    break
        if watch is not None:
            watch.cancel()
            try:
                await watch
            except ActivityError:
                pass  # cancelled, as asked
        await self._v0_delete()

    async def _v0_create(self) -> CreatedProvisioningRequest | None:
        """Create the request; None if the workload said to delete it meanwhile."""
        input = self.input
        while not self.v0_deleting:
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
                if not await self._v0_report(None, error=f'Error creating ProvisioningRequest "{input.request.metadata.name}": {message}'):
                    return None
                await workflow.wait_condition(lambda: self.v0_deleting, timeout=_AFTER_REFUSAL, timeout_summary="create again")
        return None

    async def _v0_report(self, request: ProvisioningRequest | None, error: str = "") -> bool:
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

    async def _v0_delete(self) -> None:
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
        await self._v0_report(None)
