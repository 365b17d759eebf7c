"""Every integer a manifest or message carries is bounded as Kueue's Go type bounds it (int32 for
counts, seconds and priorities; int64 for generations and tolerationSeconds): an absurd number is
refused when it is parsed, in one line naming the field, instead of overflowing a timedelta inside
a workflow later; the largest value the Go type holds is still accepted."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from admitflow.api import AdmissionCheckState, ManifestError
from admitflow.api.bounds import INT32_MAX, INT32_MIN, INT64_MAX
from admitflow.api.loader import load_text
from admitflow.api.workload import PodSetUpdate
from admitflow.wire import first_error
from tests.unit.test_manifests import V2, pod_set, wl
CONFIG_V2 = "config.kueue.x-k8s.io/v1beta2"
T0 = "2025-01-01T00:00:00Z"


def dump(document: dict | str) -> str:
    """JSON for a document; text (YAML, for `.inf` and `.nan`) as it is."""
    return document if isinstance(document, str) else json.dumps(document) + "\n"


def yaml_ac(retry_strategy: str) -> str:
    return (
        f"apiVersion: {V2}\nkind: AdmissionCheck\nmetadata:\n  name: check\n"
        f"spec:\n  controllerName: c\n  retryStrategy: {retry_strategy}\n"
    )


def ac(retry_strategy: dict) -> dict:
    spec = {"controllerName": "c", "retryStrategy": retry_strategy}
    return {"apiVersion": V2, "kind": "AdmissionCheck", "metadata": {"name": "check"}, "spec": spec}


def prc(retry_strategy: dict) -> dict:
    spec = {"provisioningClassName": "c", "retryStrategy": retry_strategy}
    return {"apiVersion": V2, "kind": "ProvisioningRequestConfig", "metadata": {"name": "prov"}, "spec": spec}


def config(wait_for_pods_ready: dict) -> dict:
    return {"apiVersion": CONFIG_V2, "kind": "Configuration", "waitForPodsReady": wait_for_pods_ready}


def requeuing(**strategy) -> dict:
    return config({"requeuingStrategy": strategy})


def check_state(**extra) -> dict:
    return {"name": "prov", "state": "Retry", "lastTransitionTime": T0, "message": "", **extra}


def cq(preemption: dict) -> dict:
    group = {"coveredResources": ["cpu"], "flavors": [{"name": "default", "resources": [{"name": "cpu", "nominalQuota": 9}]}]}
    spec = {"resourceGroups": [group], "preemption": preemption}
    return {"apiVersion": V2, "kind": "ClusterQueue", "metadata": {"name": "cq"}, "spec": spec}


def node_group(**timing) -> dict:
    spec = {"capacity": {"cpu": "8"}, **timing}
    return {"apiVersion": "admitflow.io/v1", "kind": "SimulatedNodeGroup", "metadata": {"name": "ng"}, "spec": spec}


def schema(kind: str, name: str, path: str, value: object, relation: str, bound: object) -> str:
    """The apiserver's schema message for a number out of its range."""
    return f"bad.yaml: document 1 ({kind} {name}): {path}: Invalid value: {value}: {path} in body should be {relation} {bound}"


def above(kind: str, name: str, path: str, value: object, bound: object = INT32_MAX) -> str:
    return schema(kind, name, path, value, "less than or equal to", bound)


def below(kind: str, name: str, path: str, value: object, bound: object) -> str:
    return schema(kind, name, path, value, "greater than or equal to", bound)


OUT_OF_RANGE = [
    # The bug: a Retry delay of 31,700 years passed validation and overflowed inside the workflow.
    pytest.param(
        wl(status={"admissionChecks": [check_state(requeueAfterSeconds=1_000_000_000_000)]}),
        above("Workload", "job", "status.admissionChecks[0].requeueAfterSeconds", 1_000_000_000_000),
        id="a-requeue-after-of-a-trillion-seconds-is-refused",
    ),
    pytest.param(
        wl(status={"admissionChecks": [check_state(requeueAfterSeconds=INT32_MAX + 1)]}),
        above("Workload", "job", "status.admissionChecks[0].requeueAfterSeconds", INT32_MAX + 1),
        id="a-requeue-after-one-past-int32-is-refused",
    ),
    pytest.param(
        wl(status={"admissionChecks": [check_state(retryCount=INT32_MAX + 1)]}),
        above("Workload", "job", "status.admissionChecks[0].retryCount", INT32_MAX + 1),
        id="a-retry-count-past-int32-is-refused",
    ),
    pytest.param(
        wl(status={"requeueState": {"count": INT32_MAX + 1}}),
        above("Workload", "job", "status.requeueState.count", INT32_MAX + 1),
        id="a-requeue-count-past-int32-is-refused",
    ),
    pytest.param(
        wl(spec={"podSets": [pod_set(count=INT32_MAX + 1)]}),
        above("Workload", "job", "spec.podSets[0].count", INT32_MAX + 1),
        id="a-pod-set-count-past-int32-is-refused",
    ),
    pytest.param(
        wl(spec={"podSets": [pod_set(count=1, minCount=INT32_MAX + 1)]}),
        above("Workload", "job", "spec.podSets[0].minCount", INT32_MAX + 1),
        id="a-min-count-past-int32-is-refused",
    ),
    pytest.param(
        wl(spec={"podSets": [pod_set(topologyRequest={"podSetSliceSize": INT32_MAX + 1})]}),
        above("Workload", "job", "spec.podSets[0].topologyRequest.podSetSliceSize", INT32_MAX + 1),
        id="a-topology-slice-size-past-int32-is-refused",
    ),
    pytest.param(
        wl(spec={"podSets": [pod_set()], "priority": INT32_MAX + 1}),
        above("Workload", "job", "spec.priority", INT32_MAX + 1),
        id="a-priority-past-int32-is-refused",
    ),
    pytest.param(
        wl(spec={"podSets": [pod_set()], "priority": INT32_MIN - 1}),
        below("Workload", "job", "spec.priority", INT32_MIN - 1, INT32_MIN),
        id="a-priority-below-int32-is-refused",
    ),
    pytest.param(
        wl(spec={"podSets": [pod_set()], "maximumExecutionTimeSeconds": INT32_MAX + 1}),
        above("Workload", "job", "spec.maximumExecutionTimeSeconds", INT32_MAX + 1),
        id="a-maximum-execution-time-past-int32-is-refused",
    ),
    pytest.param(
        wl(status={"admission": {"clusterQueue": "cq", "podSetAssignments": [{"name": "main", "count": INT32_MAX + 1}]}}),
        above("Workload", "job", "status.admission.podSetAssignments[0].count", INT32_MAX + 1),
        id="an-admitted-pod-count-past-int32-is-refused",
    ),
    pytest.param(
        wl(status={"reclaimablePods": [{"name": "main", "count": INT32_MAX + 1}]}),
        above("Workload", "job", "status.reclaimablePods[0].count", INT32_MAX + 1),
        id="a-reclaimable-pod-count-past-int32-is-refused",
    ),
    pytest.param(
        wl(status={"schedulingStats": {"evictions": [{"reason": "Preempted", "underlyingCause": "", "count": INT32_MAX + 1}]}}),
        above("Workload", "job", "status.schedulingStats.evictions[0].count", INT32_MAX + 1),
        id="an-eviction-count-past-int32-is-refused",
    ),
    pytest.param(
        wl(status={"accumulatedPastExecutionTimeSeconds": INT32_MAX + 1}),
        above("Workload", "job", "status.accumulatedPastExecutionTimeSeconds", INT32_MAX + 1),
        id="an-accumulated-execution-time-past-int32-is-refused",
    ),
    pytest.param(
        wl(
            spec={
                "podSets": [
                    pod_set(
                        template={
                            "spec": {
                                "containers": [{"name": "c", "image": "busybox"}],
                                "tolerations": [{"key": "k", "effect": "NoExecute", "tolerationSeconds": INT64_MAX + 1}],
                            }
                        }
                    )
                ]
            }
        ),
        above("Workload", "job", "spec.podSets[0].template.spec.tolerations[0].tolerationSeconds", INT64_MAX + 1, INT64_MAX),
        id="toleration-seconds-past-int64-is-refused",
    ),
    pytest.param(
        wl(generation=INT64_MAX + 1),
        above("Workload", "job", "metadata.generation", INT64_MAX + 1, INT64_MAX),
        id="a-generation-past-int64-is-refused",
    ),
    pytest.param(
        wl(status={"admissionChecks": [check_state(podSetUpdates=[{"name": "main", "tolerations": [{"operator": "Exists"}] * 9}])]}),
        "bad.yaml: document 1 (Workload job): status.admissionChecks[0].podSetUpdates[0].tolerations: "
        "Too many: 9: must have at most 8 items",
        id="a-pod-set-update-with-9-tolerations-is-refused",
    ),
    # AdmissionCheck retryStrategy (admitflow's extension): the same int32 seconds, a finite factor.
    pytest.param(
        ac({"baseDelaySeconds": INT32_MAX + 1, "maxDelaySeconds": INT32_MAX + 1}),
        above("AdmissionCheck", "check", "spec.retryStrategy.baseDelaySeconds", INT32_MAX + 1),
        id="a-retry-base-delay-past-int32-is-refused",
    ),
    pytest.param(
        ac({"maxDelaySeconds": 10**12}),
        above("AdmissionCheck", "check", "spec.retryStrategy.maxDelaySeconds", 10**12),
        id="a-retry-max-delay-past-int32-is-refused",
    ),
    pytest.param(
        ac({"backoffLimitCount": INT32_MAX + 1}),
        above("AdmissionCheck", "check", "spec.retryStrategy.backoffLimitCount", INT32_MAX + 1),
        id="a-retry-limit-past-int32-is-refused",
    ),
    pytest.param(
        ac({"factor": 101}),
        above("AdmissionCheck", "check", "spec.retryStrategy.factor", 101, 100),
        id="a-retry-factor-past-100-is-refused",
    ),
    pytest.param(
        yaml_ac("{factor: .inf}"),
        "bad.yaml: document 1 (AdmissionCheck check): spec.retryStrategy.factor: Invalid value: inf: "
        "Input should be a finite number",
        id="an-infinite-retry-factor-is-refused",
    ),
    pytest.param(
        yaml_ac("{jitter: .nan}"),
        "bad.yaml: document 1 (AdmissionCheck check): spec.retryStrategy.jitter: Invalid value: nan: "
        "Input should be a finite number",
        id="a-nan-retry-jitter-is-refused",
    ),
    # ProvisioningRequestConfig retryStrategy: *int32 without a Minimum.
    pytest.param(
        prc({"backoffLimitCount": INT32_MAX + 1}),
        above("ProvisioningRequestConfig", "prov", "spec.retryStrategy.backoffLimitCount", INT32_MAX + 1),
        id="a-provisioning-retry-limit-past-int32-is-refused",
    ),
    pytest.param(
        prc({"backoffBaseSeconds": 10**12}),
        above("ProvisioningRequestConfig", "prov", "spec.retryStrategy.backoffBaseSeconds", 10**12),
        id="a-provisioning-backoff-base-past-int32-is-refused",
    ),
    pytest.param(
        prc({"backoffMaxSeconds": INT32_MIN - 1}),
        below("ProvisioningRequestConfig", "prov", "spec.retryStrategy.backoffMaxSeconds", INT32_MIN - 1, INT32_MIN),
        id="a-provisioning-backoff-max-below-int32-is-refused",
    ),
    # Configuration waitForPodsReady: Kueue's config validation wording.
    pytest.param(
        requeuing(backoffLimitCount=INT32_MAX + 1),
        "bad.yaml: document 1 (Configuration config): waitForPodsReady.requeuingStrategy.backoffLimitCount: "
        "Invalid value: 2147483648: must be less than or equal to 2147483647",
        id="a-requeuing-limit-past-int32-is-refused",
    ),
    pytest.param(
        requeuing(backoffBaseSeconds=10**12),
        "bad.yaml: document 1 (Configuration config): waitForPodsReady.requeuingStrategy.backoffBaseSeconds: "
        "Invalid value: 1000000000000: must be less than or equal to 2147483647",
        id="a-requeuing-backoff-base-past-int32-is-refused",
    ),
    pytest.param(
        requeuing(backoffMaxSeconds=INT32_MAX + 1),
        "bad.yaml: document 1 (Configuration config): waitForPodsReady.requeuingStrategy.backoffMaxSeconds: "
        "Invalid value: 2147483648: must be less than or equal to 2147483647",
        id="a-requeuing-backoff-max-past-int32-is-refused",
    ),
    pytest.param(
        config({"timeout": "596523h14m8s"}),
        "bad.yaml: document 1 (Configuration config): waitForPodsReady.timeout: "
        "Invalid value: 596523h14m8s: must be less than or equal to 596523h14m7s",
        id="a-pods-ready-timeout-one-second-past-int32-seconds-is-refused",
    ),
    pytest.param(
        config({"recoveryTimeout": "2562047h"}),
        "bad.yaml: document 1 (Configuration config): waitForPodsReady.recoveryTimeout: "
        "Invalid value: 2562047h0m0s: must be less than or equal to 596523h14m7s",
        id="a-recovery-timeout-of-292-years-is-refused",
    ),
    # ClusterQueue and the simulated autoscaler's node groups.
    pytest.param(
        cq({"borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": INT32_MAX + 1}}),
        above("ClusterQueue", "cq", "spec.preemption.borrowWithinCohort.maxPriorityThreshold", INT32_MAX + 1),
        id="a-preemption-priority-threshold-past-int32-is-refused",
    ),
    pytest.param(
        node_group(provisioningDelaySeconds=INT32_MAX + 1),
        above("SimulatedNodeGroup", "ng", "spec.provisioningDelaySeconds", INT32_MAX + 1),
        id="a-node-group-provisioning-delay-past-int32-is-refused",
    ),
    pytest.param(
        node_group(availableAfterSeconds=10**12),
        above("SimulatedNodeGroup", "ng", "spec.availableAfterSeconds", 10**12),
        id="a-node-group-available-after-past-int32-is-refused",
    ),
]


@pytest.mark.parametrize(("document", "expected"), OUT_OF_RANGE)
def test_a_number_out_of_its_go_range_is_refused_in_one_line_naming_the_field(document, expected):
    with pytest.raises(ManifestError) as err:
        load_text(dump(document), "bad.yaml")
    assert str(err.value) == expected
    assert "\n" not in str(err.value)


def _get(obj: object, path: str) -> object:
    for part in path.split("."):
        if part.endswith("]"):
            name, index = part[:-1].split("[")
            obj = getattr(obj, name)[int(index)]
        else:
            obj = getattr(obj, part)
    return obj


AT_THE_LIMIT = [
    pytest.param(
        wl(status={"admissionChecks": [check_state(requeueAfterSeconds=INT32_MAX, retryCount=INT32_MAX)]}),
        {"status.admission_checks[0].requeue_after_seconds": INT32_MAX, "status.admission_checks[0].retry_count": INT32_MAX},
        id="requeue-after-and-retry-count-of-int32-max-are-accepted",
    ),
    pytest.param(
        wl(
            spec={
                "podSets": [pod_set(count=INT32_MAX, minCount=INT32_MAX)],
                "priority": INT32_MAX,
                "maximumExecutionTimeSeconds": INT32_MAX,
            },
            status={"requeueState": {"count": INT32_MAX}, "accumulatedPastExecutionTimeSeconds": INT32_MAX},
        ),
        {
            "spec.pod_sets[0].count": INT32_MAX,
            "spec.pod_sets[0].min_count": INT32_MAX,
            "spec.priority": INT32_MAX,
            "spec.maximum_execution_time_seconds": INT32_MAX,
            "status.requeue_state.count": INT32_MAX,
            "status.accumulated_past_execution_time_seconds": INT32_MAX,
        },
        id="workload-counts-priority-and-seconds-of-int32-max-are-accepted",
    ),
    pytest.param(
        wl(spec={"podSets": [pod_set()], "priority": INT32_MIN}),
        {"spec.priority": INT32_MIN},
        id="a-priority-of-int32-min-is-accepted",
    ),
    pytest.param(
        wl(generation=INT64_MAX),
        {"metadata.generation": INT64_MAX},
        id="a-generation-of-int64-max-is-accepted",
    ),
    pytest.param(
        ac({"baseDelaySeconds": INT32_MAX, "maxDelaySeconds": INT32_MAX, "backoffLimitCount": INT32_MAX, "factor": 100}),
        {
            "spec.retry_strategy.base_delay_seconds": INT32_MAX,
            "spec.retry_strategy.max_delay_seconds": INT32_MAX,
            "spec.retry_strategy.backoff_limit_count": INT32_MAX,
            "spec.retry_strategy.factor": 100,
        },
        id="admission-check-retry-strategy-at-its-limits-is-accepted",
    ),
    pytest.param(
        prc({"backoffLimitCount": INT32_MAX, "backoffBaseSeconds": INT32_MAX, "backoffMaxSeconds": INT32_MAX}),
        {
            "spec.retry_strategy.backoff_limit_count": INT32_MAX,
            "spec.retry_strategy.backoff_base_seconds": INT32_MAX,
            "spec.retry_strategy.backoff_max_seconds": INT32_MAX,
        },
        id="provisioning-retry-strategy-of-int32-max-is-accepted",
    ),
    pytest.param(
        config(
            {
                "timeout": "596523h14m7s",
                "recoveryTimeout": f"{INT32_MAX}s",
                "requeuingStrategy": {
                    "backoffLimitCount": INT32_MAX,
                    "backoffBaseSeconds": INT32_MAX,
                    "backoffMaxSeconds": INT32_MAX,
                },
            }
        ),
        {
            "wait_for_pods_ready.timeout_seconds": INT32_MAX,
            "wait_for_pods_ready.recovery_timeout_seconds": INT32_MAX,
            "wait_for_pods_ready.requeuing_strategy.backoff_limit_count": INT32_MAX,
            "wait_for_pods_ready.requeuing_strategy.backoff_base_seconds": INT32_MAX,
            "wait_for_pods_ready.requeuing_strategy.backoff_max_seconds": INT32_MAX,
        },
        id="pods-ready-timeouts-and-backoff-of-int32-max-seconds-are-accepted",
    ),
    pytest.param(
        node_group(provisioningDelaySeconds=INT32_MAX, availableAfterSeconds=INT32_MAX),
        {"spec.provisioning_delay_seconds": INT32_MAX, "spec.available_after_seconds": INT32_MAX},
        id="node-group-delays-of-int32-max-are-accepted",
    ),
]


@pytest.mark.parametrize(("document", "expected"), AT_THE_LIMIT)
def test_the_largest_value_the_go_type_holds_is_accepted_and_kept(document, expected):
    [loaded] = load_text(dump(document), "good.yaml")
    for path, value in expected.items():
        assert _get(loaded.obj, path) == value, path


def test_int32_max_seconds_after_a_kubernetes_time_is_still_a_datetime():
    # What the bound protects: the requeue time Kueue computes from a Retry never overflows.
    state = AdmissionCheckState.model_validate(check_state(requeueAfterSeconds=INT32_MAX))
    assert state.last_transition_time + timedelta(seconds=state.requeue_after_seconds) == datetime(
        2093, 1, 19, 3, 14, 7, tzinfo=UTC
    )


MESSAGES = [
    pytest.param(
        AdmissionCheckState,
        check_state(requeueAfterSeconds=1_000_000_000_000),
        "requeueAfterSeconds: Input should be less than or equal to 2147483647",
        id="a-check-state-with-a-trillion-second-delay-names-requeue-after-seconds",
    ),
    pytest.param(
        AdmissionCheckState,
        check_state(retryCount=-1),
        "retryCount: Input should be greater than or equal to 0",
        id="a-check-state-with-a-negative-retry-count-names-retry-count",
    ),
    pytest.param(
        PodSetUpdate,
        {"name": "main", "tolerations": [{"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 2**63}]},
        "tolerations.0.tolerationSeconds: Input should be less than or equal to 9223372036854775807",
        id="a-pod-set-update-with-toleration-seconds-past-int64-names-the-toleration",
    ),
]


@pytest.mark.parametrize(("model", "payload", "expected"), MESSAGES)
def test_messages_refuse_out_of_range_numbers_in_one_line_naming_the_field(model, payload, expected):
    with pytest.raises(ValidationError) as err:
        model.model_validate(payload)
    assert first_error(err.value) == expected
