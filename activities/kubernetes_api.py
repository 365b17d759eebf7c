"""The asyncio Kubernetes client that admitflow's cluster-facing parts share: the `kubernetes`
ProvisioningRequest backend (activities/provisioning/kubernetes.py) and the Kubernetes runner
(activities/jobs/kubernetes.py). Through the official package's `kubernetes.aio` client
(`kubernetes` on PyPI, the `kubernetes` extra), imported only when a client is made.

- `load_configuration`: credentials found as kubectl finds them (kubeconfig, `KUBECONFIG`,
  `~/.kube/config`, the pod's service account), with kubectl's `--context`.
- `KubernetesApi`: one `ApiClient` (authentication, TLS, proxy, a refreshed token) sending raw
  JSON: admitflow's pydantic models are the schema, and the client's own models would rewrite the
  bodies. `call` is one request answered with its status and JSON body; `list_page` one page of a
  collection from one consistent snapshot; `watch` the events of a collection from a
  resourceVersion, as activities/informer.py's `Source` wants them (`Expired` for 410
  Gone, `Disconnected` when the connection breaks or goes silent); `Collection` is one collection
  as that `Source`.
- `parse_stored`: an object as the server answers it, as admitflow's model, without the fields
  its strict models do not know (a newer server's, `known_fields`).
- An error status becomes one line naming the call, the object and the server's message; the
  statuses a retry cannot fix (400, 403, 422) are non-retryable ApplicationErrors, the others
  (401 with a token about to be refreshed, 409, 429, 5xx, network errors) `KubernetesApiError`.

Everything runs on the caller's event loop: no thread per request.
"""

from __future__ import annotations

import json
import os
import types
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from temporalio.exceptions import ApplicationError

from admitflow.activities.informer import Disconnected, Expired, Page
from admitflow.wire import first_error

if TYPE_CHECKING:
    from aiohttp import ClientResponse
    from kubernetes.aio.client import Configuration

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"

# Statuses after which retrying the same request cannot succeed: the identity is not allowed
# (403), or the server refuses the object (400 malformed, 422 invalid).
NON_RETRYABLE = {400: "BadRequest", 403: "Forbidden", 422: "Invalid"}

# What a 404 of a whole collection (not of one object) becomes: the resource is not served.
Missing = Callable[[str, dict[str, Any] | None], Exception]


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
    (in-cluster); `context` picks a kubeconfig context other than its current-context. Raises
    `KubernetesCredentialsError` with one line when none is usable.

    The package's synchronous loaders fill the asyncio client's `Configuration` (the two share
    their fields): they run once, at the worker's start, and they install the hook that refreshes
    an expiring token (a service account's, an exec plugin's), which the asyncio client calls
    before each request. The asyncio loader would need a task of its own to refresh."""
    from kubernetes import config
    from kubernetes.aio.client import Configuration

    configuration = Configuration()
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
        raise KubernetesCredentialsError(f"cannot load Kubernetes credentials from {where}: {one_line(str(exc))}") from None
    raise KubernetesCredentialsError(
        "no Kubernetes credentials: pass --kubeconfig or set KUBECONFIG, create ~/.kube/config, "
        "or run the worker in a pod with a service account"
    )


class KubernetesApi:
    """Requests to one API server (see the module doc). `call_seconds`: the time limit of every
    request but a watch. `await close()` when done."""

    def __init__(self, configuration: Configuration, *, call_seconds: float = 60.0) -> None:
        from kubernetes.aio import client

        _look_up_the_environment_once(configuration)
        self._client = client.ApiClient(configuration)
        self.call_seconds = call_seconds
        self.host = configuration.host

    async def close(self) -> None:
        await self._client.close()

    async def send(
        self, method: str, path: str, *, query: dict[str, str] | None = None, body: Any = None, content_type: str = JSON, seconds: float
    ) -> ClientResponse:
        """One request; the caller reads and releases the response."""
        headers = {"Accept": JSON}
        if body is not None:
            headers["Content-Type"] = content_type
        method, url, headers, body, _ = await self._client.param_serialize(
            method=method,
            resource_path=path,
            query_params=list((query or {}).items()),
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        response = await self._client.call_api(method, url, headers, body, _request_timeout=seconds)
        return response.response

    async def call(
        self,
        verb: str,
        what: str,
        method: str,
        path: str,
        *,
        query: dict[str, str] | None = None,
        body: Any = None,
        content_type: str = JSON,
        ok: tuple[int, ...] = (),
    ) -> tuple[int, Any]:
        """One API call. Returns (HTTP status, JSON body); an error status in `ok` is returned
        with the server's Status body instead of raised."""
        from aiohttp import ClientError

        try:
            response = await self.send(method, path, query=query, body=body, content_type=content_type, seconds=self.call_seconds)
            try:
                data = await response.read()
            finally:
                response.release()
        except (ClientError, TimeoutError) as exc:
            raise KubernetesApiError(f"{verb} {what}: cannot reach the API server at {self.host}: {describe(exc)}") from None
        status = response.status
        found = json_or_none(data)
        if status >= 400:
            if status in ok:
                return status, found or {}
            raise api_error(verb, what, status, response.reason, found)
        return status, found or {}

    async def list_page(self, what: str, path: str, page_size: int, continue_token: str | None, missing: Missing) -> Page:
        """One page of the collection at `path`; `Expired` when the continue token's snapshot is
        gone, `missing(verb, body)` raised for a 404 (the resource is not served)."""
        query = {"limit": str(page_size)}
        if continue_token:
            query["continue"] = continue_token
        status, body = await self.call("list", what, "GET", path, query=query, ok=(404, 410))
        if status == 410:
            raise Expired(one_line(body.get("message") or "continue token expired"))
        if status == 404:
            raise missing("list", body)
        meta = body.get("metadata") or {}
        return Page(items=body.get("items") or [], resource_version=meta.get("resourceVersion") or "", continue_token=meta.get("continue") or None)

    async def list_all(self, what: str, path: str, page_size: int, missing: Missing) -> list[dict[str, Any]]:
        """Every object of the collection at `path`, page after page (the snapshot of the first;
        a continue token expired meanwhile starts over)."""
        while True:
            items: list[dict[str, Any]] = []
            token: str | None = None
            try:
                while True:
                    page = await self.list_page(what, path, page_size, token, missing)
                    items.extend(page.items)
                    token = page.continue_token
                    if not token:
                        return items
            except Expired:
                if token is None:
                    raise

    async def watch(self, what: str, path: str, resource_version: str, watch_seconds: int, missing: Missing) -> AsyncIterator[dict[str, Any]]:
        """The events of the collection at `path` after `resource_version`, BOOKMARKs included,
        until the server ends the watch after `watch_seconds` (the client gives up 30 s later: a
        silent connection)."""
        from aiohttp import ClientError

        query = {
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(watch_seconds),
        }
        try:
            response = await self.send("GET", path, query=query, seconds=watch_seconds + 30)
        except (ClientError, TimeoutError) as exc:
            raise Disconnected(f"watch {what}: cannot reach the API server at {self.host}: {describe(exc)}") from None
        try:
            if response.status != 200:
                body = json_or_none(await response.read())
                if response.status == 410:
                    raise Expired(one_line((body or {}).get("message") or "resource version too old"))
                if response.status == 404:
                    raise missing("watch", body)
                raise api_error("watch", what, response.status, response.reason, body)
            while True:
                line = await response.content.readline()
                if not line:
                    return
                if not line.strip():
                    continue
                event = json.loads(line)
                if event.get("type") == "ERROR":
                    status = event.get("object") or {}
                    if status.get("code") == 410:
                        raise Expired(one_line(status.get("message") or "resource version too old"))
                    raise api_error("watch", what, status.get("code"), status.get("reason"), status)
                yield event
        except (ClientError, TimeoutError, ValueError) as exc:
            raise Disconnected(f"watch {what}: {describe(exc)}") from None
        finally:
            # Never back to the pool: a watch read only part of may still be streaming.
            response.close()


class Collection:
    """A collection of the API server as the informer's `Source` (activities/informer.py): its
    pages (`page_size` objects each) and its watch (`timeoutSeconds` of `watch_seconds`); `missing`
    says what a 404 of the collection means (its resource is not served)."""

    def __init__(self, api: KubernetesApi, what: str, path: str, page_size: int, watch_seconds: int, missing: Missing) -> None:
        self._api, self._what, self._path = api, what, path
        self._page_size, self._watch_seconds, self._missing = page_size, watch_seconds, missing

    async def list(self, continue_token: str | None) -> Page:
        return await self._api.list_page(self._what, self._path, self._page_size, continue_token, self._missing)

    def watch(self, resource_version: str) -> AsyncIterator[dict[str, Any]]:
        return self._api.watch(self._what, self._path, resource_version, self._watch_seconds, self._missing)


def not_served(what: str, hint: str = "") -> Missing:
    """A `Missing` for the collection `what`: a KubernetesApiError naming the call, with `hint`."""

    def missing(verb: str, body: dict[str, Any] | None) -> KubernetesApiError:
        detail = (body or {}).get("message") or "not found"
        return KubernetesApiError(one_line(f"{verb} {what}: HTTP 404: {detail}" + (f" ({hint})" if hint else "")), 404)

    return missing


def _look_up_the_environment_once(configuration: Configuration) -> None:
    """The client's aiohttp session trusts the environment, and so looks up the proxy variables
    and ~/.netrc in a thread of its own on every request. The API server's address does not
    change: look the proxy up once, here, with aiohttp's own function, and turn the lookups off
    (kubectl reads no ~/.netrc either)."""
    from aiohttp.helpers import get_env_proxy_for_url
    from yarl import URL

    if configuration.proxy is None:
        try:
            proxy, auth = get_env_proxy_for_url(URL(configuration.host))
        except LookupError:
            pass
        else:
            configuration.proxy = str(proxy)
            if auth is not None and not configuration.proxy_headers:
                configuration.proxy_headers = {"Proxy-Authorization": auth.encode()}
    configuration.client_session_kwargs = {"trust_env": False, **(configuration.client_session_kwargs or {})}


# --- objects ----------------------------------------------------------------------------------------


M = TypeVar("M", bound=BaseModel)


def parse_stored(model: type[M], obj: dict[str, Any]) -> M:
    """An object as the server answers it, as admitflow's `model` (the fields it does not know
    left out); one that does not parse is a KubernetesApiError naming it."""
    try:
        return model.model_validate(known_fields(model, obj))
    except ValidationError as exc:
        meta = obj.get("metadata") or {}
        where = f"{meta.get('namespace')}/{meta.get('name')}" if meta.get("namespace") else meta.get("name")
        raise KubernetesApiError(f"{obj.get('kind') or model.__name__} {where} as stored does not parse: {first_error(exc)}") from None


def known_fields(model: type[BaseModel], data: Any) -> Any:
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
        return known_fields(annotation, value)
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


def one_line(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError) and not str(exc):
        return "timed out"
    return one_line(str(exc) or type(exc).__name__)


def json_or_none(text: Any) -> dict[str, Any] | None:
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    try:
        found = json.loads(text) if text else None
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def object_not_found(status: dict[str, Any] | None, name: str) -> bool:
    """A 404 about this object, as opposed to one about the whole resource (CRD not installed,
    wrong URL), which must never be read as "the object is gone"."""
    return bool(status) and (status.get("details") or {}).get("name") == name


def api_error(verb: str, what: str, status: int | None, reason: str | None, body: dict[str, Any] | None) -> Exception:
    body = body or {}
    why = body.get("reason") or reason or ""
    message = f"{verb} {what}: HTTP {status} {why}".rstrip()
    if body.get("message"):
        message += f": {body['message']}"
    message = one_line(message)
    if status in NON_RETRYABLE:
        return ApplicationError(message, type=f"Kubernetes{NON_RETRYABLE[status]}", non_retryable=True)
    return KubernetesApiError(message, status)
