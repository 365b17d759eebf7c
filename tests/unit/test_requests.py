"""Effective pod requests, as Kubernetes and Kueue compute them, in Kueue's integer units."""

from __future__ import annotations

import pytest

from admitflow.admission.requests import pod_requests, pod_set_request


def container(requests=None, limits=None, **extra):
    return {"name": "c", "image": "busybox", "resources": {"requests": requests or {}, "limits": limits or {}}, **extra}


@pytest.mark.parametrize(
    ("spec", "want"),
    [
        pytest.param({"containers": [container({"cpu": "500m", "memory": "1Gi"})]}, {"cpu": 500, "memory": 2**30}, id="cpu-in-milli-memory-in-bytes"),
        pytest.param({"containers": [container({"cpu": "1"}), container({"cpu": "1.5"})]}, {"cpu": 2500}, id="containers-add-up"),
        pytest.param({"containers": [container(limits={"cpu": "2"})]}, {"cpu": 2000}, id="a-limit-stands-in-for-a-missing-request"),
        pytest.param({"containers": [container({"cpu": "1"}, {"cpu": "3"})]}, {"cpu": 1000}, id="a-request-wins-over-its-limit"),
        pytest.param(
            {"containers": [container({"cpu": "1"})], "initContainers": [container({"cpu": "3"})]}, {"cpu": 3000},
            id="the-largest-init-container-sets-a-floor",
        ),
        pytest.param(
            {
                "containers": [container({"cpu": "1"})],
                "initContainers": [container({"cpu": "500m"}, restartPolicy="Always"), container({"cpu": "2"})],
            },
            {"cpu": 2500},
            id="a-sidecar-runs-alongside-both-the-later-init-containers-and-the-main-ones",
        ),
        pytest.param({"containers": [container({"cpu": "1"})], "overhead": {"cpu": "250m"}}, {"cpu": 1250}, id="pod-overhead-is-added"),
        pytest.param({"containers": [container({"nvidia.com/gpu": "1", "cpu": "1m"})]}, {"nvidia.com/gpu": 1, "cpu": 1}, id="extended-resources-in-whole-units"),
    ],
)
def test_pod_requests(spec, want):
    assert pod_requests(spec) == want


def test_pod_set_request_keeps_what_flavor_matching_needs():
    ps = pod_set_request(
        {
            "name": "workers",
            "count": 4,
            "template": {
                "spec": {
                    "containers": [container({"cpu": "2"})],
                    "nodeSelector": {"zone": "a"},
                    "tolerations": [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}],
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["x"]}]}]
                            }
                        }
                    },
                }
            },
        }
    )
    assert ps.total() == {"cpu": 8000}
    assert ps.node_selector == {"zone": "a"}
    assert ps.tolerations[0].key == "spot"
    assert ps.affinity_terms[0][0].values == ("x",)
