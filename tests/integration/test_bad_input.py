"""Bad input, one table (issue 9, item 5): manifests, CLI arguments, verdict payloads by update and by
signal, controller results, pods-ready reports and ProvisioningRequest conditions set by hand.

The project's rule: bad input gets a clear one-line error and changes nothing; no message ever breaks
a workflow. Each row of `TABLE` says where its input goes, the input, the exact error, and what is
compared before and after it to prove nothing changed:

- a manifest goes to `admitflow apply -f -`, a CLI argument list to `admitflow`: exit code 2, nothing
  on stdout, and the one stderr line;
- a verdict by update goes to `apply_admission_check_state`: the update's one-line refusal;
- a verdict by signal goes to `set_admission_check_state`: recorded in the verdict log as
  `rejected` (`ignored` when it is about an attempt that is over) with the detail;
- a pods-ready report by signal goes to `set_pods_ready`: a Warning event `InvalidPodsReadyReport`;
- a ProvisioningRequest condition goes to the simulated autoscaler's update
  `set_provisioning_request_condition`: its one-line refusal;
- a controller result is what the check's activity `admission_check` returns: a result that is not a
  verdict for that check counts as `Retry` with the reason (so that a broken controller cannot leave
  a workload waiting); the proof there is that the workload was evicted with that message, was asked
  again and its workflow still runs.

`target` is what the input is about and what is compared: `catalog` (every catalog object),
`workload NS/NAME` (its workflow status, its spec and status without the event and verdict logs, read
by the `workload` query: a signal must leave it running and answering), or `provreq NS/NAME`.

All rows share one setup (one namespace, one worker, built once by the module's `outcomes` fixture),
which runs every case (the CLI ones as concurrent processes, a few at a time) and keeps what each one
did; each row's test then checks its own outcome.
"""

from __future__ import annotations

import asyncio
import json
import textwrap
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
import pytest_asyncio
from temporalio import activity
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker

from admitflow.activities.provisioning.simulated import SimulatedBackend
from admitflow import ids
from admitflow.admission.catalog import CATALOG_KINDS
from admitflow.admission.workload import WorkloadReport
from admitflow.client import AdmitflowClient
from admitflow.codec import DATA_CONVERTER
from admitflow.devserver import DevServer
from tests.builders import cluster_queue_manifest, flavor_manifest, local_queue_manifest, workload_manifest
from tests.conftest import Engine
from tests.integration.test_admission import eventually, loaded
from tests.integration.test_admission_checks import check_manifest
from tests.integration.test_cli import run
from tests.integration.test_simulated_autoscaler import node_group, provreq
from admitflow.worker.main import build_worker

pytestmark = pytest.mark.integration

MANIFEST = "manifest: admitflow apply -f -"
CLI = "CLI arguments: admitflow ..."
UPDATE = "verdict by update apply_admission_check_state"
SIGNAL = "verdict by signal set_admission_check_state"
CONTROLLER = "controller result of activity admission_check"
PODS_READY = "pods-ready report by signal set_pods_ready"
PROVREQ = "ProvisioningRequest condition by update set_provisioning_request_condition"

CATALOG = "catalog"
JOB = "workload default/job"  # QuotaReserved; check a Pending at attempt 2, check b Ready with a podSetUpdate
RUN = "workload default/run"  # Admitted, in a ClusterQueue without checks
NOBODY = "workload default/nobody"  # never submitted
OTHER = "workload default/other"  # what the bad Workload manifests would create
# A workload name Kubernetes takes (at most 253) whose workflow ID workload/default/<name> is 257 long.
LONG = "w" * 240
TOO_LONG = f"workload default/{LONG}"
PROV = "provreq default/job-prov-1"  # Accepted and Provisioned by the simulated autoscaler

CONTROLLER_QUEUE = "tests/bad-input-controller"
ASKED_AGAIN = "asked again"
# A controller's answer that is not a verdict is recorded, and the controller asked again later.
FAILED = 'Controller of check "ctl" failed on attempt 1: invalid verdict from the controller: '
AGAIN = "; asked again in 5s (1 in a row)"

QUANTITY = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
STATES = "must be one of Pending, Ready, Retry, Rejected"
NOT_A_VERDICT = "invalid verdict: verdict: Input should be an object"
WORKLOAD_NOT_FOUND = 'error: workloads "default/nobody" not found or already finished'
NAME_PART = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
    "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)


class Args(tuple):
    """Send exactly these arguments (none, or more than one) instead of the one payload."""


class NotOneLine(AssertionError):
    """The right message, after other lines (argparse prints its usage first)."""


@dataclass(frozen=True)
class Case:
    id: str
    channel: str
    target: str
    input: Any
    error: str


def cq(spec: dict[str, Any], name: str = "cq") -> str:
    return json.dumps({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec})


def group(covered: list[str], *flavors: dict) -> dict:
    return {"coveredResources": covered, "flavors": list(flavors)}


def flavor(name: str = "default", resources: tuple = (("cpu", 4),)) -> dict:
    return {"name": name, "resources": [{"name": r, "nominalQuota": q} for r, q in resources]}


def other_workload(pod_set: str, name: str = "other") -> str:
    return textwrap.dedent(
        f"""\
        apiVersion: kueue.x-k8s.io/v1beta2
        kind: Workload
        metadata: {{name: {name}, namespace: default}}
        spec:
          queueName: lq
          podSets:
          - {pod_set}
        """
    )


PROVREQ_PARAMETERS = "provreq.kueue.x-k8s.io/ annotations become the ProvisioningRequest's spec.parameters"


def annotated_workload(annotations: dict[str, str], name: str = "other") -> str:
    manifest = workload_manifest(name)
    return json.dumps({**manifest, "metadata": {**manifest["metadata"], "annotations": annotations}})


def job_changed(**change) -> str:
    return json.dumps(workload_manifest("job", **{"cpu": "1", **change}))


def doc(kind: str, name: str, spec: str, namespace: str = "") -> str:
    ns = f", namespace: {namespace}" if namespace else ""
    return f"apiVersion: kueue.x-k8s.io/v1beta2\nkind: {kind}\nmetadata: {{name: {name}{ns}}}\nspec: {spec}\n"


EXTRA_FLAVOR = "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {name: extra}\n---\n"

TABLE: list[Case] = [
    # --- manifests: admitflow apply -f - ----------------------------------------------------------
    Case("manifest-unknown-kind", MANIFEST, CATALOG, doc("Widget", "w", "{}"),
         'error: <stdin>: document 1 (Widget w): no matches for kind "Widget" in version "kueue.x-k8s.io/v1beta2"'),
    Case("manifest-not-yaml", MANIFEST, CATALOG, "kind: [ClusterQueue\n",
         "error: <stdin>: document 1: yaml: line 2: did not find expected ',' or ']'"),
    Case("manifest-not-an-object", MANIFEST, CATALOG, "just a string\n",
         "error: <stdin>: document 1: expected a Kubernetes object (a mapping), got string"),
    Case("manifest-unknown-field", MANIFEST, CATALOG, cq({"resourceGroups": [group(["cpu"], flavor())], "foo": 1}),
         'error: <stdin>: document 1 (ClusterQueue cq): spec.foo: unknown field "spec.foo"'),
    Case("manifest-bad-quantity", MANIFEST, CATALOG, cq({"resourceGroups": [group(["cpu"], flavor(resources=(("cpu", "lots"),)))]}),
         "error: <stdin>: document 1 (ClusterQueue cq): spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: "
         f'Invalid value: "lots": {QUANTITY}'),
    Case("manifest-negative-quota", MANIFEST, CATALOG, cq({"resourceGroups": [group(["cpu"], flavor(resources=(("cpu", "-500m"),)))]}),
         "error: <stdin>: document 1 (ClusterQueue cq): spec.resourceGroups[0].flavors[0].resources[0].nominalQuota: "
         'Invalid value: "-500m": must be greater than or equal to 0'),
    Case("manifest-duplicate-flavor", MANIFEST, CATALOG, cq({"resourceGroups": [group(["cpu"], flavor(), flavor())]}),
         "error: <stdin>: document 1 (ClusterQueue cq): spec.resourceGroups[0].flavors[1]: "
         'Duplicate value: map[string]interface {}{"name":"default"}'),
    Case("manifest-17-resource-groups", MANIFEST, CATALOG,
         cq({"resourceGroups": [group([f"r{i}"], flavor(f"f{i}", ((f"r{i}", 1),))) for i in range(17)]}),
         "error: <stdin>: document 1 (ClusterQueue cq): spec.resourceGroups: Too many: 17: must have at most 16 items"),
    Case("manifest-unknown-queueing-strategy", MANIFEST, CATALOG,
         cq({"resourceGroups": [group(["cpu"], flavor())], "queueingStrategy": "Foo"}),
         'error: <stdin>: document 1 (ClusterQueue cq): spec.queueingStrategy: Unsupported value: "Foo": '
         'supported values: "StrictFIFO", "BestEffortFIFO"'),
    Case("manifest-negative-pod-count", MANIFEST, OTHER,
         other_workload("{name: main, count: -1, template: {spec: {containers: [{name: c, image: x}]}}}"),
         "error: <stdin>: document 1 (Workload other): spec.podSets[0].count: Invalid value: -1: "
         "spec.podSets[0].count in body should be greater than or equal to 0"),
    Case("manifest-workload-name-too-long-for-its-workflow-id", MANIFEST, TOO_LONG,
         other_workload("{name: main, count: 1, template: {spec: {containers: [{name: c, image: x}]}}}", LONG),
         f'error: <stdin>: document 1 (Workload {LONG}): metadata.name: Invalid value: "{LONG}": too long for admitflow: '
         "its workflow ID workload/<namespace>/<name> would be 257 characters, more than the 255 Temporal's SQL "
         "persistence stores; use a shorter workload name"),
    Case("manifest-cluster-queue-name-too-long-for-its-workflow-id", MANIFEST, CATALOG,
         cq({"resourceGroups": [group(["cpu"], flavor())]}, name="c" * 243),
         f'error: <stdin>: document 1 (ClusterQueue {"c" * 243}): metadata.name: Invalid value: "{"c" * 243}": too long '
         "for admitflow: its workflow ID clusterqueue/<name> would be 256 characters, more than the 255 Temporal's SQL "
         "persistence stores; use a shorter ClusterQueue name"),
    Case("manifest-cluster-queue-reference-not-a-name", MANIFEST, CATALOG, doc("LocalQueue", "lq2", "{clusterQueue: CQ}", "default"),
         'error: <stdin>: document 1 (LocalQueue lq2): spec.clusterQueue: Invalid value: "CQ": spec.clusterQueue in body '
         "should match '^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$'"),
    Case("manifest-admission-check-without-controller", MANIFEST, CATALOG, doc("AdmissionCheck", "c2", "{}"),
         "error: <stdin>: document 1 (AdmissionCheck c2): spec.controllerName: Required value"),
    Case("manifest-second-document-bad-applies-neither", MANIFEST, CATALOG,
         EXTRA_FLAVOR + "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {name: Bad_Name}\n",
         'error: <stdin>: document 2 (ResourceFlavor Bad_Name): metadata.name: Invalid value: "Bad_Name": a lowercase '
         "RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end "
         "with an alphanumeric character (e.g. 'example.com', regex used for validation is "
         "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"),
    Case("manifest-local-queue-moved-to-another-cluster-queue", MANIFEST, CATALOG,
         doc("LocalQueue", "lq", "{clusterQueue: free}", "default"),
         'error: <stdin>: document 1 (LocalQueue lq): LocalQueue "default/lq" is invalid: spec.clusterQueue: '
         'Invalid value: "free": field is immutable'),
    Case("manifest-controller-name-changed-applies-nothing", MANIFEST, CATALOG,
         EXTRA_FLAVOR + doc("AdmissionCheck", "a", "{controllerName: elsewhere}"),
         'error: <stdin>: document 2 (AdmissionCheck a): AdmissionCheck "a" is invalid: spec.controllerName: '
         'Invalid value: "elsewhere": field is immutable'),
    Case("manifest-submitted-workload-spec-changed", MANIFEST, JOB, job_changed(cpu="2"),
         "error: <stdin>: document 1 (Workload job): spec: Forbidden: the spec of a submitted workload is immutable but "
         "for its priority; delete it and apply again"),
    Case("manifest-workload-names-a-missing-priority-class-applies-nothing", MANIFEST, CATALOG,
         EXTRA_FLAVOR + json.dumps({**workload_manifest("ghost"), "spec": {**workload_manifest("ghost")["spec"],
                                     "priorityClassRef": {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "nope"}}}),
         'error: <stdin>: document 2 (Workload ghost): workloadpriorityclasses.kueue.x-k8s.io "nope" not found'),
    Case("manifest-submitted-workload-gets-a-priority-class-while-holding-quota", MANIFEST, JOB,
         json.dumps({**workload_manifest("job"), "spec": {**workload_manifest("job", priority=5)["spec"],
                     "priorityClassRef": {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": "high"}}}),
         'error: <stdin>: document 1 (Workload job): Invalid value: "object": priorityClassRef is immutable while '
         "workload quota reserved"),
    Case("manifest-pod-template-label-value-over-63-characters", MANIFEST, OTHER,
         other_workload(f"{{name: main, count: 1, template: {{metadata: {{labels: {{app: {'x' * 64}}}}}, spec: {{containers: [{{name: c, image: x}}]}}}}}}"),
         "error: <stdin>: document 1 (Workload other): spec.podSets[0].template.metadata.labels: "
         f'Invalid value: "{"x" * 64}": must be no more than 63 characters'),
    Case("manifest-pod-priority-as-text", MANIFEST, OTHER,
         other_workload('{name: main, count: 1, template: {spec: {priority: "high", containers: [{name: c, image: x}]}}}'),
         'error: <stdin>: document 1 (Workload other): spec.podSets[0].template.spec.priority: Invalid value: "high": '
         'spec.podSets[0].template.spec.priority in body must be of type integer: "string"'),
    Case("manifest-container-without-image", MANIFEST, OTHER,
         other_workload("{name: main, count: 1, template: {spec: {containers: [{name: c}]}}}"),
         "error: <stdin>: document 1 (Workload other): spec.podSets[0].template.spec.containers[0].image: Required value"),
    Case("manifest-restart-policy-sometimes", MANIFEST, OTHER,
         other_workload("{name: main, count: 1, template: {spec: {restartPolicy: Sometimes, containers: [{name: c, image: x}]}}}"),
         'error: <stdin>: document 1 (Workload other): spec.podSets[0].template.spec.restartPolicy: Unsupported value: '
         '"Sometimes": supported values: "Always", "OnFailure", "Never"'),
    Case("manifest-provisioning-request-parameter-over-255-characters", MANIFEST, OTHER,
         annotated_workload({"provreq.kueue.x-k8s.io/maxRunDurationSeconds": "9" * 256}),
         "error: <stdin>: document 1 (Workload other): metadata.annotations[provreq.kueue.x-k8s.io/maxRunDurationSeconds]: "
         f"Too long: may not be more than 255 bytes ({PROVREQ_PARAMETERS})"),
    Case("manifest-101-provisioning-request-parameters", MANIFEST, OTHER,
         annotated_workload({f"provreq.kueue.x-k8s.io/p{i}": "1" for i in range(101)}),
         "error: <stdin>: document 1 (Workload other): metadata.annotations: Too many: 101: must have at most 100 items "
         f"({PROVREQ_PARAMETERS})"),
    # --- CLI arguments ------------------------------------------------------------------------------
    Case("cli-get-unknown-kind", CLI, CATALOG, ("get", "widgets"),
         'error: the server doesn\'t have a resource type "widgets"'),
    Case("cli-get-bad-output", CLI, CATALOG, ("get", "workloads", "-o", "xml"),
         "admitflow get: error: argument -o/--output: invalid choice: 'xml' (choose from 'table', 'wide', 'name', 'json', 'yaml')"),
    Case("cli-get-unknown-phase", CLI, CATALOG, ("get", "workloads", "--phase", "Running"),
         'error: --phase "Running": must be one of Pending, QuotaReserved, Admitted, Backoff, Inactive, Finished'),
    Case("cli-get-unknown-cluster-queue", CLI, CATALOG, ("get", "clusterqueue", "nope"),
         'error: clusterqueues "nope" not found'),
    Case("cli-apply-missing-file", CLI, CATALOG, ("apply", "-f", "/nonexistent/queues.yaml"),
         'error: /nonexistent/queues.yaml: the path "/nonexistent/queues.yaml" does not exist'),
    Case("cli-delete-unknown-local-queue", CLI, CATALOG, ("delete", "localqueue", "default/nope"),
         'error: localqueues "default/nope" not found'),
    Case("cli-activate-unknown-admission-check", CLI, CATALOG, ("admissioncheck", "activate", "nope"),
         'error: admissionchecks "nope" not found'),
    Case("cli-verdict-bad-requeue-after", CLI, JOB, ("verdict", "job", "a", "Retry", "--requeue-after", "soon"),
         'error: --requeue-after: time: invalid duration "soon"'),
    Case("cli-verdict-pod-set-update-not-json", CLI, JOB, ("verdict", "job", "a", "Ready", "--pod-set-update", "{nope"),
         "error: --pod-set-update '{nope': not JSON (Expecting property name enclosed in double quotes at column 2); "
         'give an object such as {"name": "main", "nodeSelector": {"pool": "gpu"}}'),
    Case("cli-verdict-unknown-state", CLI, JOB, ("verdict", "job", "a", "Maybe"),
         f'error: unknown state "Maybe" for check "a": {STATES}'),
    Case("cli-verdict-stale-attempt", CLI, JOB, ("verdict", "job", "a", "Rejected", "--attempt", "1"),
         'error: verdict for attempt 1 of check "a", which is at attempt 2: ignored'),
    Case("cli-verdict-attempt-not-a-number", CLI, JOB, ("verdict", "job", "a", "Ready", "--attempt", "two"),
         'admitflow verdict: error: argument --attempt: "two": must be a whole number from 1 to 2147483647'),
    Case("cli-verdict-unknown-workload", CLI, NOBODY, ("verdict", "default/nobody", "a", "Ready"), WORKLOAD_NOT_FOUND),
    Case("cli-finish-unknown-workload", CLI, NOBODY, ("finish", "default/nobody"), WORKLOAD_NOT_FOUND),
    Case("cli-pods-ready-not-ready-reason-when-ready", CLI, RUN, ("pods-ready", "run", "--reason", "WaitForStart"),
         "error: invalid pods-ready report: reason 'WaitForStart' with ready=true: use Started or Recovered"),
    Case("cli-pods-ready-ready-reason-when-not-ready", CLI, RUN, ("pods-ready", "run", "--not-ready", "--reason", "Started"),
         "error: invalid pods-ready report: reason 'Started' with ready=false: use WaitForStart or WaitForRecovery"),
    Case("cli-provreq-unknown-condition-type", CLI, PROV, ("provreq", "set-condition", "default/job-prov-1", "Ready"),
         'error: unknown condition type "Ready": must be one of Accepted, Provisioned, Failed, BookingExpired, CapacityRevoked'),
    Case("cli-provreq-unknown-status", CLI, PROV, ("provreq", "set-condition", "default/job-prov-1", "Failed", "--status", "Maybe"),
         'error: --status "Maybe": must be True, False or Unknown'),
    Case("cli-provreq-unknown-request", CLI, PROV, ("provreq", "set-condition", "default/nobody", "Failed"),
         'error: provisioningrequests.autoscaling.x-k8s.io "nobody" not found'),
    # --- verdicts by update -------------------------------------------------------------------------
    Case("update-unknown-check", UPDATE, JOB, {"name": "nope", "state": "Ready"},
         'workload default/job has no admission check "nope" (it has: a, b)'),
    Case("update-unknown-state", UPDATE, JOB, {"name": "a", "state": "Maybe"}, f'unknown state "Maybe" for check "a": {STATES}'),
    Case("update-negative-requeue-after", UPDATE, JOB, {"name": "a", "state": "Retry", "requeueAfterSeconds": -5},
         "invalid verdict: requeueAfterSeconds: Input should be greater than or equal to 0"),
    Case("update-requeue-after-past-int32", UPDATE, JOB, {"name": "a", "state": "Retry", "requeueAfterSeconds": 10**12},
         "invalid verdict: requeueAfterSeconds: Input should be less than or equal to 2147483647"),
    Case("update-requeue-after-not-a-number", UPDATE, JOB, {"name": "a", "state": "Retry", "requeueAfterSeconds": "soon"},
         "invalid verdict: requeueAfterSeconds: Input should be a valid integer, unable to parse string as an integer"),
    Case("update-pod-set-unknown", UPDATE, JOB, {"name": "a", "state": "Ready", "podSetUpdates": [{"name": "driver"}]},
         'podSetUpdates: unknown podSet "driver" (the workload has: main)'),
    Case("update-invalid-label", UPDATE, JOB,
         {"name": "a", "state": "Ready", "podSetUpdates": [{"name": "main", "labels": {"bad key": "x"}}]},
         f'podSetUpdates[0].labels: Invalid value: "bad key": {NAME_PART}'),
    Case("update-misspelled-pod-set-update-field", UPDATE, JOB,
         {"name": "a", "state": "Ready", "podSetUpdates": [{"name": "main", "nodeselector": {"pool": "gpu"}}]},
         "invalid verdict: podSetUpdates.0.nodeselector: Extra inputs are not permitted"),
    Case("update-two-updates-of-one-pod-set", UPDATE, JOB,
         {"name": "a", "state": "Ready", "podSetUpdates": [{"name": "main", "nodeSelector": {"pool": "gpu"}}, {"name": "main"}]},
         'podSetUpdates[1].name: Duplicate value: "main": one podSetUpdate per podSet'),
    Case("update-toleration-kueue-refuses", UPDATE, JOB,
         {"name": "a", "state": "Ready", "podSetUpdates": [{"name": "main", "tolerations": [{"operator": "Equal", "value": "x"}]}]},
         "podSetUpdates[0].tolerations: Invalid value: \"array\": operator must be Exists when 'key' is empty, "
         "which means 'match all values and all keys'"),
    Case("update-nine-tolerations", UPDATE, JOB,
         {"name": "a", "state": "Ready", "podSetUpdates": [{"name": "main", "tolerations": [{"operator": "Exists"}] * 9}]},
         "invalid verdict: podSetUpdates.0.tolerations: List should have at most 8 items after validation, not 9"),
    Case("update-pod-set-updates-changed-while-ready", UPDATE, JOB,
         {"name": "b", "state": "Ready", "podSetUpdates": [{"name": "main", "labels": {"approved-by": "someone-else"}}]},
         'podSetUpdates: field is immutable while check "b" stays Ready'),
    Case("update-stale-attempt", UPDATE, JOB, {"name": "a", "state": "Rejected", "attempt": 1},
         'verdict for attempt 1 of check "a", which is at attempt 2: ignored'),
    Case("update-not-an-object", UPDATE, JOB, "Ready", NOT_A_VERDICT),
    Case("update-null", UPDATE, JOB, None, NOT_A_VERDICT),
    Case("update-without-state", UPDATE, JOB, {"name": "a"}, "invalid verdict: state: Field required"),
    Case("update-name-not-a-string", UPDATE, JOB, {"name": 7, "state": "Ready"}, "invalid verdict: name: Input should be a valid string"),
    Case("update-without-payload", UPDATE, JOB, Args(), "invalid verdict: expected one payload, got 0 arguments"),
    Case("update-two-payloads", UPDATE, JOB, Args([{"name": "a", "state": "Ready"}, 2]),
         "invalid verdict: expected one payload, got 2 arguments"),
    # --- verdicts by signal -------------------------------------------------------------------------
    Case("signal-unknown-check", SIGNAL, JOB, {"name": "nope", "state": "Ready"},
         'rejected: workload default/job has no admission check "nope" (it has: a, b)'),
    Case("signal-unknown-state", SIGNAL, JOB, {"name": "a", "state": "Maybe"}, f'rejected: unknown state "Maybe" for check "a": {STATES}'),
    Case("signal-negative-requeue-after", SIGNAL, JOB, {"name": "a", "state": "Retry", "requeueAfterSeconds": -5},
         "rejected: invalid verdict: requeueAfterSeconds: Input should be greater than or equal to 0"),
    Case("signal-requeue-after-past-int32", SIGNAL, JOB, {"name": "a", "state": "Retry", "requeueAfterSeconds": 10**12},
         "rejected: invalid verdict: requeueAfterSeconds: Input should be less than or equal to 2147483647"),
    Case("signal-future-attempt", SIGNAL, JOB, {"name": "a", "state": "Ready", "attempt": 7},
         'rejected: verdict for attempt 7 of check "a", which is at attempt 2: not asked yet'),
    Case("signal-invalid-label", SIGNAL, JOB,
         {"name": "a", "state": "Ready", "podSetUpdates": [{"name": "main", "labels": {"bad key": "x"}}]},
         f'rejected: podSetUpdates[0].labels: Invalid value: "bad key": {NAME_PART}'),
    Case("signal-pod-set-updates-changed-while-ready", SIGNAL, JOB,
         {"name": "b", "state": "Ready", "podSetUpdates": [{"name": "main", "labels": {"approved-by": "someone-else"}}]},
         'rejected: podSetUpdates: field is immutable while check "b" stays Ready'),
    Case("signal-stale-attempt", SIGNAL, JOB, {"name": "a", "state": "Rejected", "attempt": 1},
         'ignored: verdict for attempt 1 of check "a", which is at attempt 2: ignored'),
    Case("signal-not-an-object", SIGNAL, JOB, ["a", "Ready"], f"rejected: {NOT_A_VERDICT}"),
    Case("signal-without-state", SIGNAL, JOB, {"name": "a"}, "rejected: invalid verdict: state: Field required"),
    Case("signal-without-payload", SIGNAL, "workload default/victim-verdict-none", Args(),
         "rejected: invalid verdict: expected one payload, got 0 arguments"),
    Case("signal-two-payloads", SIGNAL, "workload default/victim-verdict-two", Args([{"name": "a", "state": "Ready"}, 2]),
         "rejected: invalid verdict: expected one payload, got 2 arguments"),
    # --- controller results (one workload each, in a ClusterQueue with the check `ctl`) -----------------
    Case("controller-answers-a-bare-word", CONTROLLER, "workload default/controller-answers-a-bare-word", "yes",
         f'{FAILED}unknown state "yes" for check "ctl": {STATES}{AGAIN}'),
    Case("controller-answers-for-another-check", CONTROLLER, "workload default/controller-answers-for-another-check",
         {"name": "other", "state": "Ready"},
         f'{FAILED}answered for check "other"{AGAIN}'),
    Case("controller-answers-a-number", CONTROLLER, "workload default/controller-answers-a-number", 42,
         f"{FAILED}invalid verdict: state: Input should be a valid string{AGAIN}"),
    Case("controller-answers-nothing", CONTROLLER, "workload default/controller-answers-nothing", None,
         f"{FAILED}invalid verdict: state: Input should be a valid string{AGAIN}"),
    Case("controller-answers-an-unknown-pod-set", CONTROLLER, "workload default/controller-answers-an-unknown-pod-set",
         {"state": "Ready", "podSetUpdates": [{"name": "driver", "labels": {"a": "b"}}]},
         f'{FAILED}podSetUpdates: unknown podSet "driver" (the workload has: main){AGAIN}'),
    # --- pods-ready reports by signal ---------------------------------------------------------------
    Case("pods-ready-ready-not-a-boolean", PODS_READY, RUN, {"ready": "maybe"},
         "Warning InvalidPodsReadyReport: invalid pods-ready report: ready: Input should be a valid boolean, unable to interpret input"),
    Case("pods-ready-wrong-reason", PODS_READY, RUN, {"ready": True, "reason": "WaitForStart"},
         "Warning InvalidPodsReadyReport: invalid pods-ready report: reason 'WaitForStart' with ready=true: use Started or Recovered"),
    Case("pods-ready-not-an-object", PODS_READY, RUN, "ready",
         "Warning InvalidPodsReadyReport: invalid pods-ready report: report: Input should be an object"),
    Case("pods-ready-without-ready", PODS_READY, RUN, {"reason": "Started"},
         "Warning InvalidPodsReadyReport: invalid pods-ready report: ready: Field required"),
    Case("pods-ready-without-payload", PODS_READY, "workload default/victim-pods-ready-none", Args(),
         "Warning InvalidPodsReadyReport: invalid pods-ready report: expected one payload, got 0 arguments"),
    # --- ProvisioningRequest conditions by hand -----------------------------------------------------
    Case("provreq-unknown-request", PROVREQ, PROV, {"namespace": "default", "name": "nobody", "type": "Failed"},
         'provisioningrequests.autoscaling.x-k8s.io "nobody" not found'),
    Case("provreq-unknown-type", PROVREQ, PROV, {"namespace": "default", "name": "job-prov-1", "type": "Ready"},
         'unknown condition type "Ready": must be one of Accepted, Provisioned, Failed, BookingExpired, CapacityRevoked'),
    Case("provreq-bad-status", PROVREQ, PROV, {"namespace": "default", "name": "job-prov-1", "type": "Failed", "status": "Maybe"},
         'condition status "Maybe": must be True, False or Unknown'),
    Case("provreq-reason-not-camel-case", PROVREQ, PROV,
         {"namespace": "default", "name": "job-prov-1", "type": "Failed", "reason": "not camel"},
         'condition reason "not camel": must be CamelCase: a letter, then letters, digits, "_", "," or ":"'),
    Case("provreq-message-too-long", PROVREQ, PROV,
         {"namespace": "default", "name": "job-prov-1", "type": "Failed", "message": "m" * (32 * 1024 + 1)},
         "condition message: may not be longer than 32768 characters"),
    Case("provreq-without-type", PROVREQ, PROV, {"namespace": "default", "name": "job-prov-1"},
         "invalid condition: type: Field required"),
]


# --- the shared setup ----------------------------------------------------------------------------------


@pytest_asyncio.fixture(scope="module")
async def engine(dev_server: DevServer) -> AsyncIterator[Engine]:
    """conftest's `engine`, once for the whole table. Every collected case counts toward the dev
    server's namespace pool (it counts tests that take `engine`), so the pool only grows."""
    namespace = next(dev_server.pool)  # type: ignore[attr-defined]
    client = await Client.connect(dev_server.address, namespace=namespace, data_converter=DATA_CONVERTER)
    async with build_worker(client, "admitflow"):
        yield Engine(client, AdmitflowClient(client, "admitflow"), namespace, dev_server.address)


ANSWERS = {c.target.split("/")[-1]: c.input for c in TABLE if c.channel == CONTROLLER}
VICTIMS = sorted({c.target.split("/")[-1] for c in TABLE if "victim" in c.target})


ASKED: dict[str, int] = {}


@activity.defn(name="admission_check")
async def bad_controller(request: dict) -> Any:
    """The check `ctl`'s controller: its first answer about each workload is that row's result;
    asked again (after its backoff, about the same attempt), it says Pending."""
    name = request["workload"]["metadata"]["name"]
    ASKED[name] = ASKED.get(name, 0) + 1
    if ASKED[name] == 1:
        return ANSWERS[name]
    return {"state": "Pending", "message": ASKED_AGAIN}


async def build_world(engine: Engine) -> None:
    af = engine.admitflow
    await af.apply(loaded(check_manifest("a"), check_manifest("b"), check_manifest("ctl", controllerName=CONTROLLER_QUEUE)))
    for name in ("a", "b", "ctl"):
        await af.set_admission_check_active(name)
    quota = {"default": {"cpu": "16"}}
    await af.apply(
        loaded(
            flavor_manifest(),
            cluster_queue_manifest("cq", quotas=quota, checks=[{"name": "a"}, {"name": "b"}]),
            cluster_queue_manifest("free", quotas=quota),
            cluster_queue_manifest("ctl", quotas=quota, checks=[{"name": "ctl"}]),
            local_queue_manifest("lq", "cq"),
            local_queue_manifest("free", "free"),
            local_queue_manifest("ctl", "ctl"),
            node_group(),
        )
    )
    await af.apply(
        loaded(
            workload_manifest("job", cpu="1"),
            workload_manifest("run", cpu="1", queue="free"),
            *(workload_manifest(n, cpu="1", queue="free") for n in VICTIMS),
        )
    )
    backend = SimulatedBackend(engine.client, task_queue="admitflow")
    request, templates = provreq("job-prov-1", gpus=1)
    await backend.create(request, templates, "recorder/nobody")

    async def job_at(phase: str, retries: int | None):
        r = await af.workload("default/job")
        a = next((c for c in r.status.admission_checks or () if c.name == "a"), None)
        return r.status.has_condition(phase) and a is not None and a.retry_count == retries

    # Check a says Retry once (attempt 1 is over), then b says Ready with a podSetUpdate.
    await eventually(lambda: job_at("QuotaReserved", None))
    await engine.client.get_workflow_handle(ids.workload_id("default/job")).execute_update(
        "apply_admission_check_state", {"name": "a", "state": "Retry", "requeueAfterSeconds": 0}
    )
    await eventually(lambda: job_at("QuotaReserved", 1))
    await engine.client.get_workflow_handle(ids.workload_id("default/job")).execute_update(
        "apply_admission_check_state",
        {"name": "b", "state": "Ready", "podSetUpdates": [{"name": "main", "labels": {"approved-by": "setup"}}]},
    )

    async def settled():
        names = ("run", *VICTIMS)
        admitted = [(await af.workload(f"default/{n}")).status.has_condition("Admitted") for n in names]
        provisioned = [r for r in await backend.list() if r.condition("Provisioned") is not None]
        return all(admitted) and provisioned

    await eventually(settled)


# --- what is compared before and after ------------------------------------------------------------------


async def _query(engine: Engine, key: str) -> WorkloadReport:
    handle = engine.client.get_workflow_handle(ids.workload_id(key))
    return await asyncio.wait_for(
        handle.query("workload", result_type=WorkloadReport, rpc_timeout=timedelta(seconds=3)), 4
    )


async def snapshot(engine: Engine, target: str) -> Any:
    if target == CATALOG:
        return {kind: [o.to_wire() for o in await engine.admitflow.catalog_objects(kind)] for kind in CATALOG_KINDS}
    what, key = target.split(" ", 1)
    if what == "provreq":
        found = await engine.admitflow.provisioning_requests()
        return next((r.to_wire() for r in found if f"{r.metadata.namespace}/{r.metadata.name}" == key), None)
    try:
        desc = await engine.client.get_workflow_handle(ids.workload_id(key)).describe()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
    try:
        wire = (await _query(engine, key)).to_wire()
    except Exception as err:  # a stuck workflow refuses queries
        return {"workflow": desc.status.name, "query": f"refused: {type(err).__name__}: {err}"}
    for log in ("events", "verdicts"):
        wire.pop(log, None)
    return {"workflow": desc.status.name, "workload": wire}


async def controller_state(engine: Engine, key: str) -> dict[str, Any]:
    r = await _query(engine, key)
    [ctl] = r.status.admission_checks
    desc = await engine.client.get_workflow_handle(ids.workload_id(key)).describe()
    return {
        "workflow": desc.status.name,
        "ctl": (ctl.state, ctl.retry_count, ctl.message, ctl.pod_set_updates),
        "quotaReserved": r.status.has_condition("QuotaReserved"),
        "admitted": r.status.has_condition("Admitted"),
    }


# What a workload whose controller answered with something that is not a verdict looks like once its
# controller was asked again after its backoff: still running, not evicted, its check Pending, nothing applied.
RETRIED = {"workflow": "RUNNING", "ctl": ("Pending", None, ASKED_AGAIN, None), "quotaReserved": True, "admitted": False}


# --- running the cases ---------------------------------------------------------------------------------


@dataclass
class Outcome:
    error: str | None = None
    code: int | None = None
    stdout: str = ""
    before: Any = None
    after: Any = None
    crash: str = ""


async def poll(check: Callable[[], Awaitable[Any]], timeout: float) -> Any:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            found = await check()
        except Exception:
            found = None
        if found or asyncio.get_running_loop().time() > deadline:
            return found
        await asyncio.sleep(0.2)


def _args(payload: Any) -> list[Any]:
    return list(payload) if isinstance(payload, Args) else [payload]


def _cause(err: WorkflowUpdateFailedError) -> str:
    cause = err.cause
    return cause.message if isinstance(cause, ApplicationError) else str(cause or err)


async def send(engine: Engine, case: Case) -> Outcome:
    """Send one case's input where it goes; returns what came back (or was recorded)."""
    key = case.target.partition(" ")[2]
    if case.channel in (MANIFEST, CLI):
        r = await (run(engine, "apply", "-f", "-", stdin=case.input) if case.channel == MANIFEST else run(engine, *case.input))
        return Outcome(error=r.stderr.rstrip("\n"), code=r.returncode, stdout=r.stdout)
    if case.channel == UPDATE:
        try:
            status = await engine.client.get_workflow_handle(ids.workload_id(key)).execute_update(
                "apply_admission_check_state", args=_args(case.input)
            )
        except WorkflowUpdateFailedError as err:
            return Outcome(error=_cause(err))
        return Outcome(error=f"accepted: {status}")
    if case.channel == PROVREQ:
        try:
            stored = await engine.client.get_workflow_handle(ids.AUTOSCALER_ID).execute_update(
                "set_provisioning_request_condition", case.input
            )
        except WorkflowUpdateFailedError as err:
            return Outcome(error=_cause(err))
        return Outcome(error=f"accepted: {stored}")
    if case.channel == CONTROLLER:

        async def failed():
            r = await _query(engine, key)
            messages = [e.message for e in r.events if e.reason == "AdmissionCheckControllerFailed" or e.reason.startswith("Evicted")]
            return messages and (await controller_state(engine, key))["ctl"][2] == ASKED_AGAIN and messages

        messages = await poll(failed, 30)
        return Outcome(error="\n".join(messages) if messages else None)
    handle = engine.client.get_workflow_handle(ids.workload_id(key))
    if case.channel == SIGNAL:
        seen = len((await _query(engine, key)).verdicts)
        await handle.signal("set_admission_check_state", args=_args(case.input))

        async def recorded():
            verdicts = (await _query(engine, key)).verdicts
            return verdicts[seen:] and verdicts[-1]

        v = await poll(recorded, 5)
        return Outcome(error=f"{v.outcome}: {v.detail}" if v else None)
    assert case.channel == PODS_READY, case.channel

    def invalid(report: WorkloadReport) -> list:
        return [e for e in report.events if e.reason == "InvalidPodsReadyReport"]

    seen = len(invalid(await _query(engine, key)))
    await handle.signal("set_pods_ready", args=_args(case.input))

    async def warned():
        found = invalid(await _query(engine, key))
        return found[seen:] and found[-1]

    e = await poll(warned, 5)
    return Outcome(error=f"{e.type} {e.reason}: {e.message}" if e else None)


async def run_case(engine: Engine, case: Case) -> Outcome:
    try:
        before = None if case.channel == CONTROLLER else await snapshot(engine, case.target)
        outcome = await send(engine, case)
        key = case.target.partition(" ")[2]
        outcome.before = before
        outcome.after = (
            await controller_state(engine, key) if case.channel == CONTROLLER else await snapshot(engine, case.target)
        )
        return outcome
    except Exception as err:  # one case's surprise must not hide the others' outcomes
        return Outcome(crash=f"{type(err).__name__}: {err}")


async def run_all(engine: Engine) -> dict[str, Outcome]:
    """Everything at once, except that messages to one workflow go one after another (each waits for
    its own record) and CLI processes run a few at a time."""
    outcomes: dict[str, Outcome] = {}
    processes = asyncio.Semaphore(4)

    async def one(case: Case) -> None:
        if case.channel in (MANIFEST, CLI):
            async with processes:
                outcomes[case.id] = await run_case(engine, case)
        else:
            outcomes[case.id] = await run_case(engine, case)

    async def one_by_one(cases: list[Case]) -> None:
        for case in cases:
            await one(case)

    # CLI and controller cases, and each victim, each run on their own; the rest is grouped by target.
    alone = [c for c in TABLE if c.channel in (MANIFEST, CLI, CONTROLLER) or "victim" in c.target]
    by_target: dict[str, list[Case]] = {}
    for c in TABLE:
        if c not in alone:
            by_target.setdefault(c.target, []).append(c)
    await asyncio.gather(*(one(c) for c in alone), *(one_by_one(cs) for cs in by_target.values()))
    return outcomes


@pytest_asyncio.fixture(scope="module")
async def outcomes(engine: Engine) -> dict[str, Outcome]:
    worker = Worker(engine.client, task_queue=CONTROLLER_QUEUE, activities=[bad_controller])
    async with worker:
        await build_world(engine)
        await engine.admitflow.apply(
            loaded(*(workload_manifest(name, cpu="1", queue="ctl") for name in ANSWERS))
        )
        return await run_all(engine)


# --- the table -----------------------------------------------------------------------------------------


def test_the_table_covers_every_channel():
    counts = {ch: sum(c.channel == ch for c in TABLE) for ch in (MANIFEST, CLI, UPDATE, SIGNAL, CONTROLLER, PODS_READY, PROVREQ)}
    assert len(TABLE) >= 40 and len({c.id for c in TABLE}) == len(TABLE)
    assert min(counts.values()) >= 3, counts


@pytest.mark.parametrize("case", TABLE, ids=[c.id for c in TABLE])
async def test_bad_input_is_refused_in_one_line_and_changes_nothing(case: Case, outcomes: dict[str, Outcome]):
    o = outcomes[case.id]
    assert not o.crash, o.crash
    if case.channel in (MANIFEST, CLI):
        assert (o.code, o.stdout) == (2, ""), o.error
    if case.channel == CONTROLLER:
        assert o.after == RETRIED, "not evicted, asked again after a backoff, nothing of the answer applied, still running"
    else:
        assert o.before is not None or case.target in (NOBODY, OTHER, TOO_LONG), f"{case.target} missing before the case"
        assert o.after == o.before, f"{case.target} changed"
    lines = (o.error or "").splitlines()
    if len(lines) > 1 and lines[-1] == case.error:
        raise NotOneLine(f"{len(lines)} lines: {o.error}")
    assert lines == [case.error]
