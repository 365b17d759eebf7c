"""`KubernetesJobs`: a cluster's batch/v1 Jobs as a `JobApi` (activities/jobs/api.py), for the
Kubernetes runner (activities/jobs/kube_runner.py), through the asyncio client admitflow's
cluster-facing parts share (activities/kubernetes_api.py).

- One list+watch of every Job in the cluster (the shared informer, activities/informer.py:
  resourceVersion, bookmarks, a new list on 410 Gone), whose changes go to `on_change`. Reads come
  from it, as a controller's cached client reads (no request): the newer of the watch's copy and
  the answer to this runner's own last write. A Job the watch does not hold yet, or whose last
  write met a conflict (the copy lags), is read from the server once.
- Writes are JSON merge patches of the Job or of its status subresource, carrying the
  resourceVersion they were computed from (activities/jobs/reconciler.py computes them): a stale
  one is answered 409 (`JobConflict`), a Job that is gone 404 (`JobNotFound`), a body the server
  refuses 422 (`JobStoreError`, not retried).
- Kueue's events on a Job (`record_event`): events.k8s.io/v1 Events from the reporting controller
  `admitflow.io/kube-runner`, the note cut to the 1024 bytes the API server allows, as Kueue's
  recorder cuts it. An Event that cannot be written is logged, never an error: an event recorder
  drops what it cannot send.
- The cluster's PriorityClasses (`priority_classes`), which a Job's Workload takes its priority
  from, and its namespaces' labels (`namespace_labels`), which the managed namespaces' selector reads.

Every request runs on the caller's event loop: no thread per Job, none per request.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import structlog

from admitflow.activities.informer import Informer, Key, newer
from admitflow.activities.jobs.api import JobConflict, JobNotFound, JobStoreError, Subresource
from admitflow.activities.kubernetes_api import (
    MERGE_PATCH,
    Collection,
    KubernetesApi,
    KubernetesApiError,
    load_configuration,
    not_served,
    object_not_found,
    one_line,
    parse_stored,
)
from admitflow.api.job import API_VERSION, KIND, Job
from admitflow.api.priority_class import PriorityClass

if TYPE_CHECKING:
    from kubernetes.aio.client import Configuration

log = structlog.get_logger("admitflow.kube_runner")

ALL_JOBS = "Jobs in all namespaces"
ALL_PRIORITY_CLASSES = "PriorityClasses"
ALL_NAMESPACES = "Namespaces"
REPORTING_CONTROLLER = "admitflow.io/kube-runner"
# Kubernetes' limits on an Event (pkg/apis/core/validation/events.go).
NOTE_LIMIT = 1024
REPORTING_INSTANCE_LIMIT = 128


def jobs_path(namespace: str | None = None, name: str | None = None, subresource: Subresource = "") -> str:
    path = "/apis/batch/v1" + (f"/namespaces/{namespace}" if namespace else "") + "/jobs"
    if name:
        path += f"/{name}" + (f"/{subresource}" if subresource else "")
    return path


def truncated(note: str, limit: int = NOTE_LIMIT) -> str:
    """Kueue's truncation of an event's note: at most `limit` bytes of UTF-8, a cut one ending in
    ` ...` that fills the limit exactly."""
    data = note.encode()
    if len(data) <= limit:
        return note
    suffix = " ..."
    return data[: limit - len(suffix)].decode(errors="ignore") + suffix


def event_body(job: Job, reason: str, note: str, event_type: str, instance: str, now: datetime) -> dict[str, Any]:
    """An events.k8s.io/v1 Event regarding `job`, named as client-go's recorder names one."""
    meta = job.metadata
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": f"{meta.name}.{time.time_ns():x}", "namespace": meta.namespace},
        "eventTime": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "reportingController": REPORTING_CONTROLLER,
        "reportingInstance": instance[:REPORTING_INSTANCE_LIMIT],
        "action": reason,
        "reason": reason,
        "regarding": {
            "apiVersion": API_VERSION, "kind": KIND, "namespace": meta.namespace, "name": meta.name, "uid": meta.uid,
            "resourceVersion": meta.resource_version,
        },
        "note": truncated(note),
        "type": event_type,
    }


def parse_job(obj: dict[str, Any]) -> Job:
    """A Job as the server answers it, as admitflow's model; a Job that does not parse is a
    KubernetesApiError naming it."""
    return parse_stored(Job, obj)


class KubernetesJobs:
    """See the module doc. `on_change(key, obj)` (given, or set before `start()`) hears every new
    state of a Job and every Job gone (None); `watch_seconds` is the watch's `timeoutSeconds`,
    `page_size` the objects per page of a list. `start()` inside the event loop that uses it,
    `await close()` at the end."""

    def __init__(
        self,
        configuration: Configuration,
        *,
        on_change: Callable[[Key, dict[str, Any] | None], None] | None = None,
        watch_seconds: int = 300,
        call_seconds: float = 60.0,
        page_size: int = 500,
        instance: str | None = None,
    ) -> None:
        self.api = KubernetesApi(configuration, call_seconds=call_seconds)
        self.host = configuration.host
        self._page_size = page_size
        self.instance = instance or socket.gethostname()
        self.on_change = on_change
        jobs = Collection(self.api, ALL_JOBS, jobs_path(), page_size, watch_seconds, _missing)
        self.informer = Informer(jobs, what=ALL_JOBS, on_stop=self.api.close, on_change=self._changed)
        # The answer to this runner's last write of a Job, until the watch has it too; and the Jobs
        # whose last write conflicted: the watch's copy lags, read them from the server.
        self._written: dict[Key, dict[str, Any]] = {}
        self._stale: set[Key] = set()

    @classmethod
    def from_config(cls, kubeconfig: str | None = None, context: str | None = None, **options: Any) -> KubernetesJobs:
        return cls(load_configuration(kubeconfig, context), **options)

    def start(self) -> None:
        self.informer.start()

    async def close(self) -> None:
        await self.informer.close()
        await self.api.close()

    # --- reads -------------------------------------------------------------------------------------

    def stored(self, key: Key) -> dict[str, Any] | None:
        """The Job as this runner last saw it (the watch's copy, or the answer to its own write,
        whichever is newer), or None when the watch holds none."""
        watched, written = self.informer.get(key), self._written.get(key)
        if written is not None and (watched is None or newer(_rv(written), _rv(watched))):
            return written
        self._written.pop(key, None)
        return watched

    def _changed(self, key: Key, obj: dict[str, Any] | None) -> None:
        if obj is None:
            # Gone: what this runner wrote before is no news of it.
            self._written.pop(key, None)
            self._stale.discard(key)
        if self.on_change is not None:
            self.on_change(key, obj)

    async def get_job(self, namespace: str, name: str) -> Job:
        key = (namespace, name)
        obj = None if key in self._stale else self.stored(key)
        if obj is None:
            self._stale.discard(key)
            obj = await self._read(namespace, name)
            if obj is None:
                raise JobNotFound(name)
            self._remember(key, obj)
        return parse_job(obj)

    async def _read(self, namespace: str, name: str) -> dict[str, Any] | None:
        what = f"Job {namespace}/{name}"
        status, obj = await self.api.call("read", what, "GET", jobs_path(namespace, name), ok=(404,))
        if status == 404:
            if not object_not_found(obj, name):
                raise _missing("read", obj)
            return None
        return obj

    # --- writes ------------------------------------------------------------------------------------

    async def patch_job(self, namespace: str, name: str, patch: dict[str, Any], subresource: Subresource = "") -> Job:
        key = (namespace, name)
        what = f"Job {namespace}/{name}" + (" (status)" if subresource else "")
        status, obj = await self.api.call(
            "patch", what, "PATCH", jobs_path(namespace, name, subresource), body=patch, content_type=MERGE_PATCH, ok=(404, 409, 422)
        )
        if status == 409:
            self._stale.add(key)
            raise JobConflict(name)
        if status == 404:
            if not object_not_found(obj, name):
                raise _missing("patch", obj)
            self._written.pop(key, None)
            raise JobNotFound(name)
        if status == 422:
            raise JobStoreError(one_line(f"patch {what}: {obj.get('message') or 'Invalid'}"))
        self._remember(key, obj)
        return parse_job(obj)

    def _remember(self, key: Key, obj: dict[str, Any]) -> None:
        watched = self.informer.get(key)
        if watched is None or newer(_rv(obj), _rv(watched)):
            self._written[key] = obj

    async def record_event(self, job: Job, reason: str, note: str, event_type: str = "Normal") -> None:
        """Kueue's event `reason` with `note` on the Job; logged, not raised, when it cannot be written."""
        namespace = job.metadata.namespace
        body = event_body(job, reason, note, event_type, self.instance, datetime.now(UTC))
        try:
            await self.api.call("create", f"Event {reason} of Job {namespace}/{job.metadata.name}", "POST",
                                f"/apis/events.k8s.io/v1/namespaces/{namespace}/events", body=body)
        except Exception as exc:  # noqa: BLE001 - an event recorder drops what it cannot send
            log.warning("event_not_recorded", job=f"{namespace}/{job.metadata.name}", reason=reason, error=str(exc))

    async def priority_classes(self) -> dict[str, PriorityClass]:
        """The cluster's PriorityClasses by name."""
        found: dict[str, PriorityClass] = {}
        for item in await self.api.list_all(ALL_PRIORITY_CLASSES, "/apis/scheduling.k8s.io/v1/priorityclasses", self._page_size,
                                            _missing_priority_classes):
            try:
                pc = parse_stored(PriorityClass, {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", **item})
            except KubernetesApiError as exc:
                log.warning("priority_class_skipped", error=str(exc))
                continue
            found[pc.metadata.name] = pc
        return found

    async def namespace_labels(self) -> dict[str, dict[str, str]]:
        """Every namespace's labels, by name (Kueue's managedJobsNamespaceSelector reads them)."""
        items = await self.api.list_all(ALL_NAMESPACES, "/api/v1/namespaces", self._page_size, _missing_namespaces)
        return {(i.get("metadata") or {}).get("name") or "": dict((i.get("metadata") or {}).get("labels") or {}) for i in items}


def _rv(obj: dict[str, Any]) -> str | None:
    return (obj.get("metadata") or {}).get("resourceVersion")


_missing = not_served(ALL_JOBS, "does the API server serve batch/v1?")
_missing_priority_classes = not_served(ALL_PRIORITY_CLASSES)
_missing_namespaces = not_served(ALL_NAMESPACES)
