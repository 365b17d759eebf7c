"""Kueue's Configuration (config.kueue.x-k8s.io/v1beta2), reduced to what admitflow uses.

admitflow reads `waitForPodsReady` (with Kueue's defaults and validation), the
`DisableWaitForPodsReady` feature gate and `fairSharing` (on when present, with its preemption
strategies). Every other top-level field Kueue defines is accepted and dropped with a warning;
fields Kueue does not define are refused, as Kueue's strict config decoder refuses them. The object
is a singleton: its key is always `config`.

Sources: apis/config/v1beta2/configuration_types.go, apis/config/v1beta2/defaults.go,
apis/config/v1beta1/configuration_conversion.go, pkg/config/validation.go
(validateWaitForPodsReady, validateFairSharing).
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from .base import KueueModel
from .bounds import INT32_MAX, NEGATIVE_MESSAGE, non_negative_int32
from .duration import GoDuration, format_duration_nanos, parse_duration_nanos
from .field_error import k8s_error
from .meta import ObjectMeta

API_VERSION = "config.kueue.x-k8s.io/v1beta2"
KIND = "Configuration"
SINGLETON_KEY = "config"

DEFAULT_WAIT_FOR_PODS_READY_TIMEOUT = "30m"
DISABLE_WAIT_FOR_PODS_READY_GATE = "DisableWaitForPodsReady"
# Kueue's backoff fields are *int32; its timeouts end up as seconds in timers and datetimes, so they
# are held to the same 2147483647 seconds (about 68 years).
MAX_DURATION_NANOS = INT32_MAX * 1_000_000_000
MAX_DURATION_MESSAGE = f"must be less than or equal to {format_duration_nanos(MAX_DURATION_NANOS)}"

# Top-level fields of Kueue's Configuration (ControllerManager is inlined into it).
KUEUE_FIELDS_V1BETA2 = (
    "namespace",
    "webhook",
    "leaderElection",
    "metrics",
    "health",
    "pprofBindAddress",
    "controller",
    "tls",
    "manageJobsWithoutQueueName",
    "managedJobsNamespaceSelector",
    "internalCertManagement",
    "waitForPodsReady",
    "clientConnection",
    "integrations",
    "multiKueue",
    "fairSharing",
    "admissionFairSharing",
    "resources",
    "featureGates",
    "objectRetentionPolicies",
    "visibilityServer",
)
KUEUE_FIELDS_V1BETA1 = tuple(f for f in KUEUE_FIELDS_V1BETA2 if f not in ("tls", "visibilityServer")) + (
    "queueVisibility",
)
USED_FIELDS = ("apiVersion", "kind", "metadata", "waitForPodsReady", "featureGates", "fairSharing", "objectRetentionPolicies")
UNUSED_WAIT_FOR_PODS_READY_FIELDS = ("maxTimeoutOnWorkload", "unscheduledTimeout")

LESS_THAN_OR_EQUAL_TO_FINAL_SHARE = "LessThanOrEqualToFinalShare"
LESS_THAN_INITIAL_SHARE = "LessThanInitialShare"
# The strategies config v1beta1 gives `fairSharing: {enable: true}` (v1beta2 has no default).
DEFAULT_PREEMPTION_STRATEGIES = (LESS_THAN_OR_EQUAL_TO_FINAL_SHARE, LESS_THAN_INITIAL_SHARE)
# Kueue's validStrategySets: the only lists of strategies it accepts, in this order.
VALID_STRATEGY_SETS = (
    (LESS_THAN_OR_EQUAL_TO_FINAL_SHARE,),
    (LESS_THAN_INITIAL_SHARE,),
    (LESS_THAN_OR_EQUAL_TO_FINAL_SHARE, LESS_THAN_INITIAL_SHARE),
)


def _bounded_duration(value: str | None) -> str | None:
    """A duration from 0 to INT32_MAX seconds."""
    if value is not None:
        nanos = parse_duration_nanos(value)
        if nanos < 0:
            raise k8s_error(f"Invalid value: {format_duration_nanos(nanos)}: {NEGATIVE_MESSAGE}")
        if nanos > MAX_DURATION_NANOS:
            raise k8s_error(f"Invalid value: {format_duration_nanos(nanos)}: {MAX_DURATION_MESSAGE}")
    return value


class RequeuingStrategy(KueueModel):
    """How a workload evicted for PodsReady timeout goes back to its queue."""

    timestamp: Literal["Creation", "Eviction"] = Field(
        default="Eviction",
        description="Queue order after requeue: Eviction (default, the eviction time) or Creation (creationTimestamp).",
    )
    backoff_limit_count: int | None = Field(
        default=None,
        json_schema_extra={"minimum": 0, "maximum": INT32_MAX},
        description="Requeues before the workload is deactivated; unset means no limit; 0 to 2147483647 (int32).",
    )
    backoff_base_seconds: int = Field(
        default=60,
        json_schema_extra={"minimum": 0, "maximum": INT32_MAX},
        description="Backoff base: requeue n waits about base*2^(n-1) seconds; 0 to 2147483647 (int32), default 60.",
    )
    backoff_max_seconds: int = Field(
        default=3600,
        json_schema_extra={"minimum": 0, "maximum": INT32_MAX},
        description="Upper bound of one backoff, in seconds; 0 to 2147483647 (int32), default 3600.",
    )
    backoff_limit_timeout: GoDuration | None = Field(
        default=None,
        description=(
            "Time from the first PodsReady-timeout eviction after which the next one deactivates the workload "
            "(Kueue's backoffLimitTimeout); cleared once its pods are ready; unset means no limit; a Go duration "
            "greater than 0s."
        ),
    )

    @field_validator("backoff_limit_count", "backoff_base_seconds", "backoff_max_seconds")
    @classmethod
    def _int32(cls, value: int | None) -> int | None:
        return non_negative_int32(value)

    @field_validator("backoff_limit_timeout")
    @classmethod
    def _positive_duration(cls, value: str | None) -> str | None:
        if value is not None and parse_duration_nanos(value) <= 0:
            raise k8s_error(f"Invalid value: {format_duration_nanos(parse_duration_nanos(value))}: must be greater than 0s")
        return _bounded_duration(value)

    @property
    def backoff_limit_timeout_seconds(self) -> float | None:
        return None if self.backoff_limit_timeout is None else parse_duration_nanos(self.backoff_limit_timeout) / 1e9


class WorkloadRetentionPolicy(KueueModel):
    """When workloads are deleted (Kueue's objectRetentionPolicies.workloads, KEP-1618)."""

    after_finished: GoDuration | None = Field(
        default=None,
        description=(
            "Accepted for Kueue's sake: a finished workload's workflow completes at once here, and the Temporal "
            "namespace's retention period says how long its history stays. A Go duration, 0s or more."
        ),
    )
    after_deactivated_by_kueue: GoDuration | None = Field(
        default=None,
        description=(
            "Time after which a workload the engine deactivated (a Rejected check, the requeuing limit, the maximum "
            "execution time) is deleted, its workflow ended; 0s deletes at once; unset keeps it. A Go duration, 0s or more."
        ),
    )

    @field_validator("after_finished", "after_deactivated_by_kueue")
    @classmethod
    def _not_negative(cls, value: str | None) -> str | None:
        return _bounded_duration(value)


class ObjectRetentionPolicies(KueueModel):
    workloads: WorkloadRetentionPolicy | None = Field(default=None, description="Retention of workloads; unset keeps them.")


class WaitForPodsReady(KueueModel):
    """All-or-nothing start: an admitted workload whose pods are not ready in time is evicted and requeued."""

    timeout: GoDuration = Field(
        default=DEFAULT_WAIT_FOR_PODS_READY_TIMEOUT,
        description=(
            "Time from admission until PodsReady=True, as a Go duration; `0s` means the default 30m; "
            "0 to 596523h14m7s (2147483647 seconds)."
        ),
    )
    block_admission: bool = Field(
        default=False,
        description="When true, a ClusterQueue admits nothing else while an admitted workload is not ready. Default false.",
    )
    requeuing_strategy: RequeuingStrategy = Field(
        default_factory=RequeuingStrategy, description="Requeue order and backoff after a timeout."
    )
    recovery_timeout: GoDuration | None = Field(
        default=None,
        description=(
            "Time a running workload may spend with PodsReady=False; defaults to `timeout`, `0s` disables; "
            "0 to 596523h14m7s (2147483647 seconds)."
        ),
    )
    max_timeout_on_workload: GoDuration | None = Field(
        default=None, description="Upper bound of per-workload timeouts. Accepted, not used by admitflow."
    )
    unscheduled_timeout: GoDuration | None = Field(
        default=None, description="Time pods may stay unscheduled. Accepted, not used by admitflow."
    )

    @field_validator("timeout")
    @classmethod
    def _timeout(cls, value: str) -> str:
        _bounded_duration(value)
        # Kueue's defaulting treats a zero timeout as unset.
        return DEFAULT_WAIT_FOR_PODS_READY_TIMEOUT if parse_duration_nanos(value) == 0 else value

    @field_validator("recovery_timeout")
    @classmethod
    def _recovery_timeout(cls, value: str | None) -> str | None:
        return _bounded_duration(value)

    @model_validator(mode="after")
    def _recovery_defaults_to_timeout(self) -> WaitForPodsReady:
        if self.recovery_timeout is None:
            self.recovery_timeout = self.timeout
        return self

    @property
    def timeout_seconds(self) -> float:
        return parse_duration_nanos(self.timeout) / 1e9

    @property
    def recovery_timeout_seconds(self) -> float | None:
        """Seconds, or None when recovery timeouts are disabled (`0s`)."""
        nanos = parse_duration_nanos(self.recovery_timeout or self.timeout)
        return None if nanos == 0 else nanos / 1e9


class FairSharingConfig(KueueModel):
    """Preemption-based fair sharing across the ClusterQueues and Cohorts of a cohort tree: on when
    the Configuration sets it (in config v1beta1, when `enable` is true)."""

    preemption_strategies: list[str] = Field(
        default_factory=list,
        validate_default=True,
        description=(
            "What a preemption must satisfy, each tried when the one before does not make the workload "
            "fit: LessThanOrEqualToFinalShare (the preemptor's share with the workload is at most the "
            "target's share without the preempted one), LessThanInitialShare (the preemptor's share with "
            "the workload is below the target's share). One of [LessThanOrEqualToFinalShare], "
            "[LessThanInitialShare], [LessThanOrEqualToFinalShare, LessThanInitialShare]. Required "
            "(config v1beta1 defaults it to the last)."
        ),
    )

    @field_validator("preemption_strategies")
    @classmethod
    def _strategy_set(cls, value: list[str]) -> list[str]:
        if not value:
            raise k8s_error("Required value: must be specified")
        if tuple(value) not in VALID_STRATEGY_SETS:
            # Kueue reports the list with Go's %#v.
            shown = "[]v1beta2.PreemptionStrategy{" + ", ".join(json.dumps(v) for v in value) + "}"
            supported = ", ".join(json.dumps(",".join(s)) for s in VALID_STRATEGY_SETS)
            raise k8s_error(f"Unsupported value: {shown}: supported values: {supported}")
        return value


class Configuration(KueueModel):
    """The parts of Kueue's Configuration admitflow uses. A singleton (key `config`)."""

    api_version: Literal["config.kueue.x-k8s.io/v1beta2"] = Field(default=API_VERSION, description="API version.")
    kind: Literal["Configuration"] = Field(default=KIND, description="Kind.")
    metadata: ObjectMeta | None = Field(
        default=None, description="Optional; Kueue's Configuration has none. The object is always keyed `config`."
    )
    wait_for_pods_ready: WaitForPodsReady = Field(
        default_factory=WaitForPodsReady,
        description="WaitForPodsReady settings; always defaulted (on by default since Kueue's v1beta2).",
    )
    feature_gates: dict[str, bool] | None = Field(
        default=None,
        description="Feature gates; admitflow reads DisableWaitForPodsReady (true turns WaitForPodsReady off).",
    )
    fair_sharing: FairSharingConfig | None = Field(
        default=None,
        description=(
            "Fair sharing across cohorts, with its preemption strategies; unset means off (config v1beta1's "
            "`enable: false`)."
        ),
    )
    object_retention_policies: ObjectRetentionPolicies | None = Field(
        default=None, description="When workloads are deleted (Kueue's KEP-1618); unset keeps them."
    )

    @property
    def key(self) -> str:
        return SINGLETON_KEY

    @property
    def wait_for_pods_ready_enabled(self) -> bool:
        return not (self.feature_gates or {}).get(DISABLE_WAIT_FOR_PODS_READY_GATE, False)

    def fair_sharing_strategies(self) -> list[str] | None:
        """The preemption strategies when fair sharing is on, else None."""
        return list(self.fair_sharing.preemption_strategies) if self.fair_sharing is not None else None


def drop_unused_fields(data: dict[str, Any], known: tuple[str, ...]) -> tuple[dict[str, Any], list[str]]:
    """Remove the Kueue fields admitflow does not use, with one warning each.

    Fields Kueue does not know are left in place, so validation refuses them.
    """
    warnings = []
    out = {}
    for key, value in data.items():
        if key in USED_FIELDS or key not in known:
            out[key] = value
        else:
            warnings.append(f"Configuration: field {key} is not used by admitflow")
    wfpr = out.get("waitForPodsReady")
    if isinstance(wfpr, dict):
        for key in UNUSED_WAIT_FOR_PODS_READY_FIELDS:
            if key in wfpr:
                warnings.append(f"Configuration: field waitForPodsReady.{key} is not used by admitflow")
    retention = out.get("objectRetentionPolicies")
    workloads = retention.get("workloads") if isinstance(retention, dict) else None
    if isinstance(workloads, dict) and "afterFinished" in workloads:
        # Kept (it is valid Kueue), and said: a finished workload's workflow completes at once here.
        warnings.append(
            "Configuration: field objectRetentionPolicies.workloads.afterFinished is not used by admitflow "
            "(a finished workload's workflow completes at once; the Temporal namespace's retention keeps its history)"
        )
    gates = out.get("featureGates")
    if isinstance(gates, dict):
        for gate in gates:
            if gate != DISABLE_WAIT_FOR_PODS_READY_GATE:
                warnings.append(f"Configuration: field featureGates.{gate} is not used by admitflow")
    return out, warnings
