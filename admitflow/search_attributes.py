"""Search attributes of the contract: registered by `admitflow dev` and `admitflow setup`. The
workload workflow keeps the MANAGED ones current; the client sets the others when it starts the
workflow (they never change, and continue-as-new carries them over), and `AdmitflowUpdated` moves
with every change of the managed ones, so that lists and `get -w` read workloads from visibility
alone (admitflow/visibility.py)."""

from __future__ import annotations

from temporalio.common import SearchAttributeKey

CLUSTER_QUEUE = SearchAttributeKey.for_keyword("AdmitflowClusterQueue")
LOCAL_QUEUE = SearchAttributeKey.for_keyword("AdmitflowLocalQueue")
PHASE = SearchAttributeKey.for_keyword("AdmitflowPhase")
PENDING_CHECKS = SearchAttributeKey.for_keyword_list("AdmitflowPendingChecks")
PRIORITY = SearchAttributeKey.for_int("AdmitflowPriority")
RETRY_COUNT = SearchAttributeKey.for_int("AdmitflowRetryCount")
# The workload's labels, as `key=value` and `key` entries (kubectl's -l, admitflow/visibility.py).
LABELS = SearchAttributeKey.for_keyword_list("AdmitflowLabels")
# metadata.creationTimestamp (a run continued as new starts later than the workload was created).
CREATED = SearchAttributeKey.for_datetime("AdmitflowCreated")
# When the workflow last changed one of the MANAGED attributes (`get -w` asks only for those since).
UPDATED = SearchAttributeKey.for_datetime("AdmitflowUpdated")

MANAGED = (CLUSTER_QUEUE, LOCAL_QUEUE, PHASE, PENDING_CHECKS, PRIORITY, RETRY_COUNT)
ALL = (*MANAGED, LABELS, CREATED, UPDATED)

# `temporal server start-dev --search-attribute NAME=TYPE`
CLI_TYPES = {
    CLUSTER_QUEUE: "Keyword",
    LOCAL_QUEUE: "Keyword",
    PHASE: "Keyword",
    PENDING_CHECKS: "KeywordList",
    PRIORITY: "Int",
    RETRY_COUNT: "Int",
    LABELS: "KeywordList",
    CREATED: "Datetime",
    UPDATED: "Datetime",
}
