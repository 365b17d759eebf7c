"""Workflow IDs and the engine's task queue: part of the public contract (DESIGN.md)."""

from __future__ import annotations

import os

DEFAULT_TASK_QUEUE = "admitflow"
CATALOG_ID = "admitflow/catalog"
# The simulated cluster autoscaler, the `simulated` ProvisioningRequest backend.
AUTOSCALER_ID = "admitflow/autoscaler"
# The one writer of which workloads reserved under blockAdmission are not ready yet.
PODS_READY_GATE_ID = "admitflow/pods-ready-gate"

CLUSTER_QUEUE_PREFIX = "clusterqueue/"
WORKLOAD_PREFIX = "workload/"


def task_queue(flag: str | None = None) -> str:
    return flag or os.environ.get("ADMITFLOW_TASK_QUEUE") or DEFAULT_TASK_QUEUE


def cluster_queue_id(name: str) -> str:
    return f"{CLUSTER_QUEUE_PREFIX}{name}"


def workload_id(key: str) -> str:
    """`key` is namespace/name."""
    return f"{WORKLOAD_PREFIX}{key}"


def workload_key(workflow_id: str) -> str | None:
    return workflow_id[len(WORKLOAD_PREFIX) :] if workflow_id.startswith(WORKLOAD_PREFIX) else None


def split_key(ref: str, default_namespace: str = "default") -> tuple[str, str]:
    """`ns/name` or `name` (in the default namespace), as the CLI takes workloads and LocalQueues."""
    if "/" in ref:
        ns, name = ref.split("/", 1)
        return ns, name
    return default_namespace, ref
