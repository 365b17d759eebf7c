"""batch/v1 Jobs and scheduling.k8s.io/v1 PriorityClasses as manifests: Kueue's published examples
parse as they are, and what the apiserver refuses is refused with its words and field paths."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from pathlib import Path

import pytest

from admitflow import kinds, printing
from admitflow.admission import catalog
from admitflow.admission.catalog import CatalogState
from admitflow.api import ClusterQueue, Job, LocalQueue, ManifestError, PriorityClass, ResourceFlavor, load_manifests, parse_manifest
from admitflow.api.job import with_defaults
from admitflow.api.manifest import model_for
from admitflow.api.names import GENERATED_NAME_ALPHABET, generated_name

PUBLISHED = Path(__file__).resolve().parents[1] / "data" / "kueue-examples" / "published"

CONTAINER = {"name": "main", "image": "busybox", "command": ["true"]}


def job(name: str | None = "train", **spec) -> dict:
    metadata = {"name": name} if name is not None else {"generateName": "train-"}
    template = spec.pop("template", {"spec": {"containers": [CONTAINER], "restartPolicy": "Never"}})
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": {"template": template, **spec}}


def priority_class(name: str = "high", value: int = 1000, **fields) -> dict:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value, **fields}


def refusal(data: dict) -> str:
    with pytest.raises(ManifestError) as err:
        parse_manifest(data, "f.yaml")
    return str(err.value)


# --- Kueue's published examples ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("file", "kinds_found"),
    [
        pytest.param("single-clusterqueue-setup.yaml", [ResourceFlavor, ClusterQueue, LocalQueue], id="the-run-a-job-setup-parses"),
        pytest.param("quick-start-setup.yaml", [ResourceFlavor, ClusterQueue, LocalQueue], id="the-quick-start-setup-parses"),
        pytest.param("sample-job.yaml", [Job], id="the-run-a-job-sample-job-parses"),
        pytest.param("quick-start-job.yaml", [Job], id="the-quick-start-job-parses"),
    ],
)
def test_kueues_published_examples_parse_as_published(file, kinds_found):
    loaded = load_manifests([str(PUBLISHED / file)])
    assert [type(m.obj) for m in loaded] == kinds_found
    assert all(m.warnings == [] for m in loaded)


def test_the_sample_job_keeps_its_generate_name_and_queue_label():
    (loaded,) = load_manifests([str(PUBLISHED / "sample-job.yaml")])
    sample = loaded.obj
    assert (sample.metadata.name, sample.metadata.generate_name, sample.metadata.namespace) == (None, "sample-job-", "default")
    assert sample.metadata.labels == {"kueue.x-k8s.io/queue-name": "user-queue"}
    assert (sample.spec.parallelism, sample.spec.completions, sample.spec.suspend) == (3, 3, None)
    container = sample.spec.template.spec.containers[0]
    assert container.model_extra["command"] == ["/bin/sh"] and container.model_extra["args"] == ["-c", "sleep 60"]
    assert sample.to_wire()["metadata"] == {"namespace": "default", "labels": {"kueue.x-k8s.io/queue-name": "user-queue"}, "generateName": "sample-job-"}


def test_the_quick_start_job_is_named():
    (loaded,) = load_manifests([str(PUBLISHED / "quick-start-job.yaml")])
    assert loaded.obj.key == "default/sample-job"


# --- what the apiserver refuses --------------------------------------------------------------------------


def _with(data: dict, path: str, value) -> dict:
    out = copy.deepcopy(data)
    *parents, last = path.split(".")
    node = out
    for p in parents:
        node = node.setdefault(p, {})
    node[last] = value
    return out


LABEL_63 = "must be no more than 63 characters"


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        pytest.param(
            job("a" * 64),
            f'f.yaml: document 1 (Job {"a" * 64}): spec.template.labels: Invalid value: "{"a" * 64}": {LABEL_63}',
            id="a-name-over-63-characters-fails-as-the-pods-job-name-label",
        ),
        pytest.param(
            _with(job(None), "metadata", {}),
            "f.yaml: document 1 (Job ?): metadata.name: Required value: name or generateName is required",
            id="neither-name-nor-generate-name-is-refused",
        ),
        pytest.param(
            _with(job(None), "metadata", {"generateName": "Train-"}),
            'f.yaml: document 1 (Job Train-): metadata.generateName: Invalid value: "Train-": a lowercase RFC 1123 subdomain',
            id="a-generate-name-that-is-no-subdomain-prefix-is-refused",
        ),
        pytest.param(
            job(parallelism=-1),
            'f.yaml: document 1 (Job train): spec.parallelism: Invalid value: -1: must be greater than or equal to 0',
            id="a-negative-parallelism-is-refused-in-the-apiservers-words",
        ),
        pytest.param(
            job(completions=2**31),
            "f.yaml: document 1 (Job train): spec.completions: Invalid value: 2147483648: must be less than or equal to 2147483647",
            id="completions-past-int32-are-refused",
        ),
        pytest.param(
            job(completionMode="Sparse"),
            'f.yaml: document 1 (Job train): spec.completionMode: Unsupported value: "Sparse": supported values: "NonIndexed", "Indexed"',
            id="an-unknown-completion-mode-is-refused",
        ),
        pytest.param(
            job(completionMode="Indexed"),
            "f.yaml: document 1 (Job train): spec.completions: Required value: when completion mode is Indexed",
            id="an-indexed-job-needs-completions",
        ),
        pytest.param(
            job(backoffLimitPerIndex=1),
            "f.yaml: document 1 (Job train): spec.backoffLimitPerIndex: Invalid value: 1: requires indexed completion mode",
            id="a-backoff-limit-per-index-needs-an-indexed-job",
        ),
        pytest.param(
            job(managedBy="kueue"),
            'f.yaml: document 1 (Job train): spec.managedBy: Invalid value: "kueue": must be a domain-prefixed path (such as "acme.io/foo")',
            id="managed-by-must-be-a-domain-prefixed-path",
        ),
        pytest.param(
            job(managedBy="example.com/" + "a" * 60),
            "f.yaml: document 1 (Job train): spec.managedBy: Too long: may not be more than 63 bytes",
            id="managed-by-is-at-most-63-characters",
        ),
        pytest.param(
            job(template={"spec": {"containers": [CONTAINER]}}),
            'f.yaml: document 1 (Job train): spec.template.spec.restartPolicy: Required value: valid values: "OnFailure", "Never"',
            id="a-pod-template-that-would-restart-always-is-refused",
        ),
        pytest.param(
            job(template={"spec": {"containers": [CONTAINER], "restartPolicy": "Sometimes"}}),
            'f.yaml: document 1 (Job train): spec.template.spec.restartPolicy: Unsupported value: "Sometimes": supported values: "OnFailure", "Never"',
            id="an-unknown-restart-policy-is-refused",
        ),
        pytest.param(
            job("a" * 62, completionMode="Indexed", completions=10),
            f'f.yaml: document 1 (Job {"a" * 62}): metadata.name: Invalid value: "{"a" * 62}": will not able to create pod '
            f"with invalid DNS label: {'a' * 62}-9",
            id="an-indexed-job-whose-last-pod-hostname-is-no-dns-label-is-refused",
        ),
        pytest.param(
            job(suspended=True),
            'f.yaml: document 1 (Job train): spec.suspended: unknown field "spec.suspended"',
            id="an-unknown-spec-field-is-refused",
        ),
    ],
)
def test_a_job_the_apiserver_refuses_is_refused_with_its_words(data, expected):
    assert refusal(data).startswith(expected)


def test_a_63_character_name_is_taken():
    obj, _ = parse_manifest(job("a" * 63))
    assert obj.metadata.name == "a" * 63


def test_a_jobs_status_given_on_input_is_dropped_as_the_apiserver_resets_it():
    obj, _ = parse_manifest({**job(), "status": {"active": 3, "startTime": "2026-01-01T00:00:00Z"}})
    assert obj.status.active is None and obj.status.start_time is None


@pytest.mark.parametrize(
    ("spec", "labels", "expected_spec", "expected_labels"),
    [
        pytest.param(
            {},
            None,
            {"parallelism": 1, "completions": 1, "backoffLimit": 6, "completionMode": "NonIndexed", "suspend": False,
             "podReplacementPolicy": "TerminatingOrFailed", "manualSelector": False},
            None,
            id="a-job-giving-neither-parallelism-nor-completions-runs-one-pod-once",
        ),
        pytest.param(
            {"completions": 5},
            None,
            {"parallelism": 1, "completions": 5},
            None,
            id="completions-alone-run-one-pod-at-a-time",
        ),
        pytest.param(
            {"parallelism": 4},
            None,
            {"parallelism": 4},
            None,
            id="parallelism-alone-leaves-completions-unset",
        ),
        pytest.param(
            {"completionMode": "Indexed", "completions": 3, "backoffLimitPerIndex": 1},
            None,
            {"backoffLimit": 2147483647},
            None,
            id="a-backoff-limit-per-index-makes-the-job-backoff-limit-unbounded",
        ),
        pytest.param(
            {"suspend": True},
            {"app": "x"},
            {"suspend": True},
            {"app": "x"},
            id="the-templates-labels-become-the-jobs-when-it-has-none",
        ),
    ],
)
def test_the_apiserver_defaults_a_job_when_it_is_created(spec, labels, expected_spec, expected_labels):
    data = job(**spec)
    if labels is not None:
        data["spec"]["template"]["metadata"] = {"labels": labels}
    obj, _ = parse_manifest(data)
    defaulted = with_defaults(obj).to_wire()
    assert {k: defaulted["spec"].get(k) for k in expected_spec} == expected_spec
    assert defaulted["metadata"].get("labels") == expected_labels


def test_a_jobs_own_labels_are_not_replaced_by_the_templates():
    data = _with(job(), "metadata.labels", {"kueue.x-k8s.io/queue-name": "lq"})
    data["spec"]["template"]["metadata"] = {"labels": {"app": "x"}}
    obj, _ = parse_manifest(data)
    assert with_defaults(obj).metadata.labels == {"kueue.x-k8s.io/queue-name": "lq"}


def test_a_generated_name_is_the_prefix_cut_to_58_and_five_random_characters():
    picks = iter("bcdfg")
    name = generated_name("x" * 70, lambda alphabet: next(picks) if alphabet == GENERATED_NAME_ALPHABET else "?")
    assert name == "x" * 58 + "bcdfg"


# --- PriorityClass -------------------------------------------------------------------------------------


def test_a_priority_class_parses_with_its_defaults():
    obj, _ = parse_manifest(priority_class(globalDefault=True, description="for prod"))
    assert isinstance(obj, PriorityClass)
    assert obj.to_wire() == {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": "high"},
        "value": 1000,
        "globalDefault": True,
        "description": "for prod",
        "preemptionPolicy": "PreemptLowerPriority",
    }


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        pytest.param(
            priority_class(value=1_000_000_001),
            "f.yaml: document 1 (PriorityClass high): value: Forbidden: maximum allowed value of a user defined priority is 1000000000",
            id="a-user-class-is-worth-at-most-a-billion",
        ),
        pytest.param(
            priority_class("system-high"),
            "f.yaml: document 1 (PriorityClass system-high): metadata.name: Forbidden: priority class names with 'system-' "
            "prefix are reserved for system use only. error: system-high is not a known system priority class",
            id="a-system-prefixed-name-is-reserved",
        ),
        pytest.param(
            priority_class("system-cluster-critical", 5),
            "f.yaml: document 1 (PriorityClass system-cluster-critical): metadata.name: Forbidden: priority class names with "
            "'system-' prefix are reserved for system use only. error: value of system-cluster-critical PriorityClass must be 2000000000",
            id="a-system-class-keeps-its-value",
        ),
        pytest.param(
            priority_class(preemptionPolicy="Always"),
            'f.yaml: document 1 (PriorityClass high): preemptionPolicy: Unsupported value: "Always": supported values: "Never", "PreemptLowerPriority"',
            id="an-unknown-preemption-policy-is-refused",
        ),
        pytest.param(
            {k: v for k, v in priority_class().items() if k != "value"},
            "f.yaml: document 1 (PriorityClass high): value: Required value",
            id="a-class-without-a-value-is-refused",
        ),
    ],
)
def test_a_priority_class_the_apiserver_refuses_is_refused(data, expected):
    assert refusal(data) == expected


def test_a_system_class_as_the_apiserver_has_it_is_taken():
    obj, _ = parse_manifest(priority_class("system-cluster-critical", 2_000_000_000))
    assert obj.value == 2_000_000_000


# --- registration ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("api_version", "kind", "model"),
    [
        pytest.param("batch/v1", "Job", Job, id="batch-v1-job-is-a-job"),
        pytest.param("scheduling.k8s.io/v1", "PriorityClass", PriorityClass, id="scheduling-v1-priority-class-is-a-priority-class"),
        pytest.param("kueue.x-k8s.io/v1beta2", "Job", None, id="there-is-no-kueue-job"),
        pytest.param("batch/v2", "Job", None, id="there-is-no-batch-v2-job"),
        pytest.param("kueue.x-k8s.io/v1beta2", "PriorityClass", None, id="a-kueue-priority-class-is-a-workload-priority-class"),
    ],
)
def test_kinds_are_told_apart_by_api_version(api_version, kind, model):
    assert model_for(api_version, kind) is model


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        pytest.param("pc", "PriorityClass", id="pc-is-kubectls-short-name"),
        pytest.param("priorityclasses.scheduling.k8s.io", "PriorityClass", id="the-plural-with-its-group"),
        pytest.param("priorityclass.v1.scheduling.k8s.io", "PriorityClass", id="the-kind-with-version-and-group"),
    ],
)
def test_priority_classes_are_named_as_kubectl_names_them(name, kind):
    assert kinds.kind_of(name) == kind


def test_jobs_and_priority_classes_print_with_their_groups():
    assert kinds.qualified("Job", "default/train") == "job.batch/default/train"
    assert kinds.qualified("PriorityClass", "high") == "priorityclass.scheduling.k8s.io/high"
    assert "Job" in kinds.NAMESPACED and "PriorityClass" not in kinds.NAMESPACED


# --- PriorityClasses in the catalog ------------------------------------------------------------------


def test_the_catalog_holds_priority_classes_as_kubectl_apply_does():
    n = iter(range(1, 100))
    state = CatalogState()
    now = datetime(2026, 1, 1, tzinfo=UTC)
    first, _ = parse_manifest(priority_class(globalDefault=True))
    changed, _ = parse_manifest(priority_class(value=2000, globalDefault=True))
    outcomes = [catalog.apply(state, [obj], lambda: f"uid-{next(n)}", now)[0].action for obj in (first, first, changed)]
    assert outcomes == ["created", "unchanged", "configured"]
    # The catalog's state survives a round trip (continue-as-new) with the class in it.
    again = CatalogState.model_validate(state.to_wire())
    assert again.get("PriorityClass", "high").value == 2000


def test_priority_classes_print_kubectls_columns():
    obj, _ = parse_manifest(priority_class(globalDefault=True))
    headers, row = printing.columns("PriorityClass", [obj.to_wire()])
    assert headers == ["NAME", "VALUE", "GLOBAL-DEFAULT", "AGE", "PREEMPTIONPOLICY"]
    assert row(obj.to_wire()) == ["high", "1000", "true", "<unknown>", "PreemptLowerPriority"]
