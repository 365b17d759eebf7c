"""Search attributes of the contract: registered by `admitflow dev` and `admitflow setup`, kept
current by the workload workflow so that visibility queries find workloads by queue and phase."""

from __future__ import annotations

from temporalio.common import SearchAttributeKey

CLUSTER_QUEUE = SearchAttributeKey.for_keyword("AdmitflowClusterQueue")
LOCAL_QUEUE = SearchAttributeKey.for_keyword("AdmitflowLocalQueue")
PHASE = SearchAttributeKey.for_keyword("AdmitflowPhase")
PENDING_CHECKS = SearchAttributeKey.for_keyword_list("AdmitflowPendingChecks")
PRIORITY = SearchAttributeKey.for_int("AdmitflowPriority")
RETRY_COUNT = SearchAttributeKey.for_int("AdmitflowRetryCount")

ALL = (CLUSTER_QUEUE, LOCAL_QUEUE, PHASE, PENDING_CHECKS, PRIORITY, RETRY_COUNT)

# `temporal server start-dev --search-attribute NAME=TYPE`
CLI_TYPES = {
    CLUSTER_QUEUE: "Keyword",
    LOCAL_QUEUE: "Keyword",
    PHASE: "Keyword",
    PENDING_CHECKS: "KeywordList",
    PRIORITY: "Int",
    RETRY_COUNT: "Int",
}
