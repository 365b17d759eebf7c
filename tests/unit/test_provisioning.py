"""The ProvisioningRequest check as Kueue's controller implements it (reference kueue-behaviour.md §2):
names, what a request holds, which attempts start and go, and what conditions make of the check."""

from __future__ import annotations

import hashlib
from datetime import timedelta
from typing import Any

import pytest

from admitflow import ids
from admitflow.admission import checks
from admitflow.admission import provisioning as prov
from admitflow.admission import workload as wl
from admitflow.admission.cluster_queue import AdmissionCheckInfo, Notice
from admitflow.admission.flavor_assignment import Assignment, PodSetAssignment
from admitflow.api import ResourceFlavorSpec
from admitflow.api.admission_check import PROVISIONING_REQUEST_CONTROLLER_NAME
from admitflow.api.names import dns1123_subdomain_errors
from admitflow.api.provisioning_request import ProvisioningRequest
from admitflow.api.provisioning_request_config import ProvisioningRequestRetryStrategy
from tests.support import messages
from tests.builders import manifest
from tests.unit.test_workload_status import T0

GPU = "nvidia.com/gpu"
CLASS = "check-capacity.autoscaling.x-k8s.io"


def pod_set(name: str, count: int = 1, **resources: Any) -> dict:
    return {
        "name": name,
        "count": count,
        "template": {"spec": {"containers": [{"name": "c", "image": "x", "resources": resources}]}},
    }


def holding(
    pod_sets: list[dict] | None = None,
    config: dict | None = None,
    annotations: dict | None = None,
    counts: dict | None = None,
    check_name: str = "prov",
    flavors: dict | None = None,
) -> wl.WorkloadState:
    """A workload holding quota in flavor `a100` (node label pool=a100, a toleration), or in the
    flavor `flavors` names per podSet (`h100`, `l4`: node label pool=<name>), with one
    ProvisioningRequest check (`prov`) whose config is `config` (None: missing)."""
    pod_sets = pod_sets or [pod_set("main", 2, limits={GPU: "1"}, requests={"cpu": "1"})]
    meta: dict = {"name": "job", "namespace": "team-a"}
    if annotations:
        meta["annotations"] = annotations
    st = wl.new_state(
        manifest({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": meta, "spec": {"queueName": "lq", "podSets": pod_sets}}),
        "uid-1",
        T0,
    )
    st.cluster_queue, st.claim.ticket, st.claim.queued = "cq", 1, True
    info = AdmissionCheckInfo(
        controller_name=PROVISIONING_REQUEST_CONTROLLER_NAME,
        active=config is not None,
        parameters=None if config is None else {"provisioningClassName": CLASS, **config},
    )
    notice = Notice(
        key="team-a/job", uid="uid-1", ticket=1, kind="reserved", admission_checks=[check_name],
        checks_info={check_name: info},
        flavors={
            "a100": ResourceFlavorSpec.model_validate({"nodeLabels": {"pool": "a100"}, "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]}),
            **{f: ResourceFlavorSpec.model_validate({"nodeLabels": {"pool": f}}) for f in ("h100", "l4")},
        },
        assignment=Assignment(
            mode="Fit",
            pod_sets=[
                PodSetAssignment(
                    name=ps["name"], flavors={"cpu": (flavors or {}).get(ps["name"], "a100")}, resource_usage={},
                    count=(counts or {}).get(ps["name"], ps["count"]),
                )
                for ps in pod_sets
            ],
        ),
    )
    wl.reserve_quota(st, notice, T0)
    return st


def status(*conds: tuple[str, str, str], details: dict | None = None, rv: str = "2") -> ProvisioningRequest:
    return ProvisioningRequest.model_validate(
        {
            "metadata": {"name": "job-prov-1", "namespace": "team-a", "resourceVersion": rv},
            "spec": {"provisioningClassName": CLASS, "podSets": [{"podTemplateRef": {"name": "ppt-job-prov-1-main"}, "count": 2}]},
            "status": {
                "conditions": [
                    {"type": t, "status": s, "reason": "R", "message": m, "lastTransitionTime": "2026-11-22T10:00:00Z"} for t, s, m in conds
                ],
                **({"provisioningClassDetails": details} if details else {}),
            },
        }
    )


def started(st: wl.WorkloadState) -> prov.Plan:
    cmds, verdicts = prov.reconcile(st)
    assert verdicts == [] and cmds.stop == []
    (p,) = cmds.start
    return p


def check(st: wl.WorkloadState):
    return next(c for c in st.status.admission_checks if c.name == "prov")


# --- names ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("workload", "attempt", "expected_length", "suffix"),
    [
        pytest.param("wl", 1, len("wl-prov-1"), "wl-prov-1", id="short-names-are-kept"),
        pytest.param("w" * 240, 3, 247, None, id="247-characters-are-kept"),
        pytest.param("w" * 241, 3, 253, None, id="248-characters-are-cut-although-they-would-fit"),
        pytest.param("w" * 246, 1, 253, None, id="253-characters-are-cut-although-they-would-fit"),
        pytest.param("w" * 250, 1, 253, None, id="longer-names-end-in-a-dash-and-five-hex-of-sha1"),
    ],
)
def test_request_names_follow_kueues_limit(workload, attempt, expected_length, suffix):
    name = prov.request_name(workload, "prov", attempt)
    assert len(name) == expected_length
    if suffix:
        assert name == suffix
    if expected_length == 253:
        full = f"{workload}-prov-{attempt}"
        assert name == full[:247] + "-" + hashlib.sha1(full.encode()).hexdigest()[:5]


def _valid(name: str) -> bool:
    return len(name) <= 253 and not dns1123_subdomain_errors(name)


@pytest.mark.parametrize(
    ("workload", "check_name", "expected"),
    [
        pytest.param("w" * 240, "prov", "w" * 240 + "-prov-1", id="a-full-name-of-247-characters-is-kept-as-kueue-keeps-it"),
        pytest.param("w" * 241, "prov", None, id="a-full-name-of-248-characters-is-cut-to-253-as-kueue-cuts-it"),
        pytest.param("w" * 244, "p-rov", None, id="a-cut-that-ends-in-a-dash-is-kueues-name-which-is-valid"),
        pytest.param("w" * 245, "p.rov", None, id="a-cut-just-before-a-dot-is-kueues-name-which-is-valid"),
        pytest.param("w" * 243, "p.rov", None, id="a-cut-just-after-a-dot-is-kueues-name-which-is-valid"),
        pytest.param("w" * 244, "p.rov", "w" * 244 + "-p-", id="a-cut-that-ends-in-a-dot-drops-the-dot-where-kueues-name-is-invalid"),
        pytest.param("w" * 240, "a.b", None, id="a-dot-well-before-the-cut-is-kept"),
    ],
)
def test_request_names_at_the_edges_of_the_cut_are_always_valid(workload, check_name, expected):
    full = f"{workload}-{check_name}-1"
    kueue = full if len(full) <= 247 else full[:247] + "-" + hashlib.sha1(full.encode()).hexdigest()[:5]
    name = prov.request_name(workload, check_name, 1)
    assert _valid(name), name
    if expected is None:
        assert name == kueue, "where Kueue's name is valid, it is the name"
    elif len(full) <= 247:
        assert name == expected == kueue
    else:
        assert not _valid(kueue) and kueue[247 - 1] == "."
        assert name == expected + hashlib.sha1(full.encode()).hexdigest()[:5]
        assert len(name) == 252


@pytest.mark.parametrize("check_name", ["p.rov", "p-rov", "a.b.c.d", "x"])
def test_every_request_and_pod_template_name_around_the_limit_is_valid(check_name):
    for length in range(230, 254):
        request = prov.request_name("w" * length, check_name, 1)
        assert _valid(request), request
        for pod_set_name in ("main", "p" * 63):
            assert _valid(prov.pod_template_name(request, pod_set_name))


def test_a_workload_whose_request_name_cut_ends_in_a_dot_still_gets_its_request():
    """The issue's case: 244 characters and check `p.rov` cut Kueue's name to `...-p.-<hash>`."""
    st = holding(config={}, check_name="p.rov")
    st.workload.metadata.name = "w" * 244
    p = started(st)
    assert p.request.metadata.name == "w" * 244 + "-p-" + hashlib.sha1(("w" * 244 + "-p.rov-1").encode()).hexdigest()[:5]
    assert all(_valid(t.metadata.name) for t in p.pod_templates)


@pytest.mark.parametrize(
    ("request_name", "pod_set", "expected"),
    [
        pytest.param("wl-check1-1", "main", "ppt-wl-check1-1-main", id="a-short-template-name-is-kept"),
        pytest.param("r" * 238, "main", "ppt-" + "r" * 238 + "-main", id="a-template-name-of-247-characters-is-kept"),
        pytest.param(
            "r" * 239, "main",
            ("ppt-" + "r" * 239 + "-main")[:247] + "-" + hashlib.sha1(("ppt-" + "r" * 239 + "-main").encode()).hexdigest()[:5],
            id="a-template-name-of-248-characters-is-cut-to-253",
        ),
    ],
)
def test_pod_template_names_follow_kueues_limit(request_name, pod_set, expected):
    assert prov.pod_template_name(request_name, pod_set) == expected


def test_workflow_ids():
    assert prov.workflow_id("ns", "wl", "prov", 2) == "provisioning/ns/wl/prov/2"


def test_an_attempts_workflow_id_is_cut_to_temporals_255_with_a_hash():
    workload, check_name = "w" * 230, "c" * 200  # names Kubernetes takes (253 at most)
    full = f"provisioning/ns/{workload}/{check_name}/1"
    cut = prov.workflow_id("ns", workload, check_name, 1)
    assert len(full) == 449
    assert len(cut) == ids.MAX_ID_LENGTH == 255
    assert cut == full[:244] + "-" + hashlib.sha1(full.encode()).hexdigest()[:10]
    assert cut != prov.workflow_id("ns", workload, check_name, 2), "attempts whose heads are alike differ in the hash"


# --- what a request holds ------------------------------------------------------------------------


def test_a_request_holds_the_podsets_with_their_flavor_and_limits_as_requests():
    p = started(holding(config={"parameters": {"noRetry": "true"}}, annotations={"provreq.kueue.x-k8s.io/ValidUntilSeconds": "0", "other/x": "1"}))
    req = p.request.to_wire()
    assert req["metadata"]["name"] == "job-prov-1"
    assert req["metadata"]["labels"] == {"kueue.x-k8s.io/managed": "true"}
    assert req["spec"] == {
        "provisioningClassName": CLASS,
        "parameters": {"noRetry": "true", "ValidUntilSeconds": "0"},
        "podSets": [{"podTemplateRef": {"name": "ppt-job-prov-1-main"}, "count": 2}],
    }
    (tpl,) = [t.to_wire() for t in p.pod_templates]
    assert tpl["metadata"]["name"] == "ppt-job-prov-1-main" and tpl["metadata"]["namespace"] == "team-a"
    spec = tpl["template"]["spec"]
    assert spec["nodeSelector"] == {"pool": "a100"}
    assert spec["tolerations"] == [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert spec["containers"][0]["resources"]["requests"] == {GPU: "1", "cpu": "1"}
    assert p.attempt.workflow_id == "provisioning/team-a/job/prov/1"


def test_more_than_100_parameters_from_config_and_annotations_make_no_request_and_the_check_says_why():
    config = {"parameters": {f"c{i}": "1" for i in range(60)}}
    st = holding(config=config, annotations={f"provreq.kueue.x-k8s.io/a{i}": "1" for i in range(41)})
    cmds, verdicts = prov.reconcile(st)
    assert cmds.start == [] and st.provisioning.current == {}
    assert [(v.state, v.message) for v in verdicts] == [
        (
            "Pending",
            'ProvisioningRequest "job-prov-1" is not created, it would be invalid: spec.parameters: Too many: 101: '
            f"must have at most 100 items ({prov.PARAMETERS_FROM})",
        )
    ]
    checks.apply(st, verdicts[0], T0, 0.0)
    assert prov.reconcile(st) == (prov.Commands(), []), "said once"
    st.checks_info["prov"] = st.checks_info["prov"].model_copy(
        update={"parameters": {"provisioningClassName": CLASS, "parameters": {f"c{i}": "1" for i in range(59)}}}
    )
    assert len(started(st).request.spec.parameters) == 100, "a config that fits again makes the request"


def test_a_parameter_value_over_255_characters_makes_no_request_even_when_the_workload_skipped_apply():
    """A workload started through Temporal directly is not checked by `admitflow apply`."""
    st = holding(config={})
    st.workload.metadata.annotations = {"provreq.kueue.x-k8s.io/maxRunDurationSeconds": "9" * 256}
    cmds, verdicts = prov.reconcile(st)
    assert cmds.start == []
    assert [v.message for v in verdicts] == [
        'ProvisioningRequest "job-prov-1" is not created, it would be invalid: spec.parameters[maxRunDurationSeconds]: '
        f"Too long: may not be more than 255 bytes ({prov.PARAMETERS_FROM})"
    ]


def test_an_annotation_overrides_a_config_parameter():
    p = started(holding(config={"parameters": {"noRetry": "false"}}, annotations={"provreq.kueue.x-k8s.io/noRetry": "true"}))
    assert p.request.spec.parameters == {"noRetry": "true"}


@pytest.mark.parametrize(
    ("pod_sets", "counts", "managed", "expected"),
    [
        pytest.param([pod_set("main", 2, requests={GPU: "1"})], None, [], [("ppt-job-prov-1-main", 2)], id="without-managed-resources-every-podset-counts"),
        pytest.param(
            [pod_set("driver", 1, requests={"cpu": "1"}), pod_set("workers", 4, limits={GPU: "1"})], None, [GPU],
            [("ppt-job-prov-1-workers", 4)], id="managed-resources-keep-podsets-that-request-or-limit-them",
        ),
        pytest.param(
            [pod_set("a", 0, requests={GPU: "1"}), pod_set("b", 3, requests={GPU: "1"})], None, [],
            [("ppt-job-prov-1-b", 3)], id="zero-count-podsets-are-skipped",
        ),
        pytest.param(
            [pod_set("a", 2, requests={GPU: "1"}), pod_set("b", 3, requests={GPU: "1"})], {"a": 0}, [],
            [("ppt-job-prov-1-b", 3)], id="podsets-admitted-with-zero-pods-are-skipped",
        ),
    ],
)
def test_podsets_of_interest(pod_sets, counts, managed, expected):
    p = started(holding(pod_sets=pod_sets, counts=counts, config={"managedResources": managed} if managed else {}))
    assert [(ps.pod_template_ref.name, ps.count) for ps in p.request.spec.pod_sets] == expected


def with_template(name: str, count: int, **spec: Any) -> dict:
    """A podSet whose one container is `c` with image `x`, and whose pod spec has `spec` too."""
    container = {"name": "c", "image": "x", **spec.pop("container", {})}
    return {"name": name, "count": count, "template": {"spec": {"containers": [container], **spec}}}


IDENTICAL = "IdenticalPodTemplates"
REQUIREMENTS = "IdenticalWorkloadSchedulingRequirements"


@pytest.mark.parametrize(
    ("policy", "pod_sets", "flavors", "expected"),
    [
        pytest.param(
            None, [pod_set("a", 2, requests={GPU: "1"}), pod_set("b", 3, requests={GPU: "1"})], None,
            [("a", 2), ("b", 3)], id="without-a-policy-nothing-merges",
        ),
        pytest.param(
            IDENTICAL, [pod_set("a", 2, requests={GPU: "1"}), pod_set("b", 3, requests={GPU: "1"})], None,
            [("a", 5)], id="identical-templates-merge-into-the-first",
        ),
        pytest.param(
            IDENTICAL, [pod_set("a", 2, requests={GPU: "1"}), pod_set("b", 3, requests={GPU: "2"})], None,
            [("a", 2), ("b", 3)], id="different-templates-stay-apart",
        ),
        pytest.param(
            IDENTICAL, [pod_set(n, 1, requests={GPU: "1"}) for n in ("a", "b", "c")], {"a": "a100", "b": "h100", "c": "l4"},
            [("a", 3)], id="identical-templates-are-compared-as-written-not-with-the-flavors-each-podset-got",
        ),
        pytest.param(
            IDENTICAL, [pod_set("a", 1, requests={"cpu": "1"}), pod_set("b", 1, requests={"cpu": "1000m"}), pod_set("c", 1, requests={"cpu": 1})],
            None, [("a", 3)], id="identical-templates-compare-quantities-by-value",
        ),
        pytest.param(
            IDENTICAL, [pod_set("a", 1, requests={"memory": "1Gi"}), pod_set("b", 1, requests={"memory": "1073741824"})],
            None, [("a", 2)], id="a-binary-and-a-decimal-quantity-of-one-value-are-equal",
        ),
        pytest.param(
            IDENTICAL, [with_template("a", 1, nodeSelector={}, tolerations=[]), with_template("b", 1)],
            None, [("a", 2)], id="an-empty-node-selector-and-empty-tolerations-equal-none-as-in-go",
        ),
        pytest.param(
            IDENTICAL, [with_template("a", 1, container={"resources": {}}), with_template("b", 1)],
            None, [("a", 2)], id="an-empty-container-resources-equals-none-as-it-is-a-value-in-go",
        ),
        pytest.param(
            IDENTICAL, [with_template("a", 1, affinity={}), with_template("b", 1)],
            None, [("a", 1), ("b", 1)], id="an-empty-affinity-differs-from-none-as-a-non-nil-pointer-in-go",
        ),
        pytest.param(
            REQUIREMENTS, [pod_set("a", 2, requests={GPU: "1"}), pod_set("b", 2, limits={GPU: "1"})], None,
            [("a", 2), ("b", 2)], id="scheduling-requirements-compare-requests-as-written-so-limits-standing-in-for-them-do-not-merge",
        ),
        pytest.param(
            REQUIREMENTS, [with_template("a", 1, nodeSelector={"pool": "a100"}), with_template("b", 1)], None,
            [("a", 1), ("b", 1)], id="scheduling-requirements-compare-the-node-selector-as-written-not-with-the-flavors-labels",
        ),
        pytest.param(
            REQUIREMENTS, [pod_set("a", 2, requests={"cpu": "500m"}), pod_set("b", 3, requests={"cpu": "0.5"})], {"b": "h100"},
            [("a", 5)], id="scheduling-requirements-compare-requests-by-value-and-ignore-the-flavors",
        ),
        pytest.param(
            REQUIREMENTS, [with_template("a", 1, container={"image": "one", "args": ["x"]}), with_template("b", 1, container={"image": "two"})],
            None, [("a", 2)], id="scheduling-requirements-ignore-what-does-not-schedule",
        ),
        pytest.param(
            REQUIREMENTS, [with_template("a", 1, tolerations=[{"key": "gpu", "operator": "Exists", "value": ""}]),
                           with_template("b", 1, tolerations=[{"key": "gpu", "operator": "Exists"}])],
            None, [("a", 2)], id="an-empty-toleration-value-equals-none",
        ),
    ],
)
def test_pod_set_merge_policy(policy, pod_sets, flavors, expected):
    p = started(holding(pod_sets=pod_sets, flavors=flavors, config={"podSetMergePolicy": policy} if policy else {}))
    assert [(n, ps.count) for n, ps in zip(p.attempt.pod_sets, p.request.spec.pod_sets)] == expected


def test_a_merged_podsets_template_is_its_first_podsets_with_that_podsets_flavor():
    pod_sets = [pod_set(n, 1, limits={GPU: "1"}) for n in ("a", "b")]
    p = started(holding(pod_sets=pod_sets, flavors={"a": "h100", "b": "l4"}, config={"podSetMergePolicy": IDENTICAL}))
    (tpl,) = [t.to_wire() for t in p.pod_templates]
    assert tpl["metadata"]["name"] == "ppt-job-prov-1-a"
    assert tpl["template"]["spec"]["nodeSelector"] == {"pool": "h100"}
    assert tpl["template"]["spec"]["containers"][0]["resources"]["requests"] == {GPU: "1"}


# --- reconcile ------------------------------------------------------------------------------------


def test_no_podset_of_interest_makes_the_check_ready_without_a_request():
    st = holding(pod_sets=[pod_set("main", 1, requests={"cpu": "1"})], config={"managedResources": [GPU]})
    cmds, verdicts = prov.reconcile(st)
    assert cmds.start == [] and [(v.state, v.message) for v in verdicts] == [("Ready", "the provisioning request is not needed")]


def test_a_missing_config_leaves_the_check_pending_and_inactive():
    st = holding(config=None)
    cmds, verdicts = prov.reconcile(st)
    assert cmds.start == [] and [(v.state, v.message) for v in verdicts] == [("Pending", "the check is not active")]


def test_the_same_attempt_is_not_started_twice():
    st = holding(config={})
    started(st)
    assert prov.reconcile(st) == (prov.Commands(), [])


def test_a_changed_config_deletes_the_request_and_makes_it_again_once_it_is_gone():
    st = holding(config={"parameters": {"a": "1"}})
    first = started(st)
    st.checks_info["prov"] = st.checks_info["prov"].model_copy(update={"parameters": {"provisioningClassName": CLASS, "parameters": {"a": "2"}}})
    cmds, _ = prov.reconcile(st)
    assert [a.name for a in cmds.stop] == ["job-prov-1"] and cmds.start == [], "the same name waits for the old request to go"
    assert st.provisioning.stopping == [first.attempt.workflow_id]
    prov.stopped(st, "prov", 1)
    again = started(st)
    assert again.request.spec.parameters == {"a": "2"} and again.attempt.name == "job-prov-1"


def test_a_removed_check_deletes_its_request():
    st = holding(config={})
    started(st)
    st.status.admission_checks = None
    cmds, _ = prov.reconcile(st)
    assert [a.name for a in cmds.stop] == ["job-prov-1"] and st.provisioning.current == {}


@pytest.mark.parametrize(
    "leave",
    [
        pytest.param(lambda st: messages.verdict(st, {"name": "prov", "state": "Retry"}, T0), id="eviction"),
        pytest.param(lambda st: wl.finish(st, True, "", T0), id="finish"),
        pytest.param(lambda st: checks.deactivate(st, T0), id="deactivation"),
        pytest.param(lambda st: wl.delete(st), id="deletion"),
    ],
)
def test_every_request_goes_when_the_workload_leaves(leave):
    st = holding(config={})
    started(st)
    leave(st)
    cmds, _ = prov.reconcile(st)
    assert [a.name for a in cmds.stop] == ["job-prov-1"] and st.provisioning.current == {}


def test_the_next_attempt_after_a_retry_is_retry_count_plus_one():
    st = holding(config={})
    started(st)
    check_ = check(st)
    st.status.admission_checks[0] = check_.model_copy(update={"retry_count": 2})
    st.provisioning.current.clear()
    assert started(st).attempt.name == "job-prov-3"


# --- conditions -> the check ----------------------------------------------------------------------


def reported(st: wl.WorkloadState, pr: ProvisioningRequest, random: float = 0.0):
    p = st.provisioning.current["prov"]
    p.request = pr
    return prov.on_status(st, p, random)


@pytest.mark.parametrize(
    ("conds", "limit", "retry_count", "expected"),
    [
        pytest.param([("Failed", "True", "out of GPUs")], 3, 0, ("Retry", "Retrying after failure: out of GPUs", 60), id="failed-with-retries-left-is-retry-after-60s"),
        pytest.param([("Failed", "True", "out of GPUs")], 3, 2, ("Retry", "Retrying after failure: out of GPUs", 240), id="the-third-failure-waits-240s"),
        pytest.param([("Failed", "True", "out of GPUs")], 2, 2, ("Rejected", "out of GPUs", None), id="failed-past-the-limit-is-rejected"),
        pytest.param([("Failed", "True", "x")], 0, 0, ("Rejected", "x", None), id="limit-zero-rejects-the-first-failure"),
        pytest.param([("CapacityRevoked", "True", "gone")], 3, 0, ("Rejected", "gone", None), id="capacity-revoked-is-rejected"),
        pytest.param([("Provisioned", "True", "ok"), ("BookingExpired", "True", "late")], 3, 0, ("Retry", "Retrying after booking expired: late", 60), id="booking-expired-before-admission-is-like-failed"),
        pytest.param([("Accepted", "True", ""), ("Provisioned", "False", "ETA 10:30")], 3, 0, ("Pending", "ETA 10:30", None), id="the-provisioned-false-message-is-the-eta"),
        pytest.param([("Failed", "True", "x"), ("Provisioned", "True", "ok")], 3, 0, ("Retry", "Retrying after failure: x", 60), id="failed-comes-before-provisioned"),
    ],
)
def test_conditions_make_the_check(conds, limit, retry_count, expected):
    st = holding(config={"retryStrategy": {"backoffLimitCount": limit}})
    st.status.admission_checks[0] = check(st).model_copy(update={"retry_count": retry_count})
    started(st)
    v = reported(st, status(*conds))
    assert (v.state, v.message, v.requeue_after_seconds) == expected


def test_provisioned_is_ready_with_the_consume_annotations_and_node_selector_from_details():
    st = holding(config={"podSetUpdates": {"nodeSelector": [{"key": "cloud/pool", "valueFromProvisioningClassDetail": "nodeGroup"}, {"key": "zone", "valueFromProvisioningClassDetail": "missing"}]}})
    started(st)
    v = reported(st, status(("Provisioned", "True", "Capacity is found in the cluster"), details={"nodeGroup": "a100-pool"}))
    assert v.state == "Ready" and v.message == "Capacity is found in the cluster"
    assert [u.to_wire() for u in v.pod_set_updates] == [
        {
            "name": "main",
            "annotations": {
                "autoscaling.x-k8s.io/consume-provisioning-request": "job-prov-1",
                "autoscaling.x-k8s.io/provisioning-class-name": CLASS,
            },
            "nodeSelector": {"cloud/pool": "a100-pool"},
        }
    ]
    checks.apply(st, v, T0)
    assert wl.is_admitted(st)


def test_booking_expired_after_admission_is_ignored_and_revocation_still_deactivates():
    st = holding(config={})
    started(st)
    checks.apply(st, reported(st, status(("Provisioned", "True", "ok"))), T0)
    assert wl.is_admitted(st)
    assert reported(st, status(("Provisioned", "True", "ok"), ("BookingExpired", "True", "consumed"))) is None
    v = reported(st, status(("Provisioned", "True", "ok"), ("CapacityRevoked", "True", "node group shrank")))
    checks.apply(st, v, T0 + timedelta(seconds=1))
    assert wl.phase(st) == "Inactive"
    assert any(e.reason == "AdmissionCheckRejected" for e in st.events)


def test_no_condition_clears_the_message_and_nothing_repeats():
    st = holding(config={})
    started(st)
    st.status.admission_checks[0] = check(st).model_copy(update={"message": "old"})
    v = reported(st, status())
    assert (v.state, v.message) == ("Pending", "")
    checks.apply(st, v, T0)
    assert reported(st, status()) is None


OLD_ATTEMPT = [
    pytest.param([("Failed", "True", "x")], 3, id="an-old-attempts-failure-does-not-retry-again"),
    pytest.param([("Failed", "True", "x")], 0, id="an-old-attempts-failure-past-a-lowered-limit-does-not-reject"),
    pytest.param([("Provisioned", "True", "ok"), ("BookingExpired", "True", "late")], 3, id="an-old-attempts-expired-booking-does-not-retry"),
    pytest.param([("CapacityRevoked", "True", "gone")], 3, id="an-old-attempts-revoked-capacity-does-not-reject"),
    pytest.param([("Provisioned", "True", "ok")], 3, id="an-old-attempts-capacity-does-not-make-the-check-ready"),
    pytest.param([("Accepted", "True", ""), ("Provisioned", "False", "ETA 10:30")], 3, id="an-old-attempts-eta-is-not-the-message"),
]


def old_attempt(limit: int) -> wl.WorkloadState:
    """Attempt 1 is still the workflow's, but the check has been retried once (retryCount 1): the
    current attempt is 2."""
    st = holding(config={"retryStrategy": {"backoffLimitCount": limit}})
    started(st)
    st.status.admission_checks[0] = check(st).model_copy(update={"retry_count": 1, "message": "Reset to Pending after eviction. Previously: Retry"})
    return st


@pytest.mark.parametrize(("conds", "limit"), OLD_ATTEMPT)
def test_an_old_attempts_request_changes_nothing(conds, limit):
    assert reported(old_attempt(limit), status(*conds)) is None


@pytest.mark.parametrize(("conds", "limit"), OLD_ATTEMPT)
def test_a_report_of_an_old_attempt_changes_neither_the_check_nor_the_events(conds, limit):
    st = old_attempt(limit)
    before_check, before_events = check(st), list(st.events)
    prov.report(st, "prov", 1, status(*conds), "", T0, 0.0)
    assert check(st) == before_check and st.events == before_events
    assert st.provisioning.current["prov"].request == status(*conds), "kept, so that reconcile moves on to the next attempt"


def test_a_refused_create_of_an_old_attempt_changes_nothing():
    st = old_attempt(3)
    before = st.model_copy(deep=True)
    prov.report(st, "prov", 1, None, 'Error creating ProvisioningRequest "job-prov-1": forbidden', T0, 0.0)
    assert st == before


def test_after_an_old_attempts_failure_the_next_attempt_starts():
    st = old_attempt(3)
    prov.report(st, "prov", 1, status(("Failed", "True", "x")), "", T0, 0.0)
    cmds, verdicts = prov.reconcile(st)
    assert verdicts == [] and [a.name for a in cmds.stop] == ["job-prov-1"]
    assert [p.attempt.name for p in cmds.start] == ["job-prov-2"]


@pytest.mark.parametrize(
    ("n", "random", "seconds"),
    [
        pytest.param(1, 0.0, 60, id="first-retry-waits-the-base"),
        pytest.param(2, 0.0, 120, id="second-doubles"),
        pytest.param(3, 0.0, 240, id="third-doubles-again"),
        pytest.param(10, 0.0, 1800, id="capped-at-the-max"),
        pytest.param(1, 0.99, 60, id="the-jitter-is-a-ten-thousandth-truncated"),
        pytest.param(10, 0.99, 1800, id="jitter-on-the-max-adds-under-a-second"),
    ],
)
def test_backoff(n, random, seconds):
    assert prov.backoff_seconds(ProvisioningRequestRetryStrategy(), n, random) == seconds


# --- reports from the attempt's workflow -------------------------------------------------------------


def test_a_refused_create_is_a_warning_and_the_checks_message():
    st = holding(config={})
    started(st)
    prov.report(st, "prov", 1, None, 'Error creating ProvisioningRequest "job-prov-1": forbidden', T0, 0.0)
    assert [(e.type, e.reason) for e in st.events][-1] == ("Warning", "FailedCreate")
    assert (check(st).state, check(st).message) == ("Pending", 'Error creating ProvisioningRequest "job-prov-1": forbidden')


def test_the_first_report_records_the_creation_once_and_a_stale_attempt_is_ignored():
    st = holding(config={})
    started(st)
    prov.report(st, "prov", 1, status(("Accepted", "True", "")), "", T0, 0.0)
    prov.report(st, "prov", 1, status(("Provisioned", "True", "ok")), "", T0, 0.0)
    assert [e.message for e in st.events if e.reason == "ProvisioningRequestCreated"] == ['Created ProvisioningRequest: "job-prov-1"']
    assert wl.is_admitted(st)
    before = st.model_copy(deep=True)
    prov.report(st, "prov", 2, status(("Failed", "True", "late")), "", T0, 0.0)
    assert st == before, "attempt 2 is not the current attempt"


@pytest.mark.parametrize(
    ("seen", "known", "news"),
    [
        ("7", "5", True),
        ("5", "7", False),  # a stale push after the request was read back later than it
        ("5", "5", False),
        ("10", "9", True),  # numbers, not strings
        ("abc", "abd", True),  # opaque versions: any difference is news
        ("abc", "abc", False),
        ("3", None, True),
    ],
)
def test_a_push_is_news_only_when_newer_than_what_is_known(seen, known, news):
    def req(version):
        return ProvisioningRequest.model_validate(
            {"metadata": {"name": "r", "namespace": "default", "resourceVersion": version}, "spec": {"provisioningClassName": "x", "podSets": [{"podTemplateRef": {"name": "t"}, "count": 1}]}}
        )

    assert prov.newer(req(seen), req(known)) is news
