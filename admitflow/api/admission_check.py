"""AdmissionCheck (kueue.x-k8s.io/v1beta2): a gate a workload must pass after quota is reserved.

Source: apis/kueue/v1beta2/admissioncheck_types.go. `spec.retryStrategy` and `spec.pendingTimeout`
are admitflow's own extensions (KEP-3258 "Future outlook"; kueue#3231, #3245): how long to wait after
a `Retry` verdict that carries no `requeueAfterSeconds`, when to give up, and how long a check may
stay `Pending` while the workload holds quota.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from . import field_error as fe
from .base import KueueModel
from .bounds import FACTOR_MAX, INT32_MAX
from .duration import GoDuration, parse_duration
from .field_error import FieldError
from .meta import Condition, ObjectMeta
from .names import DNS1123_LABEL_PATTERN, DNS1123_SUBDOMAIN_PATTERN

API_VERSION = "kueue.x-k8s.io/v1beta2"

CheckState = Literal["Pending", "Ready", "Retry", "Rejected"]
"""State of one AdmissionCheck for one workload."""

PROVISIONING_REQUEST_CONTROLLER_NAME = "kueue.x-k8s.io/provisioning-request"


class AdmissionCheckParametersReference(KueueModel):
    """Reference to an object holding the check's parameters (e.g. a ProvisioningRequestConfig)."""

    api_group: str = Field(
        min_length=1,
        max_length=253,
        pattern=DNS1123_SUBDOMAIN_PATTERN,
        description="API group of the referenced object (e.g. kueue.x-k8s.io); 1 to 253 characters. Required.",
    )
    kind: str = Field(
        min_length=1,
        max_length=63,
        pattern=r"^(?i)[a-z]([-a-z0-9]*[a-z0-9])?$",
        description="Kind of the referenced object (e.g. ProvisioningRequestConfig); 1 to 63 characters. Required.",
    )
    name: str = Field(
        min_length=1,
        max_length=63,
        pattern=DNS1123_LABEL_PATTERN,
        description="Name of the referenced object; a DNS label of 1 to 63 characters. Required.",
    )


class AdmissionCheckRetryStrategy(KueueModel):
    """admitflow extension: the delay before retrying after a `Retry` verdict without a delay of its own.

    With `Backoff` the n-th retry waits `min(baseDelaySeconds * factor^(n-1), maxDelaySeconds)`,
    stretched by up to `jitter`; with `Static` every retry waits `baseDelaySeconds`. After
    `backoffLimitCount` retries the check becomes `Rejected`.
    """

    strategy: Literal["Static", "Backoff"] = Field(
        default="Backoff", description="Backoff (default): grow the delay by `factor`; Static: always `baseDelaySeconds`."
    )
    base_delay_seconds: int = Field(
        default=60,
        ge=0,
        le=INT32_MAX,
        description="Delay of the first retry, in seconds; 0 to 2147483647 (int32), default 60.",
    )
    factor: float = Field(
        default=2.0,
        ge=1,
        le=FACTOR_MAX,
        allow_inf_nan=False,
        description="Growth of the delay per retry with Backoff; 1 to 100, default 2.0.",
    )
    jitter: float = Field(
        default=0.0001,
        ge=0,
        le=1,
        allow_inf_nan=False,
        description="Random extra delay, as a fraction of the delay; 0 to 1, default 0.0001.",
    )
    max_delay_seconds: int = Field(
        default=1800,
        ge=0,
        le=INT32_MAX,
        description="Upper bound of the delay, in seconds; baseDelaySeconds to 2147483647 (int32), default 1800.",
    )
    backoff_limit_count: int | None = Field(
        default=None,
        ge=0,
        le=INT32_MAX,
        description=(
            "Retries allowed before the check becomes Rejected; 0 to 2147483647 (int32); unset means unlimited."
        ),
    )
    backoff_limit_timeout: GoDuration | None = Field(
        default=None,
        description=(
            "Time from the check's first Retry (since the workload was last admitted) after which a Retry "
            "becomes Rejected, as Kueue's backoffLimitTimeout does for PodsReady; a Go duration greater than "
            "0s; unset means no limit."
        ),
    )

    def validation_errors(self, path: str = "") -> list[FieldError]:
        errors = []
        if self.max_delay_seconds < self.base_delay_seconds:
            errors.append(
                fe.invalid(
                    fe.join_path(path, "maxDelaySeconds"),
                    self.max_delay_seconds,
                    f"must be greater than or equal to baseDelaySeconds ({self.base_delay_seconds})",
                )
            )
        if self.backoff_limit_timeout is not None and not 0 < parse_duration(self.backoff_limit_timeout).total_seconds() <= INT32_MAX:
            errors.append(fe.invalid(
                fe.join_path(path, "backoffLimitTimeout"), self.backoff_limit_timeout, "must be greater than 0s and at most 596523h14m7s"
            ))
        return errors


class PendingTimeout(KueueModel):
    """admitflow extension (kueue#3231, #3245): how long a check may stay `Pending` while the workload
    holds quota, counted from the reservation (or from when the check came, if later). Past it the
    check is treated as `verdict`, with a message saying so; a Retry then backs off as any Retry of
    the check does. The same object fits a ProvisioningRequestConfig's `spec.pendingTimeout`."""

    duration: GoDuration = Field(description="How long, as a Go duration greater than 0 (e.g. 24h). Required.")
    verdict: Literal["Retry", "Rejected"] = Field(
        default="Retry", description="Retry (default: release the quota, back off, try again) or Rejected (deactivate)."
    )

    def validation_errors(self, path: str = "") -> list[FieldError]:
        if not 0 < parse_duration(self.duration).total_seconds() <= INT32_MAX:
            return [fe.invalid(fe.join_path(path, "duration"), self.duration, "must be greater than 0s and at most 596523h14m7s")]
        return []


class AdmissionCheckSpec(KueueModel):
    """The desired state of an AdmissionCheck."""

    controller_name: str = Field(
        min_length=1,
        max_length=253,
        description=(
            "Controller that evaluates the check (for admitflow: the Temporal task queue of its "
            "controller); `kueue.x-k8s.io/provisioning-request` is built in. 1 to 253 characters, "
            "immutable. Required."
        ),
    )
    parameters: AdmissionCheckParametersReference | None = Field(
        default=None, description="Object with the check's parameters, if its controller needs one."
    )
    retry_strategy: AdmissionCheckRetryStrategy | None = Field(
        default=None,
        description="admitflow extension: delay and limit for Retry verdicts without requeueAfterSeconds.",
    )
    pending_timeout: PendingTimeout | None = Field(
        default=None,
        description="admitflow extension: how long the check may stay Pending while quota is reserved, and what then.",
    )

    def validation_errors(self, path: str = "spec") -> list[FieldError]:
        errors = self.retry_strategy.validation_errors(fe.join_path(path, "retryStrategy")) if self.retry_strategy else []
        if self.pending_timeout is not None:
            errors += self.pending_timeout.validation_errors(fe.join_path(path, "pendingTimeout"))
        return errors


class AdmissionCheckStatus(KueueModel):
    """The observed state of an AdmissionCheck."""

    conditions: list[Condition] = Field(
        default_factory=list,
        max_length=16,
        description="Conditions; Kueue reads only `Active` (set by the check's controller); at most 16.",
    )


class AdmissionCheck(KueueModel):
    """An AdmissionCheck. Cluster-scoped."""

    api_version: Literal["kueue.x-k8s.io/v1beta2"] = Field(default=API_VERSION, description="API version.")
    kind: Literal["AdmissionCheck"] = Field(default="AdmissionCheck", description="Kind.")
    metadata: ObjectMeta = Field(description="Object metadata; ClusterQueues refer to `name`.")
    spec: AdmissionCheckSpec = Field(description="Desired state.")
    status: AdmissionCheckStatus = Field(
        default_factory=AdmissionCheckStatus, description="Observed state; ignored on input."
    )

    @property
    def key(self) -> str:
        return self.metadata.name

    @property
    def active(self) -> bool:
        """True when the controller has set `Active=True`."""
        return any(c.type == "Active" and c.status == "True" for c in self.status.conditions)

    def validation_errors(self, path: str = "") -> list[FieldError]:
        return self.spec.validation_errors(fe.join_path(path, "spec"))

    def update_errors(self, old: AdmissionCheck, path: str = "") -> list[FieldError]:
        """Rules for replacing `old` with this object: `spec.controllerName` is immutable."""
        if self.spec.controller_name != old.spec.controller_name:
            return [fe.cel(fe.join_path(path, "spec.controllerName"), "string", "field is immutable")]
        return []
