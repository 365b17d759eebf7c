"""The names of the contract: every workflow, signal, update, query and activity admitflow's
workflows take or call, in one place, used by the client, the controller SDK, the runners, the
workflows and the activities alike (docs/contract.md says what each carries).

A name here is part of the public contract (clients we do not write send them, and histories record
them): change one only with a migration note. Where two workflows take the same name, each use has
its own constant, named for its owner.
"""

from __future__ import annotations

from admitflow.ids import CATALOG_ID, PODS_READY_GATE_ID, cluster_queue_id, engine_task_queue, entity_task_queue, workload_id

# --- workflows ----------------------------------------------------------------------------------
WORKLOAD_WORKFLOW = "WorkloadWorkflow"
CLUSTER_QUEUE_WORKFLOW = "ClusterQueueWorkflow"
COHORT_WORKFLOW = "CohortWorkflow"
CATALOG_WORKFLOW = "CatalogWorkflow"
PROVISIONING_CHECK_WORKFLOW = "ProvisioningCheckWorkflow"
PODS_READY_GATE_WORKFLOW = "PodsReadyGateWorkflow"
SIMULATED_AUTOSCALER_WORKFLOW = "SimulatedAutoscalerWorkflow"
JOB_WORKFLOW = "JobWorkflow"
# Started on the entities' task queue (ids.entity_task_queue): the workflows workloads wait on.
ENTITY_WORKFLOWS = frozenset({CLUSTER_QUEUE_WORKFLOW, COHORT_WORKFLOW})


def start_task_queue(workflow_type: str, task_queue: str) -> str:
    """The task queue a workflow of that type starts on, from the engine's task queue or its
    entities' (whichever the activity starting it runs on)."""
    return entity_task_queue(task_queue) if workflow_type in ENTITY_WORKFLOWS else engine_task_queue(task_queue)


# --- every workflow of the engine ---------------------------------------------------------------
# signal, sent by `admitflow deployment set-current` to the runs pinned to another build: no payload;
# a run continues as new onto the current build as soon as it can (admitflow.versioning).
VERSION_CHANGED = "version_changed"

# --- WorkloadWorkflow: from anyone ---------------------------------------------------------------
SET_ADMISSION_CHECK_STATE = "set_admission_check_state"  # signal: a verdict
APPLY_ADMISSION_CHECK_STATE = "apply_admission_check_state"  # update: a verdict, answered with the status
REMOVE_ADMISSION_GATES = "remove_admission_gates"  # signal: {gates: [...]} or {all: true}
APPLY_ADMISSION_GATE_REMOVAL = "apply_admission_gate_removal"  # update: the same, answered with the gates left
APPLY_PRIORITY = "apply_priority"  # update: {priority, priorityClassRef}, answered with the spec's priority
SET_PODS_READY = "set_pods_ready"
FINISH = "finish"
DEACTIVATE = "deactivate"
ACTIVATE = "activate"
DELETE = "delete"
WORKLOAD_QUERY = "workload"

# --- WorkloadWorkflow: from admitflow's own workflows ---------------------------------------------
QUOTA_RESERVED = "quota_reserved"
PENDING_STATUS = "pending_status"
DEQUEUED = "dequeued"
EVICTED = "evicted"
ADMISSION_CHECKS_CHANGED = "admission_checks_changed"
QUEUE_AVAILABLE = "queue_available"
PROVISIONING_REQUEST_UPDATED = "provisioning_request_updated"
PROVISIONING_REQUEST_DELETED = "provisioning_request_deleted"

# --- CatalogWorkflow (admitflow/catalog) ----------------------------------------------------------
CATALOG_APPLY = "apply"  # update: Kueue objects, applied all or nothing
CATALOG_DELETE = "delete"  # update: objects by kind and key
SET_ADMISSION_CHECK_ACTIVE = "set_admission_check_active"  # update: an AdmissionCheck's Active condition
WATCH_QUEUE = "watch_queue"  # signal: wake a workload when its LocalQueue resolves differently
CATALOG_GET = "get"  # query: the objects of a kind
CATALOG_DRY_RUN = "dry_run_apply"  # query: what an apply of these objects would do, changing nothing
RESOLVE_LOCAL_QUEUE = "resolve_local_queue"  # query: where a LocalQueue leads
CATALOG_VIEW = "view"  # query: a ClusterQueue's resolved view
CATALOG_NODE_GROUPS = "node_groups"  # query: the SimulatedNodeGroups

# --- ClusterQueueWorkflow (clusterqueue/<name>) ---------------------------------------------------
SET_VIEW = "set_view"  # signal: the ClusterQueue's view, from the catalog
ENQUEUE = "enqueue"  # signal: a workload's queue entry
RELEASE = "release"  # signal: a workload gives its quota or its place back
ADMITTED = "admitted"  # signal: a workload holding quota was admitted
REPRIORITIZE = "reprioritize"  # signal: a workload holding a place or quota has a new priority
CLUSTER_QUEUE_GATE_ANSWER = "pods_ready_gate"  # signal: the blockAdmission gate's answer {granted}
CLUSTER_QUEUE_STATUS = "status"  # query
CLUSTER_QUEUE_GAUGES = "gauges"  # query: Kueue's gauges of its current state (admitflow exporter)
FORCE_RELEASE = "force_release"  # update: an operator gives back a wedged workload's quota or place
TAKE_MESSAGES = "take_messages"  # update of a ClusterQueue or cohort tree: several of its messages at once
# What a workload tells its ClusterQueue, which TAKE_MESSAGES carries (activities/mail.py).
MAILED_SIGNALS = frozenset({ENQUEUE, RELEASE, ADMITTED, REPRIORITIZE})
FORWARD = "forward"  # signal: a message for a ClusterQueue, passed between its home and its cohort tree
RETURN_STATE = "return_state"  # signal: a cohort tree gives a ClusterQueue's state back to its home

# --- CohortWorkflow (cohort/<root>): schedules every ClusterQueue of one cohort tree -------------
ADOPT = "adopt"  # signal: a ClusterQueue's home hands its state over
RECALL = "recall"  # signal: a ClusterQueue's home asks for its state back
FORGET = "forget"  # forwarded: a workload no longer runs, so nothing will release for it
COHORT_STATUS = "cohort_status"  # query {name}: a Cohort of the tree's status, as Kueue writes it
# What a ClusterQueue's home sends its tree, which the tree's TAKE_MESSAGES carries (activities/mail.py).
FORWARDED_SIGNALS = frozenset({FORWARD})

# --- PodsReadyGateWorkflow (admitflow/pods-ready-gate) --------------------------------------------
GATE_REQUEST = "request"  # signal: a ClusterQueue asks for the grant
GATE_USED = "used"  # signal: whom a ClusterQueue's grant went to
GATE_RETURNED = "returned"  # signal: a ClusterQueue hands its grant back unused
GATE_SETTLED = "settled"  # signal: a workload reserved under a grant is ready, or gave its quota up
GATE_UNSETTLED = "unsettled"  # signal: such a workload is not ready while holding quota
GATE_STATUS = "status"  # query

# --- ProvisioningCheckWorkflow (provisioning/<namespace>/<workload>/<check>/<attempt>) ------------
PROVISIONING_REQUEST_STATUS = "provisioning_request_status"  # signal: the request, pushed by a backend
PROVISIONING_CHECK_DELETE = "delete_provisioning_request"  # signal: delete the request, then end
PROVISIONING_CHECK_PODS_SCHEDULED = "pods_scheduled"  # signal: the workload was admitted
PROVISIONING_CHECK_PROBE = "probe"  # signal: does nothing; fails if the attempt has ended

# --- SimulatedAutoscalerWorkflow (admitflow/autoscaler) -------------------------------------------
AUTOSCALER_CREATE_REQUEST = "create_request"  # signal (with start): a request and its PodTemplates
AUTOSCALER_DELETE_REQUEST = "delete_request"  # signal: a request by namespace and name
AUTOSCALER_PODS_SCHEDULED = "pods_scheduled"  # signal: a request's booking is consumed
AUTOSCALER_CREATE_PROVISIONING_REQUEST = "create_provisioning_request"  # update, for older histories
AUTOSCALER_DELETE_PROVISIONING_REQUEST = "delete_provisioning_request"  # update, for older histories
AUTOSCALER_PROVISIONING_PODS_SCHEDULED = "provisioning_pods_scheduled"  # update, for older histories
SET_PROVISIONING_REQUEST_CONDITION = "set_provisioning_request_condition"  # update: by hand (`admitflow provreq`)
SET_NODE_GROUPS = "set_node_groups"  # signal: the SimulatedNodeGroups, from the catalog
PROVISIONING_REQUESTS_QUERY = "provisioning_requests"  # query: the requests, of a namespace or all
PROVISIONING_REQUEST_QUERY = "provisioning_request"  # query: one request as stored
NODE_GROUP_USAGE_QUERY = "node_group_usage"  # query: node group -> resource -> quantity held

# --- JobWorkflow (job/<namespace>/<name>): a batch/v1 Job admitflow keeps ------------------------
PATCH_JOB = "patch_job"  # update: a JSON merge patch of the Job or its status, answered with the Job
DELETE_JOB = "delete_job"  # signal: the Job is deleted; the workflow returns it
JOB_QUERY = "job"  # query: the Job as stored
JOB_MEMO = "job"  # memo key: the Job as stored, kept current (what reads and runners read)

# --- activities -----------------------------------------------------------------------------------
ADMISSION_CHECK = "admission_check"  # on the task queue named by the AdmissionCheck's controllerName
START_WORKLOAD = "start_workload"  # on a runner's task queue
STOP_WORKLOAD = "stop_workload"
ENQUEUE_WORKLOAD = "enqueue_workload"
DELIVER_SIGNALS = "deliver_signals"  # a batch of signals a hot workflow sends (workflows/outbox.py)
FETCH_CLUSTER_QUEUE_VIEW = "fetch_cluster_queue_view"
FETCH_NODE_GROUPS = "fetch_node_groups"
CREATE_PROVISIONING_REQUEST = "create_provisioning_request"  # through the configured backend
DELETE_PROVISIONING_REQUEST = "delete_provisioning_request"
WATCH_PROVISIONING_REQUEST = "watch_provisioning_request"
PROVISIONING_PODS_SCHEDULED = "provisioning_pods_scheduled"

# --- query failures the engine's worker gives, which a client answers by asking again ------------
STALE_QUERY_REFUSED = (
    "admitflow refused an activation with a stale clock (a query reached this worker before the "
    "workflow task that follows a worker's death); the run is evicted and replays with that task; ask again"
)
EVENTS_WITHOUT_TASK_REFUSED = (
    "admitflow refused an activation that brings history events of no workflow task yet (a query the "
    "server sent on with them, as after a restart); the run is evicted and replays with its next task; ask again"
)
REPLAYED_FOR_QUERY_REFUSED = (
    "admitflow refused a query to a run it had just rebuilt from the query's own history (which may end "
    "in events of no workflow task); the run is evicted and replays with its next task; ask again"
)
REFUSED_QUERIES = (STALE_QUERY_REFUSED, EVENTS_WITHOUT_TASK_REFUSED, REPLAYED_FOR_QUERY_REFUSED)

# The type of the server's rejection of an update whose workflow task a worker completed without
# taking it (a worker too old for updates, or one that ended the task unread): nothing was applied.
UNPROCESSED_UPDATE = "UnprocessedUpdate"

__all__ = [name for name in dir() if name.isupper()] + ["cluster_queue_id", "workload_id", "CATALOG_ID", "PODS_READY_GATE_ID"]
