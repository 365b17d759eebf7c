"""The fake API server's batch/v1 Jobs and events.k8s.io/v1 Events (tests/k8s_fake.py) answer as a
real API server does, so that a client that passes against it sends only bodies a real one takes:
a write whose result Kubernetes 1.37's schema refuses, or that breaks a Job's update rules, is
answered 422 and stored nowhere; a stale resourceVersion is 409; the stand-in Job controller
answers each write with its own."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.k8s_fake import EVENTS, JOBS, FakeApiServer

PUBLISHED = Path(__file__).resolve().parents[1] / "data" / "kueue-examples" / "published"
JOBS_PATH = "/apis/batch/v1/namespaces/default/jobs"
MERGE = "application/merge-patch+json"


@pytest.fixture
def fake() -> Iterator[FakeApiServer]:
    server = FakeApiServer().start()
    yield server
    server.stop()


def send(fake: FakeApiServer, method: str, path: str, body: Any = None, content_type: str = "application/json") -> tuple[int, dict]:
    request = urllib.request.Request(fake.url + path, method=method, data=json.dumps(body).encode() if body is not None else None,
                                     headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def sample_job() -> dict:
    return yaml.safe_load((PUBLISHED / "sample-job.yaml").read_text())


def test_a_job_is_created_as_the_apiserver_creates_it_and_the_job_controller_answers(fake):
    status, created = send(fake, "POST", JOBS_PATH, sample_job())
    assert status == 201
    name = created["metadata"]["name"]
    assert name.startswith("sample-job-") and len(name) == len("sample-job-") + 5
    assert created["spec"]["template"]["metadata"]["labels"]["batch.kubernetes.io/job-name"] == name
    assert created["spec"]["backoffLimit"] == 6 and created["spec"]["suspend"] is False
    stored = fake.get(JOBS, "default", name)
    assert "startTime" in stored["status"], "the Job controller started the unsuspended Job"
    assert int(stored["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"]), "in a write of its own"


def test_a_patch_naming_a_stale_resource_version_conflicts(fake):
    created = fake.create_job({**sample_job(), "spec": {**sample_job()["spec"], "suspend": True}})
    name = created["metadata"]["name"]
    status, body = send(fake, "PATCH", f"{JOBS_PATH}/{name}", {"metadata": {"resourceVersion": "1"}, "spec": {"suspend": False}}, MERGE)
    assert (status, body["reason"]) == (409, "Conflict")
    assert fake.get(JOBS, "default", name)["spec"]["suspend"] is True


@pytest.mark.parametrize(
    ("suspended", "patch", "subresource", "error"),
    [
        pytest.param(True, {"spec": {"suspend": "false"}}, "", "spec.suspend in body must be of type boolean",
                     id="a-string-where-the-schema-wants-a-boolean"),
        pytest.param(True, {"spec": {"template": {"spec": {"nodeSelector": {"pool": 1}}}}}, "", "nodeSelector",
                     id="a-number-in-a-string-map"),
        pytest.param(True, {"spec": {"template": {"spec": {"tolerations": [{"key": "a", "bogus": 1}]}}}}, "", "bogus",
                     id="a-field-a-toleration-does-not-have"),
        pytest.param(True, {"spec": {"template": {"metadata": {"labels": {"a": "b c"}}}}}, "", "labels",
                     id="a-label-value-with-a-space"),
        pytest.param(False, {"status": {"startTime": "yesterday"}}, "status", "startTime", id="a-time-that-is-no-time"),
        pytest.param(False, {"spec": {"template": {"spec": {"nodeSelector": {"pool": "a"}}}}}, "",
                     "spec.template: Invalid value: \"[omitted]\": field is immutable", id="a-template-change-while-the-job-has-started"),
        pytest.param(True, {"spec": {"completions": 4}}, "", "spec.completions: Invalid value: 4: field is immutable",
                     id="a-change-of-completions"),
    ],
)
def test_a_deliberately_broken_body_is_refused_with_422_and_changes_nothing(fake, suspended, patch, subresource, error):
    # Unsuspended, the Job controller has given it a startTime: its pod template is fixed then.
    created = fake.create_job({**sample_job(), "spec": {**sample_job()["spec"], "suspend": suspended}})
    name = created["metadata"]["name"]
    before = fake.get(JOBS, "default", name)
    path = f"{JOBS_PATH}/{name}" + (f"/{subresource}" if subresource else "")
    status, body = send(fake, "PATCH", path, patch, MERGE)
    assert (status, body["reason"]) == (422, "Invalid")
    assert error in body["message"]
    assert fake.get(JOBS, "default", name) == before
    assert [r.status for r in fake.refused()] == [422]


def test_the_status_subresource_changes_the_status_alone(fake):
    created = fake.create_job({**sample_job(), "spec": {**sample_job()["spec"], "suspend": True}})
    name = created["metadata"]["name"]
    status, body = send(fake, "PATCH", f"{JOBS_PATH}/{name}/status", {"spec": {"suspend": False}, "status": {"active": 2}}, MERGE)
    assert status == 200 and body["spec"]["suspend"] is True and body["status"]["active"] == 2


def event(**changes) -> dict:
    body = {
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": "sample-job.1", "namespace": "default"},
        "eventTime": "2026-12-01T12:00:00.000000Z", "reportingController": "admitflow.io/kube-runner",
        "reportingInstance": "host-1", "action": "Stopped", "reason": "Stopped", "type": "Normal", "note": "evicted",
        "regarding": {"apiVersion": "batch/v1", "kind": "Job", "namespace": "default", "name": "sample-job"},
    }
    body.update(changes)
    return body


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        pytest.param({}, None, id="a-kueue-shaped-event-is-stored"),
        pytest.param({"reportingController": ""}, "reportingController: Required value", id="without-a-reporting-controller"),
        pytest.param({"note": "x" * 1025}, "note: Too long", id="with-a-note-over-1024-bytes"),
        pytest.param({"type": "Info"}, "type: Invalid value", id="of-a-type-neither-normal-nor-warning"),
        pytest.param({"count": 1}, "is invalid", id="with-a-field-events-k8s-io-v1-does-not-have"),
        pytest.param({"eventTime": "noon"}, "eventTime", id="with-an-event-time-that-is-no-time"),
    ],
)
def test_an_event_is_checked_as_the_apiserver_checks_it(fake, changes, error):
    status, body = send(fake, "POST", "/apis/events.k8s.io/v1/namespaces/default/events", event(**changes))
    if error is None:
        assert status == 201 and fake.events_about("sample-job") == [("Stopped", "evicted")]
    else:
        assert status == 422 and error in body["message"], body["message"]
        assert fake.names(EVENTS) == []


def test_the_kube_runners_rbac_manifest_is_valid_against_the_schema():
    from tests.k8s_schema import check

    docs = list(yaml.safe_load_all((Path(__file__).resolve().parents[2] / "deploy" / "kube-runner-rbac.yaml").read_text()))
    assert [d["kind"] for d in docs] == ["ServiceAccount", "ClusterRole", "ClusterRoleBinding"]
    for doc in docs:
        check(doc)
