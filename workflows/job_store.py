"""JobWorkflow (`job/<namespace>/<name>`): a batch/v1 Job that admitflow keeps, as an apiserver keeps
one, beside the Workload Kueue's rules made from it.

The rules are `admitflow.jobs.store`'s: update `patch_job` takes a JSON merge patch of the Job or of
its status subresource (its validator refuses a stale resourceVersion with a 409 Conflict and an
invalid result with the apiserver's field errors, so a refused patch leaves no trace in the
history), and the store keeps the Job controller's `Suspended` condition and `startTime`. Every
change is published in the workflow's memo (`job`), so that lists and runners read the Job from
Temporal's visibility and describe calls, never by a query. Signal `delete_job` ends the workflow;
it returns the Job as it was.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from admitflow import contract
    from admitflow.api.job import Job
    from admitflow.jobs import store
    from admitflow.messages import JobDeletion, JobInput, JobPatch

    from admitflow.workflows import arguments
    from admitflow.workflows.versions import Movable, continue_as_new, continue_as_new_due


@workflow.defn(name=contract.JOB_WORKFLOW)
class JobWorkflow(Movable):
    @workflow.init
    def __init__(self, input: JobInput) -> None:
        self.job = input.job
        self.deleted = False
        self.published: dict | None = None

    @workflow.run
    async def run(self, input: JobInput) -> Job:
        while True:
            self._publish()
            await workflow.wait_condition(
                lambda: self.deleted or self.published != self.job.to_wire() or continue_as_new_due()
            )
            if self.deleted:
                await workflow.wait_condition(workflow.all_handlers_finished)
                return self.job
            if continue_as_new_due():
                await workflow.wait_condition(workflow.all_handlers_finished)
                self._publish()
                continue_as_new(JobInput(job=self.job))

    def _publish(self) -> None:
        wire = self.job.to_wire()
        if wire != self.published:
            workflow.upsert_memo({contract.JOB_MEMO: wire})
            self.published = wire

    def _patched(self, request: JobPatch) -> Job:
        try:
            job = store.patched(self.job, request.patch, request.subresource)
        except store.JobStoreError as err:
            raise ApplicationError(str(err), {"status": err.status, "reason": err.reason}, type=err.reason, non_retryable=True) from None
        return store.with_suspension(job, workflow.now())

    @workflow.update(name=contract.PATCH_JOB)
    def patch(self, *payload: Any) -> Job:
        self.job = self._patched(arguments.update(contract.PATCH_JOB, payload, JobPatch))
        return self.job

    @patch.validator
    def _check_patch(self, *payload: Any) -> None:
        if self.deleted:
            name = self.job.metadata.name or ""
            raise ApplicationError(str(store.JobNotFound(name)), {"status": 404, "reason": "NotFound"}, type="NotFound", non_retryable=True)
        self._patched(arguments.update(contract.PATCH_JOB, payload, JobPatch))

    @workflow.signal(name=contract.DELETE_JOB)
    def delete(self, *payload: Any) -> None:
        if arguments.signal(contract.DELETE_JOB, payload, JobDeletion, optional=True) is not None:
            self.deleted = True

    @workflow.query(name=contract.JOB_QUERY)
    def get(self, *payload: Any) -> Job:
        arguments.no_argument(contract.JOB_QUERY, payload)
        return self.job
