"""The writes Kueue's job reconciler sends a batch/v1 Job, against any `JobApi`: on admission the
podSet info joins the pod template and the Job is resumed (`start_job`, Kueue's startJob with
RunWithPodSetsInfo), on eviction it is suspended again with its template restored (`stop_job`,
Kueue's stopJob with its three writes). Each write is a JSON merge patch of only what changes,
carrying the resourceVersion it was computed from, as controller-runtime's strict MergeFrom
sends it: a Job changed meanwhile answers 409 Conflict, and the write is computed again from the
Job as it is then, up to MAX_CONFLICTS times (a reconcile retried, as Kueue's is).

The rules themselves are pure (admitflow.jobs.batch_job, admitflow.jobs.framework); this module
only reads, diffs and sends."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from admitflow.admission.pod_set_updates import PodSetInfo
from admitflow.api import merge_patch
from admitflow.api.job import Job
from admitflow.api.workload import PodSet, Workload
from admitflow.jobs import batch_job, framework

from admitflow.activities.jobs.api import JobApi, JobConflict, JobNotFound, Subresource

MAX_CONFLICTS = 8


def body(before: Job, after: Job, subresource: Subresource = "") -> dict[str, Any]:
    """The merge patch from `before` to `after` of what the request may change (the Job's metadata
    and spec, or its status through the status subresource), with `before`'s resourceVersion; {}
    when nothing changes."""
    old, new = before.to_wire(), after.to_wire()
    parts = ("status",) if subresource == "status" else ("metadata", "spec")
    patch = merge_patch.diff({k: old.get(k) or {} for k in parts}, {k: new.get(k) or {} for k in parts})
    if not patch:
        return {}
    return merge_patch.with_resource_version(patch, before.metadata.resource_version or "")


@dataclass(frozen=True)
class Sent:
    """What a reconcile sent: the Job as stored after it, and how many requests it took (reads
    and patches, conflicts included)."""

    job: Job
    requests: int
    changed: bool


def _the_job(job: Job, name: str, uid: str | None) -> Job:
    """`job`, unless it is another Job of the same name than the one of UID `uid` (that one was
    deleted and a new one made): JobNotFound then."""
    if uid is not None and job.metadata.uid != uid:
        raise JobNotFound(name)
    return job


async def start_job(
    api: JobApi, namespace: str, name: str, infos: Sequence[PodSetInfo], workload: Workload, uid: str | None = None
) -> Sent:
    """Kueue's startJob: the admission's podSet info (with the queue labels) into the pod template,
    then `suspend: false`, in one patch. A Job that is already resumed is left as it is (a second
    start of the same admission). Raises PodSetUpdateConflict or PodSetInfoError (permanent: the
    admission cannot start this Job) and JobNotFound, also when the Job of that name is not the
    one of UID `uid` (the Workload's owner)."""
    requests = 0
    for _ in range(MAX_CONFLICTS):
        job = _the_job(await api.get_job(namespace, name), name, uid)
        requests += 1
        if job.spec.suspend is not True:
            return Sent(job, requests, False)
        started = batch_job.run_with_pod_sets_info(job, framework.with_queue_labels(infos, workload))
        try:
            stored = await api.patch_job(namespace, name, body(job, started))
            return Sent(stored, requests + 1, True)
        except JobConflict:
            requests += 1
    raise JobConflict(name)


async def stop_job(
    api: JobApi, namespace: str, name: str, pod_sets: Sequence[PodSet], uid: str | None = None
) -> tuple[Sent, bool]:
    """Kueue's stopJob (`batch_job.stop`): suspend with the stopping annotation, clear
    status.startTime through the status subresource, restore the template from the Workload's
    `pod_sets` and drop the annotation. Each write is computed from the Job as the last answer left
    it, and sent only when it changes something. A Job that ended is left as it is (Kueue's
    reconciler is done with a finished Job before any eviction). Returns what was sent and whether
    the Job was running until now (Kueue's `Stopped` event is then due). Raises JobNotFound, also
    when the Job of that name is not the one of UID `uid`."""
    job = _the_job(await api.get_job(namespace, name), name, uid)
    requests, conflicts, changed = 1, 0, False
    if batch_job.finished(job) is not None:
        return Sent(job, requests, changed), False
    stopped_now = not batch_job.is_suspended(job)
    while True:
        pending = next(
            ((w.subresource, patch) for w in batch_job.stop(job, pod_sets).writes if (patch := body(job, w.job, w.subresource))),
            None,
        )
        if pending is None:
            return Sent(job, requests, changed), stopped_now
        subresource, patch = pending
        try:
            job = await api.patch_job(namespace, name, patch, subresource)
            changed = True
        except JobConflict:
            conflicts += 1
            if conflicts >= MAX_CONFLICTS:
                raise
            job = _the_job(await api.get_job(namespace, name), name, uid)
            requests += 1
        requests += 1


async def update_status(api: JobApi, namespace: str, name: str, change: Callable[[Job], Job]) -> Job:
    """Write `change(job)`'s status through the status subresource, computed again from the Job as
    stored whenever it changed meanwhile (409 Conflict); the Job as stored after it."""
    for _ in range(MAX_CONFLICTS):
        job = await api.get_job(namespace, name)
        patch = body(job, change(job), "status")
        if not patch:
            return job
        try:
            return await api.patch_job(namespace, name, patch, "status")
        except JobConflict:
            continue
    raise JobConflict(name)
