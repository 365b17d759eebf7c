"""Job (batch/v1): what Kueue's job framework and admitflow's runners read of a Kubernetes Job, with
the checks and defaults the apiserver applies when one is created.

Modelled: the JobSpec fields Kueue reads or a runner needs (parallelism, completions,
completionMode, backoffLimit, suspend, activeDeadlineSeconds, ttlSecondsAfterFinished, managedBy,
the pod template) and the JobStatus counters and conditions; the other JobSpec fields
(podFailurePolicy, successPolicy, selector, ...) are kept as written. A Job created with only
`metadata.generateName` parses (`kubectl create` takes it); the name comes when it is created
(`admitflow.api.names.generated_name`).

The apiserver puts the Job's name in the `batch.kubernetes.io/job-name` label of its pods, so a
Job's name is at most 63 characters (a label value) although it is a DNS subdomain: a longer one is
refused with the apiserver's `spec.template.labels` error.

Sources: k8s.io/api/batch/v1/types.go; kubernetes pkg/apis/batch/validation/validation.go
(ValidateJob, validateJobSpec) and pkg/apis/batch/v1/defaults.go (SetDefaults_Job).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from . import field_error as fe
from .base import KueueModel
from .bounds import INT32_MAX, NonNegativeInt32, NonNegativeInt64
from .field_error import FieldError, invalid_body, k8s_error
from .meta import ConditionStatus, LabelSelector, NamespacedObjectMeta, Time
from .names import (
    LABEL_VALUE_MAX_LENGTH,
    dns1123_label_errors,
    domain_prefixed_path_errors,
    generate_name_errors,
    max_len_error,
)
from .pod import PodTemplateSpec

API_VERSION = "batch/v1"
GROUP = "batch"
KIND = "Job"

# The labels the apiserver gives a Job's pod template (and so its pods): its name and UID.
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"
LEGACY_JOB_NAME_LABEL = "job-name"
LEGACY_CONTROLLER_UID_LABEL = "controller-uid"

NON_INDEXED = "NonIndexed"
INDEXED = "Indexed"
DEFAULT_BACKOFF_LIMIT = 6
MAX_MANAGED_BY_LENGTH = 63
MAX_PARALLELISM_FOR_INDEXED_JOB = 100_000
MAX_FAILED_INDEXES_FOR_INDEXED_JOB = 100_000
COMPLETIONS_SOFT_LIMIT = 100_000
PARALLELISM_LIMIT_FOR_HIGH_COMPLETIONS = 10_000
MAX_FAILED_INDEXES_LIMIT_FOR_HIGH_COMPLETIONS = 10_000
RESTART_POLICIES = ("OnFailure", "Never")

# Condition types the Job controller sets.
COMPLETE = "Complete"
FAILED = "Failed"
SUSPENDED = "Suspended"


class JobMeta(NamespacedObjectMeta):
    """A Job's metadata: `name`, or `generateName` for the apiserver to make one from."""

    name: str | None = Field(
        default=None,
        description=(
            "Name of the Job, unique in its namespace: a lowercase RFC 1123 subdomain of at most 63 "
            "characters (its pods carry it as a label value). Required unless `generateName` is given."
        ),
        json_schema_extra={"maxLength": LABEL_VALUE_MAX_LENGTH},
    )
    generate_name: str | None = Field(
        default=None,
        description=(
            "Prefix of a name the apiserver makes when the Job is created without one: its first 58 "
            "characters and 5 random ones. Taken by `create`; `apply` needs a name."
        ),
    )

    @field_validator("name")
    @classmethod
    def _valid_name(cls, value: str | None) -> str | None:
        if value is None:
            return value
        return NamespacedObjectMeta._valid_name(value)

    @field_validator("generate_name")
    @classmethod
    def _valid_generate_name(cls, value: str | None) -> str | None:
        if value is None:
            return value  # null, as a stored Job's is when sent as a whole model
        for msg in generate_name_errors(value):
            raise k8s_error(invalid_body(value, msg))
        return value


class JobSpec(KueueModel):
    """The part of a JobSpec Kueue reads; the fields it does not read pass through unchecked."""

    parallelism: NonNegativeInt32 | None = Field(
        default=None,
        description="Pods running at once at most; 0 or more (int32). Defaults to 1.",
    )
    completions: NonNegativeInt32 | None = Field(
        default=None,
        description=(
            "Pods that must succeed; 0 or more (int32). Unset: the Job succeeds when any pod does and the "
            "others end (with parallelism unset too, both default to 1). Required for Indexed Jobs."
        ),
    )
    completion_mode: Literal["NonIndexed", "Indexed"] | None = Field(
        default=None,
        description="NonIndexed (the default: any `completions` successes) or Indexed (one per index 0..completions-1).",
    )
    backoff_limit: NonNegativeInt32 | None = Field(
        default=None, description="Pod failures before the Job is Failed; 0 or more (int32). Defaults to 6."
    )
    backoff_limit_per_index: NonNegativeInt32 | None = Field(
        default=None, description="Indexed Jobs only: failures allowed per index; 0 or more (int32)."
    )
    max_failed_indexes: NonNegativeInt32 | None = Field(
        default=None,
        description="Indexed Jobs with backoffLimitPerIndex: failed indexes before the Job is Failed; 0 or more (int32).",
    )
    active_deadline_seconds: NonNegativeInt64 | None = Field(
        default=None,
        description="Seconds the Job may be active (counted while not suspended) before it is Failed; an int64, 0 or more.",
    )
    ttl_seconds_after_finished: NonNegativeInt32 | None = Field(
        default=None, description="Seconds after the Job finishes before it is deleted; 0 or more (int32)."
    )
    suspend: bool | None = Field(
        default=None,
        description=(
            "True: no pods are created and running ones are deleted (Kueue keeps a Job suspended until its "
            "Workload is admitted). Defaults to false."
        ),
    )
    managed_by: str | None = Field(
        default=None,
        description=(
            "The controller that runs the Job, a domain-prefixed path of at most 63 characters; unset or "
            "`kubernetes.io/job-controller` is Kubernetes' own. Immutable."
        ),
    )
    template: PodTemplateSpec = Field(description="The pods' template; restartPolicy OnFailure or Never. Required.")
    selector: LabelSelector | None = Field(
        default=None, description="Pods the Job counts; generated by the apiserver unless manualSelector."
    )
    manual_selector: bool | None = Field(default=None, description="True: `selector` is the user's, not generated.")
    pod_failure_policy: dict[str, Any] | None = Field(
        default=None, description="How pod failures count (rules on exit codes and conditions); passed through."
    )
    success_policy: dict[str, Any] | None = Field(
        default=None, description="Indexed Jobs only: when the Job succeeds before every index does; passed through."
    )
    pod_replacement_policy: Literal["Failed", "TerminatingOrFailed"] | None = Field(
        default=None,
        description="When a replacement pod is created: TerminatingOrFailed (the default) or Failed (required with podFailurePolicy).",
    )

    def validation_errors(self, path: str = "spec", job_name: str | None = None) -> list[FieldError]:
        """validateJobSpec's rules across fields, in its order. `job_name` is checked where the
        apiserver meets it: as the value of the template's job-name label."""
        at = lambda child: fe.join_path(path, child)  # noqa: E731
        errors: list[FieldError] = []
        if self.max_failed_indexes is not None and self.backoff_limit_per_index is None:
            errors.append(fe.required(at("backoffLimitPerIndex"), "when maxFailedIndexes is specified"))
        if self.managed_by is not None:
            errors += [fe.invalid(at("managedBy"), part, msg) for part, msg in domain_prefixed_path_errors(self.managed_by)]
            if len(self.managed_by) > MAX_MANAGED_BY_LENGTH:
                errors.append(FieldError(at("managedBy"), fe.too_long_body(MAX_MANAGED_BY_LENGTH)))
        if self.completion_mode == INDEXED:
            errors += self._indexed_errors(at)
        else:
            for name, value in (("backoffLimitPerIndex", self.backoff_limit_per_index), ("maxFailedIndexes", self.max_failed_indexes)):
                if value is not None:
                    errors.append(fe.invalid(at(name), value, "requires indexed completion mode"))
            if self.success_policy is not None:
                errors.append(fe.invalid(at("successPolicy"), self.success_policy, "requires indexed completion mode"))
        if self.pod_failure_policy is not None and self.pod_replacement_policy not in (None, "Failed"):
            errors.append(fe.not_supported(at("podReplacementPolicy"), self.pod_replacement_policy, ["Failed"]))
        if job_name is not None and len(job_name) > LABEL_VALUE_MAX_LENGTH:
            errors.append(fe.invalid(at("template.labels"), job_name, max_len_error(LABEL_VALUE_MAX_LENGTH)))
        return errors + self._restart_policy_errors(at("template.spec.restartPolicy"))

    def _indexed_errors(self, at) -> list[FieldError]:
        errors: list[FieldError] = []
        completions, parallelism, max_failed = self.completions, self.parallelism, self.max_failed_indexes
        if completions is None:
            errors.append(fe.required(at("completions"), f"when completion mode is {INDEXED}"))
        if parallelism is not None and parallelism > MAX_PARALLELISM_FOR_INDEXED_JOB:
            errors.append(
                fe.invalid(
                    at("parallelism"),
                    parallelism,
                    f"must be less than or equal to {MAX_PARALLELISM_FOR_INDEXED_JOB} when completion mode is {INDEXED}",
                )
            )
        if completions is not None and max_failed is not None and max_failed > completions:
            errors.append(fe.invalid(at("maxFailedIndexes"), max_failed, "must be less than or equal to completions"))
        if max_failed is not None and max_failed > MAX_FAILED_INDEXES_FOR_INDEXED_JOB:
            errors.append(
                fe.invalid(at("maxFailedIndexes"), max_failed, f"must be less than or equal to {MAX_FAILED_INDEXES_FOR_INDEXED_JOB}")
            )
        if completions is not None and completions > COMPLETIONS_SOFT_LIMIT and self.backoff_limit_per_index is not None:
            high = f"when completions are above {COMPLETIONS_SOFT_LIMIT} and used with backoff limit per index"
            if max_failed is None:
                errors.append(fe.required(at("maxFailedIndexes"), f"must be specified when completions is above {COMPLETIONS_SOFT_LIMIT}"))
            if parallelism is not None and parallelism > PARALLELISM_LIMIT_FOR_HIGH_COMPLETIONS:
                errors.append(
                    fe.invalid(at("parallelism"), parallelism, f"must be less than or equal to {PARALLELISM_LIMIT_FOR_HIGH_COMPLETIONS} {high}")
                )
            if max_failed is not None and max_failed > MAX_FAILED_INDEXES_LIMIT_FOR_HIGH_COMPLETIONS:
                errors.append(
                    fe.invalid(
                        at("maxFailedIndexes"), max_failed, f"must be less than or equal to {MAX_FAILED_INDEXES_LIMIT_FOR_HIGH_COMPLETIONS} {high}"
                    )
                )
        return errors

    def _restart_policy_errors(self, path: str) -> list[FieldError]:
        # A pod template's restartPolicy defaults to Always, which a Job refuses.
        policy = (self.template.spec.model_extra or {}).get("restartPolicy")
        if policy in (None, "", "Always"):
            return [fe.required(path, 'valid values: "OnFailure", "Never"')]
        if policy not in RESTART_POLICIES:
            return [fe.not_supported(path, policy, RESTART_POLICIES)]
        if self.pod_failure_policy is not None and policy != "Never":
            return [fe.invalid(path, policy, 'only "Never" is supported when podFailurePolicy is specified')]
        return []


class JobCondition(KueueModel):
    """One condition of a Job: Complete, Failed, Suspended, FailureTarget, SuccessCriteriaMet."""

    type: str = Field(description="Condition type. Required.")
    status: ConditionStatus = Field(description="True, False or Unknown. Required.")
    last_probe_time: Time | None = Field(default=None, description="When the condition was last probed.")
    last_transition_time: Time | None = Field(default=None, description="When the status last changed.")
    reason: str | None = Field(default=None, description="CamelCase reason of the last transition.")
    message: str | None = Field(default=None, description="Details for people; a Failed condition's becomes the Workload's.")


class UncountedTerminatedPods(KueueModel):
    """Pods that ended but are not counted in succeeded/failed yet (the Job controller's staging area)."""

    succeeded: list[str] | None = Field(default=None, description="UIDs of pods that succeeded.")
    failed: list[str] | None = Field(default=None, description="UIDs of pods that failed.")


class JobStatus(KueueModel):
    """What the Job controller reports. Kueue reads the conditions, active, ready, succeeded and
    uncountedTerminatedPods, and clears startTime when it suspends a Job again."""

    conditions: list[JobCondition] | None = Field(default=None, description="Conditions, oldest first.")
    start_time: Time | None = Field(
        default=None, description="When the Job was last unsuspended; must be cleared before its template may change."
    )
    completion_time: Time | None = Field(default=None, description="When the Job completed.")
    active: NonNegativeInt32 | None = Field(default=None, description="Pods pending or running (not terminating).")
    ready: NonNegativeInt32 | None = Field(default=None, description="Active pods with the Ready condition.")
    succeeded: NonNegativeInt32 | None = Field(default=None, description="Pods that succeeded.")
    failed: NonNegativeInt32 | None = Field(default=None, description="Pods that failed.")
    terminating: NonNegativeInt32 | None = Field(default=None, description="Pods being terminated.")
    completed_indexes: str | None = Field(default=None, description="Indexed Jobs: indexes that succeeded (`1,3-5`).")
    failed_indexes: str | None = Field(default=None, description="Indexed Jobs with backoffLimitPerIndex: failed indexes.")
    uncounted_terminated_pods: UncountedTerminatedPods | None = Field(
        default=None, description="Pods that ended and are not counted yet."
    )


class Job(KueueModel):
    """A batch/v1 Job. Namespaced (namespace defaults to `default`)."""

    api_version: Literal["batch/v1"] = Field(default=API_VERSION, description="API version.")
    kind: Literal["Job"] = Field(default=KIND, description="Kind.")
    metadata: JobMeta = Field(description="Object metadata; `name` or `generateName` is required.")
    spec: JobSpec = Field(description="Desired state.")
    status: JobStatus = Field(default_factory=JobStatus, description="Observed state, set by the Job controller.")

    @property
    def key(self) -> str:
        """namespace/name; before a generated name is given, namespace/generateName."""
        return f"{self.metadata.namespace}/{self.metadata.name or self.metadata.generate_name}"

    def validation_errors(self, path: str = "") -> list[FieldError]:
        """ValidateJob's rules beyond each field's own, in its order."""
        errors: list[FieldError] = []
        name = self.metadata.name
        if name is None and self.metadata.generate_name is None:
            errors.append(fe.required(fe.join_path(path, "metadata.name"), "name or generateName is required"))
        errors += self.spec.validation_errors(fe.join_path(path, "spec"), job_name=name)
        completions = self.spec.completions
        if name is not None and self.spec.completion_mode == INDEXED and completions is not None and completions > 0:
            hostname = f"{name}-{completions - 1}"
            if dns1123_label_errors(hostname):
                errors.append(
                    fe.invalid(
                        fe.join_path(path, "metadata.name"),
                        name,
                        f"will not able to create pod with invalid DNS label: {hostname}",
                    )
                )
        return errors


def with_defaults(job: Job) -> Job:
    """The Job as the apiserver stores it on create (SetDefaults_Job): parallelism and completions 1
    when both are unset, else parallelism 1 when unset; backoffLimit 6 (2147483647 with
    backoffLimitPerIndex); completionMode NonIndexed; suspend false; podReplacementPolicy Failed
    with a podFailurePolicy, else TerminatingOrFailed; manualSelector false; and the template's
    labels as the Job's when it has none."""
    spec = job.spec
    update: dict[str, Any] = {}
    if spec.completions is None and spec.parallelism is None:
        update["completions"] = 1
    if spec.parallelism is None:
        update["parallelism"] = 1
    if spec.backoff_limit is None:
        update["backoff_limit"] = INT32_MAX if spec.backoff_limit_per_index is not None else DEFAULT_BACKOFF_LIMIT
    if spec.completion_mode is None:
        update["completion_mode"] = NON_INDEXED
    if spec.suspend is None:
        update["suspend"] = False
    if spec.pod_replacement_policy is None:
        update["pod_replacement_policy"] = "Failed" if spec.pod_failure_policy is not None else "TerminatingOrFailed"
    if spec.manual_selector is None:
        update["manual_selector"] = False
    metadata = job.metadata
    template_labels = spec.template.metadata.labels if spec.template.metadata else None
    if template_labels is not None and not metadata.labels:
        metadata = metadata.model_copy(update={"labels": dict(template_labels)})
    return job.model_copy(update={"metadata": metadata, "spec": spec.model_copy(update=update)})
