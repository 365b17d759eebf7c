"""Preemption within a ClusterQueue: who may be preempted under each policy, in which order, and
the fewest victims that make room."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from admitflow.admission import cluster_queue as cq
from admitflow.admission import preemption, scheduler
from tests.unit.test_cluster_queue import NOW, entry, run_pass, state_with, view


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


# --- a preemptor keeps its queue's head while its victims leave --------------------------------------
# Kueue requeues a workload pending preemption straight back to the head of its ClusterQueue (sticky
# in BestEffortFIFO) and takes one head per ClusterQueue per cycle, so nothing behind it is reserved
# until it is; a preemptor that found no targets goes to the inadmissible set and holds nothing.


def preempting_queue(**kw):
    return state_with(view(quotas={"default": {"cpu": "20"}}, preemption={"withinClusterQueue": "LowerPriority"}, **kw))


def requeue_victims(st, names):
    """The victims leave (release their quota) and come back to the queue, as a preempted workload does."""
    for name in names:
        assert cq.release(st, f"default/{name}", f"uid-{name}", 1) is True
        cq.enqueue(st, entry(name, cpu=1000, priority=50, age=100, ticket=2))


def test_freed_quota_is_not_given_to_the_workloads_behind_a_waiting_preemptor():
    st = preempting_queue()
    smalls = [f"small-{i}" for i in range(20)]
    reserve(st, *(entry(n, cpu=1000, priority=50, age=100) for n in smalls))
    cq.enqueue(st, entry("large", cpu=20000, priority=200))
    first = run_pass(st)
    assert sorted(n.key for n in first.notices if n.kind == "evicted") == sorted(f"default/{n}" for n in smalls)

    requeue_victims(st, smalls[:4])
    after_four = run_pass(st)
    assert after_four.reserved == [], "the 4 cpu freed so far wait for the large workload"
    assert [n for n in after_four.notices if n.kind == "evicted"] == [], "nobody is preempted twice"
    assert {e.key for e in st.pending} == {"default/large", *(f"default/{n}" for n in smalls[:4])}

    requeue_victims(st, smalls[4:])
    last = run_pass(st)
    assert [r.key for r in last.reserved] == ["default/large"]
    assert [n for n in last.notices if n.kind == "evicted"] == []
    assert len(st.pending) == 20


def test_a_workload_behind_a_waiting_preemptor_waits_even_where_it_would_not_compete():
    # The small one would fit in the spot flavor, which the large one does not use; Kueue does not
    # look past the preemptor at the head of the ClusterQueue either.
    st = state_with(
        view(
            flavors=("default", "spot"),
            quotas={"default": {"cpu": "20"}, "spot": {"cpu": "4"}},
            preemption={"withinClusterQueue": "LowerPriority"},
        )
    )
    reserve(st, entry("holder", cpu=20000, priority=50, age=100))
    cq.enqueue(st, entry("large", cpu=20000, priority=200))
    cq.enqueue(st, entry("spot-fit", cpu=1000, priority=10))
    result = run_pass(st)
    assert [n.key for n in result.notices if n.kind == "evicted"] == ["default/holder"]
    assert result.reserved == []
    assert [n.key for n in result.notices if n.kind == "pending"] == ["default/large"], "the one behind is not evaluated"
    cq.release(st, "default/holder", "uid-holder", 1)
    assert [r.key for r in run_pass(st).reserved] == ["default/large", "default/spot-fit"]


def test_a_preemptor_that_finds_no_victims_holds_nothing_back():
    st = state_with(view(preemption={"withinClusterQueue": "LowerPriority"}))
    reserve(st, entry("higher", cpu=2000, priority=100))
    cq.enqueue(st, entry("preemptor", cpu=4000, priority=50))
    cq.enqueue(st, entry("small", cpu=1000, priority=0))
    result = run_pass(st)
    assert [n for n in result.notices if n.kind == "evicted"] == []
    assert [r.key for r in result.reserved] == ["default/small"]
    assert st.pending.get("default/preemptor").inadmissible


def test_histories_recorded_before_the_fix_replay_the_old_pass():
    st = preempting_queue()
    smalls = [f"small-{i}" for i in range(20)]
    reserve(st, *(entry(n, cpu=1000, priority=50, age=100) for n in smalls))
    cq.enqueue(st, entry("large", cpu=20000, priority=200))
    run_pass(st)
    requeue_victims(st, smalls[:4])
    old = scheduler.schedule([st], NOW, hold_for_preemptor=lambda: False)["cq"]
    assert len(old.reserved) == 4
