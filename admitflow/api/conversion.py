"""v1beta1 -> v1beta2 conversion of Kueue manifests, done on the raw JSON before validation.

admitflow holds every object in its v1beta2 shape; v1beta1 input is rewritten here the way Kueue's
conversion webhook (apis/kueue/v1beta1/*_conversion.go, zz_generated.conversion.go and
apis/config/v1beta1/configuration_conversion.go) rewrites it:

kueue.x-k8s.io/v1beta1 (all kinds)
  - `apiVersion` becomes `kueue.x-k8s.io/v1beta2`.

ClusterQueue
  - `spec.cohort` becomes `spec.cohortName` (v1beta1 has no `cohortName`).
  - `spec.admissionChecks: [a, b]` becomes `spec.admissionChecksStrategy.admissionChecks:
    [{name: a, onFlavors: []}, {name: b, onFlavors: []}]`; an empty list is dropped; setting both
    `admissionChecks` and `admissionChecksStrategy` is refused as Kueue's v1beta1 webhook refused it.
  - `spec.flavorFungibility.whenCanBorrow: Borrow` and `whenCanPreempt: Preempt` become
    `MayStopSearch` (v1beta2 renamed the policy; the v1beta1 default `Borrow` is v1beta2's default).
  - `status.pendingWorkloadsStatus` (deprecated) is dropped.

LocalQueue
  - `status.flavorUsage` becomes `status.flavorsUsage`.

AdmissionCheck
  - `spec.retryDelayMinutes` (deprecated since v0.8, removed in v1beta2) is dropped with the
    warning `AdmissionCheck <name>: spec.retryDelayMinutes is deprecated and ignored`.

Workload
  - `spec.priorityClassSource` + `spec.priorityClassName` become `spec.priorityClassRef`:
    `kueue.x-k8s.io/workloadpriorityclass` -> `{group: kueue.x-k8s.io, kind: WorkloadPriorityClass}`,
    `scheduling.k8s.io/priorityclass` -> `{group: scheduling.k8s.io, kind: PriorityClass}`; with an
    empty source Kueue drops the name, and so do we (with a warning). Kueue's v1beta1 API wants
    `priority` beside `priorityClassName`; with a WorkloadPriorityClass source admitflow fills it in
    at submission from the class's value instead (admitflow.admission.priority).
  - `status.accumulatedPastExexcutionTimeSeconds` (v1beta1's misspelling) becomes
    `status.accumulatedPastExecutionTimeSeconds`.
  - `status.admission.podSetAssignments[].topologyAssignment.domains` (v1beta1) becomes one
    v1beta2 `slices` entry with individual values per level and individual pod counts.

ResourceFlavor, ProvisioningRequestConfig, Cohort, WorkloadPriorityClass
  - No field differences; only `apiVersion` changes. (A v1beta1 Cohort names its parent in
    `spec.parentName`, as v1beta2 does, since Kueue v0.13; `spec.parent` was v1alpha1's and is an
    unknown field, as in Kueue.)

config.kueue.x-k8s.io/v1beta1 Configuration
  - `waitForPodsReady.enable` is gone in v1beta2, where WaitForPodsReady is on by default: when it is
    not `true`, the result sets the feature gate `DisableWaitForPodsReady: true` instead; when it is,
    v1beta1's own defaults are kept: `timeout: 5m`, `blockAdmission: true`, and no recovery timeout
    (`recoveryTimeout: 0s`).
  - `fairSharing.enable` is gone in v1beta2, where a `fairSharing` that is set turns fair sharing on:
    when `enable` is not `true` the result has no `fairSharing` (with a warning if other fields were
    set); when it is, `enable` is dropped and `preemptionStrategies` defaults to
    `[LessThanOrEqualToFinalShare, LessThanInitialShare]`.
  - `queueVisibility` exists only in v1beta1; admitflow ignores it.
"""

from __future__ import annotations

import copy
from typing import Any

from . import field_error as fe
from .configuration import DEFAULT_PREEMPTION_STRATEGIES
from .field_error import FieldError
from .names import DNS1123_SUBDOMAIN_PATTERN, dns1123_subdomain_errors

KUEUE_V1BETA1 = "kueue.x-k8s.io/v1beta1"
KUEUE_V1BETA2 = "kueue.x-k8s.io/v1beta2"
CONFIG_V1BETA1 = "config.kueue.x-k8s.io/v1beta1"
CONFIG_V1BETA2 = "config.kueue.x-k8s.io/v1beta2"

WORKLOAD_PRIORITY_CLASS_SOURCE = "kueue.x-k8s.io/workloadpriorityclass"
POD_PRIORITY_CLASS_SOURCE = "scheduling.k8s.io/priorityclass"
_PRIORITY_CLASS_REFS = {
    WORKLOAD_PRIORITY_CLASS_SOURCE: {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass"},
    POD_PRIORITY_CLASS_SOURCE: {"group": "scheduling.k8s.io", "kind": "PriorityClass"},
}


class ConversionError(ValueError):
    """A v1beta1 object Kueue's v1beta1 API would have refused."""

    def __init__(self, error: FieldError):
        super().__init__(str(error))
        self.error = error


def _unknown(path: str) -> ConversionError:
    return ConversionError(FieldError(path, f'unknown field "{path}"'))


def _type_error(path: str, value: Any, expected: str) -> ConversionError:
    return ConversionError(
        fe.invalid(path, value, f'{path} in body must be of type {expected}: "{fe.json_type(value)}"')
    )


def _name(data: dict[str, Any]) -> str:
    metadata = data.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    return name if isinstance(name, str) and name else "?"


def _key(data: dict[str, Any]) -> str:
    metadata = data.get("metadata")
    namespace = metadata.get("namespace") if isinstance(metadata, dict) else None
    return f"{namespace or 'default'}/{_name(data)}"


def _dict_at(data: dict[str, Any], key: str) -> dict[str, Any] | None:
    value = data.get(key)
    return value if isinstance(value, dict) else None


def convert(data: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Return the v1beta2 form of a v1beta1 object and the warnings the conversion produced.

    Objects of other versions come back unchanged. Raises ConversionError for v1beta1 input
    Kueue's v1beta1 API refuses in ways the v1beta2 shape can no longer express.
    """
    api_version = data.get("apiVersion")
    if api_version not in (KUEUE_V1BETA1, CONFIG_V1BETA1):
        return data, []
    out = copy.deepcopy(data)
    warnings: list[str] = []
    kind = out.get("kind")
    if api_version == CONFIG_V1BETA1:
        out["apiVersion"] = CONFIG_V1BETA2
        if kind == "Configuration":
            warnings += _configuration(out)
        return out, warnings
    out["apiVersion"] = KUEUE_V1BETA2
    converter = {
        "ClusterQueue": _cluster_queue,
        "LocalQueue": _local_queue,
        "AdmissionCheck": _admission_check,
        "Workload": _workload,
    }.get(kind)
    if converter is not None:
        warnings += converter(out)
    return out, warnings


def _cluster_queue(data: dict[str, Any]) -> list[str]:
    spec = _dict_at(data, "spec")
    if spec is not None:
        if "cohortName" in spec:
            raise _unknown("spec.cohortName")
        if "cohort" in spec:
            spec["cohortName"] = spec.pop("cohort")
        if "admissionChecks" in spec:
            checks = spec.pop("admissionChecks")
            if not isinstance(checks, list):
                raise _type_error("spec.admissionChecks", checks, "array")
            for i, check in enumerate(checks):
                if not isinstance(check, str):
                    raise _type_error(f"spec.admissionChecks[{i}]", check, "string")
            if checks and "admissionChecksStrategy" in spec:
                raise ConversionError(
                    fe.invalid(
                        "spec", {}, "Either AdmissionChecks or AdmissionCheckStrategy can be set, but not both"
                    )
                )
            if checks:
                spec["admissionChecksStrategy"] = {
                    "admissionChecks": [{"name": name, "onFlavors": []} for name in checks]
                }
        fungibility = _dict_at(spec, "flavorFungibility")
        if fungibility is not None:
            if fungibility.get("whenCanBorrow") == "Borrow":
                fungibility["whenCanBorrow"] = "MayStopSearch"
            if fungibility.get("whenCanPreempt") == "Preempt":
                fungibility["whenCanPreempt"] = "MayStopSearch"
    status = _dict_at(data, "status")
    if status is not None:
        status.pop("pendingWorkloadsStatus", None)
    return []


def _local_queue(data: dict[str, Any]) -> list[str]:
    status = _dict_at(data, "status")
    if status is not None and "flavorUsage" in status:
        if "flavorsUsage" in status:
            raise _unknown("status.flavorsUsage")
        status["flavorsUsage"] = status.pop("flavorUsage")
    return []


def _admission_check(data: dict[str, Any]) -> list[str]:
    spec = _dict_at(data, "spec")
    if spec is not None and "retryDelayMinutes" in spec:
        spec.pop("retryDelayMinutes")
        return [f"AdmissionCheck {_name(data)}: spec.retryDelayMinutes is deprecated and ignored"]
    return []


def _workload(data: dict[str, Any]) -> list[str]:
    warnings: list[str] = []
    spec = _dict_at(data, "spec")
    if spec is not None:
        warnings += _priority_class(spec, _key(data))
    status = _dict_at(data, "status")
    if status is not None:
        if "accumulatedPastExecutionTimeSeconds" in status:
            raise _unknown("status.accumulatedPastExecutionTimeSeconds")
        if "accumulatedPastExexcutionTimeSeconds" in status:
            status["accumulatedPastExecutionTimeSeconds"] = status.pop("accumulatedPastExexcutionTimeSeconds")
        admission = _dict_at(status, "admission")
        assignments = admission.get("podSetAssignments") if admission else None
        for assignment in assignments if isinstance(assignments, list) else []:
            if isinstance(assignment, dict) and isinstance(assignment.get("topologyAssignment"), dict):
                _topology_domains_to_slices(assignment["topologyAssignment"])
    return warnings


def _priority_class(spec: dict[str, Any], key: str) -> list[str]:
    if "priorityClassRef" in spec:
        raise _unknown("spec.priorityClassRef")
    source = spec.pop("priorityClassSource", "")
    name = spec.pop("priorityClassName", None)
    supported = [WORKLOAD_PRIORITY_CLASS_SOURCE, POD_PRIORITY_CLASS_SOURCE, ""]
    if not isinstance(source, str):
        raise _type_error("spec.priorityClassSource", source, "string")
    if source not in supported:
        raise ConversionError(fe.not_supported("spec.priorityClassSource", source, supported))
    if name is None:
        return []
    path = "spec.priorityClassName"
    if not isinstance(name, str):
        raise _type_error(path, name, "string")
    if len(name) > 253:
        raise ConversionError(FieldError(path, fe.too_long_body(253)))
    if dns1123_subdomain_errors(name):
        raise ConversionError(fe.invalid(path, name, f"{path} in body should match '{DNS1123_SUBDOMAIN_PATTERN}'"))
    # A WorkloadPriorityClass's value is filled in at submission (admitflow.admission.priority), as
    # Kueue's job controller fills it; a pod PriorityClass admitflow cannot look up.
    if "priority" not in spec and source != WORKLOAD_PRIORITY_CLASS_SOURCE:
        raise ConversionError(fe.cel("spec", "object", "priority should not be nil when priorityClassName is set"))
    if not source:
        return [f"Workload {key}: spec.priorityClassName is ignored because spec.priorityClassSource is empty"]
    spec["priorityClassRef"] = {**_PRIORITY_CLASS_REFS[source], "name": name}
    return []


def _topology_domains_to_slices(assignment: dict[str, Any]) -> None:
    domains = assignment.get("domains")
    levels = assignment.get("levels")
    if not isinstance(domains, list) or not isinstance(levels, list):
        return
    try:
        slices = []
        if domains:
            slices.append(
                {
                    "domainCount": len(domains),
                    "valuesPerLevel": [
                        {"individual": {"roots": [domain["values"][level] for domain in domains]}}
                        for level in range(len(levels))
                    ],
                    "podCounts": {"individual": [domain["count"] for domain in domains]},
                }
            )
    except (KeyError, IndexError, TypeError):
        return  # Leave a malformed assignment as written; it is passed through, never read.
    del assignment["domains"]
    assignment["slices"] = slices


def _configuration(data: dict[str, Any]) -> list[str]:
    return _fair_sharing(data) + _wait_for_pods_ready(data)


def _fair_sharing(data: dict[str, Any]) -> list[str]:
    # Kueue's Convert_v1beta1_Configuration_To_v1beta2_Configuration and its FairSharing converter.
    if "fairSharing" not in data:
        return []
    fair = data.pop("fairSharing")
    if not isinstance(fair, dict):
        raise _type_error("fairSharing", fair, "object")
    enable = fair.get("enable", False)
    if not isinstance(enable, bool):
        raise _type_error("fairSharing.enable", enable, "boolean")
    if not enable:
        if set(fair) - {"enable"}:
            return ["Configuration: fairSharing.enable is not true, so fair sharing is off"]
        return []
    fair = {k: v for k, v in fair.items() if k != "enable"}
    if not fair.get("preemptionStrategies"):
        fair["preemptionStrategies"] = list(DEFAULT_PREEMPTION_STRATEGIES)
    data["fairSharing"] = fair
    return []


def _wait_for_pods_ready(data: dict[str, Any]) -> list[str]:
    wait = data.pop("waitForPodsReady", None)
    if wait is not None and not isinstance(wait, dict):
        raise _type_error("waitForPodsReady", wait, "object")
    enabled = isinstance(wait, dict) and wait.get("enable") is True
    if enabled:
        assert wait is not None
        wait = dict(wait)
        wait.pop("enable")
        wait.setdefault("timeout", "5m")
        wait.setdefault("blockAdmission", True)
        wait.setdefault("recoveryTimeout", "0s")
        data["waitForPodsReady"] = wait
        return []
    gates = data.setdefault("featureGates", {})
    if isinstance(gates, dict):
        gates.setdefault("DisableWaitForPodsReady", True)
    if wait:
        return ["Configuration: waitForPodsReady.enable is not true, so WaitForPodsReady is off (DisableWaitForPodsReady)"]
    return []
