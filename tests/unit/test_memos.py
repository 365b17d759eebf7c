"""admitflow/memos.py: what each workflow's memo holds, and what a reader rebuilds from it. Every
memo goes through JSON here, as it goes through the data converter into the server and back."""

from __future__ import annotations

import json
from typing import Any

import pytest

from admitflow import memos
from admitflow.admission import catalog, intake
from admitflow.admission.catalog import CatalogState
from admitflow.api.provisioning_request import ProvisioningRequest
from tests.builders import cluster_queue_manifest, flavor_manifest, local_queue_manifest, manifest
from tests.unit.test_cohort_catalog import T0, uids
from tests.unit.test_explain import admitted, deleted, gated, in_backoff, waiting_for_checks


def stored(memo: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(memo))


@pytest.mark.parametrize(
    ("wanted", "published", "upserted"),
    [
        ({"a": 1, "b": {"x": 1}}, {}, {"a": 1, "b": {"x": 1}}),
        ({"a": 1, "b": {"x": 2}}, {"a": 1, "b": {"x": 1}}, {"b": {"x": 2}}),
        ({"a": 1}, {"a": 1, "b": 2}, {"b": None}),
        ({"a": 1}, {"a": 1}, {}),
    ],
    ids=["a-first-write-writes-every-key", "only-a-changed-key-is-written", "a-key-no-longer-wanted-is-removed", "nothing-changed-nothing-written"],
)
def test_upserts(wanted, published, upserted):
    assert memos.upserts(wanted, published) == upserted


@pytest.mark.parametrize(
    "build", [admitted, waiting_for_checks, in_backoff, gated, deleted],
    ids=["admitted", "waiting-for-its-checks", "in-backoff", "gated", "deleted"],
)
def test_a_workloads_memo_gives_its_report_but_for_events_and_verdicts(build):
    st = build().state
    report = memos.workload_report(stored(memos.workload(st)))
    expected = st.report().to_wire()
    for extra in ("events", "verdicts", "podSetsInfo", "provisioningRequests"):
        expected.pop(extra, None)
    got = report.to_wire()
    for extra in ("events", "verdicts", "podSetsInfo", "provisioningRequests"):
        got.pop(extra, None)
    assert got == expected
    assert report.check_attempts == st.report().check_attempts
    assert bool(report.deleted) is st.deleted


def test_a_workloads_status_is_a_key_of_its_own():
    """A status change writes the status, not the spec with it."""
    w = waiting_for_checks()
    before = memos.workload(w.state)
    w.batch(intake.verdict(w.verdict("a", "Ready")), after=1)
    assert set(memos.upserts(memos.workload(w.state), before)) == {memos.STATUS}


@pytest.mark.parametrize("memo", [{}, {memos.WORKLOAD: {"kind": "Workload"}}], ids=["empty", "no-status-yet"])
def test_a_memo_without_a_workload_gives_none(memo):
    assert memos.workload_report(memo) is None


def applied(*docs: dict) -> CatalogState:
    st = CatalogState()
    catalog.apply(st, [manifest(d) for d in docs], uids(), T0)
    return st


def test_the_catalogs_memo_gives_its_lookups_views_and_node_groups():
    st = applied(
        flavor_manifest(), cluster_queue_manifest(quotas={"default": {"cpu": "4"}}), local_queue_manifest(),
        {"apiVersion": "admitflow.io/v1", "kind": "SimulatedNodeGroup", "metadata": {"name": "pool"}, "spec": {"capacity": {"cpu": "8"}}},
    )
    rebuilt = memos.catalog_state(stored(memos.catalog(st)))
    assert rebuilt.revision == st.revision
    for kind in st.objects:
        assert [o.to_wire() for o in sorted(rebuilt.all(kind), key=lambda o: o.key)] == [
            o.to_wire() for o in sorted(st.all(kind), key=lambda o: o.key)
        ]
    assert catalog.resolve_local_queue(rebuilt, "default", "lq") == catalog.resolve_local_queue(st, "default", "lq")
    assert catalog.resolve_local_queue(rebuilt, "default", "other") == catalog.resolve_local_queue(st, "default", "other")
    assert catalog.view_of(rebuilt, "cq") == catalog.view_of(st, "cq")
    assert catalog.node_groups(rebuilt) == catalog.node_groups(st)


def test_one_object_changed_writes_one_key():
    st = applied(flavor_manifest(), cluster_queue_manifest(quotas={"default": {"cpu": "4"}}), local_queue_manifest())
    before = memos.catalog(st)
    catalog.apply(st, [manifest(cluster_queue_manifest(quotas={"default": {"cpu": "8"}}))], uids(), T0)
    assert set(memos.upserts(memos.catalog(st), before)) == {memos.REVISION, "object/ClusterQueue/cq"}


def test_a_catalog_memo_not_written_yet_gives_none():
    assert memos.catalog_state({}) is None
    assert memos.catalog_state({memos.REVISION: 0}) == CatalogState()


HELD = {"status": {"pendingWorkloads": 3}, "localQueues": {}, "gauges": []}


@pytest.mark.parametrize(
    ("home", "trees", "expected"),
    [
        ({memos.cluster_queue_key("cq"): HELD}, {}, HELD),
        ({memos.MOVED_TO: "cohort/root"}, {"cohort/root": {memos.cluster_queue_key("cq"): HELD}}, HELD),
        ({memos.MOVED_TO: "cohort/root"}, {"cohort/root": {}}, None),
        ({memos.MOVED_TO: "cohort/root"}, {}, None),
        ({}, {}, None),
        (None, {}, None),
    ],
    ids=["its-home-holds-it", "its-tree-holds-it", "on-its-way-to-the-tree", "its-tree-not-listed", "not-written-yet", "not-started"],
)
def test_where_a_cluster_queues_memo_is(home, trees, expected):
    assert memos.cluster_queue_held("cq", home, trees) == expected


def test_stored_requests_by_namespace():
    def request(ns: str, name: str) -> ProvisioningRequest:
        return ProvisioningRequest.model_validate(
            {"metadata": {"namespace": ns, "name": name}, "spec": {"provisioningClassName": "check-capacity.autoscaling.x-k8s.io",
                                                           "podSets": [{"podTemplateRef": {"name": "t"}, "count": 1}]}}
        )

    memo = stored(memos.provisioning_requests([request("b", "y"), request("a", "x"), request("a", "z")]))
    assert [(r.metadata.namespace, r.metadata.name) for r in memos.stored_requests(memo)] == [("a", "x"), ("a", "z"), ("b", "y")]
    assert [r.metadata.name for r in memos.stored_requests(memo, "a")] == ["x", "z"]
    assert memos.stored_requests({"revision": 1}) == []


@pytest.mark.parametrize(
    ("sizes", "limit", "writes"),
    [
        ([10, 10, 10], 1000, [3]),
        ([400, 400, 400], 1000, [2, 1]),
        ([5000, 10], 1000, [1, 1]),
        ([], 1000, [0]),
    ],
    ids=["small-changes-go-in-one-write", "a-write-stays-under-the-limit", "a-key-bigger-than-the-limit-is-never-cut", "nothing"],
)
def test_a_memo_write_is_cut_under_the_servers_limit(sizes, limit, writes):
    changes = {f"k{i}": "x" * n for i, n in enumerate(sizes)}
    cut = memos.chunks(changes, limit)
    assert [len(c) for c in cut] == writes
    assert {k: v for c in cut for k, v in c.items()} == changes
