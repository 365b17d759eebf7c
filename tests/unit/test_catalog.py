"""The catalog: kubectl-like apply and delete, immutable fields, views for ClusterQueues, watchers."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from admitflow.admission import catalog
from admitflow.admission.catalog import CatalogError, CatalogState, ObjectRef
from tests.builders import (
    cluster_queue_manifest,
    configuration_manifest,
    flavor_manifest,
    local_queue_manifest,
    manifest,
)

T0 = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)


def uids():
    n = iter(range(1, 1000))
    return lambda: f"uid-{next(n)}"


def applied(*docs) -> CatalogState:
    st = CatalogState()
    catalog.apply(st, [manifest(d) for d in docs], uids(), T0)
    return st


def actions(outcomes) -> list[tuple[str, str, str]]:
    return [(o.kind, o.key, o.action) for o in outcomes]


def test_apply_answers_like_kubectl():
    st = CatalogState()
    new = uids()
    first = catalog.apply(st, [manifest(flavor_manifest()), manifest(cluster_queue_manifest())], new, T0)
    assert actions(first) == [("ResourceFlavor", "default", "created"), ("ClusterQueue", "cq", "created")]
    again = catalog.apply(st, [manifest(flavor_manifest()), manifest(cluster_queue_manifest(quotas={"default": {"cpu": "8"}}))], new, T0)
    assert actions(again) == [("ResourceFlavor", "default", "unchanged"), ("ClusterQueue", "cq", "configured")]
    stored = st.get("ClusterQueue", "cq")
    assert stored.metadata.uid == "uid-2" and stored.metadata.generation == 2
    assert st.revision == 2


def test_unchanged_apply_does_not_move_the_revision():
    st = applied(flavor_manifest())
    catalog.apply(st, [manifest(flavor_manifest())], uids(), T0)
    assert st.revision == 1


@pytest.mark.parametrize(
    ("before", "after", "message"),
    [
        pytest.param(
            local_queue_manifest(cluster_queue="cq"),
            local_queue_manifest(cluster_queue="other"),
            'LocalQueue "default/lq" is invalid: spec.clusterQueue: Invalid value: "other": field is immutable',
            id="a-local-queue-cannot-move-to-another-cluster-queue",
        ),
        pytest.param(
            {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck", "metadata": {"name": "ac"}, "spec": {"controllerName": "a"}},
            {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck", "metadata": {"name": "ac"}, "spec": {"controllerName": "b"}},
            'AdmissionCheck "ac" is invalid: spec.controllerName: Invalid value: "b": field is immutable',
            id="an-admission-check-keeps-its-controller",
        ),
    ],
)
def test_immutable_fields(before, after, message):
    st = applied(before)
    with pytest.raises(CatalogError) as err:
        catalog.apply(st, [manifest(flavor_manifest("x")), manifest(after)], uids(), T0)
    assert str(err.value) == message
    assert err.value.index == 1
    assert st.get("ResourceFlavor", "x") is None, "a refused request applies nothing"


def test_delete_and_not_found():
    st = applied(flavor_manifest())
    assert actions(catalog.delete(st, [ObjectRef(kind="ResourceFlavor", key="default")], T0)) == [
        ("ResourceFlavor", "default", "deleted")
    ]
    with pytest.raises(CatalogError, match='resourceflavors "default" not found'):
        catalog.delete(st, [ObjectRef(kind="ResourceFlavor", key="default")], T0)


def test_views_are_published_only_when_they_change():
    st = applied(flavor_manifest(), cluster_queue_manifest(), local_queue_manifest())
    (v,) = catalog.changed_views(st)
    assert v.name == "cq" and set(v.flavors) == {"default"} and set(v.local_queues) == {"default/lq"}
    assert catalog.changed_views(st) == []
    catalog.apply(st, [manifest(flavor_manifest("unrelated"))], uids(), T0)
    assert catalog.changed_views(st) == [], "a flavor the queue does not use changes nothing for it"
    catalog.delete(st, [ObjectRef(kind="ClusterQueue", key="cq")], T0)
    (gone,) = catalog.changed_views(st)
    assert gone.spec is None


@pytest.mark.parametrize(
    ("docs", "want"),
    [
        pytest.param([], ("", "Misconfigured", "LocalQueue lq is terminating or missing"), id="no-local-queue"),
        pytest.param([local_queue_manifest()], ("cq", "Misconfigured", "ClusterQueue cq is terminating or missing"), id="no-cluster-queue"),
        pytest.param([local_queue_manifest(), cluster_queue_manifest()], ("cq", "", ""), id="a-local-queue-leads-to-its-cluster-queue"),
    ],
)
def test_resolve_local_queue(docs, want):
    r = catalog.resolve_local_queue(applied(*docs) if docs else CatalogState(), "default", "lq")
    assert (r.cluster_queue or "", r.reason, r.message) == want


def test_watchers_are_woken_whenever_their_queue_resolves_differently():
    st = CatalogState()
    catalog.add_watcher(st, "default/lq", "workload/default/a", "LocalQueue lq is terminating or missing")
    assert catalog.woken_watchers(st) == []
    catalog.apply(st, [manifest(local_queue_manifest())], uids(), T0)
    assert catalog.woken_watchers(st) == ["workload/default/a"], "the message changes to the missing ClusterQueue"
    catalog.add_watcher(st, "default/lq", "workload/default/a", "ClusterQueue cq is terminating or missing")
    catalog.add_watcher(st, "default/lq", "workload/default/a", "ClusterQueue cq is terminating or missing")
    assert catalog.woken_watchers(st) == []
    catalog.apply(st, [manifest(cluster_queue_manifest())], uids(), T0)
    assert catalog.woken_watchers(st) == ["workload/default/a"]
    assert st.watchers == {}


def provreq_check(name: str = "prov", parameters: dict | None = None) -> dict:
    spec: dict = {"controllerName": "kueue.x-k8s.io/provisioning-request"}
    if parameters is not None:
        spec["parameters"] = parameters
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck", "metadata": {"name": name}, "spec": spec}


PRC = {
    "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ProvisioningRequestConfig", "metadata": {"name": "cfg"},
    "spec": {"provisioningClassName": "check-capacity.autoscaling.x-k8s.io"},
}
PRC_REF = {"apiGroup": "kueue.x-k8s.io", "kind": "ProvisioningRequestConfig", "name": "cfg"}


def active(st: CatalogState, name: str = "prov") -> tuple[str, str, str]:
    (c,) = [c for c in st.get("AdmissionCheck", name).status.conditions if c.type == "Active"]
    return c.status, c.reason, c.message


@pytest.mark.parametrize(
    ("parameters", "expected"),
    [
        pytest.param(None, ("False", "BadParametersRef", "missing parameters reference"), id="no-reference"),
        pytest.param({**PRC_REF, "apiGroup": "example.com"}, ("False", "BadParametersRef", "bad parameters reference"), id="another-group"),
        pytest.param(PRC_REF, ("False", "BadParametersRef", 'provisioningrequestconfigs.kueue.x-k8s.io "cfg" not found'), id="config-missing"),
    ],
)
def test_a_provisioning_check_without_its_config_is_inactive(parameters, expected):
    assert active(applied(provreq_check(parameters=parameters))) == expected


def test_a_provisioning_check_follows_its_config():
    st = applied(provreq_check(parameters=PRC_REF), PRC)
    assert active(st) == ("True", "Active", "The admission check is active")
    catalog.delete(st, [ObjectRef(kind="ProvisioningRequestConfig", key="cfg")], T0)
    assert active(st)[:2] == ("False", "BadParametersRef")
    with pytest.raises(CatalogError, match="managed by the built-in kueue.x-k8s.io/provisioning-request controller"):
        catalog.set_admission_check_active(st, "prov", True, "Active", "", T0)


def test_the_configuration_reaches_every_view_with_kueues_defaults_without_one():
    st = applied(flavor_manifest(), cluster_queue_manifest(), local_queue_manifest())
    default = catalog.view_of(st, "cq").wait_for_pods_ready
    assert (default.timeout, default.recovery_timeout, default.block_admission) == ("30m", "30m", False), (
        "on by default, as in Kueue's config v1beta2"
    )
    catalog.changed_views(st)
    config = configuration_manifest(timeout="5m", blockAdmission=True, requeuingStrategy={"timestamp": "Creation"})
    outcomes = catalog.apply(st, [manifest(config)], uids(), T0)
    assert actions(outcomes) == [("Configuration", "config", "created")]
    assert actions(catalog.apply(st, [manifest(config)], uids(), T0)) == [("Configuration", "config", "unchanged")]
    [view] = catalog.changed_views(st)
    settings = view.wait_for_pods_ready
    assert (settings.timeout, settings.block_admission, settings.requeuing_strategy.timestamp) == ("5m", True, "Creation")
    assert view.block_admission

    off = {**config, "featureGates": {"DisableWaitForPodsReady": True}}
    catalog.apply(st, [manifest(off)], uids(), T0)
    [view] = catalog.changed_views(st)
    assert view.wait_for_pods_ready is None and not view.block_admission


def test_a_local_queues_runner_annotation_reaches_the_view():
    lq = local_queue_manifest(runner="local")
    st = applied(flavor_manifest(), cluster_queue_manifest(), lq, local_queue_manifest("other"))
    queues = catalog.view_of(st, "cq").local_queues
    assert (queues["default/lq"].runner, queues["default/other"].runner) == ("local", "")


# --- an AdmissionCheck in use: Kueue's kueue.x-k8s.io/resource-in-use finalizer ---------------------


def check_manifest(name: str = "ac") -> dict:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck", "metadata": {"name": name}, "spec": {"controllerName": "example.com/c"}}


def using(name: str, *checks: str) -> dict:
    return cluster_queue_manifest(name, checks=[{"name": c} for c in checks] or None)


def ref(kind: str, key: str) -> ObjectRef:
    return ObjectRef(kind=kind, key=key)


AC, CQ = ref("AdmissionCheck", "ac"), ref("ClusterQueue", "cq")
IN_USE_BY_CQ = 'admissionchecks "ac" is still used by ClusterQueue "cq": it stays, terminating (kueue.x-k8s.io/resource-in-use), and is deleted once no ClusterQueue refers to it'


@pytest.mark.parametrize(
    ("docs", "steps", "answers", "left"),
    [
        pytest.param([check_manifest()], [[AC]], [[("ac", "deleted", "")]], "gone", id="a-check-no-cluster-queue-uses-is-deleted-at-once"),
        pytest.param(
            [check_manifest(), using("cq", "ac")], [[AC]], [[("ac", "terminating", IN_USE_BY_CQ)]], "terminating",
            id="a-check-a-cluster-queue-uses-stays-terminating",
        ),
        pytest.param(
            [check_manifest(), using("cq", "ac")], [[AC], [AC]], [[("ac", "terminating", IN_USE_BY_CQ)]] * 2, "terminating",
            id="deleting-it-again-still-keeps-it",
        ),
        pytest.param(
            [check_manifest(), using("cq", "ac")], [[AC], [CQ]], [[("ac", "terminating", IN_USE_BY_CQ)], [("cq", "deleted", "")]], "gone",
            id="deleting-the-cluster-queue-that-used-it-deletes-it",
        ),
        pytest.param(
            [check_manifest(), using("cq", "ac")], [[AC], using("cq")], [[("ac", "terminating", IN_USE_BY_CQ)], [("cq", "configured", "")]], "gone",
            id="a-cluster-queue-that-stops-referring-to-it-deletes-it",
        ),
        pytest.param(
            [check_manifest(), using("cq", "ac"), using("cq2", "ac")], [[AC], [CQ]],
            [
                [("ac", "terminating", IN_USE_BY_CQ.replace('ClusterQueue "cq"', 'ClusterQueues "cq", "cq2"'))],
                [("cq", "deleted", "")],
            ],
            "terminating", id="a-check-two-cluster-queues-use-waits-for-both",
        ),
        pytest.param(
            [check_manifest(), using("cq", "ac")], [[AC, CQ]], [[("ac", "deleted", ""), ("cq", "deleted", "")]], "gone",
            id="deleted-with-the-cluster-queue-that-used-it-both-go",
        ),
        pytest.param(
            [check_manifest(), using("cq", "ac")], [[CQ, AC]], [[("cq", "deleted", ""), ("ac", "deleted", "")]], "gone",
            id="deleted-after-the-cluster-queue-that-used-it-it-goes",
        ),
        pytest.param(
            [check_manifest(), using("cq", "ac"), flavor_manifest("unrelated")], [[AC], [ref("ResourceFlavor", "unrelated")]],
            [[("ac", "terminating", IN_USE_BY_CQ)], [("unrelated", "deleted", "")]], "terminating",
            id="deleting-something-else-leaves-it-terminating",
        ),
    ],
)
def test_an_admission_check_in_use_stays_until_no_cluster_queue_uses_it(docs, steps, answers, left):
    st = applied(*docs)
    got = []
    for step in steps:
        if isinstance(step, dict):
            outcomes = catalog.apply(st, [manifest(step)], uids(), T0)
        else:
            outcomes = catalog.delete(st, step, T0)
        got.append([(o.key, o.action, o.message) for o in outcomes])
    assert got == answers
    assert (st.get("AdmissionCheck", "ac") is not None) is (left == "terminating")
    assert st.terminating == ({"AdmissionCheck": {"ac": T0}} if left == "terminating" else {})


def test_a_terminating_check_stays_in_force_for_the_cluster_queue_using_it():
    st = applied(check_manifest(), flavor_manifest(), using("cq", "ac"))
    (before,) = catalog.changed_views(st)
    catalog.delete(st, [AC], T0)
    assert catalog.changed_views(st) == [], "the ClusterQueue sees no change while the check is terminating"
    assert "ac" in catalog.view_of(st, "cq").admission_checks and before.admission_checks == catalog.view_of(st, "cq").admission_checks
    catalog.apply(st, [manifest(using("cq"))], uids(), T0)
    assert st.get("AdmissionCheck", "ac") is None and st.terminating == {}
