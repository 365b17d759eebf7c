"""Handing a ClusterQueue's state between its home and its cohort tree: numbered, so a repeated or
stale handover changes nothing, and the state is in one place at a time; and where the home and the
tree send messages and the state. Every interleaving of many homes and trees is modelled in
tests/unit/test_handover_properties.py."""

from __future__ import annotations

import pytest

from admitflow import contract
from admitflow.admission.cluster_queue import ClusterQueueState, ClusterQueueView, QueueEntry
from admitflow.admission.cohort_tree import current_details as tree_details
from admitflow.admission.cohort_tree import (
    Apply,
    Away,
    CohortTreeState,
    Forwarded,
    Handover,
    Home,
    Reschedule,
    Resume,
    Send,
    Suspend,
    adopt,
    adopted,
    forwarded,
    recall,
    recalled,
    take_back,
    tree_root,
)
from admitflow.admission.quota_tree import CohortInfo, CohortTree
from admitflow.api import ClusterQueueSpec
from tests.unit.test_cluster_queue import NOW

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


# --- the home's decisions -----------------------------------------------------------------------------

ENTRY = QueueEntry(key="default/w", uid="u", ticket=1, local_queue="lq", priority=0, timestamp=NOW, pod_sets=[])


def forward(m) -> Forwarded:
    return Forwarded(cluster_queue="cq", signal=contract.ENQUEUE, payload=m.to_wire())


@pytest.mark.parametrize(
    ("away", "orders", "held"),
    [
        pytest.param(None, [Apply(message=ENTRY)], [], id="at-home-a-message-is-applied-here"),
        pytest.param(Away(root="org", number=1),
                     [Send(workflow_id="cohort/org", signal=contract.FORWARD, payload=forward(ENTRY).to_wire())], [],
                     id="away-a-message-follows-the-state-to-its-tree"),
        pytest.param(Away(root="org", number=1, recalling=True), [], [forward(ENTRY)],
                     id="while-the-state-comes-back-a-message-waits-for-it"),
    ],
)
def test_a_message_at_the_home(away, orders, held):
    home = Home("cq", state(), away)
    assert home.receive(contract.ENQUEUE, ENTRY, NOW) == orders
    assert (home.away.held if home.away else []) == held


def test_a_view_naming_a_tree_hands_the_state_over_and_starts_the_tree():
    held = ClusterQueueState(name="cq", view=view())
    home = Home("cq", held)
    orders = home.place()
    assert orders == [
        Send(workflow_id="cohort/org", signal=contract.ADOPT, start_cohort="org",
             payload=Handover(cluster_queue="cq", number=1, state=held).to_wire()),
        Suspend(),
    ]
    assert home.away == Away(root="org", number=1) and home.state is not held and home.state.view == held.view


def test_a_view_naming_no_tree_keeps_the_state_home():
    home = Home("cq", state())
    assert home.place() == [] and home.away is None


def test_a_view_naming_another_tree_asks_for_the_state_back_once():
    home = Home("cq", state(), Away(root="other", number=3))
    home.state.view = view(tree=None)
    assert home.place() == [
        Send(workflow_id="cohort/other", signal=contract.RECALL, payload=Handover(cluster_queue="cq", number=3).to_wire())
    ]
    assert home.place() == []


def test_the_returned_state_resumes_with_the_latest_view_then_what_was_held():
    home = Home("cq", ClusterQueueState(name="cq", view=view()), Away(root="org", number=2, recalling=True, held=[forward(ENTRY)]))
    back = state()
    assert home.returned(Handover(cluster_queue="cq", number=1, state=state())) == []
    assert home.returned(Handover(cluster_queue="cq", number=2, state=back)) == [Resume(state=back, view=view(), held=[forward(ENTRY)])]
    assert home.state is back and home.away is None


# --- the tree's decisions -----------------------------------------------------------------------------


def test_a_tree_applies_what_comes_for_a_queue_it_holds_and_bounces_the_rest_home():
    tree = CohortTreeState(root="org", members={"cq": state()})
    assert forwarded(tree, forward(ENTRY)) == [Apply(message=forward(ENTRY))]
    other = Forwarded(cluster_queue="gone", signal=contract.ENQUEUE, payload=ENTRY.to_wire())
    assert forwarded(tree, other) == [Send(workflow_id="clusterqueue/gone", signal=contract.FORWARD, payload=other.to_wire())]


def test_a_recalled_state_goes_home_and_the_tree_reschedules():
    tree = CohortTreeState(root="org")
    assert adopted(tree, Handover(cluster_queue="cq", number=1, state=state())) == [Reschedule()]
    assert adopted(tree, Handover(cluster_queue="cq", number=1, state=state())) == []
    back = Handover(cluster_queue="cq", number=1, state=state())
    assert recalled(tree, Handover(cluster_queue="cq", number=1)) == [
        Send(workflow_id="clusterqueue/cq", signal=contract.RETURN_STATE, payload=back.to_wire()), Reschedule()
    ]
    assert recalled(tree, Handover(cluster_queue="cq", number=1)) == []


def test_a_trees_current_details_give_each_queues_counts_and_what_it_borrows():
    from tests.unit.test_cohort_scheduling import holding, lend_a, lend_b

    a, b = lend_a(), lend_b()
    holding(b, "big", default="4")  # 2 cpu of its own, 2 borrowed from lend-a
    held = CohortTreeState(root="lend", members={"lend-a": a, "lend-b": b})
    assert tree_details(held).split("\n\n") == [
        "cohort tree lend: 2 ClusterQueue(s)",
        "- lend-a: pending 0, reserving 0, admitted 0",
        "- lend-b: pending 0, reserving 1, admitted 1, borrowing cpu 2 of default",
    ]
