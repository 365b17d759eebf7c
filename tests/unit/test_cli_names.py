"""How the command reads what a user names (kubectl's habits): kinds by name, short name, plural,
`kind.group` and `kind/name`; keys with `-n/--kueue-namespace` or `NS/NAME`; `-o name` lines."""

from __future__ import annotations

import argparse

import pytest

from admitflow import kinds
from admitflow.cli import errors
from admitflow.cli import names as cli_names
from admitflow.cli.parser import build_parser
from admitflow.printing import columns, names


@pytest.mark.parametrize(
    ("given", "kind"),
    [
        pytest.param("cq", "ClusterQueue", id="a-short-name"),
        pytest.param("ClusterQueues", "ClusterQueue", id="a-plural-in-any-case"),
        pytest.param("clusterqueue.kueue.x-k8s.io", "ClusterQueue", id="kind-dot-group"),
        pytest.param("workloads.kueue.x-k8s.io", "Workload", id="plural-dot-group"),
        pytest.param("cq.v1beta2.kueue.x-k8s.io", "ClusterQueue", id="kind-dot-version-dot-group"),
        pytest.param("simulatednodegroups.admitflow.io", "SimulatedNodeGroup", id="admitflows-own-group"),
        pytest.param("configuration.config.kueue.x-k8s.io", "Configuration", id="kueues-config-group"),
    ],
)
def test_a_kind_is_named_as_kubectl_names_it(given, kind):
    assert kinds.kind_of(given) == kind


@pytest.mark.parametrize(
    "given",
    [
        pytest.param("widgets", id="an-unknown-kind"),
        pytest.param("clusterqueues.example.com", id="a-known-kind-in-another-group"),
        pytest.param("workloads.admitflow.io", id="a-kind-in-the-group-of-another"),
        pytest.param("cq.v1.v2.kueue.x-k8s.io", id="not-a-version"),
    ],
)
def test_a_kind_that_is_not_one_is_refused_as_kubectl_refuses_it(given):
    with pytest.raises(kinds.UnknownKind, match=f'the server doesn\'t have a resource type "{given}"'):
        kinds.kind_of(given)


@pytest.mark.parametrize(
    ("ref", "split"),
    [
        pytest.param("cq", ("cq", None), id="a-kind-alone"),
        pytest.param("cq/gpu", ("cq", "gpu"), id="kind-slash-name"),
        pytest.param("workload/team-a/train", ("workload", "team-a/train"), id="a-workload-with-its-namespace"),
        pytest.param("workload.kueue.x-k8s.io/team-a/train", ("workload.kueue.x-k8s.io", "team-a/train"), id="an-o-name-line"),
    ],
)
def test_kind_slash_name(ref, split):
    assert kinds.split_kind(ref) == split


@pytest.mark.parametrize(
    ("kind", "name", "namespace", "key"),
    [
        pytest.param("Workload", "train", None, "default/train", id="a-name-alone-is-in-default"),
        pytest.param("Workload", "train", "team-a", "team-a/train", id="n-says-the-namespace"),
        pytest.param("Workload", "team-a/train", None, "team-a/train", id="ns-slash-name-says-it"),
        pytest.param("Workload", "team-a/train", "team-a", "team-a/train", id="both-agreeing"),
        pytest.param("LocalQueue", "lq", "team-b", "team-b/lq", id="a-local-queue-too"),
        pytest.param("ClusterQueue", "gpu", "team-a", "gpu", id="a-cluster-scoped-kind-ignores-n-as-kubectl-does"),
    ],
)
def test_a_key_from_a_name_and_n(kind, name, namespace, key):
    assert cli_names.key(kind, name, namespace) == key


def test_a_namespace_given_twice_and_disagreeing_is_refused():
    with pytest.raises(errors.CLIError) as err:
        cli_names.key("Workload", "team-a/train", "team-b")
    assert (str(err.value), err.value.code) == (
        '"team-a/train" is in namespace team-a, but -n/--kueue-namespace says team-b: give the namespace once',
        errors.EXIT_BAD_INPUT,
    )


def _args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


@pytest.mark.parametrize(
    ("argv", "target"),
    [
        pytest.param(("describe", "cq/gpu"), ("ClusterQueue", "gpu"), id="kind-slash-name"),
        pytest.param(("describe", "cq", "gpu"), ("ClusterQueue", "gpu"), id="kind-and-name"),
        pytest.param(("delete", "wl", "train", "-n", "team-a"), ("Workload", "team-a/train"), id="n-long-form-too"),
        pytest.param(("delete", "wl/train", "--kueue-namespace", "team-a"), ("Workload", "team-a/train"), id="slash-and-n"),
        pytest.param(("reset", "workload/team-a/train"), ("Workload", "team-a/train"), id="reset-workload-slash-key"),
        pytest.param(("delete", "localqueue.kueue.x-k8s.io/team-a/lq"), ("LocalQueue", "team-a/lq"), id="an-o-name-line-back"),
    ],
)
def test_the_object_a_command_names(argv, target):
    assert cli_names.target(_args(*argv)) == target


def test_o_name_prints_lines_admitflow_takes_back():
    objects = [
        {"kind": "Workload", "metadata": {"name": "train", "namespace": "team-a"}},
        {"kind": "Workload", "metadata": {"name": "eval", "namespace": "team-b"}},
    ]
    lines = names("Workload", objects)
    assert lines == ["workload.kueue.x-k8s.io/team-a/train", "workload.kueue.x-k8s.io/team-b/eval"]
    assert [cli_names.target(_args("delete", line)) for line in lines] == [("Workload", "team-a/train"), ("Workload", "team-b/eval")]
    assert names("ClusterQueue", [{"metadata": {"name": "gpu"}}]) == ["clusterqueue.kueue.x-k8s.io/gpu"]
    assert names("Configuration", [{"metadata": {"name": "kueue-config"}}]) == ["configuration.config.kueue.x-k8s.io/config"]


ROW = {
    "kind": "Workload",
    "metadata": {"name": "train", "namespace": "team-a", "creationTimestamp": None},
    "spec": {"queueName": "lq", "priority": 5},
    "status": {"conditions": [{"type": "QuotaReserved", "status": "True"}], "admission": {"clusterQueue": "cq"}},
    "phase": "QuotaReserved",
    "pendingChecks": ["approval"],
}


@pytest.mark.parametrize(
    ("wide", "namespaced", "headers", "cells"),
    [
        pytest.param(
            False, True, ["NAMESPACE", "NAME", "QUEUE", "RESERVED IN", "ADMITTED", "FINISHED", "AGE"],
            ["team-a", "train", "lq", "cq", "", "", "<unknown>"], id="a-list-across-namespaces",
        ),
        pytest.param(
            False, False, ["NAME", "QUEUE", "RESERVED IN", "ADMITTED", "FINISHED", "AGE"],
            ["train", "lq", "cq", "", "", "<unknown>"], id="one-namespace-has-no-namespace-column",
        ),
        pytest.param(
            True, False,
            ["NAME", "QUEUE", "RESERVED IN", "ADMITTED", "FINISHED", "AGE", "PRIORITY", "PENDING CHECKS", "STATUS"],
            ["train", "lq", "cq", "", "", "<unknown>", "5", "approval", "QuotaReserved"], id="wide-adds-priority-checks-and-status",
        ),
    ],
)
def test_workload_columns(wide, namespaced, headers, cells):
    got_headers, row = columns("Workload", [ROW], wide=wide, namespaced=namespaced)
    assert (got_headers, row(ROW)) == (headers, cells)
