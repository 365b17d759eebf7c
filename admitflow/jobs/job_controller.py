"""Kubernetes' Job controller in miniature, as pure functions: how many pods a resumed batch/v1 Job
needs now, and when it has ended. The local runner (examples/runners/local.py) runs what these
say as local processes; a cluster's own Job controller does it for the Kubernetes runner.

- Pods at once: `parallelism`, fewer when fewer completions are left (`completions - succeeded`);
  a Job without `completions` starts `parallelism` pods until one succeeds, then starts no more.
- Complete: `completions` pods succeeded (without `completions`: one did and none is active), with
  the condition `Complete` (reason CompletionsReached).
- Failed: more pods failed than `backoffLimit` allows, with the condition `Failed` (reason
  BackoffLimitExceeded) once no pod is active any more.

Indexed Jobs run their pods with `JOB_COMPLETION_INDEX` from 0 up; per-index backoff, pod failure
and success policies and `activeDeadlineSeconds` are not modelled.

Source: kubernetes pkg/controller/job/job_controller.go (manageJob, the conditions it writes).
"""

from __future__ import annotations

from datetime import datetime

from admitflow.api.job import COMPLETE, DEFAULT_BACKOFF_LIMIT, FAILED, Job, JobCondition

COMPLETIONS_REACHED = ("CompletionsReached", "Reached expected number of succeeded pods")
BACKOFF_LIMIT_EXCEEDED = ("BackoffLimitExceeded", "Job has reached the specified backoff limit")


def finished(job: Job) -> bool:
    return any(c.type in (COMPLETE, FAILED) and c.status == "True" for c in job.status.conditions or ())


def failed_too_often(job: Job) -> bool:
    """More pods failed than the backoffLimit allows (6 by default)."""
    limit = job.spec.backoff_limit if job.spec.backoff_limit is not None else DEFAULT_BACKOFF_LIMIT
    return (job.status.failed or 0) > limit


def succeeded_enough(job: Job) -> bool:
    succeeded = job.status.succeeded or 0
    if job.spec.completions is None:
        return succeeded >= 1 and not job.status.active
    return succeeded >= job.spec.completions


def pods_wanted(job: Job) -> int:
    """Pods to start now, besides those active: none for a suspended or ended Job, or one whose
    failures passed its backoffLimit."""
    if job.spec.suspend is True or finished(job) or failed_too_often(job) or succeeded_enough(job):
        return 0
    parallelism = job.spec.parallelism if job.spec.parallelism is not None else 1
    active, succeeded = job.status.active or 0, job.status.succeeded or 0
    if job.spec.completions is None:
        return max(parallelism - active, 0) if succeeded == 0 else 0
    return max(min(parallelism, job.spec.completions - succeeded) - active, 0)


def ending(job: Job, now: datetime) -> JobCondition | None:
    """The condition that ends the Job now (Complete, or Failed once no pod is active), or None."""
    if finished(job):
        return None
    reason = None
    if succeeded_enough(job):
        reason, condition = COMPLETIONS_REACHED, COMPLETE
    elif failed_too_often(job) and not job.status.active:
        reason, condition = BACKOFF_LIMIT_EXCEEDED, FAILED
    if reason is None:
        return None
    moment = now.replace(microsecond=0)
    return JobCondition(type=condition, status="True", last_probe_time=moment, last_transition_time=moment, reason=reason[0], message=reason[1])


def indexes_wanted(job: Job, running: set[int], count: int) -> list[int]:
    """The completion indexes of the next `count` pods of an Indexed Job: the lowest not done and
    not running (`status.completedIndexes` holds those done)."""
    done = parse_indexes(job.status.completed_indexes or "")
    out: list[int] = []
    for index in range(job.spec.completions or 0):
        if len(out) == count:
            break
        if index not in done and index not in running:
            out.append(index)
    return out


def parse_indexes(text: str) -> set[int]:
    """`1,3-5` -> {1, 3, 4, 5}."""
    out: set[int] = set()
    for part in filter(None, text.split(",")):
        first, _, last = part.partition("-")
        out.update(range(int(first), int(last or first) + 1))
    return out


def format_indexes(indexes: set[int]) -> str:
    """{1, 3, 4, 5} -> `1,3-5`, as the Job controller writes completedIndexes."""
    runs: list[str] = []
    ordered = sorted(indexes)
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        runs.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(runs)
