"""Kueue's job framework (pkg/controller/jobframework) as pure functions: what every kind of job
shares on its way to a Workload and back.

A kind of job is integrated by a `GenericJob` (Kueue's interface of the same name): its podSets,
whether it is suspended, how admission starts it and eviction stops it, and when it is ready or
finished. Everything else is the same for every kind and lives here:

- whether Kueue manages the job at all (`unmanaged_reason`): it needs the
  `kueue.x-k8s.io/queue-name` label (Kueue's `manageJobsWithoutQueueName: false`) and a namespace
  that `managedJobsNamespaceSelector` selects (Kueue's default: every namespace but kube-system and
  kueue-system);
- what Kueue's webhook sets when the job is created (`apply_webhook_defaults`): the queue `default`
  when the job names none and its namespace has a LocalQueue of that name, the WorkloadPriorityClass
  `default` when it names none and one exists, and `suspend: true`, so nothing runs before
  admission;
- the checks the webhook makes of Kueue's labels (`validate_labels`);
- the Workload (`construct_workload`, once the job runs no pods: `workload_may_be_created`): its name (`workload_names`), queue, podSets (each
  container's env without repeated names), priority (`extract_priority`),
  `maximumExecutionTimeSeconds`, the owner reference to the job, the job's UID as a label, the
  `provreq.kueue.x-k8s.io/` annotations and `kueue.x-k8s.io/admission-gated-by`;
- what its pods are started with once admitted (`with_queue_labels`, on top of
  `admitflow.admission.pod_set_updates.merge`);
- what the reconciler does next with a job and what is known of its Workload (`next_step`,
  Kueue's ReconcileGenericJob in its order): stop a job that runs without an admission, make the
  Workload once the job runs no pods, finish it from the job's end.

Kueue's switches are taken at their defaults, except two features admitflow does not build:
partial admission (a podSet's `minCount` is cleared, as Kueue does with its PartialAdmission gate
off) and topology-aware scheduling (no `topologyRequest`, no `kueue.x-k8s.io/workload` pod
annotation, as with its TopologyAwareScheduling gate off). Child jobs (a Job a JobSet made) are not
told apart: admitflow integrates no kind that owns jobs.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, Self, runtime_checkable

from pydantic import Field

from admitflow.admission.pod_set_updates import PodSetInfo, PodSetUpdateConflict, conflict
from admitflow.admission.priority import PriorityError
from admitflow.admission.priority import not_found as workload_priority_class_not_found
from admitflow.api import field_error as fe
from admitflow.api.field_error import FieldError
from admitflow.api.meta import LabelSelector, LabelSelectorRequirement, NamespacedObjectMeta, OwnerReference
from admitflow.api.names import dns1123_label_errors, dns1123_subdomain_errors, label_value_errors
from admitflow.api.pod import PodTemplateSpec
from admitflow.api.priority_class import RESOURCE as PRIORITY_CLASS_RESOURCE
from admitflow.api.priority_class import PriorityClass, system_priority_classes
from admitflow.api.provisioning_request import PARAMETER_ANNOTATION_PREFIX
from admitflow.api.workload import PodSet, PriorityClassRef, Workload, WorkloadSpec
from admitflow.jobs.workload_names import workload_name
from admitflow.wire import WireModel

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
MAX_EXEC_TIME_LABEL = "kueue.x-k8s.io/max-exec-time-seconds"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
ADMISSION_GATED_BY_ANNOTATION = "kueue.x-k8s.io/admission-gated-by"
# Pod labels of an admitted job (Kueue's AssignQueueLabelsForPods, on by default).
LOCAL_QUEUE_LABEL = "kueue.x-k8s.io/local-queue-name"
CLUSTER_QUEUE_LABEL = "kueue.x-k8s.io/cluster-queue-name"

DEFAULT_LOCAL_QUEUE = "default"
DEFAULT_WORKLOAD_PRIORITY_CLASS = "default"
DEFAULT_PRIORITY = 0
# The label the apiserver gives every namespace: its name.
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
DEFAULT_MANAGED_JOBS_NAMESPACE_SELECTOR = LabelSelector(
    match_expressions=[
        LabelSelectorRequirement(key=NAMESPACE_NAME_LABEL, operator="NotIn", values=["kube-system", "kueue-system"])
    ]
)
"""Kueue's default `managedJobsNamespaceSelector` (apis/config/v1beta2/defaults.go, with Kueue's own
namespace at its default, kueue-system)."""

# Labels a Workload never takes from its job, whatever `labelKeysToCopy` says (Kueue's nonInheritableLabels).
NON_INHERITABLE_LABELS = frozenset({"kueue.x-k8s.io/multikueue-origin", JOB_UID_LABEL})


class JobError(ValueError):
    """A job that cannot become a Workload as it stands; the message is one line."""


class Finished(WireModel):
    """A job that ended: how, and the message its Workload's Finished condition carries."""

    succeeded: bool = Field(description="False when it failed.")
    message: str = Field(default="", description="The job's own message (a Job's Complete or Failed condition's).")


@runtime_checkable
class GenericJob(Protocol):
    """What a kind of job tells the framework (Kueue's jobframework.GenericJob). Every method is
    pure: the ones that change the job return a new one."""

    @property
    def api_version(self) -> str:
        """`group/version` of the kind (`batch/v1`)."""
        ...

    @property
    def kind(self) -> str: ...

    @property
    def group(self) -> str: ...

    @property
    def metadata(self) -> NamespacedObjectMeta:
        """name, namespace, uid, labels, annotations of the job."""
        ...

    def with_labels(self, labels: dict[str, str]) -> Self: ...

    def is_suspended(self) -> bool: ...

    def suspended(self) -> Self: ...

    def is_active(self) -> bool:
        """Some of its pods still run."""
        ...

    def pod_sets(self) -> list[PodSet]:
        """The Workload's podSets, before the framework's own sanitizing."""
        ...

    def priority_class(self) -> str | None:
        """The pod PriorityClass the kind names itself (Kueue's JobWithPriorityClass), or None to
        take the podSets' first priorityClassName."""
        ...

    def run_with_pod_sets_info(self, infos: Sequence[PodSetInfo]) -> Self: ...

    def restore_pod_sets_info(self, pod_sets: Sequence[PodSet]) -> Self: ...

    def pods_ready(self) -> bool: ...

    def finished(self) -> Finished | None: ...


# --- which jobs are managed -------------------------------------------------------------------------


def queue_name(job: GenericJob) -> str:
    """The LocalQueue the job names (label `kueue.x-k8s.io/queue-name`), or "". Kueue no longer
    reads the old annotation of the same name."""
    return (job.metadata.labels or {}).get(QUEUE_LABEL, "")


def namespace_labels(namespace: str) -> dict[str, str]:
    """The labels of a namespace as far as admitflow knows them: the one the apiserver sets."""
    return {NAMESPACE_NAME_LABEL: namespace}


def namespace_managed(
    namespace: str,
    labels: Mapping[str, str] | None = None,
    selector: LabelSelector | None = DEFAULT_MANAGED_JOBS_NAMESPACE_SELECTOR,
) -> bool:
    """Kueue's managedJobsNamespaceSelector on the namespace's labels (`labels`, by default the
    name label alone); no selector selects every namespace."""
    if selector is None:
        return True
    return selector.matches(dict(labels) if labels is not None else namespace_labels(namespace))


def unmanaged_reason(
    job: GenericJob,
    labels: Mapping[str, str] | None = None,
    selector: LabelSelector | None = DEFAULT_MANAGED_JOBS_NAMESPACE_SELECTOR,
) -> FieldError | None:
    """Why Kueue would leave this job alone (its reconciler skips it, its webhook does not suspend
    it), in the field-error form `apply` refuses with; None when the job is managed."""
    namespace = job.metadata.namespace
    if not namespace_managed(namespace, labels, selector):
        return fe.forbidden(
            "metadata.namespace",
            f'namespace "{namespace}" is not selected by managedJobsNamespaceSelector: Kueue manages no job there',
        )
    if not queue_name(job):
        return fe.required(
            f"metadata.labels[{QUEUE_LABEL}]",
            f"a {job.kind} without a queue name is not managed (Kueue's manageJobsWithoutQueueName is false): "
            f"name a LocalQueue of namespace {namespace}",
        )
    return None


# --- the webhook ---------------------------------------------------------------------------------------


def apply_webhook_defaults(
    job: GenericJob,
    local_queues: Collection[str] = (),
    workload_priority_classes: Collection[str] = (),
    labels: Mapping[str, str] | None = None,
    selector: LabelSelector | None = DEFAULT_MANAGED_JOBS_NAMESPACE_SELECTOR,
) -> GenericJob:
    """What Kueue's mutating webhook does to a job when it is created, in its order:
    ApplyDefaultLocalQueue (`local_queues`: the LocalQueue names of the job's namespace),
    ApplyDefaultWorkloadPriorityClass (`workload_priority_classes`: the names that exist) and
    ApplyDefaultForSuspend. `labels` and `selector` are the namespace's, as `namespace_managed`."""
    job_labels = dict(job.metadata.labels or {})
    managed_namespace = namespace_managed(job.metadata.namespace, labels, selector)
    if not job_labels.get(QUEUE_LABEL) and DEFAULT_LOCAL_QUEUE in local_queues and managed_namespace:
        job_labels[QUEUE_LABEL] = DEFAULT_LOCAL_QUEUE
    if not job_labels.get(PRIORITY_CLASS_LABEL) and DEFAULT_WORKLOAD_PRIORITY_CLASS in workload_priority_classes:
        job_labels[PRIORITY_CLASS_LABEL] = DEFAULT_WORKLOAD_PRIORITY_CLASS
    if job_labels != (job.metadata.labels or {}):
        job = job.with_labels(job_labels)
    # WorkloadShouldBeSuspended: a job with a queue name (and no Kueue-managed ancestor) waits for admission.
    if queue_name(job) and not job.is_suspended():
        job = job.suspended()
    return job


def validate_labels(job: GenericJob) -> list[FieldError]:
    """The checks Kueue's validating webhook makes of its labels on create: the queue name is a DNS
    subdomain, the maximum execution time a positive integer."""
    errors: list[FieldError] = []
    job_labels = job.metadata.labels or {}
    if QUEUE_LABEL in job_labels:
        value = job_labels[QUEUE_LABEL]
        messages = dns1123_subdomain_errors(value)
        if messages:
            errors.append(fe.invalid(f"metadata.labels[{QUEUE_LABEL}]", value, ",".join(messages)))
    if MAX_EXEC_TIME_LABEL in job_labels:
        value = job_labels[MAX_EXEC_TIME_LABEL]
        path = f"metadata.labels[{MAX_EXEC_TIME_LABEL}]"
        parsed, refused = integer_field(path, value)
        errors += refused
        if parsed is not None and parsed <= 0:
            errors.append(fe.invalid(path, value, "should be greater than 0"))
    return errors


def integer_field(path: str, value: str) -> tuple[int | None, list[FieldError]]:
    """A label's or annotation's value read as Kueue's webhook reads it (strconv.Atoi): the integer,
    or None and the field error in Go's words."""
    parsed = atoi(value)
    if isinstance(parsed, str):
        return None, [fe.invalid(path, value, parsed)]
    return parsed, []


def atoi(value: str) -> int | str:
    """Go's strconv.Atoi: the integer, or its error text."""
    text = value[1:] if value[:1] in "+-" else value
    if not text or not text.isascii() or not text.isdigit():
        return f'strconv.Atoi: parsing "{value}": invalid syntax'
    number = int(value)
    if not -(2**63) <= number < 2**63:
        return f'strconv.Atoi: parsing "{value}": value out of range'
    return number


# --- the Workload --------------------------------------------------------------------------------------


def workload_may_be_created(job: GenericJob) -> bool:
    """Kueue's handleJobWithNoWorkload: a job still running pods (its Workload deleted, say) gets
    its new Workload once they are gone."""
    return not job.is_active()


def workload_name_for(job: GenericJob) -> str:
    """The name Kueue gives the job's Workload; the job needs its name and UID."""
    meta = job.metadata
    if not meta.name:
        prefix = getattr(meta, "generate_name", None) or ""
        raise JobError(f"{job.kind} {meta.namespace}/{prefix}: it has no name yet: one is generated when it is created")
    if not meta.uid:
        raise JobError(f"{job.kind} {meta.namespace}/{meta.name}: it has no UID yet: one is given when it is stored")
    return workload_name(meta.name, meta.uid, job.kind, job.group)


def maximum_execution_time_seconds(job: GenericJob) -> int | None:
    """Label `kueue.x-k8s.io/max-exec-time-seconds` as a positive int32; anything else is none."""
    value = (job.metadata.labels or {}).get(MAX_EXEC_TIME_LABEL)
    if value is None:
        return None
    parsed = atoi(value)
    if isinstance(parsed, str) or not 0 < parsed < 2**31:
        return None
    return parsed


def extract_priority(
    job: GenericJob,
    pod_sets: Sequence[PodSet],
    workload_priority_classes: Mapping[str, int],
    priority_classes: Mapping[str, PriorityClass],
) -> tuple[PriorityClassRef | None, int]:
    """Kueue's ExtractPriority: the job's label `kueue.x-k8s.io/priority-class` names a
    WorkloadPriorityClass (`workload_priority_classes`: name -> value); else the pod PriorityClass
    the kind names, or the first podSet's `priorityClassName`; else the PriorityClass marked
    globalDefault (the lowest value if several); else no class and priority 0. `priority_classes`
    are the cluster's PriorityClasses by name (the two system classes are always there). A class
    named and missing raises PriorityError with the apiserver's not-found text."""
    wpc = (job.metadata.labels or {}).get(PRIORITY_CLASS_LABEL, "")
    if wpc:
        if wpc not in workload_priority_classes:
            raise PriorityError(workload_priority_class_not_found(wpc))
        return PriorityClassRef(group="kueue.x-k8s.io", kind="WorkloadPriorityClass", name=wpc), workload_priority_classes[wpc]
    classes = {**system_priority_classes(), **priority_classes}
    name = job.priority_class()
    if name is None:
        name = next((n for n in map(pod_priority_class_name, pod_sets) if n), "")
    if name:
        if name not in classes:
            raise PriorityError(f'{PRIORITY_CLASS_RESOURCE} "{name}" not found')
        return _pod_class_ref(name), classes[name].value
    default = global_default(classes.values())
    if default is not None:
        return _pod_class_ref(default.metadata.name), default.value
    return None, DEFAULT_PRIORITY


def pod_priority_class_name(pod_set: PodSet) -> str:
    """The podSet's pod priorityClassName, or ""."""
    return (pod_set.template.spec.model_extra or {}).get("priorityClassName") or ""


def global_default(classes: Collection[PriorityClass]) -> PriorityClass | None:
    """The PriorityClass marked globalDefault; of several (a race the apiserver allows), the one
    with the lowest value, and of those the first by name (the order the apiserver lists them)."""
    defaults = sorted((c for c in classes if c.global_default), key=lambda c: (c.value, c.metadata.name))
    return defaults[0] if defaults else None


def _pod_class_ref(name: str) -> PriorityClassRef:
    return PriorityClassRef(group="scheduling.k8s.io", kind="PriorityClass", name=name)


def sanitize_pod_set(pod_set: PodSet) -> PodSet:
    """Kueue's SanitizePodSet: in every container and init container, env vars of the same name
    become one, where the name first appears, with the last one's value."""
    wire = pod_set.template.to_wire()
    spec = wire["spec"]
    for field in ("initContainers", "containers"):
        for container in spec.get(field) or ():
            if "env" in container:
                # A name keeps the place where it first appears; a later entry replaces its value.
                merged: dict[str, dict] = {}
                for var in container["env"]:
                    merged[var.get("name")] = var
                container["env"] = list(merged.values())
    return pod_set.model_copy(update={"template": PodTemplateSpec.model_validate(wire)})


def construct_workload(
    job: GenericJob,
    workload_priority_classes: Mapping[str, int] | None = None,
    priority_classes: Mapping[str, PriorityClass] | None = None,
    label_keys_to_copy: Collection[str] = (),
) -> Workload:
    """The Workload Kueue's job reconciler creates for `job` (ConstructWorkload, NewWorkload,
    prepareWorkload). Raises JobError when the job has no name or UID yet, PriorityError when a
    priority class it names is missing."""
    meta = job.metadata
    name = workload_name_for(job)
    pod_sets = [sanitize_pod_set(ps) for ps in job.pod_sets()]
    ref, priority = extract_priority(job, pod_sets, workload_priority_classes or {}, priority_classes or {})
    job_labels = meta.labels or {}
    labels = {k: job_labels[k] for k in label_keys_to_copy if k in job_labels and k not in NON_INHERITABLE_LABELS}
    if not label_value_errors(meta.uid):
        labels[JOB_UID_LABEL] = meta.uid
    job_annotations = meta.annotations or {}
    annotations = {k: v for k, v in job_annotations.items() if k.startswith(PARAMETER_ANNOTATION_PREFIX)}
    if ADMISSION_GATED_BY_ANNOTATION in job_annotations:
        annotations[ADMISSION_GATED_BY_ANNOTATION] = job_annotations[ADMISSION_GATED_BY_ANNOTATION]
    owner = OwnerReference(
        api_version=job.api_version, kind=job.kind, name=meta.name, uid=meta.uid, controller=True, block_owner_deletion=True
    )
    return Workload(
        metadata=NamespacedObjectMeta(
            name=name,
            namespace=meta.namespace,
            labels=labels or None,
            annotations=annotations or None,
            owner_references=[owner],
        ),
        spec=WorkloadSpec(
            pod_sets=[ps.model_copy(update={"min_count": None}) for ps in pod_sets],
            queue_name=queue_name(job) or None,
            priority_class_ref=ref,
            priority=priority,
            maximum_execution_time_seconds=maximum_execution_time_seconds(job),
        ),
    )


# --- admission -----------------------------------------------------------------------------------------


def with_queue_labels(infos: Sequence[PodSetInfo], workload: Workload) -> list[PodSetInfo]:
    """The podSet infos with Kueue's queue labels (AssignQueueLabelsForPods): the LocalQueue's name,
    and the ClusterQueue's when it is a DNS label. Kueue adds them before the checks' podSetUpdates,
    so a check's update giving either label another value is the check's conflict."""
    labels = {}
    if workload.spec.queue_name:
        labels[LOCAL_QUEUE_LABEL] = workload.spec.queue_name
    admission = workload.status.admission
    if admission is not None and not dns1123_label_errors(admission.cluster_queue):
        labels[CLUSTER_QUEUE_LABEL] = admission.cluster_queue
    out = []
    for info in infos:
        for key, value in labels.items():
            if info.labels.get(key, value) != value:
                check = _check_setting(workload, info.name, key)
                raise PodSetUpdateConflict(f'in admission check "{check}": {conflict("labels", key, value, info.labels[key])}')
        out.append(info.model_copy(update={"labels": {**info.labels, **labels}}))
    return out


def _check_setting(workload: Workload, pod_set: str, label: str) -> str:
    for check in workload.status.admission_checks or ():
        update = next((u for u in check.pod_set_updates or () if u.name == pod_set), None)
        if update is not None and label in (update.labels or {}):
            return check.name
    return ""


# --- the reconciler's next step ------------------------------------------------------------------------

# Kueue's messages of the `Stopped` event (pkg/controller/jobframework/reconciler.go).
MISSING_WORKLOAD = "Missing Workload; unable to restore pod templates"
WORKLOAD_DELETED = "Workload is deleted"
NOT_ADMITTED = "Not admitted by cluster queue"

Presence = Literal["absent", "deleted", "present", "finished"]
"""What is known of a job's Workload: none was ever made (`absent`), it was `deleted` while the
job lives, it is `present` (not finished), or `finished` (succeeded, failed or finished by someone:
the job is left as it is then)."""


@dataclass(frozen=True)
class Nothing:
    """Nothing to do for the job now."""

    why: str = ""


@dataclass(frozen=True)
class StopJob:
    """Suspend the job again (Kueue's stopJob); `message` is the `Stopped` event's note."""

    message: str


@dataclass(frozen=True)
class CreateWorkload:
    """Make the job's Workload (`construct_workload`) and submit it."""


@dataclass(frozen=True)
class FinishWorkload:
    """The job ended: its Workload finishes with the job's outcome."""

    finished: Finished


@dataclass(frozen=True)
class AskAdmitted:
    """The job runs and nothing here says whether its Workload is admitted: ask the Workload."""


Step = Nothing | StopJob | CreateWorkload | FinishWorkload | AskAdmitted


def next_step(job: GenericJob, workload: Presence, admitted: bool | None = None, running_here: bool = False) -> Step:
    """What Kueue's reconciler does next with `job` (ReconcileGenericJob, for a top-level job),
    given its Workload's `workload` presence, whether that Workload is `admitted` (None: not known
    here) and whether this runner runs its admission now (`running_here`: then the run itself
    reports the job's readiness and end, and `admitted` is True).

    A finished Workload leaves the job alone. A job that ended gets no Workload, and finishes the
    one it has when its run is not here to do it. Without a Workload, a job that runs is stopped
    (Kueue's ensureOneWorkload), and one that is suspended gets its Workload once none of its pods
    is active (handleJobWithNoWorkload). With one, a job that runs while its Workload is not
    admitted is stopped again: the only way a job resumed by someone else, or one whose
    eviction was never carried out, is suspended."""
    if workload == "finished":
        return Nothing("its Workload is finished")
    ended = job.finished()
    if workload in ("absent", "deleted"):
        if ended is not None:
            return Nothing("it ended without a Workload")
        if not job.is_suspended():
            return StopJob(WORKLOAD_DELETED if workload == "deleted" else MISSING_WORKLOAD)
        if not workload_may_be_created(job):
            return Nothing("its pods are still active: its Workload is made once they are gone")
        return CreateWorkload()
    if ended is not None:
        return Nothing("its run reports its end") if running_here else FinishWorkload(ended)
    if job.is_suspended() or running_here:
        return Nothing()
    if admitted is None:
        return AskAdmitted()
    return Nothing() if admitted else StopJob(NOT_ADMITTED)
