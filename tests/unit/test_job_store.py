"""The apiserver's rules for a stored batch/v1 Job (admitflow.jobs.store), JSON merge patches
(admitflow.api.merge_patch) and the Job controller in miniature (admitflow.jobs.job_controller)."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest
import yaml

from admitflow.api import merge_patch, parse_manifest
from admitflow.api.job import Job
from admitflow.jobs import job_controller, store
from tests.unit.test_job_manifests import PUBLISHED

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
UID = "0f5c3d1e-7a2b-4c9d-8e6f-1a2b3c4d5e6f"


def sample_job(**spec) -> Job:
    doc = yaml.safe_load((PUBLISHED / "quick-start-job.yaml").read_text())
    doc["spec"].update(spec)
    job, _ = parse_manifest(doc)
    return store.with_suspension(store.created(job, UID, NOW), NOW)


# --- merge patches -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "patch", "result"),
    [
        pytest.param({"a": 1}, {"a": 2}, {"a": 2}, id="a-value-replaces-a-value"),
        pytest.param({"a": 1, "b": 2}, {"a": None}, {"b": 2}, id="null-removes-a-key"),
        pytest.param({"a": {"b": 1, "c": 2}}, {"a": {"b": 3}}, {"a": {"b": 3, "c": 2}}, id="objects-merge-key-by-key"),
        pytest.param({"a": [1, 2]}, {"a": [3]}, {"a": [3]}, id="a-list-is-replaced-whole"),
        pytest.param({"a": 1}, {"b": {"c": None}}, {"a": 1, "b": {}}, id="a-null-inside-a-new-object-leaves-it-empty"),
    ],
)
def test_merge_patch_applies_as_rfc_7386_says(target, patch, result):
    assert merge_patch.apply(target, patch) == result


@pytest.mark.parametrize(
    ("before", "after"),
    [
        pytest.param({"a": 1, "b": {"c": 1, "d": [1]}}, {"a": 1, "b": {"c": 2, "d": [1, 2]}}, id="changed-values-and-lists"),
        pytest.param({"a": 1, "b": {"c": 1}}, {"b": {}}, id="dropped-keys"),
        pytest.param({}, {"a": {"b": {"c": 1}}}, id="new-nested-objects"),
    ],
)
def test_a_diff_applied_to_its_base_gives_the_target(before, after):
    assert merge_patch.apply(before, merge_patch.diff(before, after)) == after


def test_a_diff_holds_only_what_changed():
    assert merge_patch.diff({"a": 1, "b": {"c": 1, "d": 2}}, {"a": 1, "b": {"c": 1, "d": 3}}) == {"b": {"d": 3}}


# --- create --------------------------------------------------------------------------------------


def test_a_created_job_has_the_apiservers_name_uid_defaults_pod_labels_and_selector():
    doc = yaml.safe_load((PUBLISHED / "sample-job.yaml").read_text())
    job, _ = parse_manifest(doc)
    stored = store.created(job, UID, NOW, random.Random(7).choice)
    name = stored.metadata.name
    assert name.startswith("sample-job-") and len(name) == 16
    assert (stored.metadata.uid, stored.metadata.resource_version, stored.metadata.generation) == (UID, "1", 1)
    assert stored.spec.backoff_limit == 6 and stored.spec.completion_mode == "NonIndexed" and stored.spec.suspend is False
    assert stored.spec.template.metadata.labels == {
        "controller-uid": UID, "batch.kubernetes.io/controller-uid": UID, "job-name": name, "batch.kubernetes.io/job-name": name,
    }
    assert stored.spec.selector.match_labels == {"batch.kubernetes.io/controller-uid": UID}


def test_a_suspended_job_has_the_job_controllers_suspended_condition_and_its_resumption_a_start_time():
    job = sample_job(suspend=True)
    assert [(c.type, c.status, c.reason) for c in job.status.conditions] == [("Suspended", "True", "JobSuspended")]
    resumed = store.with_suspension(store.patched(job, {"spec": {"suspend": False}}), NOW)
    assert [(c.type, c.status, c.reason) for c in resumed.status.conditions] == [("Suspended", "False", "JobResumed")]
    assert resumed.status.start_time == NOW


# --- patches and the update rules ----------------------------------------------------------------


def test_a_patch_with_a_stale_resource_version_is_a_conflict_and_a_current_one_bumps_it():
    job = sample_job(suspend=True)
    patched = store.patched(job, merge_patch.with_resource_version({"metadata": {"labels": {"a": "b"}}}, "1"))
    assert patched.metadata.resource_version == "2"
    with pytest.raises(store.JobConflict, match=r'Operation cannot be fulfilled on jobs.batch "sample-job": the object has been modified'):
        store.patched(patched, merge_patch.with_resource_version({"metadata": {"labels": {"a": "c"}}}, "1"))


def test_a_patch_that_changes_nothing_keeps_the_resource_version():
    job = sample_job(suspend=True)
    assert store.patched(job, {"spec": {"suspend": True}}) is job


def test_the_main_resource_ignores_status_and_the_status_subresource_everything_else():
    job = sample_job(suspend=True)
    main = store.patched(job, {"spec": {"parallelism": 2}, "status": {"active": 5}})
    assert (main.spec.parallelism, main.status.active, main.metadata.generation) == (2, None, 2)
    status = store.patched(job, {"spec": {"parallelism": 2}, "status": {"active": 5}}, "status")
    assert (status.spec.parallelism, status.status.active, status.metadata.generation) == (3, 5, 1)


def _running(job: Job) -> Job:
    return store.with_suspension(store.patched(job, {"spec": {"suspend": False}}), NOW)


TEMPLATE_CHANGES = {
    "nodeSelector": {"spec": {"template": {"spec": {"nodeSelector": {"pool": "a"}}}}},
    "tolerations": {"spec": {"template": {"spec": {"tolerations": [{"key": "k", "operator": "Exists"}]}}}},
    "labels": {"spec": {"template": {"metadata": {"labels": {"kueue.x-k8s.io/podset": "main"}}}}},
    "annotations": {"spec": {"template": {"metadata": {"annotations": {"a": "b"}}}}},
    "schedulingGates": {"spec": {"template": {"spec": {"schedulingGates": [{"name": "g"}]}}}},
}


@pytest.mark.parametrize(
    ("state", "change", "refused"),
    [
        *(pytest.param("suspended", c, False, id=f"a-suspended-job-never-started-may-change-its-template-{c}") for c in TEMPLATE_CHANGES),
        *(pytest.param("running", c, True, id=f"a-running-job-may-not-change-its-template-{c}") for c in TEMPLATE_CHANGES),
        *(pytest.param("started-then-suspended", c, True, id=f"a-suspended-job-with-a-start-time-may-not-change-its-template-{c}")
          for c in TEMPLATE_CHANGES),
    ],
)
def test_the_pod_template_changes_only_while_the_job_is_suspended_without_a_start_time(state, change, refused):
    job = sample_job(suspend=True)
    if state != "suspended":
        job = _running(job)
    if state == "started-then-suspended":
        job = store.patched(job, {"spec": {"suspend": True}})
    if refused:
        with pytest.raises(store.JobInvalid, match=r"spec.template: Invalid value: \"\[omitted\]\": field is immutable"):
            store.patched(job, TEMPLATE_CHANGES[change])
    else:
        assert store.patched(job, TEMPLATE_CHANGES[change]).metadata.resource_version == "2"


@pytest.mark.parametrize(
    "patch",
    [
        pytest.param({"spec": {"template": {"spec": {"containers": [{"name": "x", "image": "y"}]}}}}, id="containers-never-change"),
        pytest.param({"spec": {"completions": 4}}, id="completions-never-change"),
        pytest.param({"spec": {"completionMode": "Indexed"}}, id="the-completion-mode-never-changes"),
        pytest.param({"spec": {"managedBy": "example.com/runner"}}, id="managed-by-never-changes"),
        pytest.param({"spec": {"selector": {"matchLabels": {"a": "b"}}}}, id="the-selector-never-changes"),
    ],
)
def test_what_the_schema_allows_but_an_update_may_never_change_is_refused(patch):
    with pytest.raises(store.JobInvalid, match="field is immutable"):
        store.patched(sample_job(suspend=True), patch)


def test_a_patch_the_schema_refuses_is_invalid():
    with pytest.raises(store.JobInvalid, match=r"spec.parallelism"):
        store.patched(sample_job(suspend=True), {"spec": {"parallelism": -1}})


# --- the Job controller in miniature -------------------------------------------------------------


def _with_status(job: Job, **status) -> Job:
    return job.model_copy(update={"status": job.status.model_copy(update=status)})


@pytest.mark.parametrize(
    ("spec", "status", "wanted"),
    [
        pytest.param({"parallelism": 3, "completions": 3}, {}, 3, id="parallelism-pods-start-at-once"),
        pytest.param({"parallelism": 3, "completions": 3}, {"succeeded": 2}, 1, id="no-more-than-the-completions-left"),
        pytest.param({"parallelism": 3, "completions": 3}, {"active": 2}, 1, id="active-pods-count"),
        pytest.param({"parallelism": 2, "completions": None}, {"succeeded": 1}, 0, id="without-completions-one-success-starts-no-more"),
        pytest.param({"parallelism": 3, "completions": 3, "backoffLimit": 1}, {"failed": 2}, 0, id="none-past-the-backoff-limit"),
        pytest.param({"parallelism": 3, "completions": 3, "suspend": True}, {}, 0, id="none-while-suspended"),
    ],
)
def test_the_pods_a_resumed_job_needs(spec, status, wanted):
    job = _with_status(sample_job(**{"suspend": False, **spec}), **status)
    assert job_controller.pods_wanted(job) == wanted


@pytest.mark.parametrize(
    ("status", "ending"),
    [
        pytest.param({"succeeded": 3}, ("Complete", "CompletionsReached"), id="completions-reached-complete-it"),
        pytest.param({"succeeded": 2, "active": 1}, None, id="a-job-with-completions-left-runs-on"),
        pytest.param({"failed": 7}, ("Failed", "BackoffLimitExceeded"), id="failures-past-the-limit-fail-it"),
        pytest.param({"failed": 7, "active": 1}, None, id="a-failed-job-ends-once-no-pod-is-active"),
    ],
)
def test_when_a_job_ends(status, ending):
    job = _with_status(sample_job(suspend=False), **status)
    condition = job_controller.ending(job, NOW)
    assert (condition.type, condition.reason) == ending if ending else condition is None


@pytest.mark.parametrize(
    ("text", "indexes"),
    [pytest.param("", set(), id="none"), pytest.param("1,3-5", {1, 3, 4, 5}, id="singles-and-runs"), pytest.param("0-2", {0, 1, 2}, id="one-run")],
)
def test_completed_indexes_read_and_write_as_the_job_controller_writes_them(text, indexes):
    assert job_controller.parse_indexes(text) == indexes
    assert job_controller.format_indexes(indexes) == text
