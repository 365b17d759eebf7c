"""The `kubernetes` ProvisioningRequest backend against a local HTTP fake of the API server
(tests/k8s_fake.py): the exact requests it sends, what it makes of the answers, and its one shared
watch (list, watch from the list's resourceVersion, list again on 410 Gone, watch again when a watch
ends or breaks) serving every waiting request, 500 of them at once.

No API server or cluster autoscaler runs here; docs/kubernetes-backend.md says what that leaves
unverified.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from kubernetes.aio import client
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from admitflow.activities.provisioning.kubernetes import (
    REQUEST_ANNOTATION,
    KubernetesApiError,
    KubernetesBackend,
    KubernetesCredentialsError,
    load_configuration,
)
from admitflow.api.provisioning_request import (
    MANAGED_LABEL,
    PROVISIONED,
    WORKLOAD_ANNOTATION,
    PodTemplate,
    ProvisioningRequest,
)
from tests.integration.test_admission import eventually
from tests.k8s_fake import PODTEMPLATES, PROVISIONING_REQUESTS, FakeApiServer

NS = "team-a"
PR = "wl-prov-1"
CLASS = "check-capacity.autoscaling.x-k8s.io"
TEMPLATES_PATH = f"/api/v1/namespaces/{NS}/podtemplates"
PRS_PATH = f"/apis/autoscaling.x-k8s.io/v1/namespaces/{NS}/provisioningrequests"
ALL_PRS_PATH = "/apis/autoscaling.x-k8s.io/v1/provisioningrequests"
OWNER_KEYS = ("apiVersion", "kind", "name", "uid", "controller", "blockOwnerDeletion")


def request(name: str = PR, pod_sets: tuple[tuple[str, int], ...] = (("main", 1), ("workers", 4))) -> ProvisioningRequest:
    return ProvisioningRequest.model_validate(
        {
            "metadata": {
                "name": name,
                "namespace": NS,
                "labels": {MANAGED_LABEL: "true"},
                "annotations": {WORKLOAD_ANNOTATION: f"{NS}/wl"},
            },
            "spec": {
                "provisioningClassName": CLASS,
                "parameters": {"noRetry": "true"},
                "podSets": [{"podTemplateRef": {"name": f"ppt-{name}-{ps}"}, "count": n} for ps, n in pod_sets],
            },
        }
    )


def template(request_name: str, pod_set: str, cpu: str = "2") -> PodTemplate:
    return PodTemplate.model_validate(
        {
            "metadata": {"name": f"ppt-{request_name}-{pod_set}", "namespace": NS, "labels": {MANAGED_LABEL: "true"}},
            "template": {
                "spec": {
                    "nodeSelector": {"cloud.example.com/pool": "gpu"},
                    "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}],
                }
            },
        }
    )


def templates(request_name: str = PR) -> list[PodTemplate]:
    return [template(request_name, "main"), template(request_name, "workers", cpu="1")]


@pytest.fixture
def fake() -> Iterator[FakeApiServer]:
    server = FakeApiServer().start()
    yield server
    server.stop()


@pytest.fixture
async def backend(fake: FakeApiServer) -> AsyncIterator[KubernetesBackend]:
    b = KubernetesBackend(client.Configuration(host=fake.url), heartbeat_seconds=0.1)
    yield b
    await b.close()


def later(seconds: float, fn, *args) -> threading.Timer:
    """Do something to the fake from another thread, as the cluster autoscaler would."""
    timer = threading.Timer(seconds, fn, args)
    timer.start()
    return timer


# --- create ------------------------------------------------------------------------------------


async def test_create_makes_the_templates_then_the_request_then_hands_the_templates_over(
    fake: FakeApiServer, backend: KubernetesBackend
) -> None:
    stored = await backend.create(request(), templates(), "provisioning/team-a/wl/prov/1")

    sent = [(r.method, r.path) for r in fake.requests]
    assert sent == [
        ("POST", TEMPLATES_PATH),
        ("POST", TEMPLATES_PATH),
        ("POST", PRS_PATH),
        ("PATCH", f"{TEMPLATES_PATH}/ppt-{PR}-main"),
        ("PATCH", f"{TEMPLATES_PATH}/ppt-{PR}-workers"),
    ]
    main, workers, pr, patch_main, patch_workers = fake.requests
    assert main.content_type == "application/json"
    assert main.body == {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": {
            "name": f"ppt-{PR}-main",
            "namespace": NS,
            "labels": {MANAGED_LABEL: "true"},
            "annotations": {REQUEST_ANNOTATION: PR},
        },
        "template": {
            "spec": {
                "nodeSelector": {"cloud.example.com/pool": "gpu"},
                "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}}],
            }
        },
    }
    assert workers.body["metadata"]["name"] == f"ppt-{PR}-workers"
    assert workers.body["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "1"
    assert pr.content_type == "application/json"
    assert pr.body == {
        "apiVersion": "autoscaling.x-k8s.io/v1",
        "kind": "ProvisioningRequest",
        "metadata": {
            "name": PR,
            "namespace": NS,
            "labels": {MANAGED_LABEL: "true"},
            "annotations": {WORKLOAD_ANNOTATION: f"{NS}/wl"},
        },
        "spec": {
            "provisioningClassName": CLASS,
            "parameters": {"noRetry": "true"},
            "podSets": [
                {"podTemplateRef": {"name": f"ppt-{PR}-main"}, "count": 1},
                {"podTemplateRef": {"name": f"ppt-{PR}-workers"}, "count": 4},
            ],
        },
    }

    uid = fake.get(PROVISIONING_REQUESTS, NS, PR)["metadata"]["uid"]
    owner = {
        "apiVersion": "autoscaling.x-k8s.io/v1",
        "kind": "ProvisioningRequest",
        "name": PR,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }
    for patch, created in ((patch_main, f"ppt-{PR}-main"), (patch_workers, f"ppt-{PR}-workers")):
        assert patch.content_type == "application/merge-patch+json"
        # The resourceVersion the template was created at: a precondition, 409 if it changed.
        rv = next(e for e in fake._events if e[3] == "ADDED" and e[4]["metadata"]["name"] == created)[0]
        assert patch.body == {"metadata": {"resourceVersion": str(rv), "ownerReferences": [owner]}}
    assert fake.get(PODTEMPLATES, NS, f"ppt-{PR}-workers")["metadata"]["ownerReferences"] == [owner]
    # The request itself has no owner: a Workload is no Kubernetes object here.
    assert "ownerReferences" not in fake.get(PROVISIONING_REQUESTS, NS, PR)["metadata"]

    # What is returned is the stored object, parsed although the server added managedFields.
    assert stored.metadata.uid == uid
    assert stored.metadata.resource_version == fake.get(PROVISIONING_REQUESTS, NS, PR)["metadata"]["resourceVersion"]
    assert stored.spec == request().spec
    assert stored.status.conditions == []


async def test_create_keeps_objects_that_already_exist_and_only_hands_over_once(
    fake: FakeApiServer, backend: KubernetesBackend
) -> None:
    other_owner = {"apiVersion": "v1", "kind": "ConfigMap", "name": "keep-me", "uid": "u-cm"}
    fake.put(
        PODTEMPLATES,
        {
            "apiVersion": "v1",
            "kind": "PodTemplate",
            "metadata": {"name": f"ppt-{PR}-main", "namespace": NS, "labels": {MANAGED_LABEL: "true"}, "ownerReferences": [other_owner]},
            "template": {"spec": {"containers": [{"name": "old", "image": "old"}]}},
        },
    )
    existing = fake.put(PROVISIONING_REQUESTS, {**request().to_wire(), "status": {}})
    fake.set_condition(NS, PR, PROVISIONED, message="found")
    # A field newer than our model, as a newer CRD or a vendor's autoscaler might write.
    fake.get(PROVISIONING_REQUESTS, NS, PR)
    with fake._lock:
        fake._objects[(PROVISIONING_REQUESTS, NS, PR)]["status"]["futureField"] = {"x": 1}

    stored = await backend.create(request(), templates(), "w")

    assert [(r.method, r.path) for r in fake.requests] == [
        ("POST", TEMPLATES_PATH),  # 409
        ("GET", f"{TEMPLATES_PATH}/ppt-{PR}-main"),
        ("POST", TEMPLATES_PATH),  # workers: created
        ("POST", PRS_PATH),  # 409
        ("GET", f"{PRS_PATH}/{PR}"),
        ("PATCH", f"{TEMPLATES_PATH}/ppt-{PR}-main"),
        ("PATCH", f"{TEMPLATES_PATH}/ppt-{PR}-workers"),
    ]
    assert stored.metadata.uid == existing["metadata"]["uid"]
    assert stored.is_true(PROVISIONED)
    assert stored.condition(PROVISIONED).message == "found"
    kept = fake.get(PODTEMPLATES, NS, f"ppt-{PR}-main")
    assert kept["template"]["spec"]["containers"][0]["name"] == "old"
    refs = kept["metadata"]["ownerReferences"]
    assert refs[0] == other_owner
    assert {k: refs[1][k] for k in OWNER_KEYS} == {
        "apiVersion": "autoscaling.x-k8s.io/v1",
        "kind": "ProvisioningRequest",
        "name": PR,
        "uid": existing["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }

    # A retried activity: everything exists and is handed over already, so nothing is patched.
    fake.requests.clear()
    again = await backend.create(request(), templates(), "w")
    assert [r.method for r in fake.requests] == ["POST", "GET", "POST", "GET", "POST", "GET"]
    assert again.metadata.resource_version == stored.metadata.resource_version


async def test_an_owner_added_to_a_template_before_the_handover_is_kept(fake: FakeApiServer, backend: KubernetesBackend) -> None:
    """Someone adds an owner between the template's creation and its handover: the merge patch,
    made with the resourceVersion of the creation, gets 409 Conflict; the template is read again
    and patched with both owners."""
    added = {"apiVersion": "v1", "kind": "ConfigMap", "name": "added-meanwhile", "uid": "u-added"}
    main = f"ppt-{PR}-main"
    fake.before("PATCH", f"/podtemplates/{main}$", lambda: fake.patch(PODTEMPLATES, NS, main, {"metadata": {"ownerReferences": [added]}}))

    await backend.create(request(), templates(), "w")

    uid = fake.get(PROVISIONING_REQUESTS, NS, PR)["metadata"]["uid"]
    refs = fake.get(PODTEMPLATES, NS, main)["metadata"]["ownerReferences"]
    assert refs[0] == added
    assert (refs[1]["name"], refs[1]["uid"], refs[1]["controller"]) == (PR, uid, True)
    assert len(refs) == 2
    on_main = [(r.method, r.path) for r in fake.requests if r.path.endswith(f"/{main}")]
    assert on_main == [("PATCH", f"{TEMPLATES_PATH}/{main}"), ("GET", f"{TEMPLATES_PATH}/{main}"), ("PATCH", f"{TEMPLATES_PATH}/{main}")]
    first, second = [r.body for r in fake.requests if r.method == "PATCH" and r.path.endswith(f"/{main}")]
    assert first["metadata"]["resourceVersion"] != second["metadata"]["resourceVersion"]


async def test_a_handover_that_keeps_conflicting_is_left_to_the_activitys_retry(fake: FakeApiServer, backend: KubernetesBackend) -> None:
    main = f"ppt-{PR}-main"
    bump = lambda: fake.patch(PODTEMPLATES, NS, main, {"metadata": {"labels": {"bumped": str(time.monotonic_ns())}}})  # noqa: E731
    fake.before("PATCH", f"/podtemplates/{main}$", bump, times=10)
    with pytest.raises(KubernetesApiError, match=f"set owner of PodTemplate {NS}/{main}: still written by someone else after 5 tries"):
        await backend.create(request(), templates(), "w")
    assert len([r for r in fake.requests if r.method == "PATCH" and r.path.endswith(f"/{main}")]) == 5


async def test_the_fake_refuses_a_merge_patch_whose_resource_version_is_stale(fake: FakeApiServer, backend: KubernetesBackend) -> None:
    """What the backend's conflict check relies on, as an API server answers it."""
    stored = fake.put(PODTEMPLATES, template(PR, "main").to_wire())
    fake.patch(PODTEMPLATES, NS, f"ppt-{PR}-main", {"metadata": {"labels": {"x": "y"}}})
    status, body = await backend._call(
        "patch", "t", "PATCH", f"{TEMPLATES_PATH}/ppt-{PR}-main",
        body={"metadata": {"resourceVersion": stored["metadata"]["resourceVersion"], "labels": {"z": "1"}}},
        content_type="application/merge-patch+json", ok=(409,),
    )
    assert (status, body["reason"]) == (409, "Conflict")
    assert "the object has been modified" in body["message"]
    assert "z" not in fake.get(PODTEMPLATES, NS, f"ppt-{PR}-main")["metadata"]["labels"]


async def test_create_waits_for_an_object_of_the_same_name_that_is_being_deleted(
    fake: FakeApiServer, backend: KubernetesBackend
) -> None:
    fake.put(PROVISIONING_REQUESTS, {**request().to_wire(), "status": {}})
    with fake._lock:
        fake._objects[(PROVISIONING_REQUESTS, NS, PR)]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    with pytest.raises(KubernetesApiError, match=f"create ProvisioningRequest {NS}/{PR}: .*being deleted"):
        await backend.create(request(), templates(), "w")


async def test_create_sends_nothing_when_a_template_is_one_an_api_server_refuses(
    fake: FakeApiServer, backend: KubernetesBackend
) -> None:
    """A workload that did not come through `admitflow apply` (started through Temporal directly):
    its template is refused here, in the API server's words, and nothing is sent."""
    bad = template(PR, "workers").to_wire()
    bad["template"]["spec"]["containers"][0].pop("image")
    with pytest.raises(ApplicationError) as raised:
        await backend.create(request(), [template(PR, "main"), PodTemplate.model_validate(bad)], "w")
    assert raised.value.non_retryable and raised.value.type == "InvalidPodTemplate"
    assert raised.value.message == f'PodTemplate "ppt-{PR}-workers" is invalid: template.spec.containers[0].image: Required value'
    assert fake.requests == []


async def test_create_refuses_templates_outside_the_request_namespace(fake: FakeApiServer, backend: KubernetesBackend) -> None:
    stray = PodTemplate.model_validate({**template(PR, "main").to_wire(), "metadata": {"name": f"ppt-{PR}-main", "namespace": "other"}})
    with pytest.raises(ApplicationError) as raised:
        await backend.create(request(), [stray], "w")
    assert raised.value.non_retryable
    assert fake.requests == []


# --- errors ------------------------------------------------------------------------------------


async def test_forbidden_is_not_retried_and_names_the_object(fake: FakeApiServer, backend: KubernetesBackend) -> None:
    fake.fail("POST", "/podtemplates$", 403, "Forbidden", 'podtemplates is forbidden: User "system:serviceaccount:x:y" cannot create')
    with pytest.raises(ApplicationError) as raised:
        await backend.create(request(), templates(), "w")
    error = raised.value
    assert error.non_retryable
    assert error.type == "KubernetesForbidden"
    assert error.message.startswith(f"create PodTemplate {NS}/ppt-{PR}-main: HTTP 403 Forbidden: podtemplates is forbidden")
    assert "\n" not in error.message
    assert [r.method for r in fake.requests] == ["POST"]


async def test_invalid_request_is_not_retried(fake: FakeApiServer, backend: KubernetesBackend) -> None:
    fake.fail("POST", "/provisioningrequests$", 422, "Invalid", "spec.podSets: Too many: 33: must have at most 32 items")
    with pytest.raises(ApplicationError) as raised:
        await backend.create(request(), templates(), "w")
    assert raised.value.non_retryable
    assert raised.value.type == "KubernetesInvalid"
    assert f"create ProvisioningRequest {NS}/{PR}: HTTP 422 Invalid: spec.podSets" in raised.value.message


async def test_server_errors_are_retryable_with_a_one_line_message(fake: FakeApiServer, backend: KubernetesBackend) -> None:
    fake.fail("DELETE", f"/provisioningrequests/{PR}$", 500, "InternalError", "etcdserver:\nrequest timed out")
    with pytest.raises(KubernetesApiError) as raised:
        await backend.delete(NS, PR)
    assert raised.value.status == 500
    assert str(raised.value) == f"delete ProvisioningRequest {NS}/{PR}: HTTP 500 InternalError: etcdserver: request timed out"


async def test_an_unreachable_server_is_a_retryable_error() -> None:
    backend = KubernetesBackend(client.Configuration(host="http://127.0.0.1:9"))
    try:
        with pytest.raises(
            KubernetesApiError, match="^list ProvisioningRequests in all namespaces: cannot reach the API server at http://127.0.0.1:9: "
        ):
            await backend.watch(NS, PR, "1", 1)
        with pytest.raises(KubernetesApiError, match=f"^delete ProvisioningRequest {NS}/{PR}: cannot reach the API server"):
            await backend.delete(NS, PR)
    finally:
        await backend.close()


async def test_a_watch_the_worker_may_not_list_is_not_retried(fake: FakeApiServer, backend: KubernetesBackend) -> None:
    # The shared watch lists and watches in all namespaces: a Role in one namespace is not enough.
    fake.fail("GET", f"^{ALL_PRS_PATH}$", 403, "Forbidden", 'provisioningrequests.autoscaling.x-k8s.io is forbidden: User "u" cannot list')
    with pytest.raises(ApplicationError) as raised:
        await backend.watch(NS, PR, "1", 5)
    assert raised.value.non_retryable
    assert raised.value.type == "KubernetesForbidden"
    assert raised.value.message == (
        "list ProvisioningRequests in all namespaces: HTTP 403 Forbidden: "
        'provisioningrequests.autoscaling.x-k8s.io is forbidden: User "u" cannot list'
    )
    # The next call lists again at once (not after the informer's backoff), and now may.
    stored = await backend.create(request(), templates(), "w")
    fake.set_condition(NS, PR, PROVISIONED)
    found = await backend.watch(NS, PR, stored.metadata.resource_version, 5)
    assert found is not None and found.is_true(PROVISIONED)


async def test_a_missing_crd_is_an_error_not_a_gone_request(fake: FakeApiServer, backend: KubernetesBackend) -> None:
    # What an API server answers for a resource it does not serve: 404 without the object's name.
    fake.fail("GET", "/provisioningrequests$", 404, "NotFound", "the server could not find the requested resource")
    with pytest.raises(KubernetesApiError, match=r"^list ProvisioningRequests in all namespaces: HTTP 404: .*CRD installed\?\)$"):
        await backend.watch(NS, PR, "1", 1)
    fake.fail("POST", "/provisioningrequests$", 404, "NotFound", "the server could not find the requested resource")
    with pytest.raises(KubernetesApiError, match=f"create ProvisioningRequest {NS}/{PR}: HTTP 404: the server could not find"):
        await backend.create(request(), templates(), "w")


# --- delete ------------------------------------------------------------------------------------


async def test_delete_removes_the_request_and_its_templates_and_then_reports_nothing_there(
    fake: FakeApiServer, backend: KubernetesBackend
) -> None:
    await backend.create(request(), templates(), "w")
    # Another request whose name starts with this one's: `ppt-wl-prov-1-*` also matches its
    # template, which must survive. And a template nobody manages.
    other = "wl-prov-1-x-1"
    await backend.create(request(other, (("main", 1),)), [template(other, "main")], "w")
    fake.put(PODTEMPLATES, {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": f"ppt-{PR}-mine", "namespace": NS}, "template": {}})
    fake.requests.clear()

    assert await backend.delete(NS, PR) is True

    assert [(r.method, r.path) for r in fake.requests] == [
        ("DELETE", f"{PRS_PATH}/{PR}"),
        ("GET", TEMPLATES_PATH),
        ("DELETE", f"{TEMPLATES_PATH}/ppt-{PR}-main"),
        ("DELETE", f"{TEMPLATES_PATH}/ppt-{PR}-workers"),
    ]
    assert fake.requests[0].query == {"propagationPolicy": "Background"}
    assert fake.requests[1].query == {"labelSelector": f"{MANAGED_LABEL}=true"}
    assert fake.names(PROVISIONING_REQUESTS, NS) == [other]
    assert fake.names(PODTEMPLATES, NS) == [f"ppt-{PR}-mine", f"ppt-{other}-main"]

    fake.requests.clear()
    assert await backend.delete(NS, PR) is False
    assert [r.method for r in fake.requests] == ["DELETE", "GET"]


async def test_delete_finds_templates_left_without_their_request(fake: FakeApiServer, backend: KubernetesBackend) -> None:
    # A worker lost after creating the templates and before the request: no owner, only our annotation.
    fake.fail("POST", "/provisioningrequests$", 503, "ServiceUnavailable")
    with pytest.raises(KubernetesApiError):
        await backend.create(request(), templates(), "w")
    assert fake.names(PODTEMPLATES, NS) == [f"ppt-{PR}-main", f"ppt-{PR}-workers"]

    assert await backend.delete(NS, PR) is True
    assert fake.names(PODTEMPLATES, NS) == []


async def test_delete_finds_templates_handed_over_by_kueue(fake: FakeApiServer, backend: KubernetesBackend) -> None:
    # Made by someone else (no admitflow annotation) but owned by the request: ours to delete.
    owner = {"apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest", "name": PR, "uid": "u1", "controller": True}
    fake.put(
        PODTEMPLATES,
        {"apiVersion": "v1", "kind": "PodTemplate", "template": {},
         "metadata": {"name": f"ppt-{PR}-main", "namespace": NS, "labels": {MANAGED_LABEL: "true"}, "ownerReferences": [owner]}},
    )
    assert await backend.delete(NS, PR) is True
    assert fake.names(PODTEMPLATES, NS) == []


# --- watch -------------------------------------------------------------------------------------


async def now(value):
    """For `eventually`, which awaits its check: a value at the time it is asked for."""
    return value


def has_condition(obj: dict | None, type_: str) -> bool:
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] == type_ and c["status"] == "True" for c in conditions)


def watch_requests(fake: FakeApiServer) -> list:
    return [r for r in fake.watches() if r.path == ALL_PRS_PATH]


def lists(fake: FakeApiServer) -> list:
    return [r for r in fake.calls("GET") if r.path == ALL_PRS_PATH and "watch" not in r.query]


async def test_watch_returns_the_request_as_soon_as_the_autoscaler_changes_it(fake: FakeApiServer, backend: KubernetesBackend) -> None:
    stored = await backend.create(request(), templates(), "w")
    listed_at = fake.resource_version
    fake.requests.clear()
    later(0.3, fake.set_condition, NS, PR, PROVISIONED, "True", "CapacityIsFound", "Capacity is found in the cluster")

    started = time.monotonic()
    found = await backend.watch(NS, PR, stored.metadata.resource_version, 10)
    elapsed = time.monotonic() - started

    assert found is not None
    assert found.is_true(PROVISIONED)
    assert found.condition(PROVISIONED).message == "Capacity is found in the cluster"
    assert found.metadata.resource_version != stored.metadata.resource_version
    assert 0.25 < elapsed < 2
    # The first watch lists every request in the cluster, then watches all of them from the
    # list's resourceVersion; nothing is read or watched for this request alone.
    listed, watch = fake.requests
    assert (listed.method, listed.path, listed.query) == ("GET", ALL_PRS_PATH, {"limit": "500"})
    assert (watch.method, watch.path) == ("GET", ALL_PRS_PATH)
    assert watch.query == {"watch": "true", "resourceVersion": listed_at, "allowWatchBookmarks": "true", "timeoutSeconds": "300"}


async def test_watch_returns_at_once_when_the_version_already_differs(fake: FakeApiServer, backend: KubernetesBackend) -> None:
    stored = await backend.create(request(), templates(), "w")
    fake.set_condition(NS, PR, "Accepted", reason="Accepted")
    fake.requests.clear()
    found = await backend.watch(NS, PR, stored.metadata.resource_version, 10)
    assert found is not None and found.is_true("Accepted")
    assert [r.path for r in fake.requests if not r.query.get("watch")] == [ALL_PRS_PATH]  # the list, no GET of the request
    # Later calls answer from what the shared watch keeps: no request at all.
    fake.set_condition(NS, PR, PROVISIONED)
    await eventually(lambda: now(has_condition(backend.informer.get((NS, PR)), PROVISIONED)), timeout=5)
    fake.requests.clear()
    again = await backend.watch(NS, PR, found.metadata.resource_version, 10)
    assert again is not None and again.is_true(PROVISIONED)
    assert fake.requests == []


async def test_watch_returns_the_request_unchanged_on_timeout(fake: FakeApiServer, backend: KubernetesBackend) -> None:
    stored = await backend.create(request(), templates(), "w")
    started = time.monotonic()
    found = await backend.watch(NS, PR, stored.metadata.resource_version, 1)
    elapsed = time.monotonic() - started
    assert found is not None
    assert found.metadata.resource_version == stored.metadata.resource_version
    assert found.status.conditions == []
    assert 0.9 < elapsed < 2.5


async def test_watch_returns_none_when_the_request_is_deleted(fake: FakeApiServer, backend: KubernetesBackend) -> None:
    stored = await backend.create(request(), templates(), "w")
    later(0.3, fake.remove, PROVISIONING_REQUESTS, NS, PR)
    assert await backend.watch(NS, PR, stored.metadata.resource_version, 10) is None
    # Already gone before the watch starts: the shared watch knows, nothing is sent.
    fake.requests.clear()
    assert await backend.watch(NS, PR, stored.metadata.resource_version, 10) is None
    assert fake.requests == []


async def test_watch_never_answers_with_a_state_older_than_the_one_it_was_given(fake: FakeApiServer, backend: KubernetesBackend) -> None:
    stored = await backend.create(request(), templates(), "w")
    assert await backend.watch(NS, PR, stored.metadata.resource_version, 0.1) is not None  # the shared watch runs
    # Cut the shared watch and keep it from coming back for a moment: it lags behind the server.
    fake.fail("GET", f"^{ALL_PRS_PATH}$", 503, "ServiceUnavailable", times=2)
    fake.drop_watches()
    fake.set_condition(NS, PR, "Accepted", reason="Accepted")
    newest = fake.set_condition(NS, PR, PROVISIONED)["metadata"]["resourceVersion"]
    # A workflow that already saw the newest state (from a GET, say) must not be told of the
    # older one the lagging watch still holds: it waits, and on timeout has that state back.
    started = time.monotonic()
    found = await backend.watch(NS, PR, newest, 3)
    assert time.monotonic() - started > 2.9
    assert found is not None
    assert found.metadata.resource_version == newest and found.is_true(PROVISIONED)
    # Meanwhile it caught up, by listing again after the 503s.
    assert backend.informer.get((NS, PR))["metadata"]["resourceVersion"] == newest


async def test_watch_lists_again_after_410_gone(fake: FakeApiServer, backend: KubernetesBackend) -> None:
    stored = await backend.create(request(), templates(), "w")
    assert await backend.watch(NS, PR, stored.metadata.resource_version, 0.1) is not None  # the shared watch runs
    fake.fail("GET", f"^{ALL_PRS_PATH}$", 410, "Expired", "too old resource version")
    fake.requests.clear()
    fake.drop_watches()
    later(0.5, fake.set_condition, NS, PR, PROVISIONED)

    found = await backend.watch(NS, PR, stored.metadata.resource_version, 10)

    assert found is not None and found.is_true(PROVISIONED)
    # The watch after the break gets 410, then a fresh list, then a watch from it (which may
    # come after the answer: the list can already hold the change).
    await eventually(lambda: now(len(fake.requests) == 3), timeout=5)
    assert ["watch" if r.query.get("watch") else "list" for r in fake.requests] == ["watch", "list", "watch"]


async def test_a_watch_from_a_compacted_version_lists_again_and_finds_what_was_deleted(
    fake: FakeApiServer, backend: KubernetesBackend
) -> None:
    first = await backend.create(request(), templates(), "w")
    second = await backend.create(request("wl-prov-2", (("main", 1),)), [template("wl-prov-2", "main")], "w")
    waiting = asyncio.create_task(backend.watch(NS, PR, first.metadata.resource_version, 10))
    await eventually(lambda: now(backend.informer.waiting == 1), timeout=5)
    # While the watch is down, the request is deleted and the server forgets that history.
    fake.drop_watches()
    fake.remove(PROVISIONING_REQUESTS, NS, PR)
    fake.set_condition(NS, "wl-prov-2", PROVISIONED)
    fake.compact()

    assert await waiting is None
    found = await backend.watch(NS, "wl-prov-2", second.metadata.resource_version, 5)
    assert found is not None and found.is_true(PROVISIONED)
    assert len(lists(fake)) == 2
    # The first, the one that got 410 from where the first was, one from the new list.
    watches = await eventually(lambda: now(len(watch_requests(fake)) == 3 and watch_requests(fake)), timeout=5)
    assert watches[1].query["resourceVersion"] == watches[0].query["resourceVersion"]


async def test_a_broken_watch_is_opened_again_from_where_it_was(fake: FakeApiServer, backend: KubernetesBackend) -> None:
    stored = await backend.create(request(), templates(), "w")
    assert await backend.watch(NS, PR, stored.metadata.resource_version, 0.1) is not None
    fake.set_condition(NS, PR, "Accepted", reason="Accepted")
    accepted = await backend.watch(NS, PR, stored.metadata.resource_version, 5)
    assert accepted is not None

    fake.drop_watches()
    await eventually(lambda: now(len(watch_requests(fake)) == 2), timeout=5)
    fake.set_condition(NS, PR, PROVISIONED)
    found = await backend.watch(NS, PR, accepted.metadata.resource_version, 5)

    assert found is not None and found.is_true(PROVISIONED)
    assert len(lists(fake)) == 1  # no list again: the watch went on
    assert watch_requests(fake)[1].query["resourceVersion"] == accepted.metadata.resource_version


async def test_a_watch_the_server_ends_goes_on_from_its_last_bookmark(fake: FakeApiServer) -> None:
    backend = KubernetesBackend(client.Configuration(host=fake.url), watch_seconds=1)
    try:
        stored = await backend.create(request(), templates(), "w")
        assert await backend.watch(NS, PR, stored.metadata.resource_version, 0.1) is not None
        # Writes to other resources move the server's resourceVersion on; the bookmark before
        # the server ends the watch says so, and the next watch starts there.
        fake.put(PODTEMPLATES, {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "unrelated", "namespace": NS}, "template": {}})
        moved_to = fake.resource_version
        await eventually(lambda: now(len(watch_requests(fake)) >= 2), timeout=5)
        assert watch_requests(fake)[1].query["resourceVersion"] == moved_to
        assert backend.informer.position == moved_to
        assert len(lists(fake)) == 1
        fake.set_condition(NS, PR, PROVISIONED)
        found = await backend.watch(NS, PR, stored.metadata.resource_version, 5)
        assert found is not None and found.is_true(PROVISIONED)
    finally:
        await backend.close()


async def test_bookmarks_move_an_idle_watch_on() -> None:
    fake = FakeApiServer(bookmark_seconds=0.2).start()
    backend = KubernetesBackend(client.Configuration(host=fake.url))
    try:
        assert await backend.watch(NS, PR, "1", 0.1) is None  # nothing there: the shared watch runs
        fake.put(PODTEMPLATES, {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "unrelated", "namespace": NS}, "template": {}})
        moved_to = fake.resource_version
        # No ProvisioningRequest changed, yet the watch learns where the server is, and would go on
        # from there after a break instead of from a version that may have fallen out of its window.
        await eventually(lambda: now(backend.informer.position == moved_to), timeout=5)
        assert len(watch_requests(fake)) == 1
    finally:
        await backend.close()
        fake.stop()


async def test_the_informer_lists_in_pages(fake: FakeApiServer) -> None:
    for i in range(5):
        fake.put(PROVISIONING_REQUESTS, {**request(f"pre-{i}").to_wire(), "status": {}})
    listed_at = fake.resource_version
    backend = KubernetesBackend(client.Configuration(host=fake.url), page_size=2)
    try:
        found = await backend.watch(NS, "pre-4", "1", 5)
        assert found is not None and found.metadata.name == "pre-4"
        pages = lists(fake)
        assert [r.query.get("limit") for r in pages] == ["2", "2", "2"]
        assert "continue" not in pages[0].query and pages[1].query["continue"] and pages[2].query["continue"]
        (watch,) = await eventually(lambda: now(watch_requests(fake)), timeout=5)
        assert watch.query["resourceVersion"] == listed_at
    finally:
        await backend.close()


async def test_watch_heartbeats_inside_an_activity(fake: FakeApiServer, backend: KubernetesBackend) -> None:
    stored = await backend.create(request(), templates(), "w")
    beats: list[tuple] = []
    env = ActivityEnvironment()
    env.on_heartbeat = lambda *details: beats.append(details)
    later(0.4, fake.set_condition, NS, PR, PROVISIONED)
    found = await env.run(backend.watch, NS, PR, stored.metadata.resource_version, 10)
    assert found is not None and found.is_true(PROVISIONED)
    assert len(beats) >= 3  # every 0.1 s while waiting in this test; every 5 s by default


async def test_a_cancelled_watch_leaves_the_shared_watch_to_the_others(fake: FakeApiServer, backend: KubernetesBackend) -> None:
    stored = await backend.create(request(), templates(), "w")
    other = await backend.create(request("other-1", (("main", 1),)), [template("other-1", "main")], "w")
    first = asyncio.create_task(backend.watch(NS, PR, stored.metadata.resource_version, 30))
    second = asyncio.create_task(backend.watch(NS, "other-1", other.metadata.resource_version, 30))
    await eventually(lambda: now(backend.informer.waiting == 2), timeout=5)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert backend.informer.waiting == 1
    fake.set_condition(NS, "other-1", PROVISIONED)
    found = await asyncio.wait_for(second, 5)
    assert found is not None and found.is_true(PROVISIONED)
    assert backend.informer.waiting == 0
    assert len(watch_requests(fake)) == 1 and fake.open_watches == 1


def backend_threads(before: set[int]) -> int:
    """Threads of this process started since `before`, leaving out the fake API server's."""
    return sum(1 for t in threading.enumerate() if t.ident not in before and not t.name.startswith("fake-apiserver"))


async def test_500_requests_in_flight_share_one_watch_and_no_threads(fake: FakeApiServer, backend: KubernetesBackend) -> None:
    n = 500
    before = {t.ident for t in threading.enumerate()}
    peak = 0
    done = asyncio.Event()

    async def count_threads() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, backend_threads(before))
            await asyncio.sleep(0.02)

    async def attempt(i: int) -> ProvisioningRequest:
        name = f"wl{i}-prov-1"
        stored = await backend.create(request(name, (("main", 1),)), [template(name, "main")], "w")
        seen = stored
        while not seen.is_true(PROVISIONED):
            found = await backend.watch(NS, name, seen.metadata.resource_version, 50)
            assert found is not None
            seen = found
        return seen

    counter = asyncio.create_task(count_threads())
    started = time.monotonic()
    attempts = [asyncio.create_task(attempt(i)) for i in range(n)]
    # Every request is created and waited for before the autoscaler answers any of them.
    await eventually(lambda: now(backend.informer.waiting == n), timeout=60)
    assert fake.open_watches == 1
    for i in range(n):
        fake.set_condition(NS, f"wl{i}-prov-1", PROVISIONED, message=f"capacity {i}")
    results = await asyncio.wait_for(asyncio.gather(*attempts), 60)
    elapsed = time.monotonic() - started
    done.set()
    await counter

    assert [r.condition(PROVISIONED).message for r in results] == [f"capacity {i}" for i in range(n)]
    assert backend.informer.waiting == 0
    assert len(watch_requests(fake)) == 1 and len(lists(fake)) == 1
    assert fake.peak_watches == 1
    assert peak == 0, f"{peak} threads"  # aiohttp on the event loop, the server by IP: nothing to resolve
    assert elapsed < 60


async def test_pods_scheduled_sends_nothing(fake: FakeApiServer, backend: KubernetesBackend) -> None:
    assert await backend.pods_scheduled(NS, PR) is None
    assert fake.requests == []
    assert (backend.name, backend.push) == ("kubernetes", False)


# --- credentials -------------------------------------------------------------------------------


def write_kubeconfig(path: Path, server: str, context: str = "fake") -> Path:
    path.write_text(
        f"""apiVersion: v1
kind: Config
clusters:
- name: fake
  cluster: {{server: "{server}"}}
- name: other
  cluster: {{server: "http://127.0.0.1:1"}}
users:
- name: me
  user: {{token: secret-token}}
contexts:
- name: fake
  context: {{cluster: fake, user: me}}
- name: other
  context: {{cluster: other, user: me}}
current-context: {context}
"""
    )
    return path


async def test_kubeconfig_credentials_reach_the_server(fake: FakeApiServer, tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path / "config", fake.url)
    backend = KubernetesBackend.from_config(kubeconfig=str(path))
    try:
        assert await backend.delete(NS, PR) is False
    finally:
        await backend.close()
    assert fake.requests[0].headers["authorization"] == "Bearer secret-token"
    assert load_configuration(str(path), context="other").host == "http://127.0.0.1:1"
    # --context: the same kubeconfig, another cluster.
    other = KubernetesBackend.from_config(kubeconfig=str(path), context="other")
    try:
        assert other.host == "http://127.0.0.1:1"
        with pytest.raises(KubernetesApiError, match="cannot reach the API server at http://127.0.0.1:1"):
            await other.delete(NS, PR)
    finally:
        await other.close()


async def test_the_worker_takes_kubeconfig_and_context(tmp_path: Path) -> None:
    # What `admitflow worker --provisioning-backend kubernetes --kubeconfig PATH --context NAME` makes.
    from admitflow.worker.main import provisioning_backend

    path = write_kubeconfig(tmp_path / "config", "http://127.0.0.1:2")
    backend = provisioning_backend("kubernetes", None, str(path), "other")
    try:
        assert backend.host == "http://127.0.0.1:1"
    finally:
        await backend.close()
    with pytest.raises(KubernetesCredentialsError, match=f"^cannot load Kubernetes credentials from kubeconfig {path}: "):
        provisioning_backend("kubernetes", None, str(path), "missing")


def test_kubeconfig_comes_from_KUBECONFIG_then_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(tmp_path / "env-config", "http://127.0.0.1:2")))
    assert load_configuration().host == "http://127.0.0.1:2"
    monkeypatch.delenv("KUBECONFIG")
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".kube").mkdir()
    write_kubeconfig(tmp_path / ".kube" / "config", "http://127.0.0.1:3")
    assert load_configuration().host == "http://127.0.0.1:3"


async def test_in_cluster_credentials_come_from_the_service_account(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kubernetes.config import incluster_config

    (tmp_path / "token").write_text("sa-token")
    (tmp_path / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(tmp_path / "token"))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(tmp_path / "ca.crt"))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    configuration = load_configuration()
    assert configuration.host == "https://10.96.0.1:443"
    assert await configuration.get_api_key_with_prefix("BearerToken") == "bearer sa-token"
    assert configuration.ssl_ca_cert == str(tmp_path / "ca.crt")


def test_no_credentials_is_one_clear_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(KubernetesCredentialsError) as raised:
        load_configuration()
    assert str(raised.value) == (
        "no Kubernetes credentials: pass --kubeconfig or set KUBECONFIG, create ~/.kube/config, "
        "or run the worker in a pod with a service account"
    )
    with pytest.raises(KubernetesCredentialsError, match=r"^kubeconfig /nope/config does not exist$"):
        load_configuration("/nope/config")
    path = write_kubeconfig(tmp_path / "config", "http://127.0.0.1:2")
    with pytest.raises(KubernetesCredentialsError) as raised:
        load_configuration(str(path), context="missing")
    assert str(raised.value).startswith(f"cannot load Kubernetes credentials from kubeconfig {path}: ")
    assert "\n" not in str(raised.value)


def test_admitflow_imports_the_backend_without_the_kubernetes_client() -> None:
    code = "import sys, admitflow.activities.provisioning.kubernetes; sys.exit('kubernetes' in sys.modules)"
    root = Path(__file__).resolve().parents[2]
    assert subprocess.run([sys.executable, "-c", code], cwd=root).returncode == 0


def test_without_the_kubernetes_extra_the_worker_says_what_to_install(monkeypatch):
    """The core install has no Kubernetes client: the worker refuses the backend in one line."""
    import importlib.util

    from admitflow.worker.main import provisioning_backend

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "kubernetes" else find_spec(name, *a))
    with pytest.raises(ValueError, match=r"^needs the Kubernetes client: pip install 'admitflow\[kubernetes\]'$"):
        provisioning_backend("kubernetes", None)
