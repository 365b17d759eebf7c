"""What admitflow's workflows keep in their memos for machines to read, and how a reader rebuilds
objects from one (docs/architecture.md, "Reads"). Pure: no I/O.

A memo is written by its own workflow, in a workflow task that changes what it holds, key by key
(`upserts`: only the keys that changed, so an event carries one object, not all of them). It is
read by DescribeWorkflowExecution (one workflow, as its mutable state has it) or with the rows of
ListWorkflowExecutions (many, as visibility has them). A run continued as new starts without the
keys its predecessor wrote, and writes them all in its first workflow task: meanwhile the client
waits for the catalog's, shows a workload as submitted and a ClusterQueue without its status.

- A workload (`workload/<namespace>/<name>`): `workload`, the Workload's apiVersion, kind,
  metadata and spec; `status`, its Kueue status with the attempt each check is at and whether it
  was deleted. Together: the `workload` query's report without its events, verdicts and pods'
  start information.
- The catalog (`admitflow/catalog`): `revision`, and one key per object, `object/<Kind>/<key>`, the
  object as the catalog holds it (status included).
- A ClusterQueue's home (`clusterqueue/<name>`) and a cohort tree (`cohort/<root>`): one key per
  ClusterQueue whose state they hold, `clusterQueue/<name>`, with its Kueue status, its LocalQueues'
  statuses and its gauges; a tree also `cohort/<name>` per Cohort with fair sharing on. A home
  whose state is in its tree holds `movedTo`, the tree's workflow ID, instead.
- The simulated autoscaler (`admitflow/autoscaler`): `provisioningRequest/<namespace>/<name>` per
  stored ProvisioningRequest.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from admitflow.admission import cluster_queue as cq
from admitflow.admission import metrics
from admitflow.admission import workload as wl
from admitflow.admission.catalog import CatalogState
from admitflow.admission.cluster_queue import ClusterQueueState
from admitflow.admission.workload import WorkloadReport, WorkloadState
from admitflow.api.cohort import CohortStatus
from admitflow.api.provisioning_request import ProvisioningRequest

# --- keys ----------------------------------------------------------------------------------------

WORKLOAD = "workload"
STATUS = "status"
REVISION = "revision"
OBJECT = "object/"
CLUSTER_QUEUE = "clusterQueue/"
COHORT = "cohort/"
MOVED_TO = "movedTo"
PROVISIONING_REQUEST = "provisioningRequest/"


# The server refuses a memo write of 2 MiB or more (limit.memoSize.error: it fails the workflow task);
# what one write carries is kept far below, whatever the number of keys that changed at once.
UPSERT_LIMIT = 256 * 1024


def chunks(changes: Mapping[str, Any], limit: int = UPSERT_LIMIT) -> list[dict[str, Any]]:
    """`changes` cut into writes of at most about `limit` bytes of JSON each (a key is never cut)."""
    out: list[dict[str, Any]] = [{}]
    size = 0
    for key, value in changes.items():
        weight = len(key) + len(json.dumps(value, separators=(",", ":")))
        if out[-1] and size + weight > limit:
            out.append({})
            size = 0
        out[-1][key] = value
        size += weight
    return out


def upserts(wanted: Mapping[str, Any], published: Mapping[str, Any]) -> dict[str, Any]:
    """What to upsert so that a memo that holds `published` holds `wanted`: each key whose value
    differs, and None (the key removed) for each key no longer wanted."""
    changes = {k: v for k, v in wanted.items() if published.get(k) != v}
    changes.update({k: None for k in published if k not in wanted})
    return changes


# --- a workload ----------------------------------------------------------------------------------


def workload(state: WorkloadState) -> dict[str, Any]:
    """The memo of a workload's workflow."""
    wire = state.workload.to_wire()
    status = wire.pop("status", None) or {}
    attempts = {c.name: wl.current_attempt(state, c.name) for c in state.status.admission_checks or ()}
    held: dict[str, Any] = {"status": status, "checkAttempts": attempts}
    if state.deleted:
        held["deleted"] = True
    return {WORKLOAD: wire, STATUS: held}


def workload_report(memo: Mapping[str, Any]) -> WorkloadReport | None:
    """The workload a memo holds, as the `workload` query reports it but for its events, verdicts
    and pods' start information; None when the memo holds none (not written yet)."""
    body, status = memo.get(WORKLOAD), memo.get(STATUS)
    if not isinstance(body, dict) or not isinstance(status, dict):
        return None
    return WorkloadReport.model_validate(
        {**body, "status": status.get("status") or {}, "checkAttempts": status.get("checkAttempts") or {},
         "deleted": status.get("deleted")}
    )


# --- the catalog ---------------------------------------------------------------------------------


def catalog(state: CatalogState) -> dict[str, Any]:
    """The memo of the catalog's workflow."""
    out: dict[str, Any] = {REVISION: state.revision}
    for kind in sorted(state.objects):
        for obj in state.all(kind):
            out[f"{OBJECT}{kind}/{obj.key}"] = obj.to_wire()
    return out


def catalog_state(memo: Mapping[str, Any]) -> CatalogState | None:
    """The catalog's objects and revision as its memo holds them (what its lookups, views and node
    groups are computed from); None when the memo holds no revision (not written yet)."""
    if REVISION not in memo:
        return None
    objects: dict[str, dict[str, Any]] = {}
    for name, wire in memo.items():
        if name.startswith(OBJECT):
            kind, key = name.removeprefix(OBJECT).split("/", 1)
            objects.setdefault(kind, {})[key] = wire
    return CatalogState.model_validate({"revision": memo[REVISION], "objects": objects})


# --- ClusterQueues and cohorts -------------------------------------------------------------------


def cluster_queue_key(name: str) -> str:
    return CLUSTER_QUEUE + name


def cohort_key(name: str) -> str:
    return COHORT + name


def cluster_queue(state: ClusterQueueState, weighted_share: int | None = None) -> dict[str, Any]:
    """What a ClusterQueue's memo key holds: its status (with `weighted_share` under fair sharing),
    its LocalQueues' statuses and Kueue's gauges of it, as they stand."""
    return {
        "status": cq.cluster_queue_status(state, weighted_share).to_wire(),
        "localQueues": {k: s.to_wire() for k, s in cq.local_queue_statuses(state).items()},
        "gauges": [o.to_wire() for o in metrics.cluster_queue_gauges(state)],
    }


def cluster_queue_held(name: str, home: Mapping[str, Any] | None, trees: Mapping[str, Mapping[str, Any]]) -> dict[str, Any] | None:
    """What the memos say of ClusterQueue `name`: its home's key, or, when the home says its tree
    holds its state, the tree's (`trees`: memos by workflow ID); None when neither holds it yet (not
    started, on its way between them, or not written yet)."""
    if home is None:
        return None
    moved_to = home.get(MOVED_TO)
    held = trees.get(moved_to, {}).get(cluster_queue_key(name)) if moved_to else home.get(cluster_queue_key(name))
    return held if isinstance(held, dict) else None


def gauges(held: Mapping[str, Any]) -> list[metrics.Observation]:
    return [metrics.Observation.model_validate(o) for o in held.get("gauges") or ()]


def cohort_status(tree: Mapping[str, Any] | None, name: str) -> CohortStatus:
    """A Cohort's status as its tree's memo holds it (empty without fair sharing)."""
    held = (tree or {}).get(cohort_key(name))
    return CohortStatus.model_validate(held) if isinstance(held, dict) else CohortStatus()


# --- the simulated autoscaler --------------------------------------------------------------------


def provisioning_request_key(namespace: str, name: str) -> str:
    return f"{PROVISIONING_REQUEST}{namespace}/{name}"


def provisioning_requests(requests: list[ProvisioningRequest]) -> dict[str, Any]:
    """The memo of the simulated autoscaler's workflow: every stored request."""
    return {provisioning_request_key(r.metadata.namespace, r.metadata.name): r.to_wire() for r in requests}


def stored_requests(memo: Mapping[str, Any], namespace: str | None = None) -> list[ProvisioningRequest]:
    """The stored ProvisioningRequests a memo holds, by namespace and name."""
    found = [
        ProvisioningRequest.model_validate(wire)
        for key, wire in sorted(memo.items())
        if key.startswith(PROVISIONING_REQUEST) and (namespace is None or key.removeprefix(PROVISIONING_REQUEST).split("/", 1)[0] == namespace)
    ]
    return found
