"""The `kubernetes` ProvisioningRequest backend: real `autoscaling.x-k8s.io/v1`
ProvisioningRequests and core/v1 PodTemplates in a cluster, through the official Kubernetes Python
client (`kubernetes` on PyPI), for a cluster autoscaler to act on.

What it writes (docs/kubernetes-backend.md shows whole objects):

- PodTemplates `ppt-<request>-<podSet>` first, then the ProvisioningRequest, in the request's
  namespace, all labelled `kueue.x-k8s.io/managed: "true"` (Kueue's order and label). An object
  that already exists under its name is kept as it is (a retried activity, or Kueue's reuse).
- Then every PodTemplate gets a controller ownerReference to the ProvisioningRequest, as Kueue
  hands them over, so that deleting the request garbage-collects its templates.
- The ProvisioningRequest itself has no ownerReference: admitflow's Workload is a Temporal
  workflow, not a Kubernetes object, and the garbage collector deletes objects whose owner does
  not exist. The `admitflow.io/workload` annotation says whom it is for instead.
- Each PodTemplate also carries `admitflow.io/provisioning-request: <request>`, so that `delete`
  finds exactly the templates of one request even when they were never handed over (a worker lost
  between the two steps), and never those of another request whose name merely starts the same.

The client is synchronous; every call runs in a thread of the backend's own pools so the worker's
event loop never blocks. Short calls and watches have separate pools, so that long-polling watches
(up to `WATCH_SECONDS` each) cannot hold up creates and deletes. `kubernetes` is imported only when
a backend is made, so the rest of admitflow imports without it configured.
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
import os
import time
import types
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from admitflow.api.provisioning_request import API_VERSION, MANAGED_LABEL, PodTemplate, ProvisioningRequest
from admitflow.wire import first_error

if TYPE_CHECKING:
    from kubernetes.client import Configuration

GROUP = "autoscaling.x-k8s.io"
VERSION = "v1"
PLURAL = "provisioningrequests"
KIND = "ProvisioningRequest"
# On each PodTemplate: the request it was made for (names are not enough, see the module doc).
REQUEST_ANNOTATION = "admitflow.io/provisioning-request"
# Sent explicitly: the generated client leaves Content-Type out on creates (the server would
# assume JSON, but nothing else in between has to).
JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"

# Statuses after which retrying the same request cannot succeed: the worker is not allowed
# (403), or the server refuses the object (400 malformed, 422 invalid). Everything else (401 with
# a token about to be refreshed, 409 conflicts, 429, 5xx, network errors) is retried by Temporal.
NON_RETRYABLE = {400: "BadRequest", 403: "Forbidden", 422: "Invalid"}


class KubernetesCredentialsError(RuntimeError):
    """No usable kubeconfig or in-cluster service account; the message is one line."""


class KubernetesApiError(RuntimeError):
    """An API call failed in a way a retry may fix; the message names the object and the status."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def load_configuration(kubeconfig: str | None = None, context: str | None = None) -> Configuration:
    """Client configuration the way kubectl finds it: `kubeconfig` if given, else `$KUBECONFIG`
    (a `:`-separated list is merged), else `~/.kube/config`, else the pod's service account
    (in-cluster). Raises `KubernetesCredentialsError` with one line when none is usable."""
    from kubernetes import client, config

    configuration = client.Configuration()
    if kubeconfig and not Path(kubeconfig).expanduser().is_file():
        raise KubernetesCredentialsError(f"kubeconfig {kubeconfig} does not exist")
    default = Path("~/.kube/config").expanduser()
    source = kubeconfig or os.environ.get("KUBECONFIG") or (str(default) if default.is_file() else None)
    try:
        if source:
            # persist_config=False: a worker never rewrites the user's kubeconfig.
            config.load_kube_config(
                config_file=os.path.expanduser(source), context=context, client_configuration=configuration, persist_config=False
            )
            return configuration
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            if context:
                raise KubernetesCredentialsError(f"context {context} needs a kubeconfig; in a pod only the service account is used")
            config.load_incluster_config(client_configuration=configuration)
            return configuration
    except config.ConfigException as exc:
        where = f"kubeconfig {source}" if source else "the in-cluster service account"
        raise KubernetesCredentialsError(f"cannot load Kubernetes credentials from {where}: {_one_line(str(exc))}") from None
    raise KubernetesCredentialsError(
        "no Kubernetes credentials: pass --kubeconfig or set KUBECONFIG, create ~/.kube/config, "
        "or run the worker in a pod with a service account"
    )


class KubernetesBackend:
    """ProvisioningRequests in a real cluster (see the module doc). Make one with
    `KubernetesBackend.from_config(kubeconfig=..., context=...)`, or with a ready
    `kubernetes.client.Configuration`."""

    name = "kubernetes"
    push = False

    def __init__(
        self,
        configuration: Configuration,
        *,
        max_watches: int = 64,
        max_calls: int = 8,
        heartbeat_seconds: float = 5.0,
        watch_chunk_seconds: float = 10.0,
    ) -> None:
        from kubernetes import client

        # One pooled connection per thread that may use it at the same time.
        configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize or 0, max_watches + max_calls)
        self._api_client = client.ApiClient(configuration)
        self._core = client.CoreV1Api(self._api_client)
        self._custom = client.CustomObjectsApi(self._api_client)
        self._calls = ThreadPoolExecutor(max_workers=max_calls, thread_name_prefix="k8s-call")
        self._watches = ThreadPoolExecutor(max_workers=max_watches, thread_name_prefix="k8s-watch")
        self._heartbeat_seconds = heartbeat_seconds
        # A watch is issued in pieces no longer than this, so that a cancelled watch lets go of its
        # thread soon even if its connection cannot be shut down.
        self._watch_chunk_seconds = watch_chunk_seconds
        self.host = configuration.host

    @classmethod
    def from_config(cls, kubeconfig: str | None = None, context: str | None = None, **options: Any) -> KubernetesBackend:
        """A backend with credentials found as `load_configuration` finds them."""
        return cls(load_configuration(kubeconfig, context), **options)

    def close(self) -> None:
        self._calls.shutdown(wait=False, cancel_futures=True)
        self._watches.shutdown(wait=False, cancel_futures=True)
        self._api_client.close()

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
        stored = await self._call(self._create_sync, request, pod_templates)
        return _parse_request(stored)

    async def delete(self, namespace: str, name: str) -> bool:
        return await self._call(self._delete_sync, namespace, name)

    async def watch(self, namespace: str, name: str, resource_version: str, timeout_seconds: float) -> ProvisioningRequest | None:
        """A GET, then watch requests of at most `watch_chunk_seconds` each from the version read,
        until the request changes, is deleted, or `timeout_seconds` pass (the server ends a watch
        on whole seconds, so a timeout may come up to a second late)."""
        from kubernetes import watch as k8s_watch

        deadline = time.monotonic() + timeout_seconds
        current = await self._call(self._read_request, namespace, name)
        while True:
            if current is None:
                return None
            if _rv(current) != resource_version:
                return _parse_request(current)
            since = _rv(current)
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return _parse_request(current)
                stream = k8s_watch.Watch()
                outcome, obj = await self._heartbeating(
                    self._watch_sync,
                    stream,
                    namespace,
                    name,
                    since,
                    resource_version,
                    min(remaining, self._watch_chunk_seconds),
                    on_cancel=stream.stop,
                )
                if outcome == "changed":
                    return _parse_request(obj)
                if outcome == "deleted":
                    return None
                if outcome == "expired":
                    # 410 Gone: our resourceVersion fell out of the server's watch window.
                    # Read the object again and watch from what it is now.
                    current = await self._call(self._read_request, namespace, name)
                    break
                since = obj

    async def pods_scheduled(self, namespace: str, name: str) -> None:
        """Nothing to do: in a real cluster the admitted pods carry the consume annotation and
        the cluster autoscaler counts them against the booking itself."""
        return None

    # --- threads -------------------------------------------------------------------------------

    async def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._calls, functools.partial(fn, *args))

    async def _heartbeating(self, fn: Callable[..., Any], *args: Any, on_cancel: Callable[[], None]) -> Any:
        """Run `fn` in a watch thread; meanwhile heartbeat (inside an activity) so that the engine
        notices a lost worker, and stop the watch if the activity is cancelled."""
        future = asyncio.get_running_loop().run_in_executor(self._watches, functools.partial(fn, *args))
        try:
            while True:
                done, _ = await asyncio.wait({future}, timeout=self._heartbeat_seconds)
                if done:
                    return future.result()
                if activity.in_activity():
                    activity.heartbeat()
        except asyncio.CancelledError:
            on_cancel()
            # The stopped watch ends with an error nobody waits for any more.
            future.add_done_callback(lambda f: f.cancelled() or f.exception())
            raise

    # --- synchronous calls (run in threads) -------------------------------------------------------

    def _request(self, verb: str, what: str, fn: Callable[..., Any], *args: Any, ok: tuple[int, ...] = (), **kwargs: Any) -> tuple[int, Any]:
        """One API call. Returns (HTTP status, JSON body); an error status in `ok` is returned
        with the server's Status body instead of raised."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            response = fn(*args, _preload_content=False, **kwargs)
        except ApiException as exc:
            body = _json_or_none(exc.body)
            if exc.status in ok:
                return exc.status, body or {}
            raise _api_error(verb, what, exc.status, exc.reason, body) from None
        except HTTPError as exc:
            raise KubernetesApiError(
                f"{verb} {what}: cannot reach the API server at {self.host}: {_one_line(str(exc))}"
            ) from None
        try:
            return response.status, json.loads(response.data or b"{}")
        finally:
            response.release_conn()

    def _create_sync(self, request: ProvisioningRequest, pod_templates: list[PodTemplate]) -> dict[str, Any]:
        namespace = request.metadata.namespace
        templates = [self._create_template(t, request.metadata.name) for t in pod_templates]
        what = f"ProvisioningRequest {request.key}"
        status, stored = self._request(
            "create", what, self._custom.create_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL, _request_body(request), ok=(404, 409),
            _headers={"Content-Type": JSON},
        )
        if status == 404:
            raise _missing_resource_error("create", what, stored)
        if status == 409:
            stored = self._existing(what, self._read_request(namespace, request.metadata.name))
        owner = {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "name": stored["metadata"]["name"],
            "uid": stored["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
        for template in templates:
            self._hand_over(template, owner)
        return stored

    def _create_template(self, template: PodTemplate, request_name: str) -> dict[str, Any]:
        meta = template.metadata
        what = f"PodTemplate {meta.namespace}/{meta.name}"
        status, stored = self._request(
            "create", what, self._core.create_namespaced_pod_template, meta.namespace, _template_body(template, request_name), ok=(409,),
            _headers={"Content-Type": JSON},
        )
        if status == 409:
            status, existing = self._request(
                "read", what, self._core.read_namespaced_pod_template, meta.name, meta.namespace, ok=(404,)
            )
            stored = self._existing(what, None if status == 404 else existing)
        return stored

    def _existing(self, what: str, obj: dict[str, Any] | None) -> dict[str, Any]:
        """An object found under our name after AlreadyExists: kept, unless it is on its way out."""
        if obj is None:
            raise KubernetesApiError(f"create {what}: it existed a moment ago and is gone now; will try again")
        if obj["metadata"].get("deletionTimestamp"):
            raise KubernetesApiError(f"create {what}: an object of that name is being deleted; will try again")
        return obj

    def _hand_over(self, template: dict[str, Any], owner: dict[str, Any]) -> None:
        """Make the request the template's controller, keeping other non-controller owners."""
        meta = template["metadata"]
        refs = meta.get("ownerReferences") or []
        wanted = [r for r in refs if not r.get("controller") and r.get("uid") != owner["uid"]] + [owner]
        if refs == wanted:
            return
        self._request(
            "set owner of",
            f"PodTemplate {meta['namespace']}/{meta['name']}",
            self._core.patch_namespaced_pod_template,
            meta["name"],
            meta["namespace"],
            {"metadata": {"ownerReferences": wanted}},
            _content_type=MERGE_PATCH,
        )

    def _read_request(self, namespace: str, name: str) -> dict[str, Any] | None:
        what = f"ProvisioningRequest {namespace}/{name}"
        status, obj = self._request(
            "read", what, self._custom.get_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL, name, ok=(404,)
        )
        if status == 404:
            if not _object_not_found(obj, name):
                raise _missing_resource_error("read", what, obj)
            return None
        return obj

    def _delete_sync(self, namespace: str, name: str) -> bool:
        what = f"ProvisioningRequest {namespace}/{name}"
        status, body = self._request(
            "delete",
            what,
            self._custom.delete_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            name,
            propagation_policy="Background",
            ok=(404,),
        )
        if status == 404 and not _object_not_found(body, name):
            raise _missing_resource_error("delete", what, body)
        deleted = status != 404
        # The garbage collector would delete handed-over templates, but it may lag, and a
        # template not yet handed over has no owner at all.
        _, listed = self._request(
            "list",
            f"PodTemplates in {namespace}",
            self._core.list_namespaced_pod_template,
            namespace,
            label_selector=f"{MANAGED_LABEL}=true",
        )
        for item in listed.get("items") or []:
            if not _template_of(item, name):
                continue
            template = item["metadata"]["name"]
            status, _ = self._request(
                "delete", f"PodTemplate {namespace}/{template}", self._core.delete_namespaced_pod_template, template, namespace, ok=(404,)
            )
            deleted = deleted or status != 404
        return deleted

    def _watch_sync(
        self, stream: Any, namespace: str, name: str, since: str, unchanged: str, seconds: float
    ) -> tuple[str, Any]:
        """One watch request from `since`. Returns ("changed", object), ("deleted", None),
        ("expired", None) on 410 Gone, or ("quiet", resourceVersion to go on from)."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError, ReadTimeoutError

        what = f"ProvisioningRequest {namespace}/{name}"
        server_seconds = max(1, math.ceil(seconds))
        try:
            for event in stream.stream(
                self._custom.list_namespaced_custom_object,
                GROUP,
                VERSION,
                namespace,
                PLURAL,
                field_selector=f"metadata.name={name}",
                resource_version=since,
                timeout_seconds=server_seconds,
                allow_watch_bookmarks=True,
                # The server ends the watch after timeout_seconds; this only guards against a
                # connection that goes silent.
                _request_timeout=(10, server_seconds + 15),
            ):
                obj = event.get("raw_object") or {}
                version = (obj.get("metadata") or {}).get("resourceVersion") or since
                if event["type"] == "DELETED":
                    return "deleted", None
                if event["type"] in ("ADDED", "MODIFIED") and version != unchanged:
                    return "changed", obj
                since = version
        except ApiException as exc:
            if exc.status == 410:
                return "expired", None
            if exc.status == 404 and not _object_not_found(_json_or_none(exc.body), name):
                raise _missing_resource_error("watch", what, _json_or_none(exc.body)) from None
            raise _api_error("watch", what, exc.status, exc.reason, _json_or_none(exc.body)) from None
        except ReadTimeoutError:
            pass
        except HTTPError as exc:
            raise KubernetesApiError(f"watch {what}: cannot reach the API server at {self.host}: {_one_line(str(exc))}") from None
        return "quiet", since


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
    try:
        return ProvisioningRequest.model_validate(_known(ProvisioningRequest, obj))
    except ValidationError as exc:
        meta = obj.get("metadata") or {}
        raise KubernetesApiError(
            f"ProvisioningRequest {meta.get('namespace')}/{meta.get('name')} as stored does not parse: {first_error(exc)}"
        ) from None


def _known(model: type[BaseModel], data: Any) -> Any:
    """`data` without the fields a strict model (`extra="forbid"`) does not know, at any depth:
    the server may return fields newer than our models (a newer CRD, vendor status)."""
    if not isinstance(data, dict):
        return data
    if model.model_config.get("extra") != "forbid":
        return data
    out = {}
    for name, info in model.model_fields.items():
        for key in (info.alias, name):
            if key and key in data:
                out[key] = _known_in(info.annotation, data[key])
                break
    return out


def _known_in(annotation: Any, value: Any) -> Any:
    origin = get_origin(annotation)
    args = get_args(annotation)
    if origin is Annotated:
        return _known_in(args[0], value)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return _known(annotation, value)
    if origin in (Union, types.UnionType):
        for arg in args:
            if arg is not type(None):
                value = _known_in(arg, value)
        return value
    if origin is list and isinstance(value, list) and args:
        return [_known_in(args[0], v) for v in value]
    if origin is dict and isinstance(value, dict) and len(args) == 2:
        return {k: _known_in(args[1], v) for k, v in value.items()}
    return value


# --- errors ----------------------------------------------------------------------------------------


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _json_or_none(text: Any) -> dict[str, Any] | None:
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    try:
        found = json.loads(text) if text else None
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def _object_not_found(status: dict[str, Any] | None, name: str) -> bool:
    """A 404 about this object, as opposed to one about the whole resource (CRD not installed,
    wrong URL), which must never be read as "the request is gone"."""
    return bool(status) and (status.get("details") or {}).get("name") == name


def _api_error(verb: str, what: str, status: int | None, reason: str | None, body: dict[str, Any] | None) -> Exception:
    body = body or {}
    why = body.get("reason") or reason or ""
    message = f"{verb} {what}: HTTP {status} {why}".rstrip()
    if body.get("message"):
        message += f": {body['message']}"
    message = _one_line(message)
    if status in NON_RETRYABLE:
        return ApplicationError(message, type=f"Kubernetes{NON_RETRYABLE[status]}", non_retryable=True)
    return KubernetesApiError(message, status)


def _missing_resource_error(verb: str, what: str, body: dict[str, Any] | None) -> KubernetesApiError:
    detail = (body or {}).get("message") or "not found"
    return KubernetesApiError(
        _one_line(
            f"{verb} {what}: HTTP 404: {detail} (is the {PLURAL}.{GROUP} CRD installed, "
            f"and does the namespace exist?)"
        ),
        404,
    )
