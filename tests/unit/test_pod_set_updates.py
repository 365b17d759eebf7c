"""What an admitted workload's pods start with: flavors first, then each check's podSetUpdate in
check-name order, with Kueue's conflict rules (reference §1.9)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from admitflow.admission.pod_set_updates import PodSetUpdateConflict, merge
from admitflow.api import Admission, AdmissionCheckState, ResourceFlavorSpec

T0 = datetime(2026, 11, 22, tzinfo=UTC)
GPU = {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}


def admission(*pod_sets: tuple[str, str]) -> Admission:
    return Admission.model_validate(
        {"clusterQueue": "cq", "podSetAssignments": [{"name": n, "flavors": {"cpu": f}, "count": 2} for n, f in pod_sets]}
    )


def check(name: str, *updates: dict) -> AdmissionCheckState:
    return AdmissionCheckState.model_validate(
        {"name": name, "state": "Ready", "lastTransitionTime": T0, "podSetUpdates": list(updates) or None}
    )


FLAVORS = {
    "spot": ResourceFlavorSpec.model_validate({"nodeLabels": {"pool": "spot"}, "tolerations": [GPU]}),
    "plain": ResourceFlavorSpec.model_validate({}),
}


def started(checks, pod_sets=(("main", "spot"),)) -> list[dict]:
    return [i.to_wire() for i in merge(admission(*pod_sets), FLAVORS, checks)]


@pytest.mark.parametrize(
    ("checks", "want"),
    [
        pytest.param(
            [], {"labels": {"kueue.x-k8s.io/podset": "main"}, "nodeSelector": {"pool": "spot"}, "tolerations": [GPU]},
            id="flavor-node-labels-and-tolerations-come-first",
        ),
        pytest.param(
            [check("a", {"name": "main", "labels": {"team": "x"}, "annotations": {"n": "1"}, "nodeSelector": {"zone": "z"}})],
            {"labels": {"kueue.x-k8s.io/podset": "main", "team": "x"}, "annotations": {"n": "1"},
             "nodeSelector": {"pool": "spot", "zone": "z"}, "tolerations": [GPU]},
            id="a-checks-update-is-added",
        ),
        pytest.param(
            [check("a", {"name": "main", "nodeSelector": {"pool": "spot"}})],
            {"labels": {"kueue.x-k8s.io/podset": "main"}, "nodeSelector": {"pool": "spot"}, "tolerations": [GPU]},
            id="same-key-same-value-is-no-conflict",
        ),
        pytest.param(
            [check("a", {"name": "main", "tolerations": [GPU]})],
            {"labels": {"kueue.x-k8s.io/podset": "main"}, "nodeSelector": {"pool": "spot"}, "tolerations": [GPU]},
            id="a-toleration-is-added-once",
        ),
        pytest.param(
            [check("a", {"name": "main", "labels": {"k": "first"}}, {"name": "main", "labels": {"k": "second"}})],
            {"labels": {"kueue.x-k8s.io/podset": "main", "k": "first"}, "nodeSelector": {"pool": "spot"}, "tolerations": [GPU]},
            id="only-the-first-update-for-a-pod-set-counts",
        ),
        pytest.param(
            [check("a", {"name": "other", "labels": {"k": "v"}})],
            {"labels": {"kueue.x-k8s.io/podset": "main"}, "nodeSelector": {"pool": "spot"}, "tolerations": [GPU]},
            id="an-update-for-another-pod-set-changes-nothing",
        ),
    ],
)
def test_merge(checks, want):
    (info,) = started(checks)
    assert info == {"name": "main", "count": 2, "labels": {}, "annotations": {}, "nodeSelector": {}, "tolerations": [], **want}


@pytest.mark.parametrize(
    ("checks", "error"),
    [
        pytest.param(
            [check("a", {"name": "main", "labels": {"team": "x"}}), check("b", {"name": "main", "labels": {"team": "y"}})],
            'in admission check "b": invalid admission check PodSetUpdate: conflict for labels: conflict for key=team, value1=x, value2=y',
            id="a-conflicting-label-names-the-later-check-and-both-values",
        ),
        pytest.param(
            [check("a", {"name": "main", "nodeSelector": {"pool": "ondemand"}})],
            'in admission check "a": invalid admission check PodSetUpdate: conflict for nodeSelector: conflict for key=pool, value1=spot, value2=ondemand',
            id="a-node-selector-conflicting-with-a-flavor-label",
        ),
    ],
)
def test_a_conflict_is_kueues_permanent_start_error(checks, error):
    with pytest.raises(PodSetUpdateConflict) as err:
        started(checks)
    assert str(err.value) == error


def test_each_pod_set_gets_its_own_flavors_and_a_deleted_flavor_adds_nothing():
    infos = started([], pod_sets=(("driver", "plain"), ("workers", "gone")))
    assert [(i["name"], i["nodeSelector"], i["labels"]) for i in infos] == [
        ("driver", {}, {"kueue.x-k8s.io/podset": "driver"}),
        ("workers", {}, {"kueue.x-k8s.io/podset": "workers"}),
    ]
