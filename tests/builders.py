"""Kueue objects for tests, built from manifests the way users write them."""

from __future__ import annotations

from typing import Any

from admitflow.api import parse_manifest
from admitflow.api.workload import RUNNER_ANNOTATION

V1BETA2 = "kueue.x-k8s.io/v1beta2"


def manifest(data: dict[str, Any]):
    obj, _warnings = parse_manifest(data)
    return obj


def flavor_manifest(name: str = "default", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": V1BETA2, "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": spec}


def cluster_queue_manifest(
    name: str = "cq",
    quotas: dict[str, dict[str, str]] | None = None,
    strategy: str | None = None,
    checks: list[dict[str, Any]] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """`quotas` is flavor -> resource -> nominal quota, in flavor order, one resource group."""
    quotas = quotas or {"default": {"cpu": "4"}}
    covered = list(next(iter(quotas.values())))
    body: dict[str, Any] = {
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": covered,
                "flavors": [
                    {"name": f, "resources": [{"name": r, "nominalQuota": q} for r, q in res.items()]}
                    for f, res in quotas.items()
                ],
            }
        ],
        **spec,
    }
    if strategy:
        body["queueingStrategy"] = strategy
    if checks is not None:
        body["admissionChecksStrategy"] = {"admissionChecks": checks}
    return {"apiVersion": V1BETA2, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": body}


def local_queue_manifest(
    name: str = "lq", cluster_queue: str = "cq", namespace: str = "default", runner: str | None = None, **spec: Any
) -> dict[str, Any]:
    """A LocalQueue; with `runner`, its workloads are started on that runner's task queue once admitted."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if runner is not None:
        metadata["annotations"] = {RUNNER_ANNOTATION: runner}
    return {
        "apiVersion": V1BETA2,
        "kind": "LocalQueue",
        "metadata": metadata,
        "spec": {"clusterQueue": cluster_queue, **spec},
    }


def workload_manifest(
    name: str,
    cpu: str = "1",
    queue: str = "lq",
    priority: int | None = None,
    namespace: str = "default",
    count: int = 1,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "queueName": queue,
        "podSets": [
            {
                "name": "main",
                "count": count,
                "template": {"spec": {"containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}], "restartPolicy": "Never"}},
            }
        ],
    }
    if priority is not None:
        spec["priority"] = priority
    return {"apiVersion": V1BETA2, "kind": "Workload", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def configuration_manifest(**wait_for_pods_ready: Any) -> dict[str, Any]:
    """Kueue's Configuration with these waitForPodsReady fields."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "waitForPodsReady": wait_for_pods_ready,
    }
