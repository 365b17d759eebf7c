"""Loading Kueue manifests: what is refused (with the apiserver's words), converted and defaulted."""

from __future__ import annotations

import io
import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from admitflow.api import (
    AdmissionCheck,
    ClusterQueue,
    Cohort,
    Configuration,
    LocalQueue,
    ManifestError,
    ProvisioningRequestConfig,
    ResourceFlavor,
    Workload,
    load_manifests,
    parse_manifest,
)
from admitflow.api.loader import load_text

DATA = Path(__file__).resolve().parents[1] / "data" / "kueue-examples"
V1 = "kueue.x-k8s.io/v1beta1"
V2 = "kueue.x-k8s.io/v1beta2"
DNS_SUBDOMAIN = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation "
    "is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
DNS_LABEL = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start "
    "and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
QUALIFIED_NAME_PART = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
    "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
QUANTITY_FORMAT = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)
TEMPLATE = "spec.podSets[0].template"
C = {"name": "c", "image": "busybox"}
PROVREQ_PARAMETERS = "provreq.kueue.x-k8s.io/ annotations become the ProvisioningRequest's spec.parameters"
SUBDOMAIN_PATTERN = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


def dump(*documents: dict) -> str:
    return "---\n".join(json.dumps(d) + "\n" for d in documents)


def flavor(name: str = "default", resources: tuple[tuple[str, object], ...] = (("cpu", 9),), **extra) -> dict:
    return {"name": name, "resources": [{"name": r, "nominalQuota": q, **extra} for r, q in resources]}


def group(covered: list[str], *flavors: dict) -> dict:
    return {"coveredResources": covered, "flavors": list(flavors)}


def cq(spec: dict, api_version: str = V2, name: str = "cq") -> dict:
    return {"apiVersion": api_version, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


def one_group(**spec) -> dict:
    return cq({"resourceGroups": [group(["cpu"], flavor())], **spec})


def cohort(spec: dict | None = None, api_version: str = V2, name: str = "team") -> dict:
    obj = {"apiVersion": api_version, "kind": "Cohort", "metadata": {"name": name}}
    return obj if spec is None else {**obj, "spec": spec}


def limits(**limit) -> list[dict]:
    """One resource group whose cpu quota of 5 carries these limits (borrowingLimit, lendingLimit)."""
    return [group(["cpu"], flavor(resources=(("cpu", 5),), **limit))]


def config(api_version: str = "config.kueue.x-k8s.io/v1beta2", **fields) -> dict:
    return {"apiVersion": api_version, "kind": "Configuration", **fields}


def ac(spec: dict, api_version: str = V2) -> dict:
    return {"apiVersion": api_version, "kind": "AdmissionCheck", "metadata": {"name": "check"}, "spec": spec}


def prc(spec: dict) -> dict:
    return {"apiVersion": V2, "kind": "ProvisioningRequestConfig", "metadata": {"name": "prov"}, "spec": spec}


def rf(spec: dict) -> dict:
    return {"apiVersion": V2, "kind": "ResourceFlavor", "metadata": {"name": "rf"}, "spec": spec}


def pod_set(**fields) -> dict:
    template = fields.pop("template", {"spec": {"containers": [{"name": "c", "image": "busybox"}]}})
    return {"template": template, **fields}


def wl(spec: dict | None = None, status: dict | None = None, api_version: str = V2, **metadata) -> dict:
    obj = {
        "apiVersion": api_version,
        "kind": "Workload",
        "metadata": {"name": "job", **metadata},
        "spec": spec if spec is not None else {"podSets": [pod_set()]},
    }
    if status is not None:
        obj["status"] = status
    return obj


def cond(type_: str, status: str = "True") -> dict:
    return {"type": type_, "status": status, "reason": "Test", "message": "", "lastTransitionTime": "2025-01-01T00:00:00Z"}


def check_state(name: str, **extra) -> dict:
    return {"name": name, "state": "Ready", "lastTransitionTime": "2025-01-01T00:00:00Z", "message": "", **extra}


def line(kind: str, name: str, rest: str, document: int = 1) -> str:
    return f"bad.yaml: document {document} ({kind} {name}): {rest}"


BAD = [
    # ClusterQueue: schema limits and enums
    pytest.param(
        dump(cq({"resourceGroups": [group([f"r{i}"], flavor(f"f{i}", ((f"r{i}", 1),))) for i in range(17)]})),
        line("ClusterQueue", "cq", "spec.resourceGroups: Too many: 17: must have at most 16 items"),
        id="cluster-queue-with-17-resource-groups-is-refused",
    ),
    pytest.param(
        dump(cq({"resourceGroups": [group(["cpu"], *[flavor(f"f{i}") for i in range(65)])]})),
        line("ClusterQueue", "cq", "spec.resourceGroups[0].flavors: Too many: 65: must have at most 64 items"),
        id="resource-group-with-65-flavors-is-refused",
    ),
    pytest.param(
        dump(cq({"resourceGroups": [group([], flavor())]})),
        line(
            "ClusterQueue",
            "cq",
            "spec.resourceGroups[0].coveredResources: Invalid value: []interface {}{}: "
            "spec.resourceGroups[0].coveredResources in body should have at least 1 items",
        ),
        id="resource-group-without-covered-resources-is-refused",
    ),
    pytest.param(
        dump(one_group(queueingStrategy="Foo")),
        line(
            "ClusterQueue",
            "cq",
            'spec.queueingStrategy: Unsupported value: "Foo": supported values: "StrictFIFO", "BestEffortFIFO"',
        ),
        id="unknown-queueing-strategy-is-refused-with-the-supported-values",
    ),
    pytest.param(
        dump(one_group(stopPolicy="Pause")),
        line(
            "ClusterQueue",
            "cq",
            'spec.stopPolicy: Unsupported value: "Pause": supported values: "None", "Hold", "HoldAndDrain"',
        ),
        id="unknown-stop-policy-is-refused",
    ),
    pytest.param(
        dump(one_group(foo=1)),
        line("ClusterQueue", "cq", 'spec.foo: unknown field "spec.foo"'),
        id="unknown-field-is-refused-like-strict-field-validation",
    ),
    pytest.param(
        dump(cq({"cohort": "team"})),
        line("ClusterQueue", "cq", 'spec.cohort: unknown field "spec.cohort"'),
        id="v1beta1-cohort-field-is-unknown-in-v1beta2",
    ),
    pytest.param(
        dump(cq({"resourceGroups": [group(["cpu"], flavor(resources=(("cpu", "lots"),)))]})),
        line(
            "ClusterQueue",
            "cq",
            f'spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: Invalid value: "lots": {QUANTITY_FORMAT}',
        ),
        id="nominal-quota-that-is-not-a-quantity-is-refused",
    ),
    # ClusterQueue: CEL rules of the CRD
    pytest.param(
        dump(cq({"resourceGroups": [group(["cpu", "memory"], flavor())]})),
        line(
            "ClusterQueue",
            "cq",
            'spec.resourceGroups[0]: Invalid value: "object": '
            "flavors must have the same number of resources as the coveredResources",
        ),
        id="flavor-listing-fewer-resources-than-covered-is-refused",
    ),
    pytest.param(
        dump(cq({"resourceGroups": [group(["cpu"], flavor(borrowingLimit=2))]})),
        line("ClusterQueue", "cq", 'spec: Invalid value: "object": borrowingLimit must be nil when cohort is empty'),
        id="borrowing-limit-without-a-cohort-is-refused",
    ),
    pytest.param(
        dump(one_group(preemption={"reclaimWithinCohort": "Never", "borrowWithinCohort": {"policy": "LowerPriority"}})),
        line(
            "ClusterQueue",
            "cq",
            'spec.preemption: Invalid value: "object": reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never',
        ),
        id="borrowing-preemption-without-reclaim-is-refused",
    ),
    pytest.param(
        dump(one_group(flavorFungibility={"preference": "PreemptionOverBorrowing"})),
        line(
            "ClusterQueue",
            "cq",
            'spec.flavorFungibility: Invalid value: "object": '
            "preference can only be set when both whenCanBorrow and whenCanPreempt are TryNextFlavor",
        ),
        id="fungibility-preference-needs-both-policies-try-next-flavor",
    ),
    # ClusterQueue: Kueue's webhook
    pytest.param(
        dump(cq({"resourceGroups": [group(["cpu", "memory"], flavor(resources=(("memory", 1), ("cpu", 1))))]})),
        line(
            "ClusterQueue",
            "cq",
            'spec.resourceGroups[0].flavors[0].resources[0].name: Invalid value: "memory": '
            "must match the name in coveredResources",
        ),
        id="flavor-resources-must-follow-covered-resources-in-order",
    ),
    pytest.param(
        dump(cq({"resourceGroups": [group(["cpu"], flavor(resources=(("cpu", "-500m"),)))]})),
        line(
            "ClusterQueue",
            "cq",
            'spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: Invalid value: "-500m": '
            "must be greater than or equal to 0",
        ),
        id="negative-nominal-quota-is-refused",
    ),
    pytest.param(
        dump(cq({"resourceGroups": [group(["cpu"], flavor("a")), group(["memory"], flavor("a", (("memory", 1),)))]})),
        line("ClusterQueue", "cq", 'spec.resourceGroups[1].flavors[0].name: Duplicate value: "a"'),
        id="flavor-named-in-two-resource-groups-is-refused",
    ),
    pytest.param(
        dump(cq({"resourceGroups": [group(["cpu"], flavor("a"), flavor("a"))]})),
        line(
            "ClusterQueue",
            "cq",
            'spec.resourceGroups[0].flavors[1]: Duplicate value: map[string]interface {}{"name":"a"}',
        ),
        id="flavor-named-twice-in-one-group-is-refused-by-the-list-map-schema",
    ),
    pytest.param(
        dump(cq({"resourceGroups": [group(["cpu"], flavor("a")), group(["cpu"], flavor("b"))]})),
        line("ClusterQueue", "cq", 'spec.resourceGroups[1].coveredResources[0]: Duplicate value: "cpu"'),
        id="resource-covered-by-two-groups-is-refused",
    ),
    pytest.param(
        dump(cq({"resourceGroups": [group(["bad name"], flavor(resources=(("bad name", 1),)))]})),
        line(
            "ClusterQueue",
            "cq",
            f'spec.resourceGroups[0].coveredResources[0]: Invalid value: "bad name": {QUALIFIED_NAME_PART}',
        ),
        id="covered-resource-must-be-a-qualified-name",
    ),
    pytest.param(
        dump(
            cq(
                {
                    "cohortName": "team",
                    "resourceGroups": [group(["cpu"], flavor(resources=(("cpu", 5),), lendingLimit=10))],
                }
            )
        ),
        line(
            "ClusterQueue",
            "cq",
            'spec.resourceGroups[0].flavors[0].resources[0].lendingLimit: Invalid value: "10": '
            "must be less than or equal to the nominalQuota",
        ),
        id="lending-limit-above-nominal-quota-is-refused",
    ),
    pytest.param(
        dump(one_group(admissionChecksStrategy={"admissionChecks": [{"name": "prov", "onFlavors": ["gpu"]}]})),
        line(
            "ClusterQueue",
            "cq",
            'spec.admissionChecksStrategy.admissionChecks[0].onFlavors[0]: Unsupported value: "gpu": '
            'supported values: "default"',
        ),
        id="on-flavors-must-be-flavors-of-the-cluster-queue",
    ),
    pytest.param(
        dump(one_group(admissionChecksStrategy={"admissionChecks": []})),
        line(
            "ClusterQueue",
            "cq",
            "spec.admissionChecksStrategy.admissionChecks: Invalid value: []interface {}{}: "
            "spec.admissionChecksStrategy.admissionChecks in body should have at least 1 items",
        ),
        id="admission-checks-strategy-needs-at-least-one-check",
    ),
    pytest.param(
        dump(one_group(admissionChecksStrategy={"admissionChecks": [{"name": "a"}, {"name": "a"}]})),
        line(
            "ClusterQueue",
            "cq",
            'spec.admissionChecksStrategy.admissionChecks[1]: Duplicate value: map[string]interface {}{"name":"a"}',
        ),
        id="admission-check-named-twice-is-refused",
    ),
    pytest.param(
        dump(one_group(namespaceSelector={"matchExpressions": [{"key": "team", "operator": "In"}]})),
        line(
            "ClusterQueue",
            "cq",
            "spec.namespaceSelector.matchExpressions[0].values: Required value: "
            "must be specified when `operator` is 'In' or 'NotIn'",
        ),
        id="namespace-selector-in-without-values-is-refused",
    ),
    pytest.param(
        dump(one_group(namespaceSelector={"matchExpressions": [{"key": "team", "operator": "Near"}]})),
        line(
            "ClusterQueue",
            "cq",
            'spec.namespaceSelector.matchExpressions[0].operator: Invalid value: "Near": not a valid selector operator',
        ),
        id="namespace-selector-unknown-operator-is-refused",
    ),
    pytest.param(
        dump(one_group(fairSharing={"weight": "-1"})),
        line("ClusterQueue", "cq", 'spec.fairSharing: Invalid value: "-1": must be greater than or equal to 0'),
        id="negative-fair-sharing-weight-is-refused",
    ),
    pytest.param(
        dump(
            cq(
                {"admissionChecks": ["a"], "admissionChecksStrategy": {"admissionChecks": [{"name": "b"}]}},
                api_version=V1,
            )
        ),
        line(
            "ClusterQueue",
            "cq",
            'spec: Invalid value: "object": Either AdmissionChecks or AdmissionCheckStrategy can be set, but not both',
        ),
        id="v1beta1-admission-checks-and-strategy-together-are-refused",
    ),
    # Cohort: schema, CEL rule of its resource groups, Kueue's validateCohort
    pytest.param(
        dump(cohort({"parentName": "Root"})),
        line(
            "Cohort",
            "team",
            f"spec.parentName: Invalid value: \"Root\": spec.parentName in body should match '{SUBDOMAIN_PATTERN}'",
        ),
        id="cohort-parent-must-be-a-dns-subdomain",
    ),
    pytest.param(
        dump(cohort({"resourceGroups": [group([f"r{i}"], flavor(f"f{i}", ((f"r{i}", 1),))) for i in range(17)]})),
        line("Cohort", "team", "spec.resourceGroups: Too many: 17: must have at most 16 items"),
        id="cohort-with-17-resource-groups-is-refused",
    ),
    pytest.param(
        dump(cohort({"resourceGroups": [group(["cpu", "memory"], flavor())]})),
        line(
            "Cohort",
            "team",
            'spec.resourceGroups[0]: Invalid value: "object": '
            "flavors must have the same number of resources as the coveredResources",
        ),
        id="cohort-flavor-listing-fewer-resources-than-covered-is-refused",
    ),
    pytest.param(
        dump(cohort({"resourceGroups": [group(["cpu"], flavor("a"), flavor("a"))]})),
        line("Cohort", "team", 'spec.resourceGroups[0].flavors[1]: Duplicate value: map[string]interface {}{"name":"a"}'),
        id="cohort-flavor-named-twice-in-one-group-is-refused",
    ),
    pytest.param(
        dump(cohort({"resourceGroups": limits(borrowingLimit=2)})),
        line(
            "Cohort",
            "team",
            'spec.resourceGroups[0].flavors[0].resources[0].borrowingLimit: Invalid value: "2": must be nil when parent is empty',
        ),
        id="root-cohort-may-not-set-a-borrowing-limit",
    ),
    pytest.param(
        dump(cohort({"resourceGroups": limits(lendingLimit=2)})),
        line(
            "Cohort",
            "team",
            'spec.resourceGroups[0].flavors[0].resources[0].lendingLimit: Invalid value: "2": must be nil when parent is empty',
        ),
        id="root-cohort-may-not-set-a-lending-limit",
    ),
    pytest.param(
        dump(cohort({"parentName": "org", "resourceGroups": limits(borrowingLimit="-1")})),
        line(
            "Cohort",
            "team",
            'spec.resourceGroups[0].flavors[0].resources[0].borrowingLimit: Invalid value: "-1": '
            "must be greater than or equal to 0",
        ),
        id="cohort-negative-borrowing-limit-is-refused",
    ),
    pytest.param(
        dump(cohort({"resourceGroups": [group(["cpu"], flavor(resources=(("cpu", "-1"),)))]})),
        line(
            "Cohort",
            "team",
            'spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: Invalid value: "-1": '
            "must be greater than or equal to 0",
        ),
        id="cohort-negative-nominal-quota-is-refused",
    ),
    pytest.param(
        dump(cohort({"resourceGroups": [group(["cpu"], flavor("a")), group(["cpu"], flavor("b"))]})),
        line("Cohort", "team", 'spec.resourceGroups[1].coveredResources[0]: Duplicate value: "cpu"'),
        id="cohort-resource-covered-by-two-groups-is-refused",
    ),
    pytest.param(
        dump(cohort({"fairSharing": {"weight": "-1"}})),
        line("Cohort", "team", 'spec.fairSharing: Invalid value: "-1": must be greater than or equal to 0'),
        id="cohort-negative-fair-sharing-weight-is-refused",
    ),
    pytest.param(
        dump(cohort({"fairSharing": {"weight": "1n"}})),
        line("Cohort", "team", 'spec.fairSharing: Invalid value: "1n": When not 0, weight must be > 10e-9'),
        id="cohort-fair-sharing-weight-of-one-billionth-is-refused",
    ),
    pytest.param(
        dump(cohort({"fairSharing": {"weight": "-1"}, "resourceGroups": limits(borrowingLimit=2)})),
        line("Cohort", "team", 'spec.fairSharing: Invalid value: "-1": must be greater than or equal to 0'),
        id="cohort-weight-is-checked-before-the-resource-groups-as-kueue-does",
    ),
    pytest.param(
        dump(cohort({"cohortName": "org"})),
        line("Cohort", "team", 'spec.cohortName: unknown field "spec.cohortName"'),
        id="cohort-has-no-cohort-name-it-has-a-parent-name",
    ),
    pytest.param(
        dump(cohort({"parent": "org"}, api_version=V1)),
        line("Cohort", "team", 'spec.parent: unknown field "spec.parent"'),
        id="v1beta1-cohort-parent-field-of-v1alpha1-is-unknown",
    ),
    pytest.param(
        dump(cohort({"resourceGroups": limits(lendingLimit=2)}, api_version=V1)),
        line(
            "Cohort",
            "team",
            'spec.resourceGroups[0].flavors[0].resources[0].lendingLimit: Invalid value: "2": must be nil when parent is empty',
        ),
        id="v1beta1-root-cohort-may-not-set-a-lending-limit",
    ),
    pytest.param(
        dump(cohort(name="Team")),
        line("Cohort", "Team", f'metadata.name: Invalid value: "Team": {DNS_SUBDOMAIN}'),
        id="cohort-name-must-be-a-lowercase-dns-subdomain",
    ),
    # Metadata
    pytest.param(
        dump(cq({}, name="Cluster-Queue")),
        line("ClusterQueue", "Cluster-Queue", f'metadata.name: Invalid value: "Cluster-Queue": {DNS_SUBDOMAIN}'),
        id="name-must-be-a-lowercase-dns-subdomain",
    ),
    pytest.param(
        dump(cq({}, name="a" * 254)),
        line("ClusterQueue", "a" * 254, f'metadata.name: Invalid value: "{"a" * 254}": must be no more than 253 characters'),
        id="name-longer-than-253-characters-is-refused",
    ),
    pytest.param(
        dump({"apiVersion": V2, "kind": "LocalQueue", "metadata": {"namespace": "team-a"}, "spec": {}}),
        line("LocalQueue", "?", "metadata.name: Required value: name or generateName is required"),
        id="object-without-a-name-is-refused",
    ),
    pytest.param(
        dump({"apiVersion": V2, "kind": "LocalQueue", "metadata": {"name": "q", "namespace": "Team_A"}}),
        line("LocalQueue", "q", f'metadata.namespace: Invalid value: "Team_A": {DNS_LABEL}'),
        id="namespace-must-be-a-dns-label",
    ),
    pytest.param(
        dump({"apiVersion": V2, "kind": "ResourceFlavor", "metadata": {"name": "rf", "labels": {"bad key": "x"}}}),
        line("ResourceFlavor", "rf", f'metadata.labels: Invalid value: "bad key": {QUALIFIED_NAME_PART}'),
        id="label-keys-must-be-qualified-names",
    ),
    # LocalQueue
    pytest.param(
        dump({"apiVersion": V2, "kind": "LocalQueue", "metadata": {"name": "q"}, "spec": {"clusterQueue": "CQ"}}),
        line(
            "LocalQueue",
            "q",
            f'spec.clusterQueue: Invalid value: "CQ": spec.clusterQueue in body should match \'{SUBDOMAIN_PATTERN}\'',
        ),
        id="local-queue-cluster-queue-reference-must-be-a-dns-subdomain",
    ),
    # AdmissionCheck
    pytest.param(
        dump(ac({})),
        line("AdmissionCheck", "check", "spec.controllerName: Required value"),
        id="admission-check-without-controller-name-is-refused",
    ),
    pytest.param(
        dump(ac({"controllerName": ""})),
        line(
            "AdmissionCheck",
            "check",
            'spec.controllerName: Invalid value: "": spec.controllerName in body should be at least 1 chars long',
        ),
        id="admission-check-with-empty-controller-name-is-refused",
    ),
    pytest.param(
        dump(ac({"controllerName": "c" * 254})),
        line("AdmissionCheck", "check", "spec.controllerName: Too long: may not be more than 253 bytes"),
        id="admission-check-controller-name-over-253-characters-is-refused",
    ),
    pytest.param(
        dump(ac({"controllerName": "c", "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "X"}})),
        line("AdmissionCheck", "check", "spec.parameters.name: Required value"),
        id="admission-check-parameters-need-a-name",
    ),
    pytest.param(
        dump(ac({"controllerName": "c", "retryStrategy": {"baseDelaySeconds": 60, "maxDelaySeconds": 10}})),
        line(
            "AdmissionCheck",
            "check",
            "spec.retryStrategy.maxDelaySeconds: Invalid value: 10: must be greater than or equal to baseDelaySeconds (60)",
        ),
        id="retry-strategy-max-delay-below-base-delay-is-refused",
    ),
    pytest.param(
        dump(ac({"controllerName": "c", "retryStrategy": {"factor": 0.5}})),
        line(
            "AdmissionCheck",
            "check",
            "spec.retryStrategy.factor: Invalid value: 0.5: spec.retryStrategy.factor in body should be greater than or equal to 1",
        ),
        id="retry-strategy-factor-below-one-is-refused",
    ),
    pytest.param(
        dump(ac({"controllerName": "c", "retryStrategy": {"jitter": 2}})),
        line(
            "AdmissionCheck",
            "check",
            "spec.retryStrategy.jitter: Invalid value: 2: spec.retryStrategy.jitter in body should be less than or equal to 1",
        ),
        id="retry-strategy-jitter-above-one-is-refused",
    ),
    pytest.param(
        dump(ac({"controllerName": "c", "retryStrategy": {"strategy": "Linear"}})),
        line(
            "AdmissionCheck",
            "check",
            'spec.retryStrategy.strategy: Unsupported value: "Linear": supported values: "Static", "Backoff"',
        ),
        id="retry-strategy-kind-must-be-static-or-backoff",
    ),
    pytest.param(
        dump(ac({"controllerName": "c", "retryStrategy": {"backoffLimitCount": -1}})),
        line(
            "AdmissionCheck",
            "check",
            "spec.retryStrategy.backoffLimitCount: Invalid value: -1: "
            "spec.retryStrategy.backoffLimitCount in body should be greater than or equal to 0",
        ),
        id="retry-strategy-negative-limit-is-refused",
    ),
    # ProvisioningRequestConfig
    pytest.param(
        dump(prc({})),
        line("ProvisioningRequestConfig", "prov", "spec.provisioningClassName: Required value"),
        id="provisioning-request-config-needs-a-class-name",
    ),
    pytest.param(
        dump(prc({"provisioningClassName": "c", "parameters": {"foo": "x" * 256}})),
        line("ProvisioningRequestConfig", "prov", "spec.parameters[foo]: Too long: may not be more than 255 bytes"),
        id="provisioning-parameter-value-over-255-characters-is-refused",
    ),
    pytest.param(
        dump(prc({"provisioningClassName": "c", "parameters": {f"p{i}": "v" for i in range(101)}})),
        line("ProvisioningRequestConfig", "prov", "spec.parameters: Too many: 101: must have at most 100 items"),
        id="provisioning-config-with-101-parameters-is-refused",
    ),
    pytest.param(
        dump(
            prc(
                {
                    "provisioningClassName": "c",
                    "podSetUpdates": {
                        "nodeSelector": [{"key": f"k{i}", "valueFromProvisioningClassDetail": "d"} for i in range(9)]
                    },
                }
            )
        ),
        line(
            "ProvisioningRequestConfig", "prov", "spec.podSetUpdates.nodeSelector: Too many: 9: must have at most 8 items"
        ),
        id="provisioning-config-with-9-node-selector-updates-is-refused",
    ),
    pytest.param(
        dump(prc({"provisioningClassName": "c", "podSetMergePolicy": "Merge"})),
        line(
            "ProvisioningRequestConfig",
            "prov",
            'spec.podSetMergePolicy: Unsupported value: "Merge": supported values: '
            '"IdenticalPodTemplates", "IdenticalWorkloadSchedulingRequirements"',
        ),
        id="provisioning-merge-policy-must-be-known",
    ),
    # ResourceFlavor
    pytest.param(
        dump(rf({"nodeLabels": {f"l{i}": "v" for i in range(9)}})),
        line("ResourceFlavor", "rf", "spec.nodeLabels: Too many: 9: must have at most 8 items"),
        id="resource-flavor-with-9-node-labels-is-refused",
    ),
    pytest.param(
        dump(rf({"nodeTaints": [{"key": "spot", "effect": "Sometimes"}]})),
        line(
            "ResourceFlavor",
            "rf",
            "spec.nodeTaints: Invalid value: \"array\": supported taint effect values: "
            "'NoSchedule', 'PreferNoSchedule', 'NoExecute'",
        ),
        id="resource-flavor-taint-effect-must-be-known",
    ),
    pytest.param(
        dump(
            rf(
                {
                    "nodeTaints": [
                        {"key": "spot", "value": "true", "effect": "NoSchedule"},
                        {"key": "spot", "value": "false", "effect": "NoSchedule"},
                    ]
                }
            )
        ),
        line(
            "ResourceFlavor",
            "rf",
            'spec.nodeTaints[1]: Duplicate value: v1.Taint{Key:"spot", Value:"false", Effect:"NoSchedule", '
            "TimeAdded:<nil>}: taints must be unique by key and effect pair",
        ),
        id="resource-flavor-taints-must-be-unique-by-key-and-effect",
    ),
    pytest.param(
        dump(rf({"tolerations": [{"operator": "Equal", "value": "x"}]})),
        line(
            "ResourceFlavor",
            "rf",
            "spec.tolerations: Invalid value: \"array\": operator must be Exists when 'key' is empty, "
            "which means 'match all values and all keys'",
        ),
        id="resource-flavor-toleration-without-key-must-use-exists",
    ),
    pytest.param(
        dump(rf({"topologyName": "default"})),
        line(
            "ResourceFlavor", "rf", 'spec: Invalid value: "object": at least one nodeLabel is required when topology is set'
        ),
        id="resource-flavor-with-topology-needs-node-labels",
    ),
    # Workload
    pytest.param(
        dump(wl(spec={})),
        line("Workload", "job", "spec.podSets: Required value"),
        id="workload-without-pod-sets-is-refused",
    ),
    # Workload pod templates: what core/v1 refuses (the schema, then the Go rules)
    pytest.param(
        dump(wl(spec={"podSets": [pod_set(template={"metadata": {"labels": {"app": "x" * 64}}, "spec": {"containers": [C]}})]})),
        line("Workload", "job", f'{TEMPLATE}.metadata.labels: Invalid value: "{"x" * 64}": must be no more than 63 characters'),
        id="pod-template-label-value-over-63-characters-is-refused",
    ),
    pytest.param(
        dump(wl(spec={"podSets": [pod_set(template={"metadata": {"labels": {"bad key": "x"}}, "spec": {"containers": [C]}})]})),
        line("Workload", "job", f'{TEMPLATE}.metadata.labels: Invalid value: "bad key": {QUALIFIED_NAME_PART}'),
        id="pod-template-label-key-must-be-a-qualified-name",
    ),
    pytest.param(
        dump(wl(spec={"podSets": [pod_set(template={"spec": {"containers": [C], "priority": "high"}})]})),
        line(
            "Workload", "job",
            f'{TEMPLATE}.spec.priority: Invalid value: "high": {TEMPLATE}.spec.priority in body must be of type integer: "string"',
        ),
        id="pod-priority-given-as-text-is-refused",
    ),
    pytest.param(
        dump(wl(spec={"podSets": [pod_set(template={"spec": {"containers": [C], "priority": 2**31}})]})),
        line(
            "Workload", "job",
            f"{TEMPLATE}.spec.priority: Invalid value: 2147483648: {TEMPLATE}.spec.priority in body should be less than "
            "or equal to 2147483647",
        ),
        id="pod-priority-past-int32-is-refused",
    ),
    pytest.param(
        dump(wl(spec={"podSets": [pod_set(template={"spec": {"containers": [{"name": "c"}]}})]})),
        line("Workload", "job", f"{TEMPLATE}.spec.containers[0].image: Required value"),
        id="container-without-an-image-is-refused",
    ),
    pytest.param(
        dump(wl(spec={"podSets": [pod_set(template={"spec": {"initContainers": [{"name": "init", "image": " x"}], "containers": [C]}})]})),
        line("Workload", "job", f'{TEMPLATE}.spec.initContainers[0].image: Invalid value: " x": must not have leading or trailing whitespace'),
        id="init-container-image-with-whitespace-is-refused",
    ),
    pytest.param(
        dump(wl(spec={"podSets": [pod_set(template={"spec": {"containers": [C], "restartPolicy": "Sometimes"}})]})),
        line(
            "Workload", "job",
            f'{TEMPLATE}.spec.restartPolicy: Unsupported value: "Sometimes": supported values: "Always", "OnFailure", "Never"',
        ),
        id="restart-policy-must-be-always-on-failure-or-never",
    ),
    pytest.param(
        dump(wl(spec={"podSets": [pod_set(template={"spec": {"containers": [C], "hostNetwrk": True}})]})),
        line("Workload", "job", f'{TEMPLATE}.spec.hostNetwrk: unknown field "{TEMPLATE}.spec.hostNetwrk"'),
        id="unknown-pod-spec-field-is-refused",
    ),
    pytest.param(
        dump(wl(spec={"podSets": [pod_set(template={"spec": {"containers": [C, {**C, "image": "other"}]}})]})),
        line("Workload", "job", f'{TEMPLATE}.spec.containers[1].name: Duplicate value: "c"'),
        id="container-names-must-be-unique",
    ),
    pytest.param(
        dump(wl(spec={"podSets": [pod_set(template={"spec": {"containers": [{**C, "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}]}})]})),
        line("Workload", "job", f'{TEMPLATE}.spec.containers[0].resources.requests[cpu]: Invalid value: "2": must be less than or equal to cpu limit of 1'),
        id="a-request-above-its-limit-is-refused",
    ),
    pytest.param(
        dump(wl(spec={"podSets": [pod_set(template={"spec": {"containers": [C], "volumes": [{"name": "v", "emptyDir": {"sizeLimit": "lots"}}]}})]})),
        line("Workload", "job", f'{TEMPLATE}.spec.volumes[0].emptyDir.sizeLimit: Invalid value: "lots": {QUANTITY_FORMAT}'),
        id="any-quantity-of-the-pod-spec-must-parse",
    ),
    pytest.param(
        dump(wl(spec={"podSets": [pod_set(template={"spec": {"containers": [C], "nodeSelector": {"pool": "p" * 64}}})]})),
        line("Workload", "job", f'{TEMPLATE}.spec.nodeSelector: Invalid value: "{"p" * 64}": must be no more than 63 characters'),
        id="node-selector-value-over-63-characters-is-refused",
    ),
    pytest.param(
        dump(wl(spec={"podSets": [pod_set(template={"spec": {"containers": [C], "tolerations": [{"key": "gpu", "operator": "Has"}]}})]})),
        line("Workload", "job", f'{TEMPLATE}.spec.tolerations[0].operator: Unsupported value: "Has": supported values: "Equal", "Exists"'),
        id="toleration-operator-must-be-equal-or-exists",
    ),
    pytest.param(
        dump(wl(spec={"podSets": [pod_set(template={"spec": {"containers": [{**C, "ports": [{"containerPort": 70000}]}]}})]})),
        line("Workload", "job", f"{TEMPLATE}.spec.containers[0].ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive"),
        id="container-port-must-be-a-port",
    ),
    pytest.param(
        dump(wl(spec={"podSets": [pod_set(template={"spec": {"containers": []}})]})),
        line("Workload", "job", f"{TEMPLATE}.spec.containers: Required value"),
        id="a-pod-needs-a-container",
    ),
    pytest.param(
        dump(wl(annotations={"provreq.kueue.x-k8s.io/maxRunDurationSeconds": "9" * 256})),
        line(
            "Workload",
            "job",
            "metadata.annotations[provreq.kueue.x-k8s.io/maxRunDurationSeconds]: Too long: may not be more than 255 bytes "
            f"({PROVREQ_PARAMETERS})",
        ),
        id="provisioning-request-parameter-annotation-over-255-characters-is-refused",
    ),
    pytest.param(
        dump(wl(annotations={f"provreq.kueue.x-k8s.io/p{i}": "1" for i in range(101)})),
        line("Workload", "job", f"metadata.annotations: Too many: 101: must have at most 100 items ({PROVREQ_PARAMETERS})"),
        id="more-than-100-provisioning-request-parameter-annotations-are-refused",
    ),
    pytest.param(
        dump(wl(spec={"podSets": [pod_set(name=f"ps{i}") for i in range(9)]})),
        line("Workload", "job", "spec.podSets: Too many: 9: must have at most 8 items"),
        id="workload-with-9-pod-sets-is-refused",
    ),
    pytest.param(
        dump(wl(spec={"podSets": [pod_set(count=3), pod_set(count=1)]})),
        line("Workload", "job", 'spec.podSets[1]: Duplicate value: map[string]interface {}{"name":"main"}'),
        id="pod-set-names-must-be-unique-including-the-default-main",
    ),
    pytest.param(
        dump(wl(spec={"podSets": [pod_set(count=-1)]})),
        line(
            "Workload",
            "job",
            "spec.podSets[0].count: Invalid value: -1: spec.podSets[0].count in body should be greater than or equal to 0",
        ),
        id="negative-pod-count-is-refused",
    ),
    pytest.param(
        dump(wl(spec={"podSets": [pod_set(count="3")]})),
        line(
            "Workload",
            "job",
            'spec.podSets[0].count: Invalid value: "3": spec.podSets[0].count in body must be of type integer: "string"',
        ),
        id="pod-count-given-as-text-is-refused",
    ),
    pytest.param(
        dump(wl(spec={"podSets": [pod_set(count=2, minCount=3)]})),
        line("Workload", "job", 'spec.podSets[0]: Invalid value: "object": minCount should be positive and less or equal to count'),
        id="min-count-above-count-is-refused",
    ),
    pytest.param(
        dump(wl(spec={"podSets": [pod_set(name="a", minCount=1), pod_set(name="b", minCount=1)]})),
        line("Workload", "job", "spec.podSets: Invalid value: 2: at most one podSet can use minCount"),
        id="only-one-pod-set-may-use-min-count",
    ),
    pytest.param(
        dump(wl(spec={"podSets": [pod_set(name="Main")]})),
        line(
            "Workload",
            "job",
            "spec.podSets[0].name: Invalid value: \"Main\": spec.podSets[0].name in body should match "
            "'^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'",
        ),
        id="pod-set-name-must-be-a-dns-label",
    ),
    pytest.param(
        dump(
            wl(
                spec={
                    "podSets": [
                        pod_set(template={"spec": {"containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"pods": 1}}}]}})
                    ]
                }
            )
        ),
        line(
            "Workload",
            "job",
            'spec.podSets[0].template.spec.containers[0].resources.requests[pods]: Invalid value: "pods": '
            "the key is reserved for internal kueue use",
        ),
        id="pods-resource-is-reserved-for-kueue",
    ),
    pytest.param(
        dump(
            wl(
                spec={
                    "podSets": [
                        pod_set(template={"spec": {"containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "a lot"}}}]}})
                    ]
                }
            )
        ),
        line(
            "Workload",
            "job",
            f'spec.podSets[0].template.spec.containers[0].resources.requests[cpu]: Invalid value: "a lot": {QUANTITY_FORMAT}',
        ),
        id="container-request-must-be-a-quantity",
    ),
    pytest.param(
        dump(wl(spec={"podSets": [pod_set(template={"spec": {"containers": [{"image": "busybox"}]}})]})),
        line("Workload", "job", "spec.podSets[0].template.spec.containers[0].name: Required value"),
        id="container-needs-a-name",
    ),
    pytest.param(
        dump(
            wl(
                spec={
                    "podSets": [pod_set()],
                    "priorityClassRef": {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": "high"},
                }
            )
        ),
        line("Workload", "job", 'spec: Invalid value: "object": priority should not be nil when priorityClassRef is set'),
        # A WorkloadPriorityClass's value is filled in at submission instead (tests/unit/test_workload_priority.py).
        id="pod-priority-class-ref-needs-a-priority",
    ),
    pytest.param(
        dump(wl(spec={"podSets": [pod_set()], "maximumExecutionTimeSeconds": 0})),
        line(
            "Workload",
            "job",
            "spec.maximumExecutionTimeSeconds: Invalid value: 0: "
            "spec.maximumExecutionTimeSeconds in body should be greater than or equal to 1",
        ),
        id="maximum-execution-time-must-be-at-least-one-second",
    ),
    pytest.param(
        dump(wl(status={"conditions": [cond(f"Type{i}") for i in range(17)]})),
        line("Workload", "job", "status.conditions: Too many: 17: must have at most 16 items"),
        id="workload-with-17-conditions-is-refused",
    ),
    pytest.param(
        dump(wl(status={"admissionChecks": [check_state(f"check-{i}") for i in range(9)]})),
        line("Workload", "job", "status.admissionChecks: Too many: 9: must have at most 8 items"),
        id="workload-with-9-admission-check-states-is-refused",
    ),
    pytest.param(
        dump(wl(status={"admissionChecks": [check_state("prov", state="Done")]})),
        line(
            "Workload",
            "job",
            'status.admissionChecks[0].state: Unsupported value: "Done": '
            'supported values: "Pending", "Ready", "Retry", "Rejected"',
        ),
        id="admission-check-state-must-be-known",
    ),
    pytest.param(
        dump(wl(status={"admissionChecks": [check_state("prov", message="m" * 32769)]})),
        line("Workload", "job", "status.admissionChecks[0].message: Too long: may not be more than 32768 bytes"),
        id="admission-check-message-over-32768-characters-is-refused",
    ),
    pytest.param(
        dump(wl(status={"admissionChecks": [check_state("prov", requeueAfterSeconds=-5)]})),
        line(
            "Workload",
            "job",
            "status.admissionChecks[0].requeueAfterSeconds: Invalid value: -5: "
            "status.admissionChecks[0].requeueAfterSeconds in body should be greater than or equal to 0",
        ),
        id="negative-requeue-after-seconds-is-refused",
    ),
    pytest.param(
        dump(wl(status={"admissionChecks": [check_state("prov", podSetUpdates=[{"name": f"ps{i}"} for i in range(9)])]})),
        line("Workload", "job", "status.admissionChecks[0].podSetUpdates: Too many: 9: must have at most 8 items"),
        id="admission-check-with-9-pod-set-updates-is-refused",
    ),
    pytest.param(
        dump(wl(status={"admissionChecks": [check_state("prov", podSetUpdates=[{"name": "workers"}])]})),
        line(
            "Workload",
            "job",
            'status.admissionChecks[0].podSetUpdates[0].name: Unsupported value: "workers": supported values: "main"',
        ),
        id="pod-set-update-must-name-a-pod-set-of-the-workload",
    ),
    pytest.param(
        dump(wl(status={"conditions": [{**cond("Admitted"), "lastTransitionTime": "yesterday"}]})),
        line(
            "Workload",
            "job",
            'status.conditions[0].lastTransitionTime: Invalid value: "yesterday": '
            'status.conditions[0].lastTransitionTime in body must be of type date-time: "yesterday"',
        ),
        id="condition-time-must-be-rfc3339",
    ),
    pytest.param(
        dump(wl(spec={"podSets": [pod_set()], "priorityClassSource": "kueue", "priorityClassName": "high"}, api_version=V1)),
        line(
            "Workload",
            "job",
            'spec.priorityClassSource: Unsupported value: "kueue": supported values: '
            '"kueue.x-k8s.io/workloadpriorityclass", "scheduling.k8s.io/priorityclass", ""',
        ),
        id="v1beta1-priority-class-source-must-be-known",
    ),
    # Configuration
    pytest.param(
        dump({"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration", "waitForPodsReady": {"timeout": "-5m"}}),
        line("Configuration", "config", "waitForPodsReady.timeout: Invalid value: -5m0s: must be greater than or equal to 0"),
        id="negative-pods-ready-timeout-is-refused",
    ),
    pytest.param(
        dump({"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration", "waitForPodsReady": {"timeout": "5"}}),
        line("Configuration", "config", 'waitForPodsReady.timeout: Invalid value: "5": time: missing unit in duration "5"'),
        id="pods-ready-timeout-needs-a-unit",
    ),
    pytest.param(
        dump(
            {
                "apiVersion": "config.kueue.x-k8s.io/v1beta2",
                "kind": "Configuration",
                "waitForPodsReady": {"requeuingStrategy": {"timestamp": "Admission"}},
            }
        ),
        line(
            "Configuration",
            "config",
            'waitForPodsReady.requeuingStrategy.timestamp: Unsupported value: "Admission": '
            'supported values: "Creation", "Eviction"',
        ),
        id="requeuing-timestamp-must-be-creation-or-eviction",
    ),
    pytest.param(
        dump(
            {
                "apiVersion": "config.kueue.x-k8s.io/v1beta2",
                "kind": "Configuration",
                "waitForPodsReady": {"requeuingStrategy": {"backoffBaseSeconds": -1}},
            }
        ),
        line(
            "Configuration",
            "config",
            "waitForPodsReady.requeuingStrategy.backoffBaseSeconds: Invalid value: -1: must be greater than or equal to 0",
        ),
        id="negative-requeuing-backoff-base-is-refused",
    ),
    pytest.param(
        dump({"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration", "waitForPodReady": {}}),
        line("Configuration", "config", 'waitForPodReady: unknown field "waitForPodReady"'),
        id="configuration-field-kueue-does-not-have-is-refused",
    ),
    pytest.param(
        dump(config(fairSharing={})),
        line("Configuration", "config", "fairSharing.preemptionStrategies: Required value: must be specified"),
        id="v1beta2-fair-sharing-needs-its-preemption-strategies",
    ),
    pytest.param(
        dump(config(fairSharing={"preemptionStrategies": ["LessThanInitialShare", "LessThanOrEqualToFinalShare"]})),
        line(
            "Configuration",
            "config",
            "fairSharing.preemptionStrategies: Unsupported value: "
            '[]v1beta2.PreemptionStrategy{"LessThanInitialShare", "LessThanOrEqualToFinalShare"}: supported values: '
            '"LessThanOrEqualToFinalShare", "LessThanInitialShare", "LessThanOrEqualToFinalShare,LessThanInitialShare"',
        ),
        id="fair-sharing-strategies-must-be-one-of-kueues-three-lists",
    ),
    pytest.param(
        dump(config(fairSharing={"enable": True})),
        line("Configuration", "config", 'fairSharing.enable: unknown field "fairSharing.enable"'),
        id="v1beta2-fair-sharing-has-no-enable",
    ),
    pytest.param(
        dump(config("config.kueue.x-k8s.io/v1beta1", fairSharing={"enable": "yes"})),
        line(
            "Configuration",
            "config",
            'fairSharing.enable: Invalid value: "yes": fairSharing.enable in body must be of type boolean: "string"',
        ),
        id="v1beta1-fair-sharing-enable-must-be-a-boolean",
    ),
    pytest.param(
        dump(config("config.kueue.x-k8s.io/v1beta1", fairSharing={"enable": True, "preemptionStrategies": ["Always"]})),
        line(
            "Configuration",
            "config",
            'fairSharing.preemptionStrategies: Unsupported value: []v1beta2.PreemptionStrategy{"Always"}: supported values: '
            '"LessThanOrEqualToFinalShare", "LessThanInitialShare", "LessThanOrEqualToFinalShare,LessThanInitialShare"',
        ),
        id="v1beta1-fair-sharing-strategies-are-checked-once-enabled",
    ),
    # The document itself
    pytest.param(
        dump({"apiVersion": V2, "kind": "Topology", "metadata": {"name": "default"}, "spec": {"levels": []}}),
        line("Topology", "default", 'no matches for kind "Topology" in version "kueue.x-k8s.io/v1beta2"'),
        id="kind-admitflow-does-not-take-has-no-matches",
    ),
    pytest.param(
        dump(cq({}, api_version="kueue.x-k8s.io/v1alpha1")),
        line("ClusterQueue", "cq", 'no matches for kind "ClusterQueue" in version "kueue.x-k8s.io/v1alpha1"'),
        id="unknown-api-version-has-no-matches",
    ),
    pytest.param(
        dump({"kind": "ClusterQueue", "metadata": {"name": "cq"}}),
        line("ClusterQueue", "cq", "apiVersion: Required value"),
        id="document-without-api-version-is-refused",
    ),
    pytest.param(
        "- just\n- a list\n",
        "bad.yaml: document 1: expected a Kubernetes object (a mapping), got array",
        id="document-that-is-not-an-object-is-refused",
    ),
    pytest.param(
        dump(rf({})) + "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata:\n  name: [x\n  spec: {}\n",
        "bad.yaml: document 2: yaml: line 7: did not find expected ',' or ']'",
        id="yaml-syntax-error-names-the-document-and-line",
    ),
    pytest.param(
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata:\n  name: a\n  name: b\n",
        'bad.yaml: document 1: yaml: line 5: mapping key "name" already defined at line 4',
        id="duplicate-yaml-key-is-refused",
    ),
    pytest.param(
        dump(rf({}), {"apiVersion": V2, "kind": "ClusterQueue", "metadata": {"name": "late"}, "spec": {"x": 1}}),
        line("ClusterQueue", "late", 'spec.x: unknown field "spec.x"', document=2),
        id="error-names-the-document-it-was-found-in",
    ),
]


@pytest.mark.parametrize(("text", "expected"), BAD)
def test_bad_manifest_is_refused_with_one_apiserver_like_line(text, expected):
    with pytest.raises(ManifestError) as err:
        load_text(text, "bad.yaml")
    assert str(err.value) == expected
    assert "\n" not in str(err.value)


def test_100_provisioning_request_parameter_annotations_of_255_characters_are_taken():
    annotations = {f"provreq.kueue.x-k8s.io/p{i}": "9" * 255 for i in range(100)}
    obj, _ = parse_manifest(wl(annotations={**annotations, "other.io/long": "x" * 1000}))
    assert obj.metadata.annotations == {**annotations, "other.io/long": "x" * 1000}


def test_manifest_error_is_a_value_error_that_keeps_the_field_error():
    with pytest.raises(ValueError) as err:
        load_text(dump(one_group(queueingStrategy="Foo")), "bad.yaml")
    assert isinstance(err.value, ManifestError)
    assert (err.value.source, err.value.index, err.value.kind, err.value.name) == ("bad.yaml", 1, "ClusterQueue", "cq")
    assert err.value.error.path == "spec.queueingStrategy"


def test_nothing_is_returned_when_a_later_document_fails():
    text = dump(rf({}), one_group(queueingStrategy="Foo"))
    with pytest.raises(ManifestError):
        load_text(text, "bad.yaml")


# Kueue's own examples


def _wire(loaded):
    return [(m.obj.kind, m.obj.key, m.obj.to_wire()) for m in loaded]


@pytest.mark.parametrize("version", ["v1beta1", "v1beta2"])
def test_kueue_examples_load_unmodified(version):
    loaded = load_manifests([str(DATA / version)])
    assert [(Path(m.source).name, m.index, m.obj.kind, m.obj.key) for m in loaded] == [
        ("cohort-quotas.yaml", 1, "Cohort", "hello-cohort"),
        ("cohort-quotas.yaml", 2, "ClusterQueue", "my-cluster-queue"),
        ("cohort-tree.yaml", 1, "Cohort", "root-cohort"),
        ("cohort-tree.yaml", 2, "Cohort", "important-org"),
        ("cohort-tree.yaml", 3, "Cohort", "regular-org"),
        ("resource-flavor-empty.yaml", 1, "ResourceFlavor", "default-flavor"),
        ("resource-flavor-taints.yaml", 1, "ResourceFlavor", "spot"),
        ("resource-flavor-tolerations.yaml", 1, "ResourceFlavor", "spot"),
        ("single-clusterqueue-setup.yaml", 1, "ResourceFlavor", "default-flavor"),
        ("single-clusterqueue-setup.yaml", 2, "ClusterQueue", "cluster-queue"),
        ("single-clusterqueue-setup.yaml", 3, "LocalQueue", "default/user-queue"),
    ]
    assert all(m.warnings == [] for m in loaded)


def test_both_api_versions_of_the_examples_give_the_same_objects():
    assert _wire(load_manifests([str(DATA / "v1beta1")])) == _wire(load_manifests([str(DATA / "v1beta2")]))


def test_single_cluster_queue_example_keeps_quotas_as_written_and_gets_defaults():
    loaded = load_manifests([str(DATA / "v1beta2" / "single-clusterqueue-setup.yaml")])
    queue = loaded[1].obj
    assert isinstance(queue, ClusterQueue)
    resources = queue.spec.resource_groups[0].flavors[0].resources
    assert [(r.name, r.nominal_quota) for r in resources] == [("cpu", "9"), ("memory", "36Gi")]
    assert queue.spec.namespace_selector is not None and queue.spec.namespace_selector.matches({"any": "thing"})
    assert queue.spec.queueing_strategy == "BestEffortFIFO"
    assert queue.spec.stop_policy == "None"
    assert queue.spec.flavor_fungibility.when_can_borrow == "MayStopSearch"
    assert queue.spec.flavor_fungibility.when_can_preempt == "TryNextFlavor"
    assert queue.spec.preemption.within_cluster_queue == "Never"
    assert queue.spec.preemption.reclaim_within_cohort == "Never"
    assert queue.spec.preemption.borrow_within_cohort.policy == "Never"
    assert queue.spec.admission_checks_strategy is None
    local = loaded[2].obj
    assert isinstance(local, LocalQueue) and local.spec.cluster_queue == "cluster-queue"


@pytest.mark.parametrize("version", ["v1beta1", "v1beta2"])
def test_cohort_examples_keep_their_pool_parents_and_weights(version):
    quotas = load_manifests([str(DATA / version / "cohort-quotas.yaml")])
    pool, member = quotas[0].obj, quotas[1].obj
    assert isinstance(pool, Cohort) and isinstance(member, ClusterQueue)
    assert [(r.name, r.nominal_quota) for r in pool.spec.resource_groups[0].flavors[0].resources] == [("cpu", "12")]
    assert member.spec.cohort_name == "hello-cohort"
    hierarchy = [m.obj for m in load_manifests([str(DATA / version / "cohort-tree.yaml")])]
    assert [(c.key, c.spec.parent_name, c.spec.fair_sharing and c.spec.fair_sharing.weight) for c in hierarchy] == [
        ("root-cohort", None, None),
        ("important-org", "root-cohort", "0.75"),
        ("regular-org", "root-cohort", "0.25"),
    ]


def test_taints_example_keeps_its_taint():
    (loaded,) = load_manifests([str(DATA / "v1beta1" / "resource-flavor-taints.yaml")])
    assert isinstance(loaded.obj, ResourceFlavor)
    assert [t.to_wire() for t in loaded.obj.spec.node_taints] == [{"key": "spot", "value": "true", "effect": "NoSchedule"}]


@pytest.mark.parametrize("version", ["v1beta1", "v1beta2"])
def test_minimal_cq_example_is_refused_as_kueues_webhook_refuses_it(version):
    # Kueue's example lists onFlavors without any resourceGroups; the current webhook
    # (validateAdmissionCheckOnFlavors) refuses that on create, so we do too.
    with pytest.raises(ManifestError) as err:
        load_manifests([str(DATA / version / "refused" / "minimal-cq.yaml")])
    assert str(err.value).endswith(
        "document 1 (ClusterQueue cluster-queue-2): "
        'spec.admissionChecksStrategy.admissionChecks[0].onFlavors[0]: Unsupported value: "default-flavor"'
    )


# v1beta1 conversion


def test_v1beta1_admission_checks_become_a_strategy_with_empty_on_flavors():
    obj, warnings = parse_manifest(cq({"cohort": "team", "admissionChecks": ["a", "b"]}, api_version=V1))
    assert warnings == []
    assert obj.api_version == V2
    assert obj.spec.cohort_name == "team"
    assert obj.to_wire()["spec"]["admissionChecksStrategy"] == {
        "admissionChecks": [{"name": "a", "onFlavors": []}, {"name": "b", "onFlavors": []}]
    }


def test_v1beta1_empty_admission_checks_leave_no_strategy():
    obj, _ = parse_manifest(cq({"admissionChecks": []}, api_version=V1))
    assert obj.spec.admission_checks_strategy is None


def test_v1beta1_flavor_fungibility_borrow_and_preempt_become_may_stop_search():
    obj, _ = parse_manifest(cq({"flavorFungibility": {"whenCanBorrow": "Borrow", "whenCanPreempt": "Preempt"}}, api_version=V1))
    assert (obj.spec.flavor_fungibility.when_can_borrow, obj.spec.flavor_fungibility.when_can_preempt) == (
        "MayStopSearch",
        "MayStopSearch",
    )


def test_v1beta1_retry_delay_minutes_is_dropped_with_a_warning():
    obj, warnings = parse_manifest(ac({"controllerName": "example.com/budget", "retryDelayMinutes": 15}, api_version=V1))
    assert isinstance(obj, AdmissionCheck)
    assert warnings == ["AdmissionCheck check: spec.retryDelayMinutes is deprecated and ignored"]
    assert obj.to_wire()["spec"] == {"controllerName": "example.com/budget"}


def test_retry_delay_minutes_is_unknown_in_v1beta2():
    with pytest.raises(ManifestError) as err:
        parse_manifest(ac({"controllerName": "c", "retryDelayMinutes": 15}), source="in.yaml")
    assert str(err.value) == 'in.yaml: document 1 (AdmissionCheck check): spec.retryDelayMinutes: unknown field "spec.retryDelayMinutes"'


@pytest.mark.parametrize(
    ("source", "ref"),
    [
        pytest.param(
            "kueue.x-k8s.io/workloadpriorityclass",
            {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "high"},
            id="workload-priority-class",
        ),
        pytest.param(
            "scheduling.k8s.io/priorityclass",
            {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": "high"},
            id="pod-priority-class",
        ),
    ],
)
def test_v1beta1_priority_class_source_and_name_become_a_ref(source, ref):
    spec = {"podSets": [pod_set()], "priority": 100, "priorityClassSource": source, "priorityClassName": "high"}
    obj, warnings = parse_manifest(wl(spec=spec, api_version=V1))
    assert warnings == []
    assert obj.spec.priority_class_ref.to_wire() == ref
    assert obj.spec.priority == 100


def test_v1beta1_priority_class_name_without_source_is_dropped_with_a_warning():
    spec = {"podSets": [pod_set()], "priority": 5, "priorityClassName": "high"}
    obj, warnings = parse_manifest(wl(spec=spec, api_version=V1, namespace="team-a"))
    assert obj.spec.priority_class_ref is None
    assert warnings == [
        "Workload team-a/job: spec.priorityClassName is ignored because spec.priorityClassSource is empty"
    ]


def test_v1beta1_workload_status_spelling_and_topology_domains_are_converted():
    status = {
        "accumulatedPastExexcutionTimeSeconds": 90,
        "conditions": [cond("QuotaReserved")],
        "admission": {
            "clusterQueue": "cq",
            "podSetAssignments": [
                {
                    "name": "main",
                    "count": 3,
                    "topologyAssignment": {
                        "levels": ["block", "rack"],
                        "domains": [{"values": ["b1", "r1"], "count": 2}, {"values": ["b1", "r2"], "count": 1}],
                    },
                }
            ],
        },
    }
    obj, _ = parse_manifest(wl(spec={"podSets": [pod_set(count=3)]}, status=status, api_version=V1))
    assert obj.status.accumulated_past_execution_time_seconds == 90
    assert obj.status.admission.pod_set_assignments[0].topology_assignment == {
        "levels": ["block", "rack"],
        "slices": [
            {
                "domainCount": 2,
                "valuesPerLevel": [{"individual": {"roots": ["b1", "b1"]}}, {"individual": {"roots": ["r1", "r2"]}}],
                "podCounts": {"individual": [2, 1]},
            }
        ],
    }


def test_v1beta1_configuration_without_enable_turns_wait_for_pods_ready_off():
    obj, warnings = parse_manifest(
        {"apiVersion": "config.kueue.x-k8s.io/v1beta1", "kind": "Configuration", "waitForPodsReady": {"timeout": "10m"}}
    )
    assert isinstance(obj, Configuration)
    assert obj.wait_for_pods_ready_enabled is False
    assert obj.feature_gates == {"DisableWaitForPodsReady": True}
    assert len(warnings) == 1 and "waitForPodsReady.enable is not true" in warnings[0]


def test_v1beta1_configuration_with_enable_keeps_v1beta1_defaults():
    obj, warnings = parse_manifest(
        {"apiVersion": "config.kueue.x-k8s.io/v1beta1", "kind": "Configuration", "waitForPodsReady": {"enable": True}}
    )
    assert warnings == []
    assert obj.wait_for_pods_ready_enabled is True
    wait = obj.wait_for_pods_ready
    assert (wait.timeout, wait.block_admission, wait.recovery_timeout) == ("5m", True, "0s")
    assert wait.recovery_timeout_seconds is None


# Defaults


def test_workload_defaults():
    obj, _ = parse_manifest(wl())
    assert isinstance(obj, Workload)
    assert obj.metadata.namespace == "default"
    assert obj.key == "default/job"
    assert (obj.spec.pod_sets[0].name, obj.spec.pod_sets[0].count) == ("main", 1)
    assert obj.spec.active is True
    assert obj.status.conditions == [] and obj.status.admission is None


def test_provisioning_retry_strategy_fields_default_one_by_one():
    obj, _ = parse_manifest(prc({"provisioningClassName": "check-capacity.autoscaling.x-k8s.io", "retryStrategy": {"backoffLimitCount": 1}}))
    assert isinstance(obj, ProvisioningRequestConfig)
    assert obj.spec.retry_strategy.to_wire() == {"backoffLimitCount": 1, "backoffBaseSeconds": 60, "backoffMaxSeconds": 1800}
    obj, _ = parse_manifest(prc({"provisioningClassName": "check-capacity.autoscaling.x-k8s.io"}))
    assert obj.spec.retry_strategy.to_wire() == {"backoffLimitCount": 3, "backoffBaseSeconds": 60, "backoffMaxSeconds": 1800}


def test_admission_check_retry_strategy_defaults():
    obj, _ = parse_manifest(ac({"controllerName": "c", "retryStrategy": {}}))
    assert obj.spec.retry_strategy.to_wire() == {
        "strategy": "Backoff",
        "baseDelaySeconds": 60,
        "factor": 2.0,
        "jitter": 0.0001,
        "maxDelaySeconds": 1800,
    }
    assert obj.spec.retry_strategy.backoff_limit_count is None


def test_configuration_defaults_and_unused_fields():
    obj, warnings = parse_manifest(
        {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            "namespace": "kueue-system",
            "manageJobsWithoutQueueName": True,
            "featureGates": {"TopologyAwareScheduling": True},
            "waitForPodsReady": {"timeout": "10m"},
        }
    )
    assert warnings == [
        "Configuration: field namespace is not used by admitflow",
        "Configuration: field manageJobsWithoutQueueName is not used by admitflow",
        "Configuration: field featureGates.TopologyAwareScheduling is not used by admitflow",
    ]
    wait = obj.wait_for_pods_ready
    assert obj.key == "config"
    assert obj.wait_for_pods_ready_enabled is True
    assert (wait.timeout, wait.recovery_timeout, wait.block_admission) == ("10m", "10m", False)
    assert wait.requeuing_strategy.to_wire() == {"timestamp": "Eviction", "backoffBaseSeconds": 60, "backoffMaxSeconds": 3600}
    assert wait.timeout_seconds == 600


def test_configuration_without_wait_for_pods_ready_gets_kueues_30_minutes():
    obj, _ = parse_manifest({"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration"})
    assert obj.wait_for_pods_ready.timeout == "30m"
    assert obj.wait_for_pods_ready.recovery_timeout == "30m"


def test_null_fields_get_their_defaults():
    obj, _ = parse_manifest(one_group(queueingStrategy=None, stopPolicy=None))
    assert (obj.spec.queueing_strategy, obj.spec.stop_policy) == ("BestEffortFIFO", "None")


# Input that kubectl would carry


def test_status_of_config_kinds_is_ignored_but_workload_status_is_kept():
    queue = {**one_group(), "status": {"pendingWorkloads": 3, "anything": "goes"}}
    obj, _ = parse_manifest(queue)
    assert obj.status.pending_workloads == 0
    workload, _ = parse_manifest(wl(status={"conditions": [cond("Finished")]}))
    assert workload.status.has_condition("Finished")


def test_kubectl_metadata_is_ignored_and_cluster_scoped_namespace_dropped():
    exported = one_group()
    exported["metadata"] = {
        "name": "cq",
        "namespace": "ignored",
        "uid": "1234",
        "resourceVersion": "42",
        "generation": 2,
        "creationTimestamp": "2025-03-04T05:06:07Z",
        "finalizers": ["kueue.x-k8s.io/resource-in-use"],
        "managedFields": [{"manager": "kubectl"}],
        "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"},
    }
    obj, _ = parse_manifest(exported)
    assert obj.metadata.namespace is None
    assert obj.metadata.creation_timestamp == datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC)
    assert "finalizers" not in obj.to_wire()["metadata"]


def test_times_are_utc_with_second_precision():
    obj, _ = parse_manifest(wl(creationTimestamp="2025-03-04T07:06:07.123456789+02:00"))
    assert obj.to_wire()["metadata"]["creationTimestamp"] == "2025-03-04T05:06:07Z"


def test_pod_templates_pass_through_unchanged():
    template = {
        "metadata": {"labels": {"app": "x"}, "generateName": "ignored-but-kept-"},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "busybox", "args": ["sleep", "1"], "resources": {"requests": {"cpu": 1.5}}}],
            "affinity": {
                "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []},
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]
                    }
                },
            },
        },
    }
    obj, _ = parse_manifest(wl(spec={"podSets": [pod_set(template=template, count=2)]}))
    wire = obj.to_wire()["spec"]["podSets"][0]["template"]
    expected = json.loads(json.dumps(template))
    expected["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "1.5"
    assert wire == expected


# Round trips


def _complex_workload() -> dict:
    return wl(
        spec={
            "podSets": [pod_set(name="driver", count=1), pod_set(name="workers", count=4, minCount=2)],
            "queueName": "user-queue",
            "priority": 10,
            "priorityClassRef": {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "high"},
            "maximumExecutionTimeSeconds": 3600,
        },
        status={
            "conditions": [cond("QuotaReserved"), cond("Admitted", "False")],
            "admission": {
                "clusterQueue": "cq",
                "podSetAssignments": [
                    {"name": "driver", "flavors": {"cpu": "default"}, "resourceUsage": {"cpu": "1"}, "count": 1},
                    {"name": "workers", "flavors": {"cpu": "default"}, "resourceUsage": {"cpu": "4"}, "count": 4},
                ],
            },
            "requeueState": {"count": 1, "requeueAt": "2025-01-01T00:10:00Z"},
            "admissionChecks": [
                check_state(
                    "prov",
                    state="Retry",
                    requeueAfterSeconds=60,
                    retryCount=1,
                    podSetUpdates=[{"name": "workers", "nodeSelector": {"pool": "a"}, "tolerations": [{"key": "spot", "operator": "Exists"}]}],
                )
            ],
        },
    )


ROUND_TRIP_OBJECTS = [
    pytest.param(
        one_group(admissionChecksStrategy={"admissionChecks": [{"name": "prov", "onFlavors": ["default"]}]}),
        id="cluster-queue",
    ),
    pytest.param(
        cohort({"parentName": "org", "resourceGroups": limits(borrowingLimit=1, lendingLimit=9), "fairSharing": {"weight": "0.5"}}),
        id="cohort",
    ),
    pytest.param(
        {"apiVersion": V2, "kind": "LocalQueue", "metadata": {"name": "q", "namespace": "team"}, "spec": {"clusterQueue": "cq"}},
        id="local-queue",
    ),
    pytest.param(
        rf({"nodeLabels": {"pool": "spot"}, "nodeTaints": [{"key": "spot", "effect": "NoSchedule"}]}),
        id="resource-flavor",
    ),
    pytest.param(
        ac(
            {
                "controllerName": "c",
                "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "ProvisioningRequestConfig", "name": "prov"},
                "retryStrategy": {"strategy": "Static"},
            }
        ),
        id="admission-check",
    ),
    pytest.param(
        prc({"provisioningClassName": "c", "parameters": {"a": "b"}, "managedResources": ["nvidia.com/gpu"]}),
        id="provisioning-request-config",
    ),
    pytest.param(_complex_workload(), id="workload-with-status"),
    pytest.param(
        {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            "featureGates": {"DisableWaitForPodsReady": True},
            "fairSharing": {"preemptionStrategies": ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]},
        },
        id="configuration",
    ),
]


@pytest.mark.parametrize("document", ROUND_TRIP_OBJECTS)
def test_to_wire_round_trip_equals_parse_of_its_own_output(document):
    obj, _ = parse_manifest(document)
    again, warnings = parse_manifest(obj.to_wire())
    assert again == obj
    assert again.to_wire() == obj.to_wire()
    assert warnings == []


@pytest.mark.parametrize("document", ROUND_TRIP_OBJECTS)
def test_objects_survive_temporals_pydantic_payload_converter(document):
    from temporalio.contrib.pydantic import pydantic_data_converter

    obj, _ = parse_manifest(document)
    converter = pydantic_data_converter.payload_converter
    (payload,) = converter.to_payloads([obj])
    assert converter.from_payloads([payload], [type(obj)]) == [obj]


# Sources


def test_directory_loads_its_manifest_files_sorted_and_not_recursively(tmp_path):
    (tmp_path / "b.yaml").write_text(dump(rf({})))
    (tmp_path / "a.yml").write_text(dump(one_group()))
    (tmp_path / "c.json").write_text(json.dumps(ac({"controllerName": "c"})))
    (tmp_path / "notes.txt").write_text("not a manifest")
    (tmp_path / "nested").mkdir()
    (tmp_path / "nested" / "d.yaml").write_text("this: is not read")
    loaded = load_manifests([str(tmp_path)])
    assert [(Path(m.source).name, m.obj.kind) for m in loaded] == [
        ("a.yml", "ClusterQueue"),
        ("b.yaml", "ResourceFlavor"),
        ("c.json", "AdmissionCheck"),
    ]


def test_stdin_is_read_for_a_dash():
    loaded = load_manifests(["-"], stdin=io.StringIO(dump(rf({}))))
    assert [(m.source, m.index, m.obj.key) for m in loaded] == [("<stdin>", 1, "rf")]


def test_multi_document_yaml_skips_empty_documents_and_counts_them():
    text = "---\n" + dump(rf({})) + "---\n# only a comment\n---\n" + dump(one_group())
    loaded = load_text(text, "multi.yaml")
    assert [(m.index, m.obj.kind) for m in loaded] == [(1, "ResourceFlavor"), (3, "ClusterQueue")]


def test_kind_list_is_expanded():
    text = yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [rf({}), one_group()]})
    loaded = load_text(text, "list.yaml")
    assert [(m.index, m.obj.kind, m.obj.key) for m in loaded] == [(1, "ResourceFlavor", "rf"), (1, "ClusterQueue", "cq")]


def test_missing_path_is_reported_on_one_line(tmp_path):
    missing = str(tmp_path / "nope.yaml")
    with pytest.raises(ManifestError) as err:
        load_manifests([missing])
    assert str(err.value) == f'{missing}: the path "{missing}" does not exist'


def test_unquoted_yaml_dates_stay_text_as_in_kubernetes():
    text = "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {name: rf}\nspec:\n  nodeLabels:\n    since: 2024-01-01\n"
    (loaded,) = load_text(text, "dates.yaml")
    assert loaded.obj.spec.node_labels == {"since": "2024-01-01"}


def test_error_lines_escape_newlines_from_the_input():
    with pytest.raises(ManifestError) as err:
        parse_manifest(rf({"nodeLabels": {"bad\nkey": "x"}}), source="in.yaml")
    assert "\n" not in str(err.value)
    assert 'Invalid value: "bad\\nkey"' in str(err.value)


def test_immutable_fields_are_reported_on_update():
    old, _ = parse_manifest(ac({"controllerName": "a"}))
    new, _ = parse_manifest(ac({"controllerName": "b"}))
    assert [str(e) for e in new.update_errors(old)] == ['spec.controllerName: Invalid value: "string": field is immutable']
    assert old.update_errors(old) == []
    lq = {"apiVersion": V2, "kind": "LocalQueue", "metadata": {"name": "q"}, "spec": {"clusterQueue": "a"}}
    old_lq, _ = parse_manifest(lq)
    new_lq, _ = parse_manifest({**lq, "spec": {"clusterQueue": "b"}})
    assert [str(e) for e in new_lq.update_errors(old_lq)] == ['spec.clusterQueue: Invalid value: "string": field is immutable']


def test_example_directory_copy_loads_like_the_original(tmp_path):
    shutil.copytree(DATA / "v1beta2", tmp_path / "examples")
    assert _wire(load_manifests([str(tmp_path / "examples")])) == _wire(load_manifests([str(DATA / "v1beta2")]))


def test_json_syntax_error_names_the_line(tmp_path):
    bad = tmp_path / "queue.json"
    bad.write_text('{\n  "apiVersion": "kueue.x-k8s.io/v1beta2",\n  "kind" "ClusterQueue"\n}\n')
    with pytest.raises(ManifestError) as err:
        load_manifests([str(bad)])
    assert str(err.value) == f"{bad}: document 1: json: line 3: Expecting ':' delimiter"


def test_names_with_newlines_still_give_one_line():
    with pytest.raises(ManifestError) as err:
        parse_manifest(cq({}, name="bad\nname"), source="in.yaml")
    assert "\n" not in str(err.value)
    assert str(err.value).startswith("in.yaml: document 1 (ClusterQueue bad\\nname): metadata.name: Invalid value:")


def test_cohort_fields_of_a_cluster_queue_are_taken_without_warnings():
    obj, warnings = parse_manifest(cq({"cohortName": "team", "resourceGroups": limits(borrowingLimit=2, lendingLimit=3)}))
    assert obj.spec.cohort_name == "team"
    quota = obj.spec.resource_groups[0].flavors[0].resources[0]
    assert (quota.borrowing_limit, quota.lending_limit) == ("2", "3")
    assert warnings == []


# Cohorts


def test_cohort_defaults_to_a_root_without_quota():
    obj, warnings = parse_manifest(cohort())
    assert isinstance(obj, Cohort)
    assert warnings == []
    assert obj.key == "team"
    assert (obj.spec.parent_name, obj.spec.resource_groups, obj.spec.fair_sharing) == (None, [], None)
    assert obj.to_wire() == {"apiVersion": V2, "kind": "Cohort", "metadata": {"name": "team"}, "spec": {"resourceGroups": []}, "status": {}}


def test_cohort_with_a_parent_may_lend_more_than_its_nominal_quota():
    # Kueue's validateCohort sets enforceNominalGreaterThanLending to false: the subtree may lend
    # what its ClusterQueues hold on top of the Cohort's own pool.
    obj, _ = parse_manifest(cohort({"parentName": "org", "resourceGroups": limits(borrowingLimit=1, lendingLimit=10)}))
    quota = obj.spec.resource_groups[0].flavors[0].resources[0]
    assert (obj.spec.parent_name, quota.nominal_quota, quota.borrowing_limit, quota.lending_limit) == ("org", "5", "1", "10")


def test_cluster_queue_still_may_not_lend_more_than_its_nominal_quota():
    with pytest.raises(ManifestError, match="lendingLimit: Invalid value: \"10\": must be less than or equal to the nominalQuota"):
        parse_manifest(cq({"cohortName": "team", "resourceGroups": limits(lendingLimit=10)}))


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param({}, id="an-empty-cohort"),
        pytest.param({"parentName": "org", "fairSharing": {"weight": "0.75"}}, id="a-weighted-child"),
        pytest.param({"parentName": "org", "resourceGroups": limits(borrowingLimit=1, lendingLimit=2)}, id="a-child-with-limits"),
    ],
)
def test_v1beta1_cohort_is_the_v1beta2_cohort_with_another_api_version(spec):
    old, old_warnings = parse_manifest(cohort(spec, api_version=V1))
    new, new_warnings = parse_manifest(cohort(spec))
    assert old == new
    assert old_warnings == new_warnings == []


def test_cohort_status_on_input_is_ignored():
    obj, _ = parse_manifest({**cohort(), "status": {"fairSharing": {"weightedShare": 7}}})
    assert obj.status.fair_sharing is None


# Fair sharing in the Configuration


@pytest.mark.parametrize(
    ("document", "strategies", "warnings"),
    [
        pytest.param(config(), None, [], id="v1beta2-without-fair-sharing-is-off"),
        pytest.param(
            config(fairSharing={"preemptionStrategies": ["LessThanInitialShare"]}),
            ["LessThanInitialShare"],
            [],
            id="v1beta2-fair-sharing-that-is-set-is-on-with-its-strategies",
        ),
        pytest.param(
            config("config.kueue.x-k8s.io/v1beta1", fairSharing={"enable": True}),
            ["LessThanOrEqualToFinalShare", "LessThanInitialShare"],
            [],
            id="v1beta1-enabled-fair-sharing-gets-kueues-default-strategies",
        ),
        pytest.param(
            config("config.kueue.x-k8s.io/v1beta1", fairSharing={"enable": True, "preemptionStrategies": ["LessThanOrEqualToFinalShare"]}),
            ["LessThanOrEqualToFinalShare"],
            [],
            id="v1beta1-enabled-fair-sharing-keeps-its-strategies",
        ),
        pytest.param(
            config("config.kueue.x-k8s.io/v1beta1", fairSharing={"enable": False}),
            None,
            [],
            id="v1beta1-disabled-fair-sharing-is-off",
        ),
        pytest.param(
            config("config.kueue.x-k8s.io/v1beta1", fairSharing={"preemptionStrategies": ["LessThanInitialShare"]}),
            None,
            ["Configuration: fairSharing.enable is not true, so fair sharing is off"],
            id="v1beta1-strategies-without-enable-are-dropped-with-a-warning",
        ),
    ],
)
def test_fair_sharing_strategies_of_the_configuration(document, strategies, warnings):
    obj, got = parse_manifest(document)
    assert obj.fair_sharing_strategies() == strategies
    assert [w for w in got if "fairSharing" in w or "fair sharing" in w] == warnings
