"""Every decision of admitflow, as pure functions: one version of Kueue's semantics, no I/O, no
Temporal, no branch on which code wrote a history. The workflows feed them events and carry out
what they return; each workflow of `admitflow.workflows` has its pure module here, of the same name
(`catalog`, `cluster_queue`, `cohort_tree`, `queue_owner`, `provisioning_attempt`,
`pods_ready_gate`; the workload's is `lifecycle`).

The workload side (one workload's state, and what happens to it):

- `lifecycle`: its one transition, `step(state, event) -> (state, commands)`, the typed events and
  commands, and the `Driver` that steps a batch; `intake` parses each message into an event;
- `workload`: `WorkloadState` and Kueue's conditions, reasons and events on it;
- the rules `step` calls: `checks` (verdicts, Retry, Rejected, controllers asked), `check_timeouts`,
  `admission_gates`, `priority`, `pods_ready` (WaitForPodsReady), `pod_set_updates`,
  `provisioning` (the built-in ProvisioningRequest check) and `provisioning_attempt` (one
  request's own transition), `retention`, `backoff`, `conditions`;
- `protocol`: what a workload, its queue, the gate and a runner say to each other.

The queue side (the ClusterQueues and what reserves quota):

- `catalog`: the cluster-scoped configuration and how it resolves for queues;
- `cluster_queue` (a queue's view and state), `pending_queue` (its order), `scheduler` (one pass),
  `flavor_assignment`, `preemption`, `fair_sharing`, `quota_tree` (quota along a cohort tree),
  `requests` (resource arithmetic), `selectors`;
- `cohort_tree` (who schedules a queue: itself or its tree), `queue_owner` (what one scheduling
  entity holds and tells), `pods_ready_gate` (blockAdmission across queues).

Read models (what clients are shown, never a decision): `explain` (why a workload waits, and an
estimate), `metrics` (Kueue's metrics from state changes). `semantic_equality` compares pod
templates as Kubernetes does.
"""
