"""Visibility reads (admitflow/visibility.py): kubectl's label selectors as visibility clauses, the
list query for each filter, and a workload's row from its search attributes. The clauses' meaning
is checked against Temporal itself in tests/integration/test_list_from_visibility.py."""

from datetime import UTC, datetime

import pytest

from admitflow import visibility as v

ALIVE = "(ExecutionStatus = 'Running' OR (ExecutionStatus = 'Completed' AND AdmitflowPhase = 'Finished'))"
BASE = f"WorkflowType = 'WorkloadWorkflow' AND {ALIVE}"


@pytest.mark.parametrize(
    ("selector", "clauses"),
    [
        ("", []),
        ("a=b", ["AdmitflowLabels = 'a=b'"]),
        ("a==b", ["AdmitflowLabels = 'a=b'"]),
        ("a!=b", ["AdmitflowLabels != 'a=b'"]),
        ("a=", ["AdmitflowLabels = 'a='"]),  # the empty value is a value
        ("a in (b, c)", ["AdmitflowLabels IN ('a=b', 'a=c')"]),
        ("a notin (b)", ["AdmitflowLabels NOT IN ('a=b')"]),
        ("a", ["AdmitflowLabels = 'a'"]),
        ("!a", ["AdmitflowLabels != 'a'"]),
        ("team=a,tier in (x,y),!gpu", ["AdmitflowLabels = 'team=a'", "AdmitflowLabels IN ('tier=x', 'tier=y')", "AdmitflowLabels != 'gpu'"]),
        ("example.com/team=a", ["AdmitflowLabels = 'example.com/team=a'"]),
    ],
)
def test_selectors_become_clauses(selector, clauses):
    assert v.selector_clauses(v.parse_selector(selector)) == clauses


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        ("a in ()", 'label selector "a in ()": "a in ()": a set needs one or more values, as in (a,b)'),
        ("a=b,", 'label selector "a=b,": empty requirement (a comma too many?)'),
        ("a>1", 'label selector "a>1": "a>1": > and < are not supported here'),
        ("a in (b", 'label selector "a in (b": unbalanced "("'),
        ("a=b)", 'label selector "a=b)": unbalanced ")"'),
        ("a b", 'label selector "a b": cannot parse "a b": expected key, !key, key=value, key!=value, key in (v1,v2) or key notin (v1,v2)'),
        ("-a=b", 'label selector "-a=b": key "-a": '),
        ("a=b'c", 'label selector "a=b\'c": value "b\'c": '),
    ],
)
def test_bad_selectors_are_one_line(selector, message):
    with pytest.raises(v.SelectorError) as err:
        v.parse_selector(selector)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("selector", "labels", "selected"),
    [
        ("a=b", {"a": "b"}, True),
        ("a=b", {"a": "c"}, False),
        ("a!=b", {}, True),  # kubectl: no label a is not a=b
        ("a!=b", {"a": "b"}, False),
        ("a in (b,c)", {"a": "c"}, True),
        ("a notin (b,c)", {}, True),
        ("a notin (b,c)", {"a": "b"}, False),
        ("a", {"a": ""}, True),
        ("!a", {"a": ""}, False),
        ("!a", {"b": "a"}, True),
        ("a,b=c", {"a": "x", "b": "c"}, True),
    ],
)
def test_labels_match_selects_as_the_clauses_do(selector, labels, selected):
    assert v.labels_match(v.parse_selector(selector), labels) is selected


def test_label_entries_hold_each_pair_and_each_key():
    assert v.label_entries({"team": "a", "gpu": ""}) == ["gpu", "gpu=", "team", "team=a"]
    assert v.label_entries(None) == []


@pytest.mark.parametrize(
    ("filters", "query"),
    [
        ({}, BASE),
        ({"finished": False}, "WorkflowType = 'WorkloadWorkflow' AND ExecutionStatus = 'Running'"),
        ({"namespace": "team-a"}, f"{BASE} AND WorkflowId STARTS_WITH 'workload/team-a/'"),
        ({"namespace": "team-a", "name": "job"}, f"{BASE} AND WorkflowId = 'workload/team-a/job'"),
        ({"local_queue": "team-a/main"}, f"{BASE} AND AdmitflowLocalQueue = 'team-a/main'"),
        ({"phase": "Backoff"}, f"{BASE} AND AdmitflowPhase = 'Backoff'"),
        ({"cluster_queue": "it's"}, f"{BASE} AND AdmitflowClusterQueue = 'it\\'s'"),
        ({"pending_check": "budget"}, f"{BASE} AND AdmitflowPendingChecks = 'budget'"),
        ({"pending_check": ["a", "b"]}, f"{BASE} AND AdmitflowPendingChecks IN ('a', 'b')"),
        ({"label_selector": "team=a"}, f"{BASE} AND AdmitflowLabels = 'team=a'"),
        (
            {"updated_since": datetime(2026, 11, 24, 8, 0, 1, 500000, tzinfo=UTC)},
            f"{BASE} AND (AdmitflowUpdated >= '2026-11-24T08:00:01.500000Z' OR TemporalReportedProblems IS NOT NULL)",
        ),
    ],
)
def test_the_list_query_for_each_filter(filters, query):
    assert v.workloads_query(**filters) == query


def test_an_unknown_phase_is_refused():
    with pytest.raises(ValueError, match='unknown phase "Running": must be one of Pending, '):
        v.workloads_query(phase="Running")


CREATED = datetime(2026, 11, 24, 8, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("attributes", "expected"),
    [
        (
            {"AdmitflowPhase": "Admitted", "AdmitflowClusterQueue": "cq", "AdmitflowLocalQueue": "main", "AdmitflowPriority": 5,
             "AdmitflowCreated": CREATED, "AdmitflowLabels": ["team", "team=a"]},
            {
                "metadata": {"name": "job", "namespace": "team-a", "creationTimestamp": "2026-11-24T08:00:00Z", "labels": {"team": "a"}},
                "spec": {"queueName": "main", "priority": 5},
                "status": {"conditions": [{"type": "QuotaReserved", "status": "True"}, {"type": "Admitted", "status": "True"}],
                           "admission": {"clusterQueue": "cq"}},
                "phase": "Admitted", "pendingChecks": [], "retryCount": 0,
            },
        ),
        (
            {"AdmitflowPhase": "Backoff", "AdmitflowClusterQueue": "cq", "AdmitflowPendingChecks": ["budget"], "AdmitflowRetryCount": 2},
            {
                "metadata": {"name": "job", "namespace": "team-a", "creationTimestamp": "2026-11-24T07:00:00Z"},
                "spec": {"queueName": "", "priority": 0},
                "status": {"conditions": [{"type": "QuotaReserved", "status": "False"}, {"type": "Admitted", "status": "False"}]},
                "phase": "Backoff", "pendingChecks": ["budget"], "retryCount": 2,
            },
        ),
        (
            {"AdmitflowPhase": "Finished"},
            {
                "metadata": {"name": "job", "namespace": "team-a", "creationTimestamp": "2026-11-24T07:00:00Z"},
                "spec": {"queueName": "", "priority": 0},
                "status": {"conditions": [{"type": "Finished", "status": "True"}]},
                "phase": "Finished", "pendingChecks": [], "retryCount": 0,
            },
        ),
        (
            {"AdmitflowPhase": "Inactive", "TemporalReportedProblems": ["category=WorkflowTaskFailed", "cause=WorkflowTaskFailedCauseUnhandledCommand"]},
            {
                "metadata": {"name": "job", "namespace": "team-a", "creationTimestamp": "2026-11-24T07:00:00Z"},
                "spec": {"queueName": "", "priority": 0, "active": False},
                "status": {"conditions": [{"type": "QuotaReserved", "status": "False"}, {"type": "Admitted", "status": "False"}]},
                "phase": "Inactive", "pendingChecks": [], "retryCount": 0,
                "workflow": {"status": "TaskFailing", "workflowId": "workload/team-a/job", "phase": "Inactive", "clusterQueue": "",
                             "cause": "WorkflowTaskFailedCauseUnhandledCommand"},
            },
        ),
    ],
)
def test_a_row_from_search_attributes(attributes, expected):
    started = datetime(2026, 11, 24, 7, 0, 0, 400000, tzinfo=UTC)  # a run before AdmitflowCreated existed
    assert v.row("workload/team-a/job", attributes, started) == {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", **expected}


def test_a_workflow_that_is_not_a_workloads_has_no_row():
    assert v.row("clusterqueue/cq", {}) is None
