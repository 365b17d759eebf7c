"""A local HTTP fake of the two Kubernetes resources the `kubernetes` ProvisioningRequest backend
uses: core/v1 PodTemplates and autoscaling.x-k8s.io/v1 ProvisioningRequests.

It is not an API server: no validation, no RBAC, no garbage collector, no admission. It keeps what
the backend's calls depend on: create/get/list/delete/patch, a resourceVersion that grows on every
write, 404 and 409 answered with a `Status` body shaped like the API server's, `labelSelector`
(`key=value` terms) and `fieldSelector=metadata.name=...`, and `?watch=true` streaming one JSON
event per line (ADDED, MODIFIED, DELETED; an ERROR event with code 410 when the requested
fault says 410 Gone, as an API server does when the requested resourceVersion is too old). Every request is recorded, so tests can assert
exactly what the backend sent.
"""

from __future__ import annotations

import functools
import json
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

PODTEMPLATES = "podtemplates"
PROVISIONING_REQUESTS = "provisioningrequests"

_ROUTES = [
    (PODTEMPLATES, re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/podtemplates(?:/(?P<name>[^/]+))?$")),
    (
        PROVISIONING_REQUESTS,
        re.compile(
            r"^/apis/autoscaling\.x-k8s\.io/v1/namespaces/(?P<ns>[^/]+)/provisioningrequests(?:/(?P<name>[^/]+))?$"
        ),
    ),
]
_KIND = {PODTEMPLATES: "PodTemplate", PROVISIONING_REQUESTS: "ProvisioningRequest"}
_GROUP = {PODTEMPLATES: "", PROVISIONING_REQUESTS: "autoscaling.x-k8s.io"}


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, str]
    body: Any
    content_type: str | None
    headers: dict[str, str] = field(default_factory=dict)  # names in lower case


@dataclass
class _Fault:
    method: str
    path: re.Pattern[str]
    status: int
    reason: str
    message: str
    times: int


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _status(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "details": details or {},
        "code": code,
    }


def _label_selector_matches(selector: str, labels: dict[str, str]) -> bool:
    for term in filter(None, selector.split(",")):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = term.split("=", 1)
            if labels.get(key.rstrip("=")) != value.lstrip("="):
                return False
        elif labels.get(term) is None:
            return False
    return True


def _field_selector_matches(selector: str, obj: dict[str, Any]) -> bool:
    for term in filter(None, selector.split(",")):
        key, _, value = term.partition("=")
        if key == "metadata.name" and obj["metadata"]["name"] != value:
            return False
        if key == "metadata.namespace" and obj["metadata"].get("namespace") != value:
            return False
    return True


class FakeApiServer:
    """Start with `start()` (127.0.0.1, a free port), point a client at `url`, `stop()` at the end."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self._rv = 100
        # (resourceVersion, resource, namespace, event type, object): the watch history.
        self._events: list[tuple[int, str, str, str, dict[str, Any]]] = []
        self._faults: list[_Fault] = []
        self._stopping = False
        self.requests: list[Recorded] = []
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle -------------------------------------------------------------------------------

    def start(self) -> FakeApiServer:
        fake = self

        class Handler(_Handler):
            server_fake = fake

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=functools.partial(self._server.serve_forever, poll_interval=0.05), name="fake-apiserver", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        with self._lock:
            self._stopping = True
            self._lock.notify_all()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    # --- what tests use --------------------------------------------------------------------------

    def calls(self, method: str | None = None, resource: str | None = None) -> list[Recorded]:
        with self._lock:
            found = list(self.requests)
        return [
            r
            for r in found
            if (method is None or r.method == method) and (resource is None or f"/{resource}" in r.path)
        ]

    def get(self, resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            obj = self._objects.get((resource, namespace, name))
            return json.loads(json.dumps(obj)) if obj is not None else None

    def names(self, resource: str, namespace: str = "default") -> list[str]:
        with self._lock:
            return sorted(n for (r, ns, n) in self._objects if r == resource and ns == namespace)

    def put(self, resource: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Store an object as if someone else had created it."""
        with self._lock:
            return self._create(resource, obj["metadata"].get("namespace", "default"), json.loads(json.dumps(obj)))

    def set_condition(
        self, namespace: str, name: str, type_: str, status: str = "True", reason: str = "CapacityIsFound", message: str = ""
    ) -> dict[str, Any]:
        """What the cluster autoscaler does: add or replace one status condition (a MODIFIED event)."""
        with self._lock:
            obj = self._objects[(PROVISIONING_REQUESTS, namespace, name)]
            conditions = [c for c in obj.setdefault("status", {}).get("conditions", []) if c["type"] != type_]
            conditions.append(
                {"type": type_, "status": status, "reason": reason, "message": message, "lastTransitionTime": _now()}
            )
            obj["status"]["conditions"] = conditions
            self._write(PROVISIONING_REQUESTS, namespace, "MODIFIED", obj)
            return json.loads(json.dumps(obj))

    def remove(self, resource: str, namespace: str, name: str) -> None:
        """Delete an object behind the backend's back (a DELETED event)."""
        with self._lock:
            obj = self._objects.pop((resource, namespace, name))
            self._write(resource, namespace, "DELETED", obj)

    def fail(self, method: str, path: str, status: int, reason: str, message: str = "injected", times: int = 1) -> None:
        """Answer the next `times` requests whose method matches and path matches the regex `path`
        with this status instead of serving them. A watch request given 410 gets what an API
        server sends when the resourceVersion is too old: 200 and one ERROR event with code 410."""
        with self._lock:
            self._faults.append(_Fault(method, re.compile(path), status, reason, message, times))

    # --- the store (callers hold the lock) --------------------------------------------------------

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _write(self, resource: str, namespace: str, type_: str, obj: dict[str, Any]) -> None:
        obj["metadata"]["resourceVersion"] = self._next_rv()
        self._events.append((self._rv, resource, namespace, type_, json.loads(json.dumps(obj))))
        self._lock.notify_all()

    def _create(self, resource: str, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj.setdefault("metadata", {})
        meta["namespace"] = namespace
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = _now()
        # Fields a real API server adds that the backend's models do not know.
        meta["managedFields"] = [
            {"manager": "fake", "operation": "Update", "apiVersion": obj.get("apiVersion", "v1"), "time": _now()}
        ]
        if resource == PROVISIONING_REQUESTS:
            meta["generation"] = 1
            # The CRD has a status subresource: status sent on create is dropped.
            obj.pop("status", None)
        self._objects[(resource, namespace, meta["name"])] = obj
        self._write(resource, namespace, "ADDED", obj)
        return json.loads(json.dumps(obj))

    def _take_fault(self, method: str, path: str) -> _Fault | None:
        for fault in self._faults:
            if fault.method == method and fault.path.search(path) and fault.times > 0:
                fault.times -= 1
                return fault
        return None


class _Handler(BaseHTTPRequestHandler):
    server_fake: FakeApiServer
    protocol_version = "HTTP/1.1"
    # Headers and body are written separately; without this, Nagle and delayed ACKs add 40 ms.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass

    # --- plumbing ----------------------------------------------------------------------------------

    def _send_json(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _not_found(self, resource: str, name: str) -> None:
        self._send_json(
            404,
            _status(
                404,
                "NotFound",
                f'{resource}{"." + _GROUP[resource] if _GROUP[resource] else ""} "{name}" not found',
                {"name": name, "group": _GROUP[resource], "kind": resource},
            ),
        )

    def _handle(self, method: str) -> None:
        fake = self.server_fake
        split = urlsplit(self.path)
        query = dict(parse_qsl(split.query, keep_blank_values=True))
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        with fake._lock:
            fake.requests.append(
                Recorded(
                    method,
                    split.path,
                    query,
                    json.loads(raw) if raw else None,  # a copy: the store must not change what was sent
                    self.headers.get("Content-Type"),
                    {k.lower(): v for k, v in self.headers.items()},
                )
            )
            fault = fake._take_fault(method, split.path)
        if fault is not None:
            if fault.status == 410 and query.get("watch", "").lower() in ("true", "1"):
                event = {"type": "ERROR", "object": _status(410, fault.reason, fault.message)}
                data = (json.dumps(event) + "\n").encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            else:
                self._send_json(fault.status, _status(fault.status, fault.reason, fault.message))
            return
        for resource, pattern in _ROUTES:
            match = pattern.match(split.path)
            if match:
                break
        else:
            # What an API server says for a resource it does not serve (e.g. CRD not installed).
            self._send_json(404, _status(404, "NotFound", "the server could not find the requested resource"))
            return
        ns, name = match["ns"], match["name"]
        handler = getattr(self, f"_{method.lower()}_{'item' if name else 'collection'}", None)
        if handler is None:
            self._send_json(405, _status(405, "MethodNotAllowed", f"{method} is not supported"))
            return
        handler(resource, ns, name, query, body) if name else handler(resource, ns, query, body)

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    # --- verbs -------------------------------------------------------------------------------------

    def _post_collection(self, resource: str, ns: str, query: dict[str, str], body: Any) -> None:
        fake = self.server_fake
        name = body["metadata"]["name"]
        with fake._lock:
            if (resource, ns, name) in fake._objects:
                status = _status(
                    409,
                    "AlreadyExists",
                    f'{resource} "{name}" already exists',
                    {"name": name, "group": _GROUP[resource], "kind": resource},
                )
                created = None
            else:
                created = fake._create(resource, ns, body)
        if created is None:
            self._send_json(409, status)
        else:
            self._send_json(201, created)

    def _get_item(self, resource: str, ns: str, name: str, query: dict[str, str], body: Any) -> None:
        obj = self.server_fake.get(resource, ns, name)
        if obj is None:
            self._not_found(resource, name)
        else:
            self._send_json(200, obj)

    def _delete_item(self, resource: str, ns: str, name: str, query: dict[str, str], body: Any) -> None:
        fake = self.server_fake
        with fake._lock:
            obj = fake._objects.pop((resource, ns, name), None)
            if obj is not None:
                fake._write(resource, ns, "DELETED", obj)
                obj = json.loads(json.dumps(obj))
        if obj is None:
            self._not_found(resource, name)
        else:
            self._send_json(200, obj)

    def _patch_item(self, resource: str, ns: str, name: str, query: dict[str, str], body: Any) -> None:
        fake = self.server_fake
        content_type = (self.headers.get("Content-Type") or "").split(";")[0]
        if content_type != "application/merge-patch+json":
            # Only what the backend uses; a strategic merge or JSON patch would be a different test.
            self._send_json(415, _status(415, "UnsupportedMediaType", f"the fake does not serve {content_type}"))
            return
        with fake._lock:
            obj = fake._objects.get((resource, ns, name))
            if obj is not None:
                patched = merge_patch(obj, body)
                fake._objects[(resource, ns, name)] = patched
                fake._write(resource, ns, "MODIFIED", patched)
                patched = json.loads(json.dumps(patched))
        if obj is None:
            self._not_found(resource, name)
        else:
            self._send_json(200, patched)

    def _get_collection(self, resource: str, ns: str, query: dict[str, str], body: Any) -> None:
        if query.get("watch", "").lower() in ("true", "1"):
            self._watch(resource, ns, query)
            return
        fake = self.server_fake
        labels = query.get("labelSelector", "")
        fields = query.get("fieldSelector", "")
        with fake._lock:
            items = [
                json.loads(json.dumps(obj))
                for (r, n, _), obj in sorted(fake._objects.items())
                if r == resource
                and n == ns
                and _label_selector_matches(labels, obj["metadata"].get("labels") or {})
                and _field_selector_matches(fields, obj)
            ]
            rv = str(fake._rv)
        api_version = "v1" if resource == PODTEMPLATES else "autoscaling.x-k8s.io/v1"
        self._send_json(
            200, {"apiVersion": api_version, "kind": f"{_KIND[resource]}List", "metadata": {"resourceVersion": rv}, "items": items}
        )

    def _watch(self, resource: str, ns: str, query: dict[str, str]) -> None:
        fake = self.server_fake
        fields = query.get("fieldSelector", "")
        labels = query.get("labelSelector", "")
        timeout = float(query.get("timeoutSeconds") or 1800)
        deadline = time.monotonic() + timeout
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def send(event: dict[str, Any]) -> None:
            data = (json.dumps(event) + "\n").encode()
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        def matches(r: str, n: str, obj: dict[str, Any]) -> bool:
            return (
                r == resource
                and n == ns
                and _field_selector_matches(fields, obj)
                and _label_selector_matches(labels, obj["metadata"].get("labels") or {})
            )

        try:
            with fake._lock:
                since_text = query.get("resourceVersion")
                pending: list[dict[str, Any]] = []
                if since_text in (None, "", "0"):
                    # No version: the current objects first, as ADDED, then what changes.
                    since = fake._rv
                    pending = [
                        {"type": "ADDED", "object": json.loads(json.dumps(o))}
                        for (r, n, _), o in sorted(fake._objects.items())
                        if matches(r, n, o)
                    ]
                else:
                    since = int(since_text)
            for event in pending:
                send(event)
            while True:
                with fake._lock:
                    fresh = [e for e in fake._events if e[0] > since]
                    while not fresh and not fake._stopping and time.monotonic() < deadline:
                        fake._lock.wait(timeout=max(0.0, min(0.2, deadline - time.monotonic())))
                        fresh = [e for e in fake._events if e[0] > since]
                    stopping = fake._stopping
                for rv, r, n, type_, obj in fresh:
                    since = rv
                    if matches(r, n, obj):
                        send({"type": type_, "object": obj})
                if stopping or (not fresh and time.monotonic() >= deadline):
                    break
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass
        self.close_connection = True
