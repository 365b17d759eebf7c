"""Preemption within a ClusterQueue: who may be preempted under each policy, in which order, and
the fewest victims that make room."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from admitflow.admission import cluster_queue as cq
from admitflow.admission import preemption
from tests.unit.test_cluster_queue import entry, run_pass, state_with, view


def reserve(st, *entries):
    for e in entries:
        cq.enqueue(st, e)
    run_pass(st)
    assert {e.key for e in entries} <= set(st.reservations)


@pytest.mark.parametrize(
    ("policy", "victim_priority", "victim_age", "preempted"),
    [
        pytest.param("Never", 0, 0, False, id="never-preempts-nobody"),
        pytest.param("LowerPriority", 0, 0, True, id="lower-priority-preempts-a-lower-priority-workload"),
        pytest.param("LowerPriority", 5, 0, False, id="lower-priority-spares-an-equal-priority-workload"),
        pytest.param("LowerOrNewerEqualPriority", 5, -30, True, id="newer-equal-priority-is-preempted-by-an-older-one"),
        pytest.param("LowerOrNewerEqualPriority", 5, 30, False, id="older-equal-priority-is-spared"),
        pytest.param("LowerOrNewerEqualPriority", 9, -30, False, id="higher-priority-is-never-preempted"),
    ],
)
def test_policies(policy, victim_priority, victim_age, preempted):
    st = state_with(view(preemption={"withinClusterQueue": policy}))
    reserve(st, entry("victim", cpu=4000, priority=victim_priority, age=victim_age))
    cq.enqueue(st, entry("preemptor", cpu=2000, priority=5))
    result = run_pass(st)
    evicted = [n.key for n in result.notices if n.kind == "evicted"]
    assert evicted == (["default/victim"] if preempted else [])
    told = next(n for n in result.notices if n.key == "default/preemptor")
    if preempted:
        assert (told.reason, told.message) == (
            "WaitingForPreemptedWorkloads",
            "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default, "
            "2 more needed. Pending the preemption of 1 workload(s)",
        )
        assert st.reservations["default/victim"].evicting, "the victim keeps its quota until it leaves"
    else:
        assert told.reason == "WaitingForQuota"


def test_the_fewest_and_lowest_priority_victims_are_chosen():
    st = state_with(view(preemption={"withinClusterQueue": "LowerPriority"}))
    reserve(
        st,
        entry("big-low", cpu=2000, priority=1, age=50),
        entry("small-lowest", cpu=1000, priority=0, age=40),
        entry("small-mid", cpu=1000, priority=2, age=30),
    )
    cq.enqueue(st, entry("preemptor", cpu=2000, priority=9))
    result = run_pass(st)
    # Lowest priority first: small-lowest (1 cpu) is not enough, big-low (2 cpu) then is; giving
    # small-lowest back still leaves room, so only big-low goes.
    assert [n.key for n in result.notices if n.kind == "evicted"] == ["default/big-low"]


def test_the_victim_message_and_the_preemptor_admitted_once_the_victim_leaves():
    st = state_with(view(preemption={"withinClusterQueue": "LowerPriority"}))
    reserve(st, entry("victim", cpu=4000, priority=0))
    cq.enqueue(st, entry("preemptor", cpu=4000, priority=1))
    (evicted,) = [n for n in run_pass(st).notices if n.kind == "evicted"]
    assert (evicted.reason, evicted.preemption_reason, evicted.message) == (
        "Preempted",
        "InClusterQueue",
        "Preempted to accommodate a workload (UID: uid-preemptor, JobUID: UNKNOWN) due to prioritization in the "
        "ClusterQueue; preemptor path: /cq; preemptee path: /cq",
    )
    again = run_pass(st)
    assert [n.kind for n in again.notices] == [], "nobody is told twice while the victim leaves"
    cq.release(st, "default/victim", "uid-victim", 1)
    assert [r.key for r in run_pass(st).reserved] == ["default/preemptor"]


def test_no_preemption_when_even_all_candidates_would_not_make_room():
    assert preemption.select_victims({("f", "cpu"): 5}, {("f", "cpu"): 4}, {("f", "cpu"): 4}, []) is None


def test_candidate_order_is_kueues():
    t = datetime(2026, 1, 1, tzinfo=UTC)

    class R:
        def __init__(self, key, priority, reserved, evicting=False):
            self.key, self.priority, self.evicting, self.uid = key, priority, evicting, key
            self.reserved_at = t + timedelta(seconds=reserved)

    p = entry("p", priority=10)
    got = preemption.candidates(
        "LowerPriority", p, [R("old-low", 1, 0), R("new-low", 1, 9), R("lowest", 0, 5), R("evicting", 5, 0, True)]
    )
    assert [r.key for r in got] == ["evicting", "lowest", "new-low", "old-low"]
