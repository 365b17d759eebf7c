"""`admitflow explain`'s rules (admitflow/admission/explain.py): the one cause of a workload not being
admitted, one row per cause, from states its workflow really reaches; what a flavor lacks, read from
the scheduler's message; the estimate of when it could be admitted; a ClusterQueue's waiting
workloads counted once each; and, under random interleavings, a cause that agrees with the phase and
is the same whether read from the workflow's state (the UI) or from its report (the CLI)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as s

from admitflow.admission import explain
from admitflow.admission import lifecycle as lc
from admitflow.admission import intake
from admitflow.admission import pods_ready
from admitflow.admission import workload as wl
from admitflow.admission.catalog import QueueResolution
from admitflow.admission.explain import Contender, Running
from admitflow.admission.protocol import PendingWorkload, ReservingWorkload
from tests.builders import cluster_queue_manifest, manifest, workload_manifest
from tests.unit.test_lifecycle import World
from tests.unit.test_workload_status import T0

GATES = "kueue.x-k8s.io/admission-gated-by"
CAPACITY = (
    "couldn't assign flavors to pod set main: insufficient quota for cpu in flavor default, previously considered "
    "podsets requests (0) + current podset request (10) > maximum capacity (4)"
)
UNUSED = "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default, 2 more needed"


class Job(World):
    """`World`, with the pending notice its ClusterQueue sends."""

    def pending(self, reason: str, message: str, after: float = 0) -> None:
        payload = {"key": "default/job", "uid": "uid-1", "ticket": self.state.claim.ticket, "kind": "pending", "reason": reason, "message": message}
        self.batch(intake.notice("pending_status", payload), after=after)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def place(position: int, in_lq: int | None = None) -> PendingWorkload:
    return PendingWorkload(
        name="job", namespace="default", local_queue_name="lq", priority=0, position_in_cluster_queue=position,
        position_in_local_queue=position if in_lq is None else in_lq, queued_since=T0,
    )


# --- one row per cause ------------------------------------------------------------------------------


def deleted() -> Job:
    w = Job()
    w.batch(lc.DeleteRequested())
    return w


def finished() -> Job:
    w = Job()
    w.reserve()
    w.batch(intake.finish({"succeeded": False, "message": "exit 3"}), after=60)
    return w


def rejected() -> Job:
    w = Job()
    w.reserve("a", after=5)
    w.batch(intake.verdict(w.verdict("a", "Rejected", message="over budget")), after=10)
    return w


def admitted() -> Job:
    w = Job()
    w.reserve(after=3)
    return w


def waiting_for_checks() -> Job:
    w = Job()
    w.reserve("a", "b", after=5)
    w.batch(intake.verdict(w.verdict("b", "Ready")), after=1)
    w.batch(intake.verdict(w.verdict("a", "Pending", message="asking finance")), after=1)
    return w


def gated() -> Job:
    return Job(annotations={GATES: "example.com/a, example.com/b"})


def in_backoff() -> Job:
    w = Job()
    w.reserve("a", after=5)
    w.batch(intake.verdict(w.verdict("a", "Retry", requeueAfterSeconds=120)), after=10)
    return w


def queue_missing() -> Job:
    return Job(resolution=QueueResolution(reason="Misconfigured", message="LocalQueue lq is terminating or missing"))


def pods_gate() -> Job:
    w = Job()
    w.pending(pods_ready.WAITING_REASON, pods_ready.WAITING_MESSAGE, after=2)
    return w


def too_big() -> Job:
    w = Job()
    w.pending("ExceedsMaxQuota", CAPACITY, after=2)
    return w


def no_quota() -> Job:
    w = Job()
    w.pending("WaitingForQuota", UNUSED, after=2)
    return w


# (case, build, position, now, cause, summary, since)
ROWS = [
    pytest.param(
        deleted, None, 0, "Deleted", "deleted", None, id="a-deleted-workload-is-deleted-whatever-it-held",
    ),
    pytest.param(
        finished, None, 61, "Finished", "finished (Failed): exit 3", at(60), id="a-finished-workload-says-how-it-ended",
    ),
    pytest.param(
        rejected, None, 20, "Inactive",
        'deactivated (DeactivatedDueToAdmissionCheck): The workload is deactivated due to AdmissionCheck in Rejected '
        'state: "a" (over budget); `admitflow activate default/job` puts it back in its queue',
        at(15), id="a-rejected-workload-is-inactive-with-kueues-reason",
    ),
    pytest.param(admitted, None, 9, "Admitted", "admitted in ClusterQueue cq", at(3), id="an-admitted-workload-waits-for-nothing"),
    pytest.param(
        waiting_for_checks, None, 30, "WaitingForChecks",
        "quota reserved in ClusterQueue cq; waits for AdmissionCheck a (Pending: asking finance) since 2026-11-22T10:00:05Z",
        at(5), id="with-quota-it-waits-for-the-check-not-ready-since-the-reservation",
    ),
    pytest.param(
        gated, None, 1, "AdmissionGated",
        "admission gated by example.com/a, example.com/b: `admitflow ungate workload default/job GATE` or the signal "
        "remove_admission_gates removes them",
        at(0), id="a-gated-workload-names-its-gates",
    ),
    pytest.param(
        in_backoff, None, 45, "Backoff",
        "in backoff after AdmissionCheck: back in its queue at 2026-11-22T10:02:15Z (in 1m30s)",
        at(15), id="in-backoff-it-says-when-it-is-back-and-how-long-that-is",
    ),
    pytest.param(
        queue_missing, None, 1, "QueueMissing",
        "LocalQueue lq is terminating or missing: it enters its queue once that exists",
        at(0), id="a-workload-whose-local-queue-is-gone-waits-for-it",
    ),
    pytest.param(
        pods_gate, place(1), 5, "WaitingForPodsReady",
        "waiting for all admitted workloads to be in PodsReady condition (waitForPodsReady.blockAdmission) "
        "(position 1 in its ClusterQueue)",
        at(0), id="block-admission-holds-it-until-the-admitted-pods-are-ready",
    ),
    pytest.param(
        too_big, place(0), 5, "Inadmissible",
        "ExceedsMaxQuota: flavor default lacks cpu: 10 asked, 4 at most (position 0 in its ClusterQueue)",
        at(0), id="too-big-for-the-quota-it-says-which-flavor-lacks-how-much-of-what",
    ),
    pytest.param(
        no_quota, place(3), 5, "NoQuota",
        "WaitingForQuota: flavor default lacks 2 more cpu (position 3 in its ClusterQueue)",
        at(0), id="waiting-for-quota-it-says-how-much-more-must-be-freed",
    ),
    pytest.param(
        Job, place(2, 1), 5, "Queued", "waits its turn in its ClusterQueue: position 2, 2 workload(s) ahead",
        at(0), id="a-queued-workload-waits-its-turn-at-its-position",
    ),
]


@pytest.mark.parametrize(("build", "position", "now", "name", "summary", "since"), ROWS)
def test_one_cause_per_workload(build, position, now, name, summary, since):
    w = build()
    c = explain.cause(w.state, at(now), position=position)
    assert (c.cause, c.summary, c.since) == (name, summary, since)
    # The CLI reads the workflow's report, the UI its state: they name the same cause.
    report = explain.cause(w.state.report(), at(now), position=position)
    assert (report.cause, report.summary) == (c.cause, c.summary)


def test_every_cause_has_a_row_and_the_rules_are_tried_in_the_order_of_the_list():
    assert tuple(explain._RULES) == explain.CAUSES
    assert {p.values[3] for p in ROWS} | {"NotAnswering"} == set(explain.CAUSES)


def test_a_workload_whose_workflow_does_not_answer_has_that_cause_and_its_last_phase():
    c = explain.cause(Job().state.report(), not_answering="its workflow task fails (attempt 4): boom", last_phase="Admitted")
    assert (c.cause, c.phase, c.waiting) == ("NotAnswering", "Admitted", False)
    assert c.summary == "its workflow does not answer, so its status is unknown: its workflow task fails (attempt 4): boom"
    assert explain.cause(Job().state.report(), not_answering="x", last_phase="Pending").waiting


def test_each_cause_carries_what_says_it():
    c = explain.cause(waiting_for_checks().state, at(30))
    assert [(k.name, k.state, k.message, k.since) for k in c.checks] == [("a", "Pending", "asking finance", at(5))]
    assert (c.condition, c.reason, c.cluster_queue, c.local_queue) == ("Admitted=False", "UnsatisfiedAdmissionChecks", "cq", "lq")
    c = explain.cause(in_backoff().state, at(45))
    assert (c.requeue_at, c.remaining_seconds, c.condition) == (at(135), 90, "Requeued=False")
    c = explain.cause(gated().state)
    assert (c.gates, c.condition, c.reason) == (["example.com/a", "example.com/b"], "QuotaReserved=False", "AdmissionGated")
    c = explain.cause(too_big().state, position=place(4, 2))
    assert (c.position, c.position_in_local_queue, c.reason) == (4, 2, "ExceedsMaxQuota")
    assert [s.to_wire() for s in c.shortfalls] == [
        {"podSet": "main", "flavor": "default", "resource": "cpu", "kind": "capacity", "requested": "10", "capacity": "4", "moreNeeded": ""}
    ]


def test_a_stale_queue_missing_message_does_not_hide_a_workload_back_in_its_queue():
    w = Job()
    w.batch(intake.notice("dequeued", {
        "key": "default/job", "uid": "uid-1", "ticket": w.state.claim.ticket, "kind": "dequeued", "reason": "Misconfigured",
        "message": "LocalQueue lq is terminating or missing",
    }))
    assert w.state.claim.queued, "World found its queue again at once"
    assert explain.cause(w.state).cause == "Queued"
    assert explain.cause(w.state.report()).cause == "QueueMissing", "a report alone cannot tell"
    assert explain.cause(w.state.report(), position=place(0)).cause == "Queued", "its position does"


def test_without_now_the_ui_line_has_absolute_times_only_and_none_once_admitted():
    w = in_backoff()
    line = explain.details_line(w.state)
    assert line == "why not admitted (Backoff): in backoff after AdmissionCheck: back in its queue at 2026-11-22T10:02:15Z"
    details = explain.current_details(w.state).split("\n\n")
    assert details[1] == line
    assert explain.details_line(admitted().state) is None
    assert "why not admitted" not in explain.current_details(finished().state)


# --- what a flavor lacks --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "lacks"),
    [
        pytest.param(CAPACITY, ["flavor default lacks cpu: 10 asked, 4 at most"], id="more-than-the-flavor-can-ever-give"),
        pytest.param(UNUSED, ["flavor default lacks 2 more cpu"], id="more-than-is-unused-now"),
        pytest.param(
            "couldn't assign flavors to pod set workers: insufficient quota for memory in flavor on-demand, previously "
            "considered podsets requests (4Gi) + current podset request (40Gi) > maximum capacity (32Gi), insufficient "
            "unused quota for cpu in flavor spot, 500m more needed; couldn't assign flavors to pod set driver: "
            "insufficient unused quota for cpu in flavor on-demand, 1 more needed",
            [
                "flavor on-demand lacks memory: 4Gi + 40Gi asked, 32Gi at most",
                "flavor spot lacks 500m more cpu",
                "flavor on-demand lacks 1 more cpu",
            ],
            id="every-flavor-of-every-pod-set-with-what-earlier-pod-sets-asked",
        ),
        pytest.param(f"{UNUSED}. Pending the preemption of 2 workload(s)", ["flavor default lacks 2 more cpu"], id="while-preempting"),
        pytest.param("Bypassed scheduling evaluation because an equivalent workload recently failed", [], id="a-bypass-says-nothing-of-flavors"),
        pytest.param("couldn't assign flavors to pod set main: flavor gpu doesn't match node affinity", [], id="no-quota-words-no-shortfall"),
    ],
)
def test_what_a_flavor_lacks_is_read_from_the_schedulers_message(message, lacks):
    assert [s.words() for s in explain.shortfalls(message)] == lacks


# --- the estimate ---------------------------------------------------------------------------------

QUOTA = {"cpu": 4000}


def me(cpu: int = 2000, runs_for: int | None = None, key: str = "default/me") -> Contender:
    return Contender(key=key, requests={"cpu": cpu}, runs_for=runs_for)


def run(key: str, cpu: int, ends: float | None) -> Running:
    return Running(key=key, usage={"cpu": cpu}, ends_by=at(ends) if ends is not None else None)


@pytest.mark.parametrize(
    ("ahead", "holding", "mine", "expected"),
    [
        pytest.param([], [run("a", 2000, None)], me(), (at(0), "", "the quota it asks for is free now: its ClusterQueue's next scheduling pass"),
                     id="what-it-asks-for-is-free-now"),
        pytest.param([], [run("a", 3000, 600), run("b", 1000, 300)], me(), (at(600), "", "once a has given its quota back (its maximum execution time is up)"),
                     id="it-waits-for-the-running-workload-whose-end-frees-enough"),
        pytest.param([me(3000, 100, "x")], [run("a", 4000, 60)], me(),
                     (at(160), "", "once x has given its quota back (its maximum execution time is up)"),
                     id="the-workloads-ahead-go-first-and-run-their-maximum"),
        pytest.param([], [run("a", 4000, -30)], me(), (at(0), "", "once a has given its quota back (its maximum execution time is up)"),
                     id="an-overdue-deadline-counts-from-now"),
        pytest.param([me(8000, 10, "huge")], [], me(), (at(0), "", "the quota it asks for is free now: its ClusterQueue's next scheduling pass"),
                     id="a-workload-ahead-that-never-fits-does-not-go-first"),
        pytest.param([], [run("a", 1000, 60), run("b", 2000, None)], me(3000), (None, "it waits for quota held by b, with no maximumExecutionTimeSeconds", ""),
                     id="quota-held-without-a-limit-makes-it-unknown"),
        pytest.param([me(4000, None, "x")], [run("a", 4000, 60)], me(), (None, "it waits for quota held by x, with no maximumExecutionTimeSeconds", ""),
                     id="a-workload-ahead-without-a-limit-makes-it-unknown"),
        pytest.param([me(3000, None, "x")], [run("a", 2000, None)], me(), (None, "x, ahead of it, waits for quota held by a, with no maximumExecutionTimeSeconds", ""),
                     id="the-head-waiting-on-a-workload-without-a-limit-makes-it-unknown"),
        pytest.param([], [], me(6000), (None, "it asks for more than the ClusterQueue's nominal quota (6 cpu, of 4): it never fits on its own", ""),
                     id="more-than-the-whole-quota-never-fits"),
    ],
)
def test_the_estimate(ahead, holding, mine, expected):
    e = explain.estimate(mine, ahead, holding, QUOTA, at(0))
    assert (e.at, e.unknown, e.basis) == expected


def test_a_resource_the_queue_does_not_have_never_fits():
    e = explain.estimate(Contender(key="me", requests={"nvidia.com/gpu": 1}), [], [], QUOTA, at(0))
    assert e.unknown == "it asks for more than the ClusterQueue's nominal quota (1 nvidia.com/gpu, of 0): it never fits on its own"


@pytest.mark.parametrize(
    ("build", "now", "expected"),
    [
        pytest.param(in_backoff, 45, (at(135), "", "not before its backoff ends and it is back in its queue"), id="backoff-ends-first"),
        pytest.param(waiting_for_checks, 30, (None, "it waits for a verdict from a", ""), id="a-check-decides"),
        pytest.param(gated, 1, (None, "it waits for its admission gates to be removed (example.com/a, example.com/b)", ""), id="its-gates-decide"),
        pytest.param(rejected, 20, (None, "it stays out of admission until it is activated", ""), id="an-inactive-one-waits-for-a-person"),
        pytest.param(too_big, 5, (None, "ExceedsMaxQuota: the ClusterQueue or the workload must change first", ""), id="an-inadmissible-one-waits-for-a-change"),
    ],
)
def test_what_is_said_of_when_a_workload_that_does_not_wait_for_quota_is_admitted(build, now, expected):
    e = explain.no_estimate(explain.cause(build().state, at(now)))
    assert (e.at, e.unknown, e.basis) == expected


def test_the_estimates_inputs_come_from_the_queue_and_the_workloads():
    spec = manifest(cluster_queue_manifest(quotas={"on-demand": {"cpu": "8", "pods": "10"}, "spot": {"cpu": "16", "pods": "5"}})).spec
    assert explain.capacity(spec) == {"cpu": 24000, "pods": 15}
    m = workload_manifest("job", cpu="2", count=3)
    m["spec"]["maximumExecutionTimeSeconds"] = 600
    w = manifest(m)
    w.status.accumulated_past_execution_time_seconds = 100
    assert explain.contender(w, explain.capacity(spec)) == Contender(key="default/job", requests={"cpu": 6000, "pods": 3}, runs_for=500)
    assert explain.contender(w).requests == {"cpu": 6000}, "pods count only where the queue has a quota for them"

    a = Job(maximumExecutionTimeSeconds=600)
    a.reserve(after=30)
    held = ReservingWorkload(
        name="job", namespace="default", local_queue_name="lq", priority=0, admitted=True, reserved_since=at(30),
        flavors={"main": {"cpu": "default"}}, usage={"cpu": "2"},
    )
    assert explain.running(held, a.state.report()) == Running(key="default/job", usage={"cpu": 2000}, ends_by=at(630))
    assert explain.running(held, None).ends_by is None


# --- a ClusterQueue -------------------------------------------------------------------------------


def test_a_queue_counts_each_waiting_workload_once_under_its_one_cause():
    causes = {
        "default/a": explain.cause(no_quota().state),
        "default/b": explain.cause(no_quota().state),
        "default/c": explain.cause(gated().state),
        "default/d": explain.cause(admitted().state),
        "default/e": explain.cause(finished().state),
        "default/f": explain.cause(Job().state.report(), not_answering="x", last_phase="Admitted"),
        "default/g": explain.cause(Job().state.report(), not_answering="x", last_phase="Backoff"),
        "default/h": explain.cause(waiting_for_checks().state),
    }
    q = explain.tally("cq", causes)
    assert [(c.cause, c.count, c.workloads) for c in q.causes] == [
        ("NotAnswering", 1, ["default/g"]),
        ("WaitingForChecks", 1, ["default/h"]),
        ("AdmissionGated", 1, ["default/c"]),
        ("NoQuota", 2, ["default/a", "default/b"]),
    ]
    assert q.total == sum(c.count for c in q.causes) == len(q.workloads) == 5
    assert sorted(w.workload for w in q.workloads) == ["default/a", "default/b", "default/c", "default/g", "default/h"]


def test_a_workload_belongs_where_it_holds_quota_else_where_its_local_queue_leads():
    routes = {"default/lq": "other"}
    assert explain.cluster_queue_of(admitted().state.report(), routes) == "cq"
    assert explain.cluster_queue_of(Job().state.report(), routes) == "other"
    assert explain.cluster_queue_of(Job().state.report(), {}) == ""
    assert explain.cluster_queue_of(Job().state.report(), routes, reserved_in="cq") == "cq"


# --- under random interleavings ---------------------------------------------------------------------

# The causes each phase allows: the cause never contradicts the phase `get` shows.
BY_PHASE = {
    "Finished": {"Finished", "Deleted"},
    "Inactive": {"Inactive", "Deleted"},
    "Admitted": {"Admitted", "Deleted"},
    "QuotaReserved": {"WaitingForChecks", "Deleted"},
    "Backoff": {"Backoff", "Deleted"},
    "Pending": {"AdmissionGated", "QueueMissing", "WaitingForPodsReady", "Inadmissible", "NoQuota", "Queued", "Deleted"},
}
REASONS = ["WaitingForQuota", "ExceedsMaxQuota", "NoMatchingFlavor", "Suspended", pods_ready.WAITING_REASON, "PendingEvaluation"]


STEPS = s.lists(
    s.one_of(
        s.just(("reserve",)),
        s.just(("reserve",)),  # twice: most interleavings worth trying hold quota somewhere
        s.tuples(s.just("verdict"), s.sampled_from(["Ready", "Pending", "Retry", "Rejected"]), s.integers(0, 60)),
        s.tuples(s.just("pending"), s.sampled_from(REASONS)),
        s.just(("evict",)),
        s.just(("deactivate",)),
        s.just(("activate",)),
        s.tuples(s.just("wait"), s.integers(1, 90)),
        s.just(("ungate",)),
    ),
    max_size=12,
)
# How it ends, if it does: last, so that the steps before it reach every other cause.
ENDS = s.sampled_from([[], [("finish",)], [("delete",)]])


def _apply(w: Job, step: tuple) -> None:
    notice = {"key": "default/job", "uid": "uid-1", "ticket": w.state.claim.ticket}
    match step:
        case ("reserve",):
            if w.state.claim.queued:
                w.reserve("a", after=1)
        case ("verdict", state, delay):
            w.batch(intake.verdict(w.verdict("a", state, requeueAfterSeconds=delay)), after=1)
        case ("pending", reason):
            w.pending(reason, UNUSED if reason == "WaitingForQuota" else reason, after=1)
        case ("evict",):
            w.batch(intake.notice("evicted", {**notice, "kind": "evicted", "reason": "Preempted", "message": "m"}), after=1)
        case ("deactivate",):
            w.batch(lc.Deactivated(), after=1)
        case ("activate",):
            w.batch(lc.Activated(), after=1)
        case ("finish",):
            w.batch(intake.finish({"succeeded": True}), after=1)
        case ("delete",):
            w.batch(lc.DeleteRequested(), after=1)
        case ("wait", seconds):
            w.batch(lc.TimerFired(at=w.now + timedelta(seconds=seconds)), after=seconds)
        case ("ungate",):
            w.batch(intake.gate_removal({"all": True}), after=1)


@settings(max_examples=150, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(gate=s.sampled_from([False, False, True]), steps=STEPS, end=ENDS)
def test_under_any_interleaving_the_cause_agrees_with_the_phase_and_the_report(gate, steps, end):
    w = Job(annotations={GATES: "example.com/a"} if gate else None)
    for step in steps + end:
        _apply(w, step)
        c = explain.cause(w.state, w.now)
        assert c.cause in BY_PHASE[wl.phase(w.state)], (step, wl.phase(w.state), c)
        position = place(0) if w.state.claim.queued else None  # what the client reads from its ClusterQueue
        assert explain.cause(w.state.report(), w.now, position=position).cause == c.cause
        assert explain.details_line(w.state) is None or not explain.details_line(w.state).startswith("why not admitted: unknown")
