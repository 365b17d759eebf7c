"""What the job runners need of a store of batch/v1 Jobs: read one, and send it a JSON merge patch
(of the Job, or of its status subresource). A store answers as an apiserver does: a patch naming a
stale `metadata.resourceVersion` raises `JobConflict`, a Job that is not there `JobNotFound`, a
result the apiserver would refuse `JobInvalid` (admitflow.jobs.store's errors)."""

from __future__ import annotations

from typing import Any, Protocol

from admitflow.api.job import Job
from admitflow.jobs.store import JobConflict, JobInvalid, JobNotFound, JobStoreError, Subresource

__all__ = ["Job", "JobApi", "JobConflict", "JobInvalid", "JobNotFound", "JobStoreError", "Subresource"]


class JobApi(Protocol):
    async def get_job(self, namespace: str, name: str) -> Job:
        """The Job as stored, or JobNotFound."""
        ...

    async def patch_job(self, namespace: str, name: str, patch: dict[str, Any], subresource: Subresource = "") -> Job:
        """Apply a JSON merge patch; the Job as stored after it."""
        ...
