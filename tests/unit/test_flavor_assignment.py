"""Flavor assignment for a standalone ClusterQueue: Kueue's first-fit rules and its messages."""

from __future__ import annotations

import pytest

from admitflow.admission.flavor_assignment import (
    FlavorInfo,
    FlavorQuota,
    ResourceGroupQuota,
    assign_flavors,
)
from admitflow.admission.requests import PodSetRequest
from admitflow.admission.selectors import Requirement, Taint, Toleration

CPU_GROUP = ResourceGroupQuota(
    covered=("cpu", "memory"),
    flavors=(
        FlavorQuota(name="on-demand", nominal={"cpu": 4000, "memory": 8 * 2**30}),
        FlavorQuota(name="spot", nominal={"cpu": 8000, "memory": 16 * 2**30}),
    ),
)
ONE_FLAVOR = ResourceGroupQuota(covered=("cpu",), flavors=(FlavorQuota(name="default", nominal={"cpu": 4000}),))
FLAVORS = {"on-demand": FlavorInfo(), "spot": FlavorInfo(), "default": FlavorInfo()}


def podset(cpu: int, count: int = 1, name: str = "main", **kw) -> PodSetRequest:
    return PodSetRequest(name=name, count=count, per_pod={"cpu": cpu}, **kw)


CASES = [
    pytest.param(
        [podset(2000)], [ONE_FLAVOR], {}, ("Fit", "", ""), {"main": {"cpu": "default"}},
        id="a-pod-set-that-fits-takes-the-first-flavor",
    ),
    pytest.param(
        [podset(1000, count=3)], [CPU_GROUP], {("on-demand", "cpu"): 2000}, ("Fit", "", ""), {"main": {"cpu": "spot"}},
        id="when-the-first-flavor-is-full-the-next-one-is-tried-and-nothing-is-reported",
    ),
    pytest.param(
        [podset(2000)], [ONE_FLAVOR], {("default", "cpu"): 3000},
        ("Preempt", "WaitingForQuota", "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default, 1 more needed"),
        {"main": {"cpu": "default"}},
        id="quota-held-by-others-means-waiting-for-quota-with-what-is-missing",
    ),
    pytest.param(
        [podset(5000)], [ONE_FLAVOR], {},
        ("NoFit", "ExceedsMaxQuota", "couldn't assign flavors to pod set main: insufficient quota for cpu in flavor default, previously considered podsets requests (0) + current podset request (5) > maximum capacity (4)"),
        {"main": {}},
        id="a-request-above-the-nominal-quota-can-never-fit",
    ),
    pytest.param(
        [PodSetRequest(name="main", count=1, per_pod={"cpu": 1000, "nvidia.com/gpu": 1})], [ONE_FLAVOR], {},
        ("NoFit", "NoMatchingFlavor", "couldn't assign flavors to pod set main: resource nvidia.com/gpu unavailable in ClusterQueue"),
        {"main": {"cpu": "default"}},
        id="a-resource-the-queue-does-not-cover-is-unavailable",
    ),
    pytest.param(
        [PodSetRequest(name="main", count=1, per_pod={"cpu": 1000, "example.com/foo": 0})], [ONE_FLAVOR], {},
        ("Fit", "", ""), {"main": {"cpu": "default"}},
        id="a-zero-request-for-an-uncovered-resource-is-ignored",
    ),
    pytest.param(
        [podset(3000, count=2)], [CPU_GROUP], {("on-demand", "cpu"): 2000, ("spot", "cpu"): 4000},
        ("Preempt", "WaitingForQuota", "couldn't assign flavors to pod set main: insufficient quota for cpu in flavor on-demand, previously considered podsets requests (0) + current podset request (6) > maximum capacity (4), insufficient unused quota for cpu in flavor spot, 2 more needed"),
        {"main": {"cpu": "spot"}},
        id="every-flavor-tried-is-reported-sorted-and-the-best-one-is-kept",
    ),
    pytest.param(
        [podset(3000, name="driver"), podset(2000, name="workers")], [ONE_FLAVOR], {},
        ("NoFit", "ExceedsMaxQuota", "couldn't assign flavors to pod set workers: insufficient quota for cpu in flavor default, previously considered podsets requests (3) + current podset request (2) > maximum capacity (4)"),
        {"driver": {"cpu": "default"}, "workers": {}},
        id="pod-sets-of-one-workload-add-up-against-the-same-flavor",
    ),
    pytest.param(
        [podset(1000)], [ONE_FLAVOR.model_copy(update={"flavors": (FlavorQuota(name="gone", nominal={"cpu": 4000}),)})], {},
        ("NoFit", "NoMatchingFlavor", "couldn't assign flavors to pod set main: flavor gone not found"),
        {"main": {}},
        id="a-flavor-that-does-not-exist-is-skipped",
    ),
]


@pytest.mark.parametrize(("pod_sets", "groups", "usage", "want", "want_flavors"), CASES)
def test_assign_flavors(pod_sets, groups, usage, want, want_flavors):
    got = assign_flavors(pod_sets, groups, FLAVORS, usage)
    assert (got.mode, got.reason, got.message) == want
    assert {ps.name: ps.flavors for ps in got.pod_sets} == want_flavors


TAINTED = {
    "gpu": FlavorInfo(node_labels={"accel": "a100"}, node_taints=(Taint(key="gpu", value="true", effect="NoSchedule"),)),
    "cpu": FlavorInfo(node_labels={"pool": "cpu"}),
}
TWO = [ResourceGroupQuota(covered=("cpu",), flavors=(FlavorQuota(name="gpu", nominal={"cpu": 8000}), FlavorQuota(name="cpu", nominal={"cpu": 8000})))]


@pytest.mark.parametrize(
    ("ps", "want_flavor", "want_message"),
    [
        pytest.param(podset(1000), "cpu", "", id="an-untolerated-taint-sends-the-pod-set-to-the-next-flavor"),
        pytest.param(
            podset(1000, tolerations=(Toleration(key="gpu", operator="Exists"),)), "gpu", "",
            id="a-toleration-lets-the-pod-set-onto-a-tainted-flavor",
        ),
        pytest.param(
            podset(1000, tolerations=(Toleration(key="gpu", operator="Exists"),), node_selector={"pool": "gpu"}), "gpu", "",
            id="a-node-selector-only-counts-for-flavors-that-label-the-key",
        ),
        pytest.param(
            podset(1000, node_selector={"pool": "other"}), None,
            "couldn't assign flavors to pod set main: flavor cpu doesn't match node affinity, untolerated taint gpu=true:NoSchedule in flavor gpu",
            id="nothing-matches-and-both-reasons-are-reported",
        ),
        pytest.param(
            podset(1000, affinity_terms=((Requirement(key="accel", operator="In", values=("h100",)),),)), "cpu", "",
            id="required-node-affinity-on-a-key-only-one-flavor-labels-rules-out-that-flavor",
        ),
    ],
)
def test_flavor_matching(ps, want_flavor, want_message):
    got = assign_flavors([ps], TWO, TAINTED, {})
    assert got.pod_sets[0].flavors.get("cpu") == want_flavor
    assert got.message == want_message


def test_pods_resource_counts_pods_when_the_queue_covers_it():
    groups = [ResourceGroupQuota(covered=("cpu", "pods"), flavors=(FlavorQuota(name="default", nominal={"cpu": 10000, "pods": 2}),))]
    got = assign_flavors([podset(1000, count=3)], groups, FLAVORS, {})
    assert got.mode == "NoFit"
    assert "insufficient quota for pods in flavor default" in got.message
    fits = assign_flavors([podset(1000, count=2)], groups, FLAVORS, {})
    assert fits.mode == "Fit"
    assert fits.usage() == {("default", "cpu"): 2000, ("default", "pods"): 2}
