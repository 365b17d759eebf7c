"""Handing a ClusterQueue's state between its home and its cohort tree: numbered, so a repeated or
stale handover changes nothing, and the state is in one place at a time."""

from __future__ import annotations

import pytest

from admitflow.admission.cluster_queue import ClusterQueueState, ClusterQueueView
from admitflow.admission.cohort_tree import Away, CohortTreeState, Handover, adopt, recall, take_back, tree_root
from admitflow.admission.quota_tree import CohortInfo, CohortTree
from admitflow.api import ClusterQueueSpec

TREE = CohortTree(root="org", cohorts={"org": CohortInfo(name="org"), "team": CohortInfo(name="team", parent="org")})


def view(spec: bool = True, tree: CohortTree | None = TREE) -> ClusterQueueView:
    return ClusterQueueView(name="cq", revision=1, spec=ClusterQueueSpec() if spec else None, cohort_tree=tree)


@pytest.mark.parametrize(
    ("v", "root"),
    [
        pytest.param(None, None, id="no-view-yet-schedules-itself"),
        pytest.param(view(tree=None), None, id="no-cohort-schedules-itself"),
        pytest.param(view(spec=False), None, id="a-deleted-queue-comes-home"),
        pytest.param(view(), "org", id="in-a-cohort-the-root-of-its-tree-schedules-it"),
    ],
)
def test_tree_root(v, root):
    assert tree_root(v) == root


def state(name: str = "cq") -> ClusterQueueState:
    return ClusterQueueState(name=name)


def test_an_adopted_state_is_held_once_and_a_repeat_or_an_older_handover_is_ignored():
    tree = CohortTreeState(root="org")
    first = state()
    assert adopt(tree, Handover(cluster_queue="cq", number=2, state=first))
    assert not adopt(tree, Handover(cluster_queue="cq", number=2, state=state()))
    assert not adopt(tree, Handover(cluster_queue="cq", number=1, state=state()))
    assert tree.members["cq"] is first


def test_a_recall_returns_the_state_once_and_a_repeat_returns_nothing():
    tree = CohortTreeState(root="org")
    adopt(tree, Handover(cluster_queue="cq", number=1, state=state()))
    returned = recall(tree, Handover(cluster_queue="cq", number=1))
    assert returned is not None and returned.state is not None and returned.number == 1
    assert "cq" not in tree.members
    assert recall(tree, Handover(cluster_queue="cq", number=1)) is None


def test_a_recall_for_another_handover_leaves_the_state_where_it_is():
    tree = CohortTreeState(root="org")
    adopt(tree, Handover(cluster_queue="cq", number=3, state=state()))
    assert recall(tree, Handover(cluster_queue="cq", number=2)) is None
    assert "cq" in tree.members


@pytest.mark.parametrize(
    ("away", "handover", "taken"),
    [
        pytest.param(Away(root="org", number=1, recalling=True), Handover(cluster_queue="cq", number=1, state=state()), True,
                     id="the-state-asked-for-is-taken-back"),
        pytest.param(Away(root="org", number=1), Handover(cluster_queue="cq", number=1, state=state()), False,
                     id="a-state-never-asked-for-is-refused"),
        pytest.param(Away(root="org", number=2, recalling=True), Handover(cluster_queue="cq", number=1, state=state()), False,
                     id="an-older-handover-is-refused"),
        pytest.param(None, Handover(cluster_queue="cq", number=1, state=state()), False,
                     id="a-home-holding-its-state-takes-no-other"),
        pytest.param(Away(root="org", number=1, recalling=True), Handover(cluster_queue="cq", number=1), False,
                     id="a-return-without-a-state-is-refused"),
    ],
)
def test_take_back(away, handover, taken):
    assert take_back(away, handover) is taken
