"""A ClusterQueue's rules: its Active condition, which checks a workload gets, queueing and one
scheduling pass (priority order, StrictFIFO vs BestEffortFIFO, stopped and inactive queues)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from admitflow.admission import cluster_queue as cq
from admitflow.admission import scheduler
from admitflow.admission.cluster_queue import (
    AdmissionCheckInfo,
    ClusterQueueState,
    ClusterQueueView,
    LocalQueueInfo,
    QueueEntry,
)
from admitflow.admission.requests import PodSetRequest
from tests.builders import cluster_queue_manifest, flavor_manifest, manifest

NOW = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)


def view(revision: int = 1, flavors=("default",), check_infos=None, lqs=None, **cq_kw) -> ClusterQueueView:
    spec = manifest(cluster_queue_manifest(**cq_kw)).spec
    return ClusterQueueView(
        name="cq",
        revision=revision,
        spec=spec,
        flavors={f: manifest(flavor_manifest(f)).spec for f in flavors},
        admission_checks=check_infos or {},
        local_queues=lqs if lqs is not None else {"default/lq": LocalQueueInfo()},
    )


def entry(name: str, cpu: int = 2000, priority: int = 0, age: int = 0, ticket: int = 1, lq: str = "lq") -> QueueEntry:
    return QueueEntry(
        key=f"default/{name}",
        uid=f"uid-{name}",
        ticket=ticket,
        local_queue=lq,
        priority=priority,
        timestamp=NOW - timedelta(seconds=age),
        pod_sets=[PodSetRequest(name="main", count=1, per_pod={"cpu": cpu})],
    )


def state_with(v: ClusterQueueView, *entries: QueueEntry) -> ClusterQueueState:
    st = ClusterQueueState(name="cq")
    cq.set_view(st, v, NOW)
    for e in entries:
        cq.enqueue(st, e)
    return st


def run_pass(st: ClusterQueueState) -> scheduler.PassResult:
    return scheduler.schedule([st], NOW)["cq"]


# --- Active condition -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("v", "want"),
    [
        pytest.param(view(), (True, "Ready", "Can admit new workloads"), id="a-complete-queue-is-active"),
        pytest.param(
            view(flavors=()),
            (False, "FlavorNotFound", "Can't admit new workloads: references missing ResourceFlavor(s): default."),
            id="a-missing-flavor-makes-it-inactive",
        ),
        pytest.param(
            view(check_infos={"b": AdmissionCheckInfo(controller_name="x", active=False)}, checks=[{"name": "a"}, {"name": "b"}]),
            (
                False,
                "AdmissionCheckNotFound",
                "Can't admit new workloads: references missing AdmissionCheck(s): a, references inactive AdmissionCheck(s): b.",
            ),
            id="missing-and-inactive-checks-are-both-named-and-the-first-reason-wins",
        ),
        pytest.param(
            view(stopPolicy="Hold", flavors=()),
            (False, "Stopped", "Can't admit new workloads: is stopped, references missing ResourceFlavor(s): default."),
            id="stopped-comes-first",
        ),
        pytest.param(
            ClusterQueueView(name="cq", revision=2),
            (False, "Terminating", "Can't admit new workloads; clusterQueue is terminating"),
            id="a-deleted-queue-is-terminating",
        ),
    ],
)
def test_active_condition(v, want):
    assert cq.active_condition(v) == want


@pytest.mark.parametrize(
    ("rules", "used", "want"),
    [
        pytest.param([{"name": "a"}], None, ["a"], id="a-check-on-every-flavor-applies-before-reservation"),
        pytest.param([{"name": "a", "onFlavors": ["spot"]}], None, [], id="a-per-flavor-check-waits-for-the-assignment"),
        pytest.param([{"name": "a", "onFlavors": ["spot"]}], {"spot"}, ["a"], id="a-per-flavor-check-applies-when-its-flavor-is-used"),
        pytest.param([{"name": "a", "onFlavors": ["spot"]}], {"default"}, [], id="a-per-flavor-check-skips-other-flavors"),
        pytest.param([{"name": "z"}, {"name": "a"}], {"default"}, ["a", "z"], id="checks-are-sorted-by-name"),
    ],
)
def test_checks_for(rules, used, want):
    spec = manifest(cluster_queue_manifest(quotas={"default": {"cpu": "4"}, "spot": {"cpu": "4"}}, checks=rules)).spec
    assert cq.checks_for(spec, used) == want


# --- queueing -------------------------------------------------------------------------------------


def test_the_two_highest_priorities_get_the_quota():
    st = state_with(view(), entry("low", priority=1, age=30), entry("high", priority=3), entry("mid", priority=2, age=10))
    result = run_pass(st)
    assert [r.key for r in result.reserved] == ["default/high", "default/mid"]
    assert [e.key for e in st.pending] == ["default/low"]
    (notice,) = [n for n in result.notices if n.kind == "pending"]
    assert (notice.key, notice.reason, notice.message) == (
        "default/low",
        "WaitingForQuota",
        "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default, 2 more needed",
    )


def test_equal_priority_goes_by_timestamp_then_uid():
    st = state_with(view(), entry("b", age=5), entry("a", age=5), entry("old", age=60))
    assert [e.key for e in st.pending] == ["default/old", "default/a", "default/b"]


def test_strict_fifo_head_blocks_everything_behind_it():
    st = state_with(view(strategy="StrictFIFO"), entry("big", cpu=6000, age=10), entry("small", cpu=1000))
    result = run_pass(st)
    assert result.reserved == []
    assert [e.key for e in st.pending] == ["default/big", "default/small"]


def test_best_effort_fifo_skips_what_does_not_fit_and_sets_it_aside():
    st = state_with(view(), entry("big", cpu=6000, age=10), entry("small", cpu=1000))
    result = run_pass(st)
    assert [r.key for r in result.reserved] == ["default/small"]
    assert st.pending.entries()[0].inadmissible
    assert [n.reason for n in result.notices if n.kind == "pending"] == ["ExceedsMaxQuota"]


@pytest.mark.parametrize("outdated", [True, False], ids=["after-a-view-change-the-new-capacity-is-told", "the-same-reason-is-not-told-again"])
def test_a_changed_configuration_tells_what_waits_again(outdated):
    """A workload too big for its queue is told the queue's capacity. A new view (more quota, or the
    queue joins a cohort) marks what was told outdated: the next pass tells the new capacity.
    Without it a waiting-for-quota reason is told once (amounts go stale as quota moves)."""
    st = state_with(view(), entry("big", cpu=8000))
    [told] = [n for n in run_pass(st).notices if n.kind == "pending"]
    assert told.reason == "ExceedsMaxQuota" and "maximum capacity (4)" in told.message
    cq.set_view(st, view(revision=2, quotas={"default": {"cpu": "7"}}), NOW)
    if outdated:
        cq.notices_outdated(st)
    again = [n for n in run_pass(st).notices if n.kind == "pending"]
    if outdated:
        assert [(n.reason, "maximum capacity (7)" in n.message) for n in again] == [("ExceedsMaxQuota", True)]
        assert [n for n in run_pass(st).notices if n.kind == "pending"] == [], "told once more, not at every pass"
    else:
        assert again == []


def test_a_reason_is_told_once_until_it_changes():
    st = state_with(view(), entry("a", cpu=4000), entry("b", cpu=4000, age=-1))
    first = run_pass(st)
    assert [n.kind for n in first.notices] == ["reserved", "pending"]
    cq.requeue_inadmissible(st)
    assert run_pass(st).notices == []


@pytest.mark.parametrize(
    ("who", "told"),
    [
        pytest.param(("default/b", "uid-b", 1), True, id="a-waiting-entry-is-told-again-what-it-was-told"),
        pytest.param(("default/b", "uid-b", 2), False, id="not-about-another-ticket"),
        pytest.param(("default/b", "uid-other", 1), False, id="not-about-another-run"),
        pytest.param(("default/a", "uid-a", 1), False, id="not-about-one-holding-quota"),
    ],
)
def test_an_enqueue_asking_again_gets_the_reason_its_entry_was_told(who, told):
    """An enqueue that asked for its answer (activities/mail.py) and came again, because its first
    answer was lost with the workflow task that got it, is answered with the reason its entry was told."""
    st = state_with(view(), entry("a", cpu=4000), entry("b", cpu=4000, age=-1))
    [pending] = [n for n in run_pass(st).notices if n.kind == "pending"]
    again = scheduler.pending_told(st, *who)
    assert (again == pending) if told else again is None


def test_releasing_quota_brings_back_what_was_set_aside():
    st = state_with(view(), entry("a", cpu=4000), entry("b", cpu=4000, age=-1))
    run_pass(st)
    assert cq.release(st, "default/a", "uid-a", 1) is True
    result = run_pass(st)
    assert [r.key for r in result.reserved] == ["default/b"]


def test_a_new_priority_moves_a_pending_workload_to_its_place():
    st = state_with(view(), entry("low", priority=1, age=30), entry("high", priority=3), entry("mid", priority=2, age=10))
    assert cq.reprioritize(st, "default/low", "uid-low", 1, 5) is True
    assert [(e.key, e.priority) for e in st.pending] == [("default/low", 5), ("default/high", 3), ("default/mid", 2)]
    assert [r.key for r in run_pass(st).reserved] == ["default/low", "default/high"]


def test_a_new_priority_takes_a_workload_out_of_the_inadmissible_set():
    """Kueue's queue puts a workload whose spec changed back into the active heap."""
    st = state_with(view(), entry("big", cpu=6000, age=10), entry("small", cpu=1000))
    run_pass(st)
    assert st.pending.get("default/big").inadmissible
    assert cq.reprioritize(st, "default/big", "uid-big", 1, 9) is True
    assert not st.pending.get("default/big").inadmissible


def test_a_new_priority_reaches_a_reservation_and_what_was_set_aside_is_tried_again():
    """Preemption compares the priorities of the reservations."""
    st = state_with(view(), entry("a", cpu=4000), entry("b", cpu=4000, age=-1))
    run_pass(st)
    assert st.pending.get("default/b").inadmissible
    assert cq.reprioritize(st, "default/a", "uid-a", 1, -5) is True
    assert st.reservations["default/a"].priority == -5
    assert not st.pending.get("default/b").inadmissible


@pytest.mark.parametrize(
    ("key", "uid", "ticket", "new"),
    [
        pytest.param("default/a", "uid-a", 1, 0, id="the-same-priority"),
        pytest.param("default/a", "uid-a", 2, 7, id="another-ticket"),
        pytest.param("default/a", "uid-other", 1, 7, id="another-run"),
        pytest.param("default/nobody", "uid-nobody", 1, 7, id="a-workload-it-does-not-hold"),
    ],
)
def test_a_priority_change_that_is_not_about_what_the_queue_holds_changes_nothing(key, uid, ticket, new):
    st = state_with(view(), entry("a"), entry("b", cpu=6000))
    before = st.model_copy(deep=True)
    assert cq.reprioritize(st, key, uid, ticket, new) is False
    assert st == before


@pytest.mark.parametrize(
    ("v", "lq", "want"),
    [
        pytest.param(view(stopPolicy="Hold"), "lq", ("Suspended", "ClusterQueue cq is stopped"), id="a-stopped-queue-admits-nothing"),
        pytest.param(view(flavors=()), "lq", ("Suspended", "ClusterQueue cq is inactive"), id="an-inactive-queue-admits-nothing"),
        pytest.param(
            view(lqs={"default/lq": LocalQueueInfo(stop_policy="Hold")}), "lq", ("Suspended", "LocalQueue lq is stopped"),
            id="a-stopped-local-queue-holds-its-workloads",
        ),
        pytest.param(
            view(namespaceSelector={"matchLabels": {"kubernetes.io/metadata.name": "team-a"}}), "lq",
            ("Misconfigured", "Workload namespace doesn't match ClusterQueue selector"),
            id="a-namespace-outside-the-selector-is-refused",
        ),
    ],
)
def test_blocked_queues(v, lq, want):
    st = state_with(v, entry("a", lq=lq))
    result = run_pass(st)
    assert result.reserved == []
    assert [(n.reason, n.message) for n in result.notices] == [want]


def test_a_deleted_local_queue_sends_its_workloads_back():
    st = state_with(view(), entry("a", cpu=5000))
    assert cq.set_view(st, view(revision=2, lqs={}), NOW) is True
    result = run_pass(st)
    assert [(n.kind, n.message) for n in result.notices] == [("dequeued", "LocalQueue lq is terminating or missing")]
    assert len(st.pending) == 0


def test_a_workload_routed_here_by_an_outdated_lookup_is_sent_back_not_admitted():
    st = state_with(view(), entry("stranger", lq="elsewhere"), entry("member"))
    result = run_pass(st)
    assert [r.key for r in result.reserved] == ["default/member"]
    assert [(n.key, n.kind) for n in result.notices if n.kind != "reserved"] == [("default/stranger", "dequeued")]


def test_an_older_view_is_ignored():
    st = state_with(view(revision=5))
    assert cq.set_view(st, view(revision=4, flavors=()), NOW) is False
    assert cq.active_condition(st.view)[0] is True


# --- idempotency ----------------------------------------------------------------------------------


def test_enqueue_twice_is_harmless():
    st = state_with(view(), entry("a"))
    cq.enqueue(st, entry("a"))
    assert len(st.pending) == 1


def test_a_late_duplicate_of_a_released_enqueue_is_ignored():
    st = state_with(view(), entry("a", cpu=9000))
    cq.release(st, "default/a", "uid-a", 1)
    cq.enqueue(st, entry("a", cpu=9000))
    assert len(st.pending) == 0


def test_a_newer_ticket_replaces_the_reservation():
    st = state_with(view(), entry("a"))
    run_pass(st)
    cq.enqueue(st, entry("a", ticket=2))
    assert "default/a" not in st.reservations
    assert [e.ticket for e in st.pending] == [2]


def test_release_of_another_ticket_changes_nothing():
    st = state_with(view(), entry("a"))
    run_pass(st)
    assert cq.release(st, "default/a", "uid-a", 7) is False
    assert "default/a" in st.reservations


@pytest.mark.parametrize(
    ("gated", "message", "freed"),
    [
        pytest.param(True, ("release", 1), True, id="its-release"),
        pytest.param(True, ("release", 7), False, id="the-release-of-another-ticket"),
        pytest.param(True, ("enqueue", entry("a", ticket=2)), True, id="a-newer-ticket-in-its-place"),
        pytest.param(True, ("enqueue", entry("a").model_copy(update={"uid": "uid-next-run"})), True, id="a-new-run-in-its-place"),
        pytest.param(True, ("enqueue", entry("a")), False, id="its-enqueue-again"),
        pytest.param(False, ("release", 1), False, id="reserved-without-the-grant"),
    ],
)
def test_what_frees_a_reservation_made_with_the_gates_grant(gated, message, freed):
    """`grant_freed`: the gate must be told when a release or an enqueue frees a reservation made
    with its grant (the workload may never have taken it), and only then."""
    st = state_with(view(), entry("a"))
    run_pass(st)
    st.reservations["default/a"].gated = gated
    held = st.reservations["default/a"]
    kind, arg = message
    if kind == "release":
        cq.release(st, "default/a", "uid-a", arg)
    else:
        cq.enqueue(st, arg)
    assert cq.grant_freed(st, held) is freed


@pytest.mark.parametrize(
    ("ask", "told"),
    [
        pytest.param(("uid-a", 1), True, id="its-ticket"),
        pytest.param(("uid-a", 2), False, id="another-ticket"),
        pytest.param(("uid-other-run", 1), False, id="another-run"),
        pytest.param(("evicting", 1), False, id="one-being-evicted"),
        pytest.param(("gone", 1), False, id="one-released"),
    ],
)
@pytest.mark.parametrize("gated", [False, True], ids=["", "with-the-gates-grant"])
def test_an_enqueue_of_a_ticket_the_queue_reserved_is_told_that_reservation_again(ask, told, gated):
    """A run reset in Temporal to before its reservation notice enqueues the same ticket again: the
    queue keeps its reservation and answers with the notice the pass sent, not with nothing (the run
    would wait for good while the queue held its quota, and the blockAdmission gate counted it)."""
    st = state_with(blocking_view(gated), entry("a"))
    if gated:
        st.gate = "granted"
    (sent,) = [n for n in run_pass(st).notices if n.kind == "reserved"]
    uid, ticket = ask
    if uid == "evicting":
        st.reservations["default/a"].evicting, uid = True, "uid-a"
    elif uid == "gone":
        cq.release(st, "default/a", "uid-a", 1)
        uid = "uid-a"
    again = scheduler.reservation_told(st, "default/a", uid, ticket)
    assert again == (sent if told else None)
    if told:
        assert again.gated is gated


@pytest.mark.parametrize(
    ("after", "word", "told_again"),
    [
        pytest.param(timedelta(0), None, False, id="just-answered"),
        pytest.param(scheduler.RETELL_AFTER - timedelta(seconds=1), None, False, id="not-yet"),
        pytest.param(scheduler.RETELL_AFTER, None, True, id="due"),
        pytest.param(scheduler.RETELL_AFTER * 10, None, True, id="long-due"),
        pytest.param(scheduler.RETELL_AFTER, "admitted", False, id="the-workload-said-it-is-admitted"),
        pytest.param(scheduler.RETELL_AFTER, "admitted-already", False, id="admitted-with-the-reservation-and-said-so"),
        pytest.param(scheduler.RETELL_AFTER, "reprioritized", False, id="the-workload-changed-its-priority"),
        pytest.param(scheduler.RETELL_AFTER, "another-ticket", True, id="word-about-another-ticket"),
        pytest.param(scheduler.RETELL_AFTER, "evicting", False, id="being-evicted-it-is-told-anyway"),
        pytest.param(scheduler.RETELL_AFTER, "released", False, id="released"),
        pytest.param(scheduler.RETELL_AFTER, "signalled", False, id="told-by-signal"),
    ],
)
def test_a_reservation_told_only_in_an_answer_is_told_again_when_its_workload_says_nothing(after, word, told_again):
    """`retell_answered`: a reservation told only in its enqueue's answer (the answer is lost with a
    failed workflow task) is told again, by signal, RETELL_AFTER later, once, unless the workload
    has said something of it since, or it is gone or being evicted."""
    st = state_with(view(), entry("a"))
    (sent,) = [n for n in run_pass(st).notices if n.kind == "reserved"]
    held = st.reservations["default/a"]
    if word != "signalled":
        held.answered_at = NOW
    if word == "admitted":
        held.admitted = False
        assert cq.mark_admitted(st, "default/a", "uid-a", 1)
    elif word == "admitted-already":
        assert held.admitted and not cq.mark_admitted(st, "default/a", "uid-a", 1)
    elif word == "reprioritized":
        cq.reprioritize(st, "default/a", "uid-a", 1, 5)
    elif word == "another-ticket":
        cq.reprioritize(st, "default/a", "uid-a", 2, 5)
    elif word == "evicting":
        held.evicting = True
    elif word == "released":
        cq.release(st, "default/a", "uid-a", 1)
    due = scheduler.next_retell(st)
    assert due == (NOW + scheduler.RETELL_AFTER if word in (None, "another-ticket", "evicting") else None)
    told = scheduler.retell_answered(st, NOW + after)
    assert told == ([sent] if told_again else [])
    if due is not None and after >= scheduler.RETELL_AFTER:
        assert scheduler.next_retell(st) is None, "told again once"
        assert scheduler.retell_answered(st, NOW + after * 2 + scheduler.RETELL_AFTER) == []


@pytest.mark.parametrize(
    "kind, in_answer",
    [
        pytest.param("pending", True, id="a-pending-reason-goes-in-the-answer"),
        pytest.param("reserved", True, id="a-reservation-goes-in-the-answer"),
        pytest.param("evicted", False, id="an-eviction-goes-by-signal"),
        pytest.param("dequeued", False, id="a-dequeue-goes-by-signal"),
        pytest.param("checks", False, id="new-checks-go-by-signal"),
    ],
)
def test_what_an_enqueues_answer_carries_instead_of_a_signal(kind, in_answer):
    """`answered`: the notices that go in the answer to a waiting enqueue, and a reservation so told
    marked for telling again."""
    st = state_with(view(), entry("a"))
    (reserved,) = [n for n in run_pass(st).notices if n.kind == "reserved"]
    n = reserved.model_copy(update={"kind": kind})
    assert scheduler.answered(st, n, NOW) == in_answer
    assert st.reservations["default/a"].answered_at == (NOW if kind == "reserved" else None)


def test_when_to_tell_again_is_the_earliest_answer_and_survives_the_wire():
    st = state_with(view(), entry("a"), entry("b", age=1))
    run_pass(st)
    st.reservations["default/a"].answered_at = NOW + timedelta(seconds=5)
    st.reservations["default/b"].answered_at = NOW
    again = ClusterQueueState.model_validate_json(st.model_dump_json())
    assert scheduler.next_retell(again) == scheduler.next_retell(st) == NOW + scheduler.RETELL_AFTER
    assert [n.key for n in scheduler.retell_answered(again, NOW + scheduler.RETELL_AFTER)] == ["default/b"]
    assert scheduler.next_retell(again) == NOW + timedelta(seconds=5) + scheduler.RETELL_AFTER


def test_a_queue_tells_again_at_most_so_many_at_a_time_and_the_rest_stay_due():
    st = state_with(view(), *(entry(f"w{i}", cpu=100, age=i) for i in range(5)))
    run_pass(st)
    for r in st.reservations.values():
        r.answered_at = NOW
    later = NOW + scheduler.RETELL_AFTER
    assert len(scheduler.retell_answered(st, later, limit=2)) == 2
    assert scheduler.next_retell(st) == later, "the rest are still due"
    assert len(scheduler.retell_answered(st, later, limit=2)) == 2
    assert len(scheduler.retell_answered(st, later, limit=2)) == 1
    assert scheduler.next_retell(st) is None


def test_nothing_held_frees_no_grant():
    assert cq.grant_freed(state_with(view(), entry("a")), None) is False


# --- status ---------------------------------------------------------------------------------------


def test_status_counts_reservations_and_usage():
    st = state_with(view(), entry("a"), entry("b", cpu=3000))
    run_pass(st)
    status = cq.cluster_queue_status(st).to_wire()
    assert status["pendingWorkloads"] == 1
    assert status["reservingWorkloads"] == 1
    assert status["admittedWorkloads"] == 1
    assert status["flavorsReservation"] == [{"name": "default", "resources": [{"name": "cpu", "total": "2", "borrowed": "0"}]}]
    assert status["flavorsUsage"] == status["flavorsReservation"]


# --- scale ----------------------------------------------------------------------------------------


def test_what_a_pass_caches_on_pending_entries_is_not_part_of_the_queue_state():
    """A pass caches each entry's shape; the state read back from its wire form (continue-as-new,
    replay) has none cached and is still the same state."""
    st = state_with(view(), entry("fits", cpu=3000, priority=9), *(entry(f"big{i}", cpu=2000, age=i) for i in range(3)))
    run_pass(st)
    assert len(st.pending) == 3  # evaluated, and still pending
    again = ClusterQueueState.model_validate_json(st.model_dump_json())
    assert again.pending == st.pending
    assert [e.shape for e in again.pending] == [e.shape for e in st.pending]


def test_the_index_of_released_workloads_is_not_part_of_the_queue_state():
    """A release builds a set of what was released, for the next message's check; the state read
    back from its wire form has none built and is still the same state, and answers the same."""
    st = state_with(view(), entry("a"), entry("b"))
    cq.release(st, "default/a", "uid-a", 1)
    assert st.was_released("default/a", "uid-a", 1) and not st.was_released("default/b", "uid-b", 1)
    again = ClusterQueueState.model_validate_json(st.model_dump_json())
    assert again == st
    assert again.was_released("default/a", "uid-a", 1) and not again.was_released("default/b", "uid-b", 1)


def test_equivalent_workloads_are_bypassed_once_one_of_their_shape_failed():
    st = state_with(view(), entry("fits", cpu=3000, priority=9), *(entry(f"big{i}", cpu=2000, age=i) for i in range(3)))
    result = run_pass(st)
    assert [r.key for r in result.reserved] == ["default/fits"]
    told = {n.key: (n.reason, n.message) for n in result.notices if n.kind == "pending"}
    assert told["default/big2"] == (
        "WaitingForQuota",
        "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default, 1 more needed",
    )
    assert told["default/big1"] == told["default/big0"] == (
        "WaitingForQuota",
        "Bypassed scheduling evaluation because an equivalent workload recently failed",
    )


def test_a_bypassed_workload_keeps_the_detailed_message_it_already_had():
    st = state_with(view(), entry("a", cpu=5000, age=2), entry("b", cpu=5000, age=1))
    first = run_pass(st)
    assert [n.key for n in first.notices] == ["default/a", "default/b"]
    st.pending.remove("default/a")
    cq.requeue_inadmissible(st)
    st.pending.add(entry("c", cpu=5000, age=9))
    second = run_pass(st)
    assert [(n.key, n.message.startswith("Bypassed")) for n in second.notices] == [("default/c", False)]


def test_the_pending_queue_survives_serialization_in_order():
    st = state_with(view(), *(entry(f"w{i}", priority=i % 3, age=i) for i in range(20)))
    again = ClusterQueueState.model_validate_json(st.model_dump_json())
    assert [e.key for e in again.pending] == [e.key for e in st.pending]
    assert again.pending.get("default/w7").priority == 1
    again.pending.add(entry("late", priority=5))
    assert next(iter(again.pending)).key == "default/late"


@pytest.mark.parametrize(
    ("stop", "lq_stop", "want"),
    [
        pytest.param("HoldAndDrain", "None", ("ClusterQueueStopped", "The ClusterQueue is stopped"), id="a-draining-cluster-queue-evicts-what-it-holds"),
        pytest.param("None", "HoldAndDrain", ("LocalQueueStopped", "The LocalQueue is stopped"), id="a-draining-local-queue-evicts-its-workloads"),
        pytest.param("Hold", "Hold", None, id="hold-keeps-what-is-admitted"),
    ],
)
def test_drain(stop, lq_stop, want):
    st = state_with(view(), entry("a"))
    run_pass(st)
    cq.set_view(st, view(revision=2, stopPolicy=stop, lqs={"default/lq": LocalQueueInfo(stop_policy=lq_stop)}), NOW)
    evicted = [(n.reason, n.message) for n in run_pass(st).notices if n.kind == "evicted"]
    assert evicted == ([want] if want else [])
    assert run_pass(st).notices == [], "told once"


def test_only_the_head_of_a_deep_queue_is_told_why_it_waits(monkeypatch):
    monkeypatch.setattr(scheduler, "NOTIFY_WINDOW", 3)
    st = state_with(view(), *(entry(f"w{i}", cpu=3000, age=-i) for i in range(6)))
    result = run_pass(st)
    assert [r.key for r in result.reserved] == ["default/w0"]
    assert [n.key for n in result.notices if n.kind == "pending"] == ["default/w1", "default/w2"]
    assert all(e.inadmissible for e in st.pending), "all were evaluated all the same"
    cq.release(st, "default/w0", "uid-w0", 1)
    again = run_pass(st)
    assert [r.key for r in again.reserved] == ["default/w1"]
    told = [(n.key, n.message.startswith("Bypassed")) for n in again.notices if n.kind == "pending"]
    # w2 was only bypassed before; now evaluated in full it is told the details. w3 moved up into
    # the window behind it and is told it was bypassed.
    assert told == [("default/w2", False), ("default/w3", True)]


def test_forgetting_a_vanished_run_spares_a_new_run_of_the_same_name():
    st = state_with(view(), entry("a"))
    run_pass(st)
    newer = entry("a", ticket=1)
    newer = newer.model_copy(update={"uid": "uid-a-second-run"})
    cq.enqueue(st, newer)
    assert cq.forget(st, "default/a", "uid-a") is False, "the old run's reservation was already replaced"
    assert st.pending.get("default/a").uid == "uid-a-second-run"
    assert cq.forget(st, "default/a", "uid-a-second-run") is False
    assert len(st.pending) == 0


# --- blockAdmission: a pass asks the gate before it reserves ----------------------------------------


def blocking_view(block: bool = True) -> ClusterQueueView:
    from admitflow.api.configuration import WaitForPodsReady

    return view().model_copy(update={"wait_for_pods_ready": WaitForPodsReady(blockAdmission=block)})


def test_with_block_admission_a_pass_asks_the_gate_and_reserves_nothing_until_granted():
    st = state_with(blocking_view(), entry("a", age=2), entry("b", age=1))
    first = run_pass(st)
    assert (first.ask_gate, first.reserved, st.gate) == (True, [], "asked")
    assert first.notices == [], "nothing is told before the gate answers"
    again = run_pass(st)
    assert (again.ask_gate, again.reserved) == (False, []), "asked once"

    cq.gate_answer(st, granted=False)
    waiting = run_pass(st)
    assert [(n.key, n.reason, n.message) for n in waiting.notices] == [
        ("default/a", "WaitingForPodsReady", "waiting for all admitted workloads to be in PodsReady condition")
    ], "only the workload that fits is told; the pass stops there"
    assert (waiting.reserved, st.gate) == ([], "waiting")

    cq.gate_answer(st, granted=True)
    granted = run_pass(st)
    assert [r.key for r in granted.reserved] == ["default/a"]
    assert granted.gate_used.key == "default/a" and granted.gate_used.gated
    assert [n.gated for n in granted.notices if n.kind == "reserved"] == [True]
    assert (granted.ask_gate, st.gate, granted.return_grant) == (True, "asked", False), "b needs a grant of its own"


def test_an_unused_grant_is_handed_back_by_the_pass_that_received_it():
    st = state_with(blocking_view(), entry("big", cpu=9000))
    cq.gate_answer(st, granted=True)
    result = run_pass(st)
    assert (result.reserved, result.return_grant, st.gate) == ([], True, "none")


def test_without_block_admission_the_gate_is_not_asked():
    st = state_with(blocking_view(block=False), entry("a", age=2), entry("b", age=1))
    result = run_pass(st)
    assert [r.key for r in result.reserved] == ["default/a", "default/b"]
    assert (result.ask_gate, result.gate_used, [n.gated for n in result.notices]) == (False, None, [False, False])


def test_the_ui_shows_where_each_waiting_workload_stands():
    st = state_with(view(), entry("a", cpu=4000, age=4), *(entry(f"w{i}", cpu=4000, priority=i, age=3) for i in range(3)))
    run_pass(st)  # w2, of the highest priority, gets the quota
    assert cq.current_details(st, head=2).split("\n\n") == [
        "pending 3, reserving 1, admitted 1",
        "0. default/w1 (priority 1)",
        "1. default/a (priority 0)",
        "... 1 more (`admitflow get pending-workloads cq`)",
    ]
