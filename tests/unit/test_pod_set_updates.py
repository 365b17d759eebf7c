"""What an admitted workload's pods start with: the assigned flavors, then each check's podSetUpdate.
Each case id reads like the rule it pins down (Kueue's podset.FromAssignment and Merge)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from admitflow.admission.pod_set_updates import PodSetInfo, PodSetUpdateConflict, merge
from admitflow.api import Admission, AdmissionCheckState, ResourceFlavorSpec, Toleration
from admitflow.api.workload import PodSetAssignment, PodSetUpdate

T0 = datetime(2026, 1, 1, tzinfo=UTC)
POD_SET = "kueue.x-k8s.io/podset"


def tol(key: str, value: str | None = None) -> Toleration:
    return Toleration(key=key, operator="Equal" if value else "Exists", value=value, effect="NoSchedule")


def assigned(name: str = "main", count: int | None = 1, **flavors: str) -> PodSetAssignment:
    """`assigned("main", cpu="on-demand")`: podSet main gets flavor on-demand for cpu."""
    return PodSetAssignment(name=name, count=count, flavors=flavors or None)


def check(name: str, *updates: PodSetUpdate) -> AdmissionCheckState:
    return AdmissionCheckState(name=name, state="Ready", last_transition_time=T0, pod_set_updates=list(updates) or None)


def update(name: str = "main", **fields) -> PodSetUpdate:
    return PodSetUpdate(name=name, **fields)


def info(name: str = "main", count: int = 1, labels: dict | None = None, **fields) -> PodSetInfo:
    """The expected info; the podSet label is always there."""
    return PodSetInfo(name=name, count=count, labels={POD_SET: name, **(labels or {})}, **fields)


FLAVORS = {
    "on-demand": ResourceFlavorSpec(node_labels={"pool": "on-demand", "zone": "z1"}),
    "spot": ResourceFlavorSpec(node_labels={"pool": "spot"}, tolerations=[tol("spot")]),
    "gpu": ResourceFlavorSpec(node_labels={"accelerator": "a100", "zone": "z2"}, tolerations=[tol("nvidia.com/gpu")]),
}


@pytest.mark.parametrize(
    ("assignments", "checks", "expected"),
    [
        pytest.param([assigned(count=3)], [], [info(count=3)], id="the-pod-set-label-names-the-pod-set"),
        pytest.param([assigned(count=None)], [], [info(count=1)], id="count-defaults-to-one-without-a-count"),
        pytest.param(
            [assigned(cpu="on-demand")],
            [],
            [info(node_selector={"pool": "on-demand", "zone": "z1"})],
            id="flavor-node-labels-become-the-node-selector",
        ),
        pytest.param(
            [assigned(cpu="spot", memory="spot")],
            [],
            [info(node_selector={"pool": "spot"}, tolerations=[tol("spot")])],
            id="a-flavor-assigned-for-several-resources-counts-once",
        ),
        pytest.param(
            [assigned(cpu="deleted", memory="spot")],
            [],
            [info(node_selector={"pool": "spot"}, tolerations=[tol("spot")])],
            id="a-deleted-flavor-contributes-nothing",
        ),
        pytest.param(
            [assigned(cpu="on-demand", **{"nvidia.com/gpu": "gpu"})],
            [],
            [
                info(
                    node_selector={"pool": "on-demand", "zone": "z1", "accelerator": "a100"},
                    tolerations=[tol("nvidia.com/gpu")],
                )
            ],
            id="flavors-disagreeing-on-a-node-label-keep-the-first-one",
        ),
        pytest.param(
            [assigned(cpu="spot")],
            [check("budget", update(labels={"team": "a"}, annotations={"note": "ok"}, node_selector={"rack": "r1"}))],
            [
                info(
                    labels={"team": "a"},
                    annotations={"note": "ok"},
                    node_selector={"pool": "spot", "rack": "r1"},
                    tolerations=[tol("spot")],
                )
            ],
            id="a-check-adds-labels-annotations-and-node-selector",
        ),
        pytest.param(
            [assigned(cpu="on-demand")],
            [
                check("a", update(labels={"team": "x"}, node_selector={"zone": "z1"})),
                check("b", update(labels={"team": "x", POD_SET: "main"})),
            ],
            [info(labels={"team": "x"}, node_selector={"pool": "on-demand", "zone": "z1"})],
            id="same-key-same-value-is-no-conflict",
        ),
        pytest.param(
            [assigned(cpu="spot")],
            [
                check("a", update(tolerations=[tol("spot"), tol("quota", "x"), tol("quota", "x")])),
                check("b", update(tolerations=[tol("quota", "x")])),
            ],
            [info(node_selector={"pool": "spot"}, tolerations=[tol("spot"), tol("quota", "x")])],
            id="tolerations-are-added-once",
        ),
        pytest.param(
            [assigned()],
            [check("a", update(tolerations=[tol("quota", "x")])), check("a", update(tolerations=[tol("quota", "y")]))],
            [info(tolerations=[tol("quota", "x"), tol("quota", "y")])],
            id="tolerations-differing-in-one-field-are-both-kept",
        ),
        pytest.param(
            [assigned()],
            [check("budget", update(labels={"team": "a"}), update(labels={"team": "b", "extra": "x"}))],
            [info(labels={"team": "a"})],
            id="only-the-first-update-for-a-pod-set-counts",
        ),
        pytest.param(
            [assigned()],
            [check("zeta", update(tolerations=[tol("z")])), check("alpha", update(tolerations=[tol("a")]))],
            [info(tolerations=[tol("z"), tol("a")])],
            id="checks-are-merged-in-the-order-given",
        ),
        pytest.param(
            [assigned("main"), assigned("workers", count=4)],
            [check("budget", update("workers", labels={"role": "worker"}))],
            [info("main"), info("workers", count=4, labels={"role": "worker"})],
            id="an-update-for-another-pod-set-changes-nothing",
        ),
        pytest.param(
            [assigned("launcher", cpu="on-demand"), assigned("workers", count=8, cpu="spot")],
            [],
            [
                info("launcher", node_selector={"pool": "on-demand", "zone": "z1"}),
                info("workers", count=8, node_selector={"pool": "spot"}, tolerations=[tol("spot")]),
            ],
            id="each-pod-set-gets-its-own-flavors-in-assignment-order",
        ),
        pytest.param(
            [assigned(cpu="spot")],
            [check("pending"), check("other", update("workers", labels={"pool": "x"}))],
            [info(node_selector={"pool": "spot"}, tolerations=[tol("spot")])],
            id="a-check-without-an-update-for-the-pod-set-changes-nothing",
        ),
    ],
)
def test_merge(assignments, checks, expected):
    admission = Admission(cluster_queue="cq", pod_set_assignments=assignments)
    assert merge(admission, FLAVORS, checks) == expected


@pytest.mark.parametrize(
    ("assignments", "checks", "message"),
    [
        pytest.param(
            [assigned()],
            [check("owner", update(labels={"team": "a"})), check("budget", update(labels={"team": "b"}))],
            'in admission check "budget": invalid admission check PodSetUpdate: '
            "conflict for labels: conflict for key=team, value1=a, value2=b",
            id="a-conflicting-label-names-the-check-and-both-values",
        ),
        pytest.param(
            [assigned()],
            [check("a", update(annotations={"note": "1"})), check("b", update(annotations={"note": "2"}))],
            'in admission check "b": invalid admission check PodSetUpdate: '
            "conflict for annotations: conflict for key=note, value1=1, value2=2",
            id="a-conflicting-annotation-names-the-later-check",
        ),
        pytest.param(
            [assigned(cpu="on-demand")],
            [check("placement", update(node_selector={"zone": "z9"}))],
            'in admission check "placement": invalid admission check PodSetUpdate: '
            "conflict for nodeSelector: conflict for key=zone, value1=z1, value2=z9",
            id="node-selector-conflicting-with-a-flavor-label",
        ),
        pytest.param(
            [assigned()],
            [check("rename", update(labels={POD_SET: "other"}))],
            'in admission check "rename": invalid admission check PodSetUpdate: '
            f"conflict for labels: conflict for key={POD_SET}, value1=main, value2=other",
            id="a-label-changing-the-pod-set-label-is-a-conflict",
        ),
        pytest.param(
            [assigned()],
            [
                check("a", update(labels={"team": "a"}, annotations={"note": "1"})),
                check("b", update(labels={"team": "b"}, annotations={"note": "2"})),
            ],
            'in admission check "b": invalid admission check PodSetUpdate: '
            "conflict for annotations: conflict for key=note, value1=1, value2=2",
            id="annotations-are-checked-before-labels",
        ),
        pytest.param(
            [assigned()],
            [
                check("a", update(labels={"x": "1", "y": "1"})),
                check("b", update(labels={"y": "2", "x": "2"})),
            ],
            'in admission check "b": invalid admission check PodSetUpdate: '
            "conflict for labels: conflict for key=y, value1=1, value2=2",
            id="the-first-conflicting-key-of-the-check-is-named",
        ),
        pytest.param(
            [assigned("main"), assigned("workers", cpu="spot")],
            [check("placement", update("workers", node_selector={"pool": "on-demand"}))],
            'in admission check "placement": invalid admission check PodSetUpdate: '
            "conflict for nodeSelector: conflict for key=pool, value1=spot, value2=on-demand",
            id="a-conflict-in-any-pod-set-fails-the-merge",
        ),
    ],
)
def test_conflict(assignments, checks, message):
    admission = Admission(cluster_queue="cq", pod_set_assignments=assignments)
    with pytest.raises(PodSetUpdateConflict) as raised:
        merge(admission, FLAVORS, checks)
    assert str(raised.value) == message


def test_a_conflict_is_a_value_error():
    assert issubclass(PodSetUpdateConflict, ValueError)


def test_merging_leaves_the_flavors_and_updates_as_they_were():
    flavors = {"spot": ResourceFlavorSpec(node_labels={"pool": "spot"}, tolerations=[tol("spot")])}
    checks = [check("a", update(labels={"team": "a"}, tolerations=[tol("quota")]))]
    before = (flavors["spot"].model_copy(deep=True), checks[0].model_copy(deep=True))
    admission = Admission(cluster_queue="cq", pod_set_assignments=[assigned(cpu="spot")])
    merge(admission, flavors, checks)
    merge(admission, flavors, checks)
    assert (flavors["spot"], checks[0]) == before


def test_pod_set_info_travels_in_camel_case():
    admission = Admission(cluster_queue="cq", pod_set_assignments=[assigned(cpu="spot")])
    [merged] = merge(admission, FLAVORS, [check("a", update(annotations={"note": "ok"}))])
    wire = merged.to_wire()
    assert wire == {
        "name": "main",
        "count": 1,
        "labels": {POD_SET: "main"},
        "annotations": {"note": "ok"},
        "nodeSelector": {"pool": "spot"},
        "tolerations": [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}],
    }
    assert PodSetInfo.model_validate(wire) == merged
