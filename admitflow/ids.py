"""Workflow IDs and the engine's task queue: part of the public contract (docs/contract.md)."""

from __future__ import annotations

import hashlib
import os

DEFAULT_TASK_QUEUE = "admitflow"
CATALOG_ID = "admitflow/catalog"
# The simulated cluster autoscaler, the `simulated` ProvisioningRequest backend.
AUTOSCALER_ID = "admitflow/autoscaler"
# The one writer of which workloads reserved under blockAdmission are not ready yet.
PODS_READY_GATE_ID = "admitflow/pods-ready-gate"

CLUSTER_QUEUE_PREFIX = "clusterqueue/"
COHORT_PREFIX = "cohort/"
WORKLOAD_PREFIX = "workload/"
JOB_PREFIX = "job/"

# Temporal's SQL persistence (PostgreSQL, MySQL) keeps workflow IDs in VARCHAR(255) columns, and
# docker/temporal/dynamicconfig.yaml makes the server refuse longer ones (the dev server allows
# 1000). Every ID admitflow makes fits: the manifests refuse longer workload and ClusterQueue keys,
# and an attempt's ID is cut with limit_id.
MAX_ID_LENGTH = 255
_HASH_LENGTH = 10


def task_queue(flag: str | None = None) -> str:
    return flag or os.environ.get("ADMITFLOW_TASK_QUEUE") or DEFAULT_TASK_QUEUE


# Appended to the engine's task queue for the queues' and cohort trees' own task queue.
ENTITY_TASK_QUEUE_SUFFIX = "-entities"


def entity_task_queue(task_queue: str) -> str:
    """Where ClusterQueue and cohort-tree workflows start: a task queue of their own beside the
    engine's, which every engine worker polls too (worker/main.py). Workloads wait on these
    workflows (a workload's local activity holds its workflow task until its ClusterQueue takes its
    message); on their own task queue their workflow tasks have slots no workload can hold."""
    return task_queue if task_queue.endswith(ENTITY_TASK_QUEUE_SUFFIX) else task_queue + ENTITY_TASK_QUEUE_SUFFIX


def engine_task_queue(task_queue: str) -> str:
    """The engine's task queue, from its own or its entities' (`entity_task_queue`)."""
    return task_queue.removesuffix(ENTITY_TASK_QUEUE_SUFFIX)


def cluster_queue_id(name: str) -> str:
    return f"{CLUSTER_QUEUE_PREFIX}{name}"


def cohort_id(root: str) -> str:
    """The entity of the cohort tree whose root Cohort is `root` (cut to fit, as Cohort names may
    be 253 characters long; its input carries the full name)."""
    return limit_id(f"{COHORT_PREFIX}{root}")


def workload_id(key: str) -> str:
    """`key` is namespace/name."""
    return f"{WORKLOAD_PREFIX}{key}"


def shorten(full: str, maximum: int, hash_length: int, keep: int | None = None) -> str:
    """`full` when it has at most `keep` characters (default `maximum`); else its head, a dash and
    the first `hash_length` hex digits of the SHA-1 of all of it, `maximum` characters in all.

    Kueue's limitObjectName (pkg/controller/admissionchecks/provisioning/controller.go) is
    `shorten(full, 253, 5, keep=247)`: it keeps names of up to 247 characters only, so one of 248
    to 253 is cut too (to 253). `limit_id` keeps whatever fits, as workflow IDs always have."""
    if len(full) <= (maximum if keep is None else keep):
        return full
    digest = hashlib.sha1(full.encode()).hexdigest()[:hash_length]
    return f"{full[: maximum - hash_length - 1]}-{digest}"


def limit_id(full: str) -> str:
    return shorten(full, MAX_ID_LENGTH, _HASH_LENGTH)


def id_length_error(kind: str, workflow_id: str, shape: str) -> str | None:
    """Why a workload or ClusterQueue may not have this name, or None."""
    if len(workflow_id) <= MAX_ID_LENGTH:
        return None
    return (
        f"too long for admitflow: its workflow ID {shape} would be {len(workflow_id)} characters, "
        f"more than the {MAX_ID_LENGTH} Temporal's SQL persistence stores; use a shorter {kind} name"
    )


def job_id(key: str) -> str:
    """The workflow of a batch/v1 Job admitflow keeps; `key` is namespace/name."""
    return f"{JOB_PREFIX}{key}"


def job_key(workflow_id: str) -> str | None:
    return workflow_id[len(JOB_PREFIX) :] if workflow_id.startswith(JOB_PREFIX) else None


def workload_key(workflow_id: str) -> str | None:
    return workflow_id[len(WORKLOAD_PREFIX) :] if workflow_id.startswith(WORKLOAD_PREFIX) else None


def split_key(ref: str, default_namespace: str = "default") -> tuple[str, str]:
    """`ns/name` or `name` (in the default namespace), as the CLI takes workloads and LocalQueues."""
    if "/" in ref:
        ns, name = ref.split("/", 1)
        return ns, name
    return default_namespace, ref
