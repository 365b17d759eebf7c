"""Typed facade over a Temporal client: apply, submit, get, list, finish, delete.

Everything here is a plain Temporal call a user could make from any SDK or the `temporal` CLI; the
facade adds kubectl's manners (per-object outcomes, one-line errors naming file and document) and
assembles Kueue-shaped objects from the catalog and the queue workflows.

`AdmitflowClient` is one object whose methods come from three parts, each a module of this
package: `reads` (the catalog, ClusterQueues, Cohorts, workloads, lists from visibility),
`writes` (apply, submit, delete and every message to a workload, the catalog or the simulated
autoscaler), `jobs` (batch/v1 Jobs: apply, create, get, delete, each stored with its Workload) and `diagnostics` (why a workload waits, who serves its checks, and the ways out for
one whose workflow does not answer). Writes and diagnostics build on reads, and all on
`connection` (the Temporal client, the errors, the timeouts); `trouble` holds what is shown of a
workflow that does not answer.
"""

from __future__ import annotations

from admitflow.client.connection import (
    QUERY_TIMEOUT,
    RPC_TIMEOUT,
    AdmitflowError,
    NotAnswering,
    kind_of,
    unprocessed_update,
)
from admitflow.client.diagnostics import ADMISSION_CHECK_ACTIVITY, SERVED_WITHIN, ControllerCall, Diagnostics
from admitflow.client.trouble import (
    FAILING_ATTEMPTS,
    NOT_ANSWERING,
    TASK_FAILING,
    UnansweredWorkload,
    WorkflowTrouble,
    WorkloadNotAnswering,
)
from admitflow.client.jobs import Jobs


class AdmitflowClient(Jobs, Diagnostics):
    """The client of admitflow's workflows, on a Temporal client and the engine's task queue:
    `AdmitflowClient(client, task_queue, query_timeout=QUERY_TIMEOUT)`."""


__all__ = [
    "ADMISSION_CHECK_ACTIVITY",
    "FAILING_ATTEMPTS",
    "NOT_ANSWERING",
    "QUERY_TIMEOUT",
    "RPC_TIMEOUT",
    "SERVED_WITHIN",
    "TASK_FAILING",
    "AdmitflowClient",
    "AdmitflowError",
    "ControllerCall",
    "NotAnswering",
    "UnansweredWorkload",
    "WorkflowTrouble",
    "WorkloadNotAnswering",
    "kind_of",
    "unprocessed_update",
]
