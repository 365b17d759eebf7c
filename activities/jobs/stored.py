"""`StoredJobs`: the Jobs admitflow keeps (one JobWorkflow each, workflows/job_store.py) as a `JobApi`.
A Job is read from its workflow's memo (a describe call, no query), and patched through its update
`patch_job`, whose validator refuses a stale resourceVersion or an invalid result before anything
reaches the history."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from admitflow import contract, ids
from admitflow.api.job import Job
from admitflow.jobs import store
from admitflow.messages import JobPatch

from admitflow.activities.jobs.api import JobConflict, JobNotFound, JobStoreError, Subresource

RPC_TIMEOUT = timedelta(seconds=10)


class StoredJobs:
    def __init__(self, client: Client) -> None:
        self.client = client

    async def get_job(self, namespace: str, name: str) -> Job:
        handle = self.client.get_workflow_handle(ids.job_id(f"{namespace}/{name}"))
        try:
            desc = await handle.describe(rpc_timeout=RPC_TIMEOUT)
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                raise JobNotFound(name) from None
            raise
        if desc.status != WorkflowExecutionStatus.RUNNING:
            raise JobNotFound(name)
        return Job.model_validate(await desc.memo_value(contract.JOB_MEMO))

    async def patch_job(self, namespace: str, name: str, patch: dict[str, Any], subresource: Subresource = "") -> Job:
        handle = self.client.get_workflow_handle(ids.job_id(f"{namespace}/{name}"))
        try:
            return await handle.execute_update(
                contract.PATCH_JOB, JobPatch(patch=patch, subresource=subresource), result_type=Job, rpc_timeout=RPC_TIMEOUT
            )
        except WorkflowUpdateFailedError as err:
            raise refusal(name, err.cause) from None
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                raise JobNotFound(name) from None
            raise


def refusal(name: str, cause: BaseException | None) -> JobStoreError:
    """The store's error a JobWorkflow's refusal stands for (its ApplicationError's type)."""
    if isinstance(cause, ApplicationError):
        if cause.type == "Conflict":
            return JobConflict(name)
        if cause.type == "NotFound":
            return JobNotFound(name)
        return store.JobStoreError(cause.message)
    return store.JobStoreError(str(cause))
