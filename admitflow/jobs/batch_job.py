"""batch/v1 Job in the job framework, as Kueue's Job integration handles it
(pkg/controller/jobs/job/job_controller.go and job_webhook.go): pure functions over the Job model,
each returning a new Job; `BatchJob` wraps them as a `GenericJob`.

- One podSet `main`: the pod template (without the labels the Job controller manages, except
  `batch.kubernetes.io/job-name`, which Kueue now keeps), with `count = min(parallelism,
  completions)`, and `minCount` from the annotation `kueue.x-k8s.io/job-min-parallelism` (which the
  framework clears: partial admission is not built).
- Admission (`run_with_pod_sets_info`): the podSet info (flavors' node labels and tolerations, the
  checks' podSetUpdates, the podSet and queue labels) merged into the pod template, a key given two
  values being a permanent conflict; then `suspend: false`.
- Eviction (`stop`): Kueue's three writes: suspend (with the `kueue.x-k8s.io/stopping` annotation
  while the next two are pending), clear `status.startTime` (through the status subresource; the
  apiserver lets a suspended Job's template change only without it), then put the template's labels,
  annotations, node selector, tolerations and scheduling gates back as the Workload keeps them.
  Kueue sets no condition on the Job.
- `pods_ready`: succeeded + ready + succeeded-but-uncounted pods reach the podSet's count.
- `finished`: the first Complete or Failed condition that is True, with its message.

The functions expect a Job as the apiserver stores it (`admitflow.api.job.with_defaults`), as Kueue
only ever sees such Jobs; an unset parallelism counts as its default, 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from admitflow.admission import admission_gates
from admitflow.admission.pod_set_updates import PodSetInfo, PodSetUpdateConflict, first_conflict
from admitflow.api import field_error as fe
from admitflow.api.field_error import FieldError
from admitflow.api.job import (
    API_VERSION,
    COMPLETE,
    CONTROLLER_UID_LABEL,
    FAILED,
    GROUP,
    INDEXED,
    JOB_NAME_LABEL,
    KIND,
    LEGACY_CONTROLLER_UID_LABEL,
    LEGACY_JOB_NAME_LABEL,
    Job,
    JobMeta,
)
from admitflow.api.pod import PodTemplateSpec
from admitflow.api.workload import PodSet
from admitflow.jobs import framework
from admitflow.jobs.framework import Finished, atoi, integer_field

MIN_PARALLELISM_ANNOTATION = "kueue.x-k8s.io/job-min-parallelism"
COMPLETIONS_EQUAL_PARALLELISM_ANNOTATION = "kueue.x-k8s.io/job-completions-equal-parallelism"
STOPPING_ANNOTATION = "kueue.x-k8s.io/stopping"
MAIN = "main"

# Labels the Job controller puts on the template; a restore keeps their current values.
MANAGED_LABELS = (LEGACY_JOB_NAME_LABEL, LEGACY_CONTROLLER_UID_LABEL, JOB_NAME_LABEL, CONTROLLER_UID_LABEL)
# Those of them the Workload's template goes without (Kueue's PropagateBatchJobLabelsToWorkload
# keeps batch.kubernetes.io/job-name, for pod affinities a cluster autoscaler resolves).
DROPPED_LABELS = (LEGACY_JOB_NAME_LABEL, LEGACY_CONTROLLER_UID_LABEL, CONTROLLER_UID_LABEL)
# What the Workload CRD keeps of a pod template's metadata.
WORKLOAD_TEMPLATE_METADATA = ("labels", "annotations", "finalizers", "name", "namespace")


class PodSetInfoError(ValueError):
    """Admission infos that do not fit the Job; permanent, as a conflict is (Kueue's ErrInvalidPodsetInfo)."""


# --- reading the Job ----------------------------------------------------------------------------------


def is_suspended(job: Job) -> bool:
    """Kueue's IsSuspended: `suspend: true`, and not in the middle of being stopped."""
    return job.spec.suspend is True and (job.metadata.annotations or {}).get(STOPPING_ANNOTATION) != "true"


def is_active(job: Job) -> bool:
    """Some of its pods are pending or running."""
    return (job.status.active or 0) != 0


def pods_count(job: Job) -> int:
    """The pods that run at once: parallelism (1 when unset), or fewer completions."""
    count = job.spec.parallelism if job.spec.parallelism is not None else 1
    completions = job.spec.completions
    return completions if completions is not None and completions < count else count


def min_pods_count(job: Job) -> int | None:
    """The annotation `kueue.x-k8s.io/job-min-parallelism` as an integer, if it is one."""
    value = (job.metadata.annotations or {}).get(MIN_PARALLELISM_ANNOTATION)
    parsed = atoi(value) if value is not None else None
    return parsed if isinstance(parsed, int) else None


def parse_bool(value: str) -> bool | str:
    """Go's strconv.ParseBool: the boolean, or its error text."""
    if value in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if value in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    return f'strconv.ParseBool: parsing "{value}": invalid syntax'


def completions_follow_parallelism(job: Job) -> bool:
    """The annotation `kueue.x-k8s.io/job-completions-equal-parallelism` is a true boolean."""
    value = (job.metadata.annotations or {}).get(COMPLETIONS_EQUAL_PARALLELISM_ANNOTATION)
    return value is not None and parse_bool(value) is True


def pod_sets(job: Job) -> list[PodSet]:
    """Kueue's (*Job).PodSets: one podSet `main`."""
    template = job.spec.template.to_wire()
    metadata = {k: v for k, v in (template.get("metadata") or {}).items() if k in WORKLOAD_TEMPLATE_METADATA}
    labels = {k: v for k, v in (metadata.get("labels") or {}).items() if k not in DROPPED_LABELS}
    if "labels" in metadata:
        metadata["labels"] = labels
    template["metadata"] = metadata
    if not metadata:
        del template["metadata"]
    return [
        PodSet(
            name=MAIN,
            template=PodTemplateSpec.model_validate(template),
            count=pods_count(job),
            min_count=min_pods_count(job),
        )
    ]


def pods_ready(job: Job) -> bool:
    """Kueue's (*Job).PodsReady: the pods that succeeded (counted or not yet) and those ready reach
    the podSet's count."""
    status = job.status
    uncounted = len((status.uncounted_terminated_pods.succeeded or ()) if status.uncounted_terminated_pods else ())
    return (status.succeeded or 0) + (status.ready or 0) + uncounted >= pods_count(job)


def finished(job: Job) -> Finished | None:
    """Kueue's (*Job).Finished: the first True condition of type Complete or Failed."""
    for condition in job.status.conditions or ():
        if condition.type in (COMPLETE, FAILED) and condition.status == "True":
            return Finished(succeeded=condition.type != FAILED, message=condition.message or "")
    return None


def validate_create(job: Job) -> list[FieldError]:
    """What Kueue's Job webhook refuses on create beyond the apiserver: the framework's label
    checks, a malformed `kueue.x-k8s.io/admission-gated-by`, and the partial-admission annotations."""
    annotations = job.metadata.annotations or {}
    errors = framework.validate_labels(BatchJob(job))
    if admission_gates.ANNOTATION in annotations:
        errors += admission_gates.format_errors(annotations[admission_gates.ANNOTATION])
    if MIN_PARALLELISM_ANNOTATION in annotations:
        path = f"metadata.annotations[{MIN_PARALLELISM_ANNOTATION}]"
        parsed, refused = integer_field(path, annotations[MIN_PARALLELISM_ANNOTATION])
        errors += refused
        if parsed is not None and not 0 < parsed < pods_count(job):
            errors.append(fe.invalid(path, parsed, f"should be between 0 and {pods_count(job) - 1}"))
    if COMPLETIONS_EQUAL_PARALLELISM_ANNOTATION in annotations:
        value = annotations[COMPLETIONS_EQUAL_PARALLELISM_ANNOTATION]
        path = f"metadata.annotations[{COMPLETIONS_EQUAL_PARALLELISM_ANNOTATION}]"
        parsed = parse_bool(value)
        if isinstance(parsed, str):
            errors.append(fe.invalid(path, value, parsed))
        elif parsed:
            if job.spec.completion_mode != INDEXED:
                errors.append(fe.invalid(path, value, "should not be enabled for NonIndexed jobs"))
            completions = job.spec.completions if job.spec.completions is not None else 1
            if completions != (job.spec.parallelism if job.spec.parallelism is not None else 1):
                errors.append(
                    fe.invalid(
                        "spec.completions",
                        completions,
                        f"should be equal to parallelism when {COMPLETIONS_EQUAL_PARALLELISM_ANNOTATION} annotation is true",
                    )
                )
    return errors


# --- changing the Job ---------------------------------------------------------------------------------


def suspended(job: Job) -> Job:
    """The Job with `suspend: true` (Kueue's Suspend)."""
    return job.model_copy(update={"spec": job.spec.model_copy(update={"suspend": True})})


def with_labels(job: Job, labels: dict[str, str]) -> Job:
    return job.model_copy(update={"metadata": job.metadata.model_copy(update={"labels": labels or None})})


def run_with_pod_sets_info(job: Job, infos: Sequence[PodSetInfo]) -> Job:
    """Kueue's RunWithPodSetsInfo: the Job admission starts. The info's labels, annotations and node
    selector join the template's (the same key with another value raises PodSetUpdateConflict, in
    Kueue's words); its tolerations are added once; parallelism (and completions, when they follow
    it) become the admitted count for a Job with `kueue.x-k8s.io/job-min-parallelism`."""
    if len(infos) != 1:
        raise PodSetInfoError(f"invalid podset infos: expecting 1 podset, got {len(infos)}")
    info = infos[0]
    wire = job.to_wire()
    spec = wire["spec"]
    spec["suspend"] = False
    if min_pods_count(job) is not None:
        spec["parallelism"] = info.count
        if completions_follow_parallelism(job):
            spec["completions"] = info.count
    template = spec["template"]
    meta, pod = template.get("metadata") or {}, template["spec"]
    merges = (
        ("annotations", meta, "annotations", info.annotations),
        ("labels", meta, "labels", info.labels),
        ("nodeSelector", pod, "nodeSelector", info.node_selector),
    )
    for field, holder, key, extra in merges:
        found = first_conflict(field, holder.get(key) or {}, extra)
        if found:
            raise PodSetUpdateConflict(found)
    for _, holder, key, extra in merges:
        if extra:
            holder[key] = {**(holder.get(key) or {}), **extra}
    tolerations = list(pod.get("tolerations") or ())
    for toleration in (t.to_wire() for t in info.tolerations):
        if toleration not in tolerations:
            tolerations.append(toleration)
    if tolerations:
        pod["tolerations"] = tolerations
    if meta:
        template["metadata"] = meta
    return Job.model_validate(wire)


def restore_pod_sets_info(job: Job, workload_pod_sets: Sequence[PodSet]) -> Job:
    """Kueue's RestorePodSetsInfo with the Workload's podSets (GetPodSetsInfoFromWorkload): the
    template's labels (but the current values of those the Job controller manages), annotations,
    node selector, tolerations and scheduling gates become the Workload's copies again, and a
    partially admitted Job's parallelism its podSet count. Without podSets nothing changes."""
    if not workload_pod_sets:
        return job
    pod_set = workload_pod_sets[0]
    wire = job.to_wire()
    spec = wire["spec"]
    if min_pods_count(job) is not None and spec.get("parallelism", 0) != pod_set.count:
        spec["parallelism"] = pod_set.count
        if completions_follow_parallelism(job):
            spec["completions"] = pod_set.count
    template = spec["template"]
    meta, pod = template.get("metadata") or {}, template["spec"]
    kept = pod_set.template.to_wire()
    kept_meta, kept_pod = kept.get("metadata") or {}, kept["spec"]
    labels = dict(kept_meta.get("labels") or {})
    for label in MANAGED_LABELS:
        if label in (meta.get("labels") or {}):
            labels[label] = meta["labels"][label]
    _restore(meta, "labels", labels or kept_meta.get("labels"))
    _restore(meta, "annotations", kept_meta.get("annotations"))
    for key in ("nodeSelector", "tolerations", "schedulingGates"):
        _restore(pod, key, kept_pod.get(key))
    template["metadata"] = meta
    if not meta:
        del template["metadata"]
    return Job.model_validate(wire)


def _restore(holder: dict[str, Any], key: str, value: Any) -> None:
    # As Kueue's RestorePodSpec: an empty value and an absent one are equal, and nothing changes.
    if (holder.get(key) or None) == (value or None):
        return
    if value is None:
        holder.pop(key, None)
    else:
        holder[key] = value


@dataclass(frozen=True)
class JobWrite:
    """One request of a stop: the Job after it, and whether it goes to the status subresource."""

    job: Job
    subresource: Literal["", "status"] = ""


@dataclass(frozen=True)
class Stop:
    """Kueue's (*Job).Stop, as the writes it sends, in order. `stopped_now`: the Job was running
    (Kueue's `Stopped` event is then due)."""

    writes: tuple[JobWrite, ...]
    stopped_now: bool

    @property
    def job(self) -> Job:
        return self.writes[-1].job


def stop(job: Job, workload_pod_sets: Sequence[PodSet]) -> Stop:
    """The Job suspended again with its template as the Workload keeps it: suspend and mark it
    stopping (when it is not suspended), clear status.startTime (when set), then restore the
    template and drop the mark. The last write is made every time, changed or not, as Kueue does."""
    writes: list[JobWrite] = []
    stopped_now = not is_suspended(job)
    if stopped_now:
        annotations = {**(job.metadata.annotations or {}), STOPPING_ANNOTATION: "true"}
        job = suspended(job)
        job = job.model_copy(update={"metadata": job.metadata.model_copy(update={"annotations": annotations})})
        writes.append(JobWrite(job))
    if job.status.start_time is not None:
        job = job.model_copy(update={"status": job.status.model_copy(update={"start_time": None})})
        writes.append(JobWrite(job, "status"))
    job = restore_pod_sets_info(job, workload_pod_sets)
    annotations = {k: v for k, v in (job.metadata.annotations or {}).items() if k != STOPPING_ANNOTATION}
    job = job.model_copy(update={"metadata": job.metadata.model_copy(update={"annotations": annotations or None})})
    writes.append(JobWrite(job))
    return Stop(writes=tuple(writes), stopped_now=stopped_now)


# --- the GenericJob -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class BatchJob:
    """A batch/v1 Job as a `framework.GenericJob`."""

    job: Job

    api_version: ClassVar[str] = API_VERSION
    kind: ClassVar[str] = KIND
    group: ClassVar[str] = GROUP

    @property
    def metadata(self) -> JobMeta:
        return self.job.metadata

    def with_labels(self, labels: dict[str, str]) -> BatchJob:
        return BatchJob(with_labels(self.job, labels))

    def is_suspended(self) -> bool:
        return is_suspended(self.job)

    def suspended(self) -> BatchJob:
        return BatchJob(suspended(self.job))

    def is_active(self) -> bool:
        return is_active(self.job)

    def pod_sets(self) -> list[PodSet]:
        return pod_sets(self.job)

    def priority_class(self) -> str | None:
        return None  # a Job's priority class is its pods'

    def run_with_pod_sets_info(self, infos: Sequence[PodSetInfo]) -> BatchJob:
        return BatchJob(run_with_pod_sets_info(self.job, infos))

    def restore_pod_sets_info(self, pod_sets: Sequence[PodSet]) -> BatchJob:
        return BatchJob(restore_pod_sets_info(self.job, pod_sets))

    def pods_ready(self) -> bool:
        return pods_ready(self.job)

    def finished(self) -> Finished | None:
        return finished(self.job)
