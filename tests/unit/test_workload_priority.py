"""WorkloadPriorityClass: the kind as admitflow accepts it (both API versions), a workload's priority
resolved from it at submission (admission.priority), which changes of a submitted workload's
priority fields are refused and in whose words, and the `priority_class` label of the metrics."""

from __future__ import annotations

from typing import Any

import pytest

from admitflow import kinds
from admitflow.admission import catalog
from admitflow.admission import metrics as m
from admitflow.admission import priority
from admitflow.admission import workload as wl
from admitflow.admission.catalog import CatalogState, ObjectRef
from admitflow.api import ManifestError, WorkloadPriorityClass, parse_manifest
from admitflow.api.workload import WorkloadSpec
from tests.support import messages
from tests.builders import manifest, workload_manifest
from tests.unit.test_workload_status import T0, reserved_notice

V1 = "kueue.x-k8s.io/v1beta1"
V2 = "kueue.x-k8s.io/v1beta2"
WPC = {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass"}
POD_PC = {"group": "scheduling.k8s.io", "kind": "PriorityClass"}


def wpc(name: str = "high", value: Any = 100, api_version: str = V2, **fields: Any) -> dict:
    return {"apiVersion": api_version, "kind": "WorkloadPriorityClass", "metadata": {"name": name}, "value": value, **fields}


def spec(priority: int | None = None, ref: dict | None = None, **extra: Any) -> WorkloadSpec:
    doc = workload_manifest("job", priority=priority)
    if ref is not None:
        doc["spec"]["priorityClassRef"] = ref
    doc["spec"].update(extra)
    return manifest(doc).spec


def refused(doc: dict) -> str:
    with pytest.raises(ManifestError) as err:
        parse_manifest(doc, "f.yaml")
    return str(err.value)


# --- the kind ------------------------------------------------------------------------------------


@pytest.mark.parametrize("api_version", [V2, V1])
def test_kueues_sample_class_is_taken_in_both_api_versions_and_held_as_v1beta2(api_version):
    # The sample of Kueue's concept page, with the namespace kubectl ignores on a cluster-scoped kind.
    doc = wpc("sample-priority", 10000, api_version, description="Sample priority")
    doc["metadata"]["namespace"] = "team-a"
    obj, warnings = parse_manifest(doc)
    assert isinstance(obj, WorkloadPriorityClass) and warnings == []
    assert obj.to_wire() == {
        "apiVersion": V2,
        "kind": "WorkloadPriorityClass",
        "metadata": {"name": "sample-priority"},
        "value": 10000,
        "description": "Sample priority",
    }


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        pytest.param({k: v for k, v in wpc().items() if k != "value"}, "value: Required value", id="value-is-required"),
        pytest.param(
            wpc(value="high"),
            'value: Invalid value: "high": value in body must be of type integer: "string"',
            id="value-must-be-an-integer",
        ),
        pytest.param(
            wpc(value=2**31),
            "value: Invalid value: 2147483648: value in body should be less than or equal to 2147483647",
            id="value-must-fit-an-int32",
        ),
        pytest.param(
            wpc(value=-(2**31) - 1),
            "value: Invalid value: -2147483649: value in body should be greater than or equal to -2147483648",
            id="negative-value-must-fit-an-int32",
        ),
        pytest.param(
            wpc(description="x" * 2049), "description: Too long: may not be more than 2048 bytes", id="description-is-at-most-2048"
        ),
        pytest.param(wpc(spec={"value": 1}), 'spec: unknown field "spec"', id="value-is-not-under-a-spec"),
        pytest.param(
            {**wpc(), "metadata": {"name": "High"}},
            "metadata.name: Invalid value: \"High\": a lowercase RFC 1123 subdomain must consist of lower case "
            "alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. "
            "'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
            id="name-is-a-dns-subdomain",
        ),
    ],
)
def test_a_bad_class_is_refused_in_one_line(doc, message):
    name = doc["metadata"]["name"]
    assert refused(doc) == f"f.yaml: document 1 (WorkloadPriorityClass {name}): {message}"


def test_kubectl_names_of_the_kind_are_kueues_crd_names():
    for name in ("workloadpriorityclass", "workloadpriorityclasses", "WorkloadPriorityClass",
                 "workloadpriorityclasses.kueue.x-k8s.io", "workloadpriorityclasses.v1beta1.kueue.x-k8s.io"):
        assert kinds.kind_of(name) == "WorkloadPriorityClass", name
    with pytest.raises(kinds.UnknownKind):
        kinds.kind_of("wpc")  # Kueue's CRD declares no short name
    assert kinds.qualified("WorkloadPriorityClass", "high") == "workloadpriorityclass.kueue.x-k8s.io/high"


def test_the_catalog_applies_changes_and_deletes_classes_like_kubectl():
    st, uid = CatalogState(), iter(range(1, 10))
    new = lambda: f"uid-{next(uid)}"  # noqa: E731
    assert [o.action for o in catalog.apply(st, [manifest(wpc())], new, T0)] == ["created"]
    assert [o.action for o in catalog.apply(st, [manifest(wpc())], new, T0)] == ["unchanged"]
    assert [o.action for o in catalog.apply(st, [manifest(wpc(value=5))], new, T0)] == ["configured"]
    assert st.get("WorkloadPriorityClass", "high").value == 5
    outcomes = catalog.delete(st, [ObjectRef(kind="WorkloadPriorityClass", key="high")], T0)
    assert [(o.action, o.message) for o in outcomes] == [("deleted", "")]  # no finalizer: workloads keep their priority
    assert st.get("WorkloadPriorityClass", "high") is None


# --- workloads naming a class --------------------------------------------------------------------


def test_a_workload_naming_a_class_may_leave_out_its_priority_and_a_pod_priority_class_may_not():
    ok = manifest({**workload_manifest("job"), "spec": {**workload_manifest("job")["spec"], "priorityClassRef": {**WPC, "name": "high"}}})
    assert ok.spec.priority is None and priority.needs_class(ok.spec)
    doc = workload_manifest("job")
    doc["spec"]["priorityClassRef"] = {**POD_PC, "name": "high"}
    assert refused(doc) == (
        'f.yaml: document 1 (Workload job): spec: Invalid value: "object": priority should not be nil when priorityClassRef is set'
    )


@pytest.mark.parametrize(
    ("source", "error"),
    [
        pytest.param("kueue.x-k8s.io/workloadpriorityclass", None, id="v1beta1-workload-priority-class-source-is-resolved-later"),
        pytest.param(
            "scheduling.k8s.io/priorityclass",
            'spec: Invalid value: "object": priority should not be nil when priorityClassName is set',
            id="v1beta1-pod-priority-class-source-needs-a-priority",
        ),
    ],
)
def test_a_v1beta1_workload_names_its_class_by_source_and_name(source, error):
    doc = workload_manifest("job")
    doc["apiVersion"] = V1
    doc["spec"].update(priorityClassSource=source, priorityClassName="high")
    if error is not None:
        assert refused(doc) == f"f.yaml: document 1 (Workload job): {error}"
        return
    obj, _ = parse_manifest(doc)
    assert obj.spec.priority_class_ref.to_wire() == {**WPC, "name": "high"}
    assert priority.resolve(obj.spec, {"high": 7}).priority == 7


HIGH = {**WPC, "name": "high"}
LOW = {**WPC, "name": "low"}


@pytest.mark.parametrize(
    ("given", "values", "submitted", "want"),
    [
        pytest.param(spec(None, HIGH), {"high": 100}, None, 100, id="a-class-without-a-priority-gives-its-value"),
        pytest.param(spec(5, HIGH), {"high": 100}, None, 5, id="a-given-priority-is-kept-beside-a-class"),
        pytest.param(spec(5, HIGH), {}, None, 5, id="a-given-priority-needs-no-class-to-exist"),
        pytest.param(spec(-3, {**POD_PC, "name": "high"}), {"high": 100}, None, -3, id="a-pod-priority-class-is-left-as-given"),
        pytest.param(spec(), {"high": 100}, None, None, id="no-class-no-priority-stays-unset"),
        pytest.param(
            spec(None, HIGH), {"high": 500}, spec(100, HIGH), 100,
            id="applied-again-with-the-same-class-it-keeps-the-priority-it-was-submitted-with-though-the-class-changed",
        ),
        pytest.param(
            spec(None, HIGH), {}, spec(100, HIGH), 100,
            id="applied-again-with-the-same-class-it-needs-no-class-to-exist-any-more",
        ),
        pytest.param(spec(None, LOW), {"low": 1}, spec(100, HIGH), 1, id="applied-again-with-another-class-it-takes-that-value"),
    ],
)
def test_the_priority_a_workload_is_submitted_with(given, values, submitted, want):
    resolved = priority.resolve(given, values, submitted)
    assert resolved.priority == want
    assert resolved.priority_class_ref == given.priority_class_ref


def test_a_missing_class_is_refused_with_kueues_not_found():
    with pytest.raises(priority.PriorityError) as err:
        priority.resolve(spec(None, HIGH), {"low": 1})
    assert str(err.value) == 'workloadpriorityclasses.kueue.x-k8s.io "high" not found'
    with pytest.raises(priority.PriorityError):
        priority.resolve(spec(None, LOW), {}, spec(100, HIGH))


# --- changes of a submitted workload's priority ---------------------------------------------------

QUOTA_IMMUTABLE = 'Invalid value: "object": priorityClassRef is immutable while workload quota reserved'


@pytest.mark.parametrize(
    ("submitted", "wanted", "reserved", "only", "refusal"),
    [
        pytest.param(spec(100, HIGH), spec(100, HIGH), True, False, None, id="nothing-changed-nothing-to-refuse"),
        pytest.param(spec(100, HIGH), spec(5, HIGH, queueName="other"), False, False, None,
                     id="other-fields-changed-too-the-callers-refusal"),
        pytest.param(spec(100, HIGH), spec(5, HIGH), False, True, None, id="priority-while-pending-kueue-allows-it"),
        pytest.param(spec(100, HIGH), spec(5, HIGH), True, True, None, id="priority-while-holding-quota-kueue-allows-it"),
        pytest.param(spec(100, HIGH), spec(1, LOW), True, True, None,
                     id="another-workload-priority-class-while-holding-quota-kueue-allows-it"),
        pytest.param(spec(1), spec(100, HIGH), False, True, None, id="a-class-added-while-pending-kueue-allows-it"),
        pytest.param(spec(100, HIGH), spec(100), False, True, None, id="a-class-removed-while-pending-kueue-allows-it"),
        pytest.param(spec(1), spec(100, HIGH), True, True, QUOTA_IMMUTABLE, id="a-class-added-while-holding-quota-kueue-refuses-it"),
        pytest.param(spec(100, HIGH), spec(100), True, True, QUOTA_IMMUTABLE, id="a-class-removed-while-holding-quota-kueue-refuses-it"),
        pytest.param(
            spec(100, {**POD_PC, "name": "high"}), spec(1, {**POD_PC, "name": "low"}), True, True,
            'Invalid value: "object": priorityClassRef.name is immutable for scheduling.k8s.io/priorityclass while workload quota reserved',
            id="another-pod-priority-class-while-holding-quota-kueue-refuses-it",
        ),
        pytest.param(
            spec(100, HIGH), spec(100, {**POD_PC, "name": "high"}), True, True,
            'Invalid value: "object": priorityClassRef.group is immutable while workload quota reserved',
            id="from-a-workload-to-a-pod-priority-class-while-holding-quota-kueue-refuses-it",
        ),
    ],
)
def test_which_changes_of_a_submitted_workloads_priority_are_refused_and_how(submitted, wanted, reserved, only, refusal):
    assert priority.priority_only(submitted, wanted) == only
    assert priority.change_refusal(submitted, wanted, reserved) == refusal


def _state(reserved: bool, ref: dict | None = HIGH) -> wl.WorkloadState:
    doc = workload_manifest("job", priority=100)
    if ref is not None:
        doc["spec"]["priorityClassRef"] = ref
    st = wl.new_state(manifest(doc), "uid-1", T0)
    if reserved:
        st.cluster_queue, st.claim.ticket, st.claim.queued = "cq", 1, True
        wl.reserve_quota(st, reserved_notice(), T0)
        assert wl.has_quota(st)
    return st


@pytest.mark.parametrize(
    ("payload", "reserved", "changed", "event"),
    [
        pytest.param({"priority": 5, "priorityClassRef": HIGH}, False, (5, "high"),
                     ("Normal", "PriorityChanged", "Priority changed from 100 to 5"), id="pending-priority"),
        pytest.param({"priority": 1, "priorityClassRef": LOW}, True, (1, "low"),
                     ("Normal", "PriorityChanged", "Priority changed from 100 to 1 (class high -> low)"),
                     id="holding-quota-another-class"),
        pytest.param({"priority": 100, "priorityClassRef": HIGH}, True, None, None, id="the-same-changes-nothing-and-says-nothing"),
        pytest.param({"priority": 7}, True, None,
                     ("Warning", "InvalidPriorityChange", f"workload default/job: {QUOTA_IMMUTABLE}"),
                     id="a-class-removed-while-holding-quota-is-refused-with-kueues-words"),
        pytest.param({"priority": 2**31}, False, None,
                     ("Warning", "InvalidPriorityChange",
                      "invalid priority change: priority: Input should be less than or equal to 2147483647"),
                     id="out-of-int32-range"),
        pytest.param({"priority": "high"}, False, None,
                     ("Warning", "InvalidPriorityChange", "invalid priority change: priority: Input should be a valid integer, "
                      "unable to parse string as an integer"), id="not-a-number"),
        pytest.param(None, False, None, ("Warning", "InvalidPriorityChange", "invalid priority change: change: Input should be "
                                         "an object"), id="no-payload"),
    ],
)
def test_a_priority_change_as_the_workload_takes_it(payload, reserved, changed, event):
    """`apply_priority` as the workload's lifecycle takes it: made, or refused with a Warning event
    and nothing changed. It never raises, whatever the payload."""
    st = _state(reserved)
    before = st.workload.spec.model_copy(deep=True)
    assert messages.priority_change(st, payload, T0) == (changed is not None)
    if changed is None:
        assert st.workload.spec == before
    else:
        assert (st.workload.spec.priority, priority.class_name(st.workload.spec)) == changed
    last = st.events[-1] if st.events else None
    got = (last.type, last.reason, last.message) if last is not None and last.reason.startswith(("Priority", "Invalid")) else None
    assert got == event


def test_a_finished_workloads_priority_is_not_changed():
    st = _state(False)
    wl.finish(st, True, "done", T0)
    with pytest.raises(priority.PriorityError, match="is finished"):
        priority.validate(st, priority.PriorityChange(priority=5))


# --- metrics -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ref", "label"),
    [
        pytest.param(HIGH, "high", id="a-workload-priority-class-names-the-label"),
        pytest.param({**POD_PC, "name": "system"}, "system", id="a-pod-priority-class-names-it-too-as-in-kueue"),
        pytest.param(None, "", id="no-class-an-empty-label"),
    ],
)
def test_the_priority_class_label_of_the_metrics(ref, label):
    doc = workload_manifest("job", priority=100)
    if ref is not None:
        doc["spec"]["priorityClassRef"] = ref
    st = wl.new_state(manifest(doc), "uid-1", T0)
    st.cluster_queue, st.claim.ticket, st.claim.queued = "cq", 1, True
    seen = m.snapshot(st)
    wl.reserve_quota(st, reserved_notice(), T0)
    _, observations = m.workload_observations(seen, st)
    assert {o.name.removeprefix(m.PREFIX) for o in observations} >= {"quota_reserved_workloads_total", "admitted_workloads_total"}
    assert {o.labels["priority_class"] for o in observations} == {label}
