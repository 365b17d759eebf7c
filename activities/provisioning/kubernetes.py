"""The `kubernetes` ProvisioningRequest backend: real `autoscaling.x-k8s.io/v1`
ProvisioningRequests and core/v1 PodTemplates in a cluster, through the asyncio client of the
official Kubernetes Python package (`kubernetes.aio`, shipped in `kubernetes` on PyPI).

What it writes (docs/kubernetes-backend.md shows whole objects):

- Nothing when a PodTemplate fails core/v1 validation (admitflow/api/pod_template_validation.py):
  the call fails, not retried, with the API server's kind of message.
- PodTemplates `ppt-<request>-<podSet>` first, then the ProvisioningRequest, in the request's
  namespace, all labelled `kueue.x-k8s.io/managed: "true"` (Kueue's order and label). An object
  that already exists under its name is kept as it is (a retried activity, or Kueue's reuse).
- Then every PodTemplate gets a controller ownerReference to the ProvisioningRequest, as Kueue
  hands them over, so that deleting the request garbage-collects its templates: a JSON merge patch
  of its ownerReferences with the resourceVersion they were read at, read again and patched anew
  on 409 Conflict. Until then a template has no owner: Kueue's first owner, the Workload, is no
  Kubernetes object here, and the request must not exist before its templates (the autoscaler
  may fail a request whose templates it cannot find, kueue#3957).
- The ProvisioningRequest itself has no ownerReference: admitflow's Workload is a Temporal
  workflow, not a Kubernetes object, and the garbage collector deletes objects whose owner does
  not exist. The `admitflow.io/workload` annotation says whom it is for instead.
- Each PodTemplate also carries `admitflow.io/provisioning-request: <request>`, so that `delete`
  finds exactly the templates of one request even when they were never handed over (a worker lost
  between the two steps), and never those of another request whose name merely starts the same.

How it waits: one watch of every ProvisioningRequest in the cluster per backend (per worker), kept
by an informer (activities/informer.py: list, watch from the list's resourceVersion,
list again on 410 Gone, open the watch again when it ends); each `watch` call is a waiter on it.
Everything runs on the worker's event loop: no thread per request, no thread per call.

Requests go through the asyncio client admitflow's cluster-facing parts share
(activities/kubernetes_api.py: credentials, raw JSON bodies, one-line errors). `kubernetes` is
imported only when a backend is made, so the rest of admitflow imports without it.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from admitflow.activities.informer import Informer
from admitflow.activities.kubernetes_api import (
    MERGE_PATCH,
    NON_RETRYABLE,
    Collection,
    KubernetesApi,
    KubernetesApiError,
    KubernetesCredentialsError,
    load_configuration,
    object_not_found,
    one_line,
    parse_stored,
)
from admitflow.api.pod_template_validation import pod_template_errors
from admitflow.api.provisioning_request import API_VERSION, MANAGED_LABEL, PodTemplate, ProvisioningRequest

if TYPE_CHECKING:
    from kubernetes.aio.client import Configuration

__all__ = [
    "NON_RETRYABLE", "KubernetesApiError", "KubernetesBackend", "KubernetesCredentialsError", "load_configuration",
]

GROUP = "autoscaling.x-k8s.io"
VERSION = "v1"
PLURAL = "provisioningrequests"
KIND = "ProvisioningRequest"
# On each PodTemplate: the request it was made for (names are not enough, see the module doc).
REQUEST_ANNOTATION = "admitflow.io/provisioning-request"
ALL_REQUESTS = "ProvisioningRequests in all namespaces"
# Reads and patches of one template's owners before a handover that keeps conflicting is left to
# the activity's retry.
HANDOVER_TRIES = 5



class KubernetesBackend:
    """ProvisioningRequests in a real cluster (see the module doc). Make one with
    `KubernetesBackend.from_config(kubeconfig=..., context=...)`, or with a ready
    `kubernetes.aio.client.Configuration`; `await close()` when done with it.

    `heartbeat_seconds`: how often a waiting `watch` heartbeats inside an activity.
    `watch_seconds`: the shared watch's `timeoutSeconds`; the server ends it then, and it is
    opened again from where it was. `call_seconds`: the time limit of every other request.
    `page_size`: objects per page when the informer lists."""

    name = "kubernetes"
    push = False

    def __init__(
        self,
        configuration: Configuration,
        *,
        heartbeat_seconds: float = 5.0,
        watch_seconds: int = 300,
        call_seconds: float = 60.0,
        page_size: int = 500,
    ) -> None:
        self._api = KubernetesApi(configuration, call_seconds=call_seconds)
        self._call = self._api.call
        self._heartbeat_seconds = heartbeat_seconds
        self._page_size = page_size
        self.host = configuration.host
        requests = Collection(self._api, ALL_REQUESTS, _requests_path(None), page_size, watch_seconds, _missing_requests)
        self.informer = Informer(requests, what=ALL_REQUESTS, on_stop=self._api.close)

    @classmethod
    def from_config(cls, kubeconfig: str | None = None, context: str | None = None, **options: Any) -> KubernetesBackend:
        """A backend with credentials found as `load_configuration` finds them."""
        return cls(load_configuration(kubeconfig, context), **options)

    async def close(self) -> None:
        await self.informer.close()
        await self._api.close()

    # --- the ProvisioningBackend interface -----------------------------------------------------

    async def create(self, request: ProvisioningRequest, pod_templates: list[PodTemplate], watcher: str) -> ProvisioningRequest:
        """Templates, then the request, then the templates' handover to the request. `watcher`
        is not used: this backend does not push, the watcher calls `watch`."""
        namespace = request.metadata.namespace
        for template in pod_templates:
            if template.metadata.namespace != namespace:
                raise ApplicationError(
                    f"PodTemplate {template.metadata.namespace}/{template.metadata.name} is not in the "
                    f"namespace of ProvisioningRequest {request.key}",
                    type="InvalidProvisioningRequest",
                    non_retryable=True,
                )
        for template in pod_templates:
            # Never send what an API server would refuse: say why instead, once, as it would.
            errors = pod_template_errors(template.template.to_wire(), "template")
            if errors:
                raise ApplicationError(
                    f'PodTemplate "{template.metadata.name}" is invalid: {errors[0]}', type="InvalidPodTemplate", non_retryable=True
                )
        templates = [await self._create_template(t, request.metadata.name) for t in pod_templates]
        what = f"ProvisioningRequest {request.key}"
        status, stored = await self._call("create", what, "POST", _requests_path(namespace), body=_request_body(request), ok=(404, 409))
        if status == 404:
            raise _missing_resource_error("create", what, stored)
        if status == 409:
            stored = _existing(what, await self._read_request(namespace, request.metadata.name))
        owner = {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "name": stored["metadata"]["name"],
            "uid": stored["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
        for template in templates:
            await self._hand_over(template, owner)
        return _parse_request(stored)

    async def delete(self, namespace: str, name: str) -> bool:
        what = f"ProvisioningRequest {namespace}/{name}"
        status, body = await self._call(
            "delete", what, "DELETE", _requests_path(namespace, name), query={"propagationPolicy": "Background"}, ok=(404,)
        )
        if status == 404 and not object_not_found(body, name):
            raise _missing_resource_error("delete", what, body)
        deleted = status != 404
        # The garbage collector would delete handed-over templates, but it may lag, and a
        # template not yet handed over has no owner at all.
        _, listed = await self._call(
            "list", f"PodTemplates in {namespace}", "GET", _templates_path(namespace), query={"labelSelector": f"{MANAGED_LABEL}=true"}
        )
        for item in listed.get("items") or []:
            if not _template_of(item, name):
                continue
            template = item["metadata"]["name"]
            status, _ = await self._call(
                "delete", f"PodTemplate {namespace}/{template}", "DELETE", _templates_path(namespace, template), ok=(404,)
            )
            deleted = deleted or status != 404
        return deleted

    async def watch(self, namespace: str, name: str, resource_version: str, timeout_seconds: float) -> ProvisioningRequest | None:
        """The first state of the request newer than `resource_version`, from the shared watch;
        None when it is gone; after `timeout_seconds`, the request as it is then. The first call
        waits for the informer's first list and raises its error, if it fails, as one line."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_seconds
        key = (namespace, name)
        if await self._synced(deadline):
            waiter = self.informer.wait_for(key, resource_version)
            try:
                while not waiter.done():
                    remaining = deadline - loop.time()
                    if remaining <= 0:
                        break
                    await asyncio.wait({waiter}, timeout=min(remaining, self._heartbeat_seconds))
                    if not waiter.done() and activity.in_activity():
                        activity.heartbeat()
            finally:
                self.informer.forget(key, waiter)
            if waiter.done() and not waiter.cancelled():
                found = waiter.result()
                return None if found is None else _parse_request(found)
            current = self.informer.get(key)
            if current is not None and _rv(current) == resource_version:
                return _parse_request(current)
        # The shared watch does not hold that version (it lags, or cannot list): ask the server.
        current = await self._read_request(namespace, name)
        return None if current is None else _parse_request(current)

    async def pods_scheduled(self, namespace: str, name: str) -> None:
        """Nothing to do: in a real cluster the admitted pods carry the consume annotation and
        the cluster autoscaler counts them against the booking itself."""
        return None

    async def _synced(self, deadline: float) -> bool:
        """Wait for the informer's first list, heartbeating; False when the deadline comes first."""
        loop = asyncio.get_running_loop()
        while not self.informer.synced:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            if await self.informer.sync(min(remaining, self._heartbeat_seconds)):
                return True
            if activity.in_activity():
                activity.heartbeat()
        return True

    # --- requests --------------------------------------------------------------------------------

    async def _create_template(self, template: PodTemplate, request_name: str) -> dict[str, Any]:
        meta = template.metadata
        what = f"PodTemplate {meta.namespace}/{meta.name}"
        status, stored = await self._call(
            "create", what, "POST", _templates_path(meta.namespace), body=_template_body(template, request_name), ok=(409,)
        )
        if status == 409:
            status, existing = await self._call("read", what, "GET", _templates_path(meta.namespace, meta.name), ok=(404,))
            stored = _existing(what, None if status == 404 else existing)
        return stored

    async def _hand_over(self, template: dict[str, Any], owner: dict[str, Any]) -> None:
        """Make the request the template's controller, keeping its other, non-controller owners.
        The merge patch replaces the whole list, so it carries the resourceVersion the list was
        read at: the server answers 409 Conflict when someone wrote the template since (an owner
        added meanwhile would otherwise be lost), and the template is read again and the patch
        made anew, as Kueue's Update of the template retries on a conflict."""
        meta = template["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        what = f"PodTemplate {namespace}/{name}"
        for _ in range(HANDOVER_TRIES):
            refs = meta.get("ownerReferences") or []
            wanted = [r for r in refs if not r.get("controller") and r.get("uid") != owner["uid"]] + [owner]
            if refs == wanted:
                return
            patch = {"metadata": {"resourceVersion": meta["resourceVersion"], "ownerReferences": wanted}}
            path = _templates_path(namespace, name)
            status, _ = await self._call("set owner of", what, "PATCH", path, body=patch, content_type=MERGE_PATCH, ok=(409,))
            if status != 409:
                return
            status, current = await self._call("read", what, "GET", path, ok=(404,))
            if status == 404:
                raise KubernetesApiError(f"set owner of {what}: it was deleted meanwhile; will try again", 404)
            meta = current["metadata"]
        raise KubernetesApiError(f"set owner of {what}: still written by someone else after {HANDOVER_TRIES} tries; will try again", 409)

    async def _read_request(self, namespace: str, name: str) -> dict[str, Any] | None:
        what = f"ProvisioningRequest {namespace}/{name}"
        status, obj = await self._call("read", what, "GET", _requests_path(namespace, name), ok=(404,))
        if status == 404:
            if not object_not_found(obj, name):
                raise _missing_resource_error("read", what, obj)
            return None
        return obj

    # --- what the informer lists and watches -----------------------------------------------------


def _requests_path(namespace: str | None, name: str | None = None) -> str:
    path = f"/apis/{GROUP}/{VERSION}" + (f"/namespaces/{namespace}" if namespace else "") + f"/{PLURAL}"
    return f"{path}/{name}" if name else path


def _templates_path(namespace: str, name: str | None = None) -> str:
    path = f"/api/v1/namespaces/{namespace}/podtemplates"
    return f"{path}/{name}" if name else path


def _existing(what: str, obj: dict[str, Any] | None) -> dict[str, Any]:
    """An object found under our name after AlreadyExists: kept, unless it is on its way out."""
    if obj is None:
        raise KubernetesApiError(f"create {what}: it existed a moment ago and is gone now; will try again")
    if obj["metadata"].get("deletionTimestamp"):
        raise KubernetesApiError(f"create {what}: an object of that name is being deleted; will try again")
    return obj


# --- objects ---------------------------------------------------------------------------------------


def _metadata(meta: Any) -> dict[str, Any]:
    """What we set on a new object; the server assigns uid, resourceVersion and the rest."""
    out: dict[str, Any] = {"name": meta.name, "namespace": meta.namespace}
    if meta.labels:
        out["labels"] = dict(meta.labels)
    if meta.annotations:
        out["annotations"] = dict(meta.annotations)
    return out


def _request_body(request: ProvisioningRequest) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": _metadata(request.metadata), "spec": request.spec.to_wire()}


def _template_body(template: PodTemplate, request_name: str) -> dict[str, Any]:
    meta = _metadata(template.metadata)
    meta["annotations"] = {**meta.get("annotations", {}), REQUEST_ANNOTATION: request_name}
    return {"apiVersion": "v1", "kind": "PodTemplate", "metadata": meta, "template": template.template.to_wire()}


def _template_of(template: dict[str, Any], request_name: str) -> bool:
    meta = template.get("metadata") or {}
    if (meta.get("annotations") or {}).get(REQUEST_ANNOTATION) == request_name:
        return True
    return any(
        ref.get("kind") == KIND and ref.get("apiVersion", "").startswith(f"{GROUP}/") and ref.get("name") == request_name
        for ref in meta.get("ownerReferences") or []
        if ref.get("controller")
    )


def _rv(obj: dict[str, Any]) -> str:
    return obj["metadata"].get("resourceVersion", "")


def _parse_request(obj: dict[str, Any]) -> ProvisioningRequest:
    return parse_stored(ProvisioningRequest, {"kind": KIND, **obj})


# --- errors ----------------------------------------------------------------------------------------


def _missing_requests(verb: str, body: dict[str, Any] | None) -> KubernetesApiError:
    return _missing_resource_error(verb, ALL_REQUESTS, body)


def _missing_resource_error(verb: str, what: str, body: dict[str, Any] | None) -> KubernetesApiError:
    detail = (body or {}).get("message") or "not found"
    namespace = "" if what == ALL_REQUESTS else ", and does the namespace exist"
    return KubernetesApiError(one_line(f"{verb} {what}: HTTP 404: {detail} (is the {PLURAL}.{GROUP} CRD installed{namespace}?)"), 404)
