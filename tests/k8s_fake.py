"""A local HTTP fake of the Kubernetes resources admitflow's cluster-facing parts use: core/v1
PodTemplates and autoscaling.x-k8s.io/v1 ProvisioningRequests (the `kubernetes` ProvisioningRequest
backend), batch/v1 Jobs with their status subresource, events.k8s.io/v1 Events,
scheduling.k8s.io/v1 PriorityClasses and core/v1 Namespaces (the Kubernetes runner).

It is not an API server: no RBAC, no garbage collector, no admission. It keeps what the clients'
calls depend on: create/get/list/delete/patch, one resourceVersion counter for every write (as
etcd's revision), a `metadata.resourceVersion` in a merge patch taken as a precondition (409
Conflict when the object changed since), 404 and 409 answered with a `Status` body shaped like the
API server's,
`labelSelector` (`key=value` terms) and `fieldSelector=metadata.name=...`, lists in one namespace
or in all of them, paged with `limit` and `continue` from one snapshot, and `?watch=true` streaming
one JSON event per line (ADDED, MODIFIED, DELETED) from a resourceVersion, with BOOKMARK events when
asked for, and an ERROR event with code 410 when the resourceVersion is older than the last
`compact()` (or when an injected fault says 410 Gone), as an API server does. Every request is
recorded with the status it was answered with, so tests can assert exactly what a client sent;
watch streams are counted.

Jobs are kept as an apiserver keeps them (admitflow.jobs.store: a create gets its name from
`generateName`, its UID, defaults, pod labels and selector; a merge patch of the Job or of its
`/status` is refused with 409 for a stale resourceVersion and 422 when it breaks the update rules,
such as a pod template changed while the Job has a startTime), and every Job and Event stored is
checked against Kubernetes 1.37's OpenAPI schema (tests/k8s_schema.py) and the Event rules the
schema does not carry: a body the real API server would refuse is answered 422 and stored nowhere.
A stand-in Job controller answers each write of a Job with its own write, as Kubernetes' does:
the `Suspended` condition and `startTime` (admitflow.jobs.store.with_suspension), and the pods of a
suspended Job gone; the pods' counts and the Job's end are the test's to set (`set_job_status`,
`end_job`), or, with `job_run_seconds`, a resumed Job's pods are ready at once and it completes
that long after.

`python -m tests.k8s_fake --provision-after 1` runs it on its own (benchmarks), printing its URL,
with a stand-in cluster autoscaler that sets `Provisioned=True` on every ProvisioningRequest that
long after it is created (`--provision-spread S` adds up to S seconds at random), with the time it
did so in the condition's message; `GET /_fake/stats` answers the watch counts.
"""

from __future__ import annotations

import argparse
import bisect
import functools
import heapq
import json
import random
import re
import select
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

PODTEMPLATES = "podtemplates"
PROVISIONING_REQUESTS = "provisioningrequests"
JOBS = "jobs"
EVENTS = "events"
PRIORITY_CLASSES = "priorityclasses"
NAMESPACES = "namespaces"

# resource: (group, version, kind, namespaced)
_RESOURCES = {
    PODTEMPLATES: ("", "v1", "PodTemplate", True),
    PROVISIONING_REQUESTS: ("autoscaling.x-k8s.io", "v1", "ProvisioningRequest", True),
    JOBS: ("batch", "v1", "Job", True),
    EVENTS: ("events.k8s.io", "v1", "Event", True),
    PRIORITY_CLASSES: ("scheduling.k8s.io", "v1", "PriorityClass", False),
    NAMESPACES: ("", "v1", "Namespace", False),
}
_KIND = {r: kind for r, (_, _, kind, _) in _RESOURCES.items()}
_GROUP = {r: group for r, (group, _, _, _) in _RESOURCES.items()}
_API_VERSION = {r: f"{group}/{version}" if group else version for r, (group, version, _, _) in _RESOURCES.items()}
_SUBRESOURCES = {JOBS: ("status",)}


def _route(resource: str) -> re.Pattern[str]:
    group, version, _, namespaced = _RESOURCES[resource]
    prefix = f"/apis/{re.escape(group)}/{version}" if group else f"/api/{version}"
    namespace = "(?:/namespaces/(?P<ns>[^/]+))?" if namespaced else "(?P<ns>)"
    sub = "(?:/(?P<sub>" + "|".join(_SUBRESOURCES[resource]) + "))?" if resource in _SUBRESOURCES else "(?P<sub>)"
    return re.compile(f"^{prefix}{namespace}/{resource}(?:/(?P<name>[^/]+){sub})?$")


# A namespaced resource's path without a namespace is the collection across all namespaces (list
# and watch only); a cluster-scoped resource's objects have the namespace "".
_ROUTES = [(resource, _route(resource)) for resource in _RESOURCES]
STATS_PATH = "/_fake/stats"
# Items per page of a list when the client gives no `limit`.
_PAGE_ALL = 1 << 30
# Kubernetes' limits on an events.k8s.io/v1 Event (pkg/apis/core/validation/events.go).
EVENT_NOTE_LIMIT = 1024
EVENT_FIELD_LIMIT = 128


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, str]
    body: Any
    content_type: str | None
    headers: dict[str, str] = field(default_factory=dict)  # names in lower case
    status: int | None = None  # what it was answered with (200 for a watch)


@dataclass
class _Fault:
    method: str
    path: re.Pattern[str]
    status: int
    reason: str
    message: str
    times: int


@dataclass
class _Action:
    method: str
    path: re.Pattern[str]
    run: Callable[[], object]
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


class _Refused(Exception):
    """A write the fake refuses as the API server would: `code` and its Status body."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.body = code, _status(code, reason, message)


def event_errors(event: dict[str, Any]) -> list[str]:
    """What Kubernetes' ValidateEventCreate refuses of an events.k8s.io/v1 Event beyond its schema."""
    from admitflow.api.names import dns1123_subdomain_errors, qualified_name_errors

    errors = []
    for name in ("eventTime", "reportingController", "reportingInstance", "action", "reason"):
        if not event.get(name):
            errors.append(f"{name}: Required value")
    errors += [f"reportingController: Invalid value: {m}" for m in qualified_name_errors(event.get("reportingController") or "")]
    for name in ("reportingInstance", "action", "reason"):
        if len(event.get(name) or "") > EVENT_FIELD_LIMIT:
            errors.append(f"{name}: Too long: may not be more than {EVENT_FIELD_LIMIT} bytes")
    if len((event.get("note") or "").encode()) > EVENT_NOTE_LIMIT:
        errors.append(f"note: Too long: may not be more than {EVENT_NOTE_LIMIT} bytes")
    if event.get("type") not in ("Normal", "Warning"):
        errors.append(f"type: Invalid value: has invalid value: {event.get('type')}")
    name = (event.get("metadata") or {}).get("name") or ""
    errors += [f"metadata.name: Invalid value: {m}" for m in dns1123_subdomain_errors(name)]
    try:
        datetime.fromisoformat((event.get("eventTime") or "").replace("Z", "+00:00"))
    except ValueError:
        errors.append(f"eventTime: Invalid value: {event.get('eventTime')!r}: not an RFC 3339 time")
    return errors


def _check_event(event: dict[str, Any]) -> None:
    """422, as the API server answers an Event its schema or its rules refuse."""
    from tests.k8s_schema import SchemaError, check

    try:
        check(event)
    except SchemaError as err:
        raise _Refused(422, "Invalid", f"Event.events.k8s.io is invalid: {err}") from None
    errors = event_errors(event)
    if errors:
        raise _Refused(422, "Invalid", f"Event.events.k8s.io is invalid: {'; '.join(errors)}")


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
    """Start with `start()` (127.0.0.1, a free port), point a client at `url`, `stop()` at the end.

    `provision_after`: seconds after which a stand-in cluster autoscaler sets `Provisioned=True` on
    each new ProvisioningRequest (None: nobody does; tests call `set_condition`), plus up to
    `provision_spread` seconds at random; the message says when, in seconds since the epoch.
    `bookmark_seconds`: a watch that allows bookmarks gets a BOOKMARK after this long without an
    event, and one before the server ends it (None: only the one at the end).
    `job_run_seconds`: a resumed Job's pods are ready at once, and it completes this long after
    (None: the test sets the pods' counts and the end)."""

    def __init__(
        self,
        provision_after: float | None = None,
        bookmark_seconds: float | None = None,
        provision_spread: float = 0.0,
        job_run_seconds: float | None = None,
    ) -> None:
        self._lock = threading.Condition()
        self._objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self._rv = 100
        # (resourceVersion, resource, namespace, event type, object): the watch history, in order;
        # `_event_rvs` holds the first column, so that a watch finds where to start by bisection.
        self._events: list[tuple[int, str, str, str, dict[str, Any]]] = []
        self._event_rvs: list[int] = []
        # A watch from a resourceVersion below this one gets 410 Gone (see `compact`).
        self._compacted = 0
        self._faults: list[_Fault] = []
        self._actions: list[_Action] = []
        # Lists paged with `limit`: the snapshot each `continue` token reads from.
        self._snapshots: dict[str, tuple[str, list[dict[str, Any]]]] = {}
        # Bumped by `drop_watches`: open watch streams end at once, without their last chunk.
        self._drops = 0
        self._stopping = False
        self.requests: list[Recorded] = []
        self.open_watches = 0
        self.peak_watches = 0
        self.provision_after = provision_after
        self.provision_spread = provision_spread
        self.bookmark_seconds = bookmark_seconds
        self._provisions: list[tuple[float, str, str]] = []
        self.job_run_seconds = job_run_seconds
        # (due, namespace, name, the startTime of the run it ends)
        self._job_ends: list[tuple[float, str, str, str]] = []
        self._server: ThreadingHTTPServer | None = None
        self._threads: list[threading.Thread] = []

    # --- lifecycle -------------------------------------------------------------------------------

    def start(self, port: int = 0) -> FakeApiServer:
        fake = self

        class Handler(_Handler):
            server_fake = fake

        self._server = _Server(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        serve = threading.Thread(
            target=functools.partial(self._server.serve_forever, poll_interval=0.05), name="fake-apiserver", daemon=True
        )
        self._threads = [serve]
        if self.provision_after is not None:
            self._threads.append(threading.Thread(target=self._autoscale, name="fake-apiserver-autoscaler", daemon=True))
        if self.job_run_seconds is not None:
            self._threads.append(threading.Thread(target=self._end_jobs, name="fake-apiserver-job-controller", daemon=True))
        for thread in self._threads:
            thread.start()
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

    def watches(self) -> list[Recorded]:
        """The watch requests received, in order."""
        return [r for r in self.calls("GET") if r.query.get("watch", "").lower() in ("true", "1")]

    def get(self, resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            obj = self._objects.get((resource, namespace, name))
            return json.loads(json.dumps(obj)) if obj is not None else None

    def names(self, resource: str, namespace: str = "default") -> list[str]:
        with self._lock:
            return sorted(n for (r, ns, n) in self._objects if r == resource and ns == namespace)

    @property
    def resource_version(self) -> str:
        """The last resourceVersion written."""
        with self._lock:
            return str(self._rv)

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

    def before(self, method: str, path: str, action: Callable[[], object], times: int = 1) -> None:
        """Run `action` (from the server's thread, without the lock) before serving each of the
        next `times` requests whose method matches and path matches the regex `path`: someone else's
        write landing between the backend's read and its write."""
        with self._lock:
            self._actions.append(_Action(method, re.compile(path), action, times))

    def patch(self, resource: str, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """Apply a JSON merge patch as someone else would (a MODIFIED event)."""
        with self._lock:
            patched = merge_patch(self._objects[(resource, namespace, name)], patch)
            self._objects[(resource, namespace, name)] = patched
            self._write(resource, namespace, "MODIFIED", patched)
            return json.loads(json.dumps(patched))

    def create_job(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """Create a Job as `kubectl create` would (its name generated from `generateName`)."""
        with self._lock:
            return self._create_job(manifest["metadata"].get("namespace") or "default", json.loads(json.dumps(manifest)))

    def set_job_status(self, namespace: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
        """What Kubernetes' Job controller writes: `status` merged into the Job's (a MODIFIED event)."""
        with self._lock:
            return self._write_job(namespace, name, {"status": status}, "status")

    def end_job(self, namespace: str, name: str, succeeded: bool = True, message: str | None = None) -> dict[str, Any]:
        """The Job ends, as the Job controller ends it: its pods succeeded (`completions` of them)
        and the condition Complete, or the condition Failed; `message` the condition's."""
        from admitflow.api.job import Job
        from admitflow.jobs import job_controller

        with self._lock:
            job = Job.model_validate(_job_fields(self._objects[(JOBS, namespace, name)]))
            return self._write_job(namespace, name, {"status": _ending(job, succeeded, message, job_controller)}, "status")

    def events_about(self, name: str, namespace: str = "default") -> list[tuple[str, str]]:
        """(reason, note) of the Events regarding the object `name`, oldest first."""
        with self._lock:
            found = [o for (r, ns, _), o in self._objects.items() if r == EVENTS and ns == namespace and o["regarding"]["name"] == name]
        return [(e["reason"], e.get("note", "")) for e in sorted(found, key=lambda e: int(e["metadata"]["resourceVersion"]))]

    def events(self, reason: str | None = None) -> list[dict[str, Any]]:
        """The Events stored (of `reason`, when given)."""
        with self._lock:
            return [json.loads(json.dumps(o)) for (r, _, _), o in self._objects.items() if r == EVENTS and reason in (None, o.get("reason"))]

    def refused(self) -> list[Recorded]:
        """The writes answered 400 or 422: bodies a real API server would not have taken."""
        return [r for r in self.calls() if r.status in (400, 422)]

    def compact(self) -> None:
        """Forget the watch history, as etcd's compaction does: a watch from any resourceVersion
        written so far gets an ERROR event with code 410 Gone."""
        with self._lock:
            self._compacted = self._rv

    def drop_watches(self) -> None:
        """Cut every open watch stream (a restarting API server, a load balancer's idle timeout)."""
        with self._lock:
            self._drops += 1
            self._lock.notify_all()

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {
                "openWatches": self.open_watches,
                "peakWatches": self.peak_watches,
                "watchRequests": sum(1 for r in self.requests if r.query.get("watch", "").lower() in ("true", "1")),
                "requests": len(self.requests),
            }

    # --- the store (callers hold the lock) --------------------------------------------------------

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _write(self, resource: str, namespace: str, type_: str, obj: dict[str, Any]) -> None:
        obj["metadata"]["resourceVersion"] = self._next_rv()
        self._events.append((self._rv, resource, namespace, type_, json.loads(json.dumps(obj))))
        self._event_rvs.append(self._rv)
        self._lock.notify_all()

    def _create(self, resource: str, namespace: str, obj: dict[str, Any], keep_identity: bool = False) -> dict[str, Any]:
        meta = obj.setdefault("metadata", {})
        if not _RESOURCES[resource][3]:
            namespace = ""
        else:
            meta["namespace"] = namespace
        if not keep_identity:
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = _now()
        # Fields a real API server adds that the clients' models do not know.
        meta["managedFields"] = _managed_fields(obj)
        if resource == PROVISIONING_REQUESTS:
            meta["generation"] = 1
            # The CRD has a status subresource: status sent on create is dropped.
            obj.pop("status", None)
            if self.provision_after is not None:
                due = time.monotonic() + self.provision_after + random.uniform(0, self.provision_spread)
                heapq.heappush(self._provisions, (due, namespace, meta["name"]))
        self._objects[(resource, namespace, meta["name"])] = obj
        self._write(resource, namespace, "ADDED", obj)
        return json.loads(json.dumps(obj))

    def _create_job(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        """The apiserver's create of a Job (admitflow.jobs.store.created), checked as it checks it."""
        from pydantic import ValidationError

        from admitflow.api import field_error as fe
        from admitflow.api.job import Job
        from admitflow.jobs import store

        body.setdefault("metadata", {})["namespace"] = namespace
        try:
            job = store.created(Job.model_validate(body), str(uuid.uuid4()), datetime.now(UTC), random.choice)
        except ValidationError as err:
            raise _Refused(422, "Invalid", f"Job.batch is invalid: {fe.from_pydantic(err.errors()[0], Job)}") from None
        except store.JobStoreError as err:
            raise _Refused(err.status, err.reason, str(err)) from None
        name = job.metadata.name or ""
        if (JOBS, namespace, name) in self._objects:
            raise _Refused(409, "AlreadyExists", str(store.JobAlreadyExists(name)))
        wire = _stored(job)
        created = self._create(JOBS, namespace, wire, keep_identity=True)
        self._run_job_controller(namespace, name)
        return created

    def _write_job(self, namespace: str, name: str, patch: dict[str, Any], subresource: str = "") -> dict[str, Any]:
        """A merge patch of a Job (or of its status) as the apiserver takes it (admitflow.jobs.store.patched):
        409 for a stale resourceVersion, 422 for a result it refuses; then the Job controller's answer."""
        from admitflow.api.job import Job
        from admitflow.jobs import store

        obj = self._objects.get((JOBS, namespace, name))
        if obj is None:
            raise _Refused(404, "NotFound", str(store.JobNotFound(name)))
        current = Job.model_validate(_job_fields(obj))
        try:
            job = store.patched(current, patch, subresource)  # type: ignore[arg-type]
        except store.JobStoreError as err:
            raise _Refused(err.status, err.reason, str(err)) from None
        if job is not current:
            wire = _stored(job)
            wire["metadata"]["managedFields"] = obj["metadata"].get("managedFields")
            self._objects[(JOBS, namespace, name)] = wire
            self._write(JOBS, namespace, "MODIFIED", wire)
            obj = wire
        answer = json.loads(json.dumps(obj))
        self._run_job_controller(namespace, name)
        return answer

    def _run_job_controller(self, namespace: str, name: str) -> None:
        """The stand-in Job controller's answer to a write of the Job, as its own write: the
        Suspended condition and startTime; a suspended Job's pods gone; with `job_run_seconds`, a
        resumed Job's pods ready and its end planned."""
        from admitflow.api.job import Job
        from admitflow.jobs import batch_job, store

        obj = self._objects[(JOBS, namespace, name)]
        job = Job.model_validate(_job_fields(obj))
        after = store.with_suspension(job, datetime.now(UTC))
        status = after.to_wire().get("status") or {}
        if job.spec.suspend is True:
            status.pop("active", None)
            status.pop("ready", None)
        elif self.job_run_seconds is not None and batch_job.finished(job) is None and not job.status.active:
            status["active"] = status["ready"] = batch_job.pods_count(job)
            heapq.heappush(self._job_ends, (time.monotonic() + self.job_run_seconds, namespace, name, status.get("startTime", "")))
        if status != (obj.get("status") or {}):
            wire = {**obj, "status": status}
            self._objects[(JOBS, namespace, name)] = wire
            self._write(JOBS, namespace, "MODIFIED", wire)

    def _end_jobs(self) -> None:
        """The stand-in Job controller of `job_run_seconds`: each resumed Job completes on time,
        unless it was suspended (or resumed again) since."""
        from admitflow.api.job import Job
        from admitflow.jobs import job_controller

        with self._lock:
            while not self._stopping:
                now = time.monotonic()
                while self._job_ends and self._job_ends[0][0] <= now:
                    _, namespace, name, started = heapq.heappop(self._job_ends)
                    obj = self._objects.get((JOBS, namespace, name))
                    if obj is None or obj["spec"].get("suspend") or (obj.get("status") or {}).get("startTime", "") != started:
                        continue
                    job = Job.model_validate(_job_fields(obj))
                    self._write_job(namespace, name, {"status": _ending(job, True, None, job_controller)}, "status")
                wait = self._job_ends[0][0] - now if self._job_ends else 0.2
                self._lock.wait(timeout=max(0.001, min(wait, 0.2)))

    def _take_fault(self, method: str, path: str) -> _Fault | None:
        for fault in self._faults:
            if fault.method == method and fault.path.search(path) and fault.times > 0:
                fault.times -= 1
                return fault
        return None

    def _take_actions(self, method: str, path: str) -> list[Callable[[], object]]:
        found = []
        for action in self._actions:
            if action.method == method and action.path.search(path) and action.times > 0:
                action.times -= 1
                found.append(action.run)
        return found

    def _events_after(self, since: int) -> list[tuple[int, str, str, str, dict[str, Any]]]:
        return self._events[bisect.bisect_right(self._event_rvs, since) :]

    def _autoscale(self) -> None:
        """The stand-in cluster autoscaler of `provision_after`."""
        with self._lock:
            while not self._stopping:
                now = time.monotonic()
                while self._provisions and self._provisions[0][0] <= now:
                    _, namespace, name = heapq.heappop(self._provisions)
                    if (PROVISIONING_REQUESTS, namespace, name) in self._objects:
                        self.set_condition(namespace, name, "Provisioned", message=f"provisioned at {time.time():.6f}")
                wait = self._provisions[0][0] - now if self._provisions else 0.2
                self._lock.wait(timeout=max(0.001, min(wait, 0.2)))


def _managed_fields(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"manager": "fake", "operation": "Update", "apiVersion": obj.get("apiVersion", "v1"), "time": _now()}]


def _job_fields(obj: dict[str, Any]) -> dict[str, Any]:
    """A stored Job without what the model does not hold (managedFields)."""
    return {**obj, "metadata": {k: v for k, v in obj["metadata"].items() if k != "managedFields"}}


def _stored(job: Any) -> dict[str, Any]:
    """The Job as stored, once the schema and the pod template's rules take it (422 otherwise)."""
    from admitflow.api.pod_template_validation import pod_template_errors
    from tests.k8s_schema import SchemaError, check

    wire = job.to_wire()
    if not wire.get("status"):
        wire.pop("status", None)
    try:
        check(wire)
    except SchemaError as err:
        raise _Refused(422, "Invalid", f'Job.batch "{job.metadata.name}" is invalid: {err}') from None
    errors = pod_template_errors(wire["spec"]["template"], "spec.template")
    if errors:
        raise _Refused(422, "Invalid", f'Job.batch "{job.metadata.name}" is invalid: {errors[0]}')
    return wire


def _ending(job: Any, succeeded: bool, message: str | None, job_controller: Any) -> dict[str, Any]:
    """The status of a Job that ends now: Complete with its pods succeeded, or Failed."""
    now = datetime.now(UTC)
    count = job.spec.completions if job.spec.completions is not None else (job.spec.parallelism or 1)
    done = job.model_copy(update={"status": job.status.model_copy(update={"succeeded": count, "active": None})})
    condition = job_controller.ending(done, now)
    if not succeeded:
        condition = condition.model_copy(update={"type": "Failed", "reason": "BackoffLimitExceeded",
                                                 "message": "Job has reached the specified backoff limit"})
    if message is not None:
        condition = condition.model_copy(update={"message": message})
    status = {"active": None, "ready": None, "conditions": [*(c.to_wire() for c in job.status.conditions or ()), condition.to_wire()]}
    if succeeded:
        status.update(succeeded=count, completionTime=condition.to_wire()["lastTransitionTime"])
    else:
        status["failed"] = (job.status.failed or 0) + 1
    return status


class _Server(ThreadingHTTPServer):
    # The backends open up to about a hundred connections at once.
    request_queue_size = 256

    def process_request(self, request: Any, client_address: Any) -> None:
        # ThreadingHTTPServer's own, with a thread name that says whose it is: tests that count a
        # backend's threads leave these out.
        thread = threading.Thread(
            target=self.process_request_thread, args=(request, client_address), name="fake-apiserver-connection", daemon=True
        )
        thread.start()


class _Handler(BaseHTTPRequestHandler):
    server_fake: FakeApiServer
    protocol_version = "HTTP/1.1"
    # Headers and body are written separately; without this, Nagle and delayed ACKs add 40 ms.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass

    # --- plumbing ----------------------------------------------------------------------------------

    def _client_gone(self) -> bool:
        """Whether the client closed its end (as an API server notices a watcher that went away)."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def _send_json(self, code: int, body: dict[str, Any]) -> None:
        record = getattr(self, "_record", None)
        if record is not None:
            record.status = code
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
        if split.path == STATS_PATH:
            self._send_json(200, fake.stats())
            return
        self._record = Recorded(
            method,
            split.path,
            query,
            json.loads(raw) if raw else None,  # a copy: the store must not change what was sent
            self.headers.get("Content-Type"),
            {k.lower(): v for k, v in self.headers.items()},
        )
        with fake._lock:
            fake.requests.append(self._record)
            fault = fake._take_fault(method, split.path)
            actions = fake._take_actions(method, split.path)
        for action in actions:
            action()
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
        ns, name, sub = match["ns"], match["name"], match["sub"] or ""
        handler = getattr(self, f"_{method.lower()}_{'item' if name else 'collection'}", None)
        if handler is None or (ns is None and (name or method != "GET")) or (sub and method != "PATCH"):
            self._send_json(405, _status(405, "MethodNotAllowed", f"{method} is not supported"))
            return
        try:
            if name and method == "PATCH":
                handler(resource, ns, name, query, body, sub)
            else:
                handler(resource, ns, name, query, body) if name else handler(resource, ns, query, body)
        except _Refused as refused:
            self._send_json(refused.code, refused.body)

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
        if resource == JOBS:
            with fake._lock:
                created = fake._create_job(ns, body)
            self._send_json(201, created)
            return
        if resource == EVENTS:
            _check_event(body)
        meta = body.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        name = meta["name"]
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

    def _patch_item(self, resource: str, ns: str, name: str, query: dict[str, str], body: Any, sub: str = "") -> None:
        fake = self.server_fake
        content_type = (self.headers.get("Content-Type") or "").split(";")[0]
        if content_type != "application/merge-patch+json":
            # Only what the clients use; a strategic merge or JSON patch would be a different test.
            self._send_json(415, _status(415, "UnsupportedMediaType", f"the fake does not serve {content_type}"))
            return
        if resource == JOBS:
            with fake._lock:
                patched = fake._write_job(ns, name, body or {}, sub)
            self._send_json(200, patched)
            return
        precondition = ((body or {}).get("metadata") or {}).get("resourceVersion")
        with fake._lock:
            obj = fake._objects.get((resource, ns, name))
            conflict = obj is not None and precondition is not None and precondition != obj["metadata"]["resourceVersion"]
            if obj is not None and not conflict:
                patched = merge_patch(obj, body)
                fake._objects[(resource, ns, name)] = patched
                fake._write(resource, ns, "MODIFIED", patched)
                patched = json.loads(json.dumps(patched))
        if obj is None:
            self._not_found(resource, name)
        elif conflict:
            self._send_json(
                409,
                _status(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on {resource}{"." + _GROUP[resource] if _GROUP[resource] else ""} '
                    f'"{name}": the object has been modified; please apply your changes to the latest version and try again',
                    {"name": name, "group": _GROUP[resource], "kind": resource},
                ),
            )
        else:
            self._send_json(200, patched)

    def _get_collection(self, resource: str, ns: str | None, query: dict[str, str], body: Any) -> None:
        if query.get("watch", "").lower() in ("true", "1"):
            self._watch(resource, ns, query)
            return
        fake = self.server_fake
        labels = query.get("labelSelector", "")
        fields = query.get("fieldSelector", "")
        limit = int(query.get("limit") or 0) or _PAGE_ALL
        token, _, offset_text = (query.get("continue") or "").partition(":")
        with fake._lock:
            if token:
                # Every page of a paged list comes from the snapshot its first page was cut from.
                if token not in fake._snapshots:
                    self._send_json(410, _status(410, "Expired", "The provided continue parameter is too old"))
                    return
                rv, items = fake._snapshots[token]
                offset = int(offset_text)
            else:
                rv = str(fake._rv)
                items = [
                    json.loads(json.dumps(obj))
                    for (r, n, _), obj in sorted(fake._objects.items())
                    if r == resource
                    and (ns is None or n == ns)
                    and _label_selector_matches(labels, obj["metadata"].get("labels") or {})
                    and _field_selector_matches(fields, obj)
                ]
                offset = 0
                token = uuid.uuid4().hex
            page = items[offset : offset + limit]
            more = offset + limit < len(items)
            if more:
                fake._snapshots[token] = (rv, items)
            else:
                fake._snapshots.pop(token, None)
        metadata: dict[str, Any] = {"resourceVersion": rv}
        if more:
            metadata["continue"] = f"{token}:{offset + limit}"
            metadata["remainingItemCount"] = len(items) - offset - limit
        self._send_json(200, {"apiVersion": _API_VERSION[resource], "kind": f"{_KIND[resource]}List", "metadata": metadata, "items": page})

    def _watch(self, resource: str, ns: str | None, query: dict[str, str]) -> None:
        fake = self.server_fake
        fields = query.get("fieldSelector", "")
        labels = query.get("labelSelector", "")
        bookmarks = query.get("allowWatchBookmarks", "").lower() in ("true", "1")
        timeout = float(query.get("timeoutSeconds") or 1800)
        deadline = time.monotonic() + timeout
        kind = _KIND[resource]
        api_version = _API_VERSION[resource]
        self._record.status = 200
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def send(event: dict[str, Any]) -> None:
            data = (json.dumps(event) + "\n").encode()
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        def bookmark(rv: int) -> dict[str, Any]:
            return {"type": "BOOKMARK", "object": {"kind": kind, "apiVersion": api_version, "metadata": {"resourceVersion": str(rv)}}}

        def matches(r: str, n: str, obj: dict[str, Any]) -> bool:
            return (
                r == resource
                and (ns is None or n == ns)
                and _field_selector_matches(fields, obj)
                and _label_selector_matches(labels, obj["metadata"].get("labels") or {})
            )

        with fake._lock:
            fake.open_watches += 1
            fake.peak_watches = max(fake.peak_watches, fake.open_watches)
            drops = fake._drops
        dropped = False
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
                    if since < fake._compacted:
                        pending = [{"type": "ERROR", "object": _status(410, "Expired", f"too old resource version: {since} ({fake._compacted})")}]
            for event in pending:
                send(event)
            if pending and pending[0]["type"] == "ERROR":
                return
            quiet_since = checked = time.monotonic()
            while True:
                if time.monotonic() - checked >= 0.2:
                    # A watcher that went away is noticed even while other objects' events keep a
                    # filtered watch busy without writing to it.
                    if self._client_gone():
                        return
                    checked = time.monotonic()
                with fake._lock:
                    fresh = fake._events_after(since)
                    if not fresh and not fake._stopping and fake._drops == drops and time.monotonic() < deadline:
                        fake._lock.wait(timeout=max(0.0, min(0.2, deadline - time.monotonic())))
                        fresh = fake._events_after(since)
                    stopping = fake._stopping
                    dropped = fake._drops != drops
                    current = fake._rv
                if dropped:
                    return
                for rv, r, n, type_, obj in fresh:
                    since = rv
                    if matches(r, n, obj):
                        send({"type": type_, "object": obj})
                        quiet_since = time.monotonic()
                now = time.monotonic()
                if stopping or (not fresh and now >= deadline):
                    if bookmarks:
                        # An API server sends one before it ends a watch: where to go on from.
                        send(bookmark(current))
                    break
                if not fresh and bookmarks and fake.bookmark_seconds is not None and now - quiet_since >= fake.bookmark_seconds:
                    send(bookmark(current))
                    since = current
                    quiet_since = now
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            with fake._lock:
                fake.open_watches -= 1
            self.close_connection = True
            if dropped:
                # No last chunk: the client sees the stream break, not end.
                try:
                    self.connection.shutdown(2)
                except OSError:
                    pass


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.k8s_fake", description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--provision-after", type=float, default=None, help="seconds; default: never")
    parser.add_argument("--provision-spread", type=float, default=0.0, help="up to this many seconds more, at random")
    parser.add_argument("--bookmark-seconds", type=float, default=None)
    args = parser.parse_args(argv)
    fake = FakeApiServer(
        provision_after=args.provision_after, bookmark_seconds=args.bookmark_seconds, provision_spread=args.provision_spread
    ).start(args.port)
    print(fake.url, flush=True)
    # Runs until its standard input closes (the parent went away) or it is killed.
    sys.stdin.read()
    fake.stop()


if __name__ == "__main__":
    main()
