"""WaitForPodsReady as `admitflow.admission.pods_ready` implements it (KEP-1282; docs/pods-ready.md).

Covers: parsing `set_pods_ready` reports; the PodsReady condition a report produces (Kueue's
generatePodsReadyCondition) and reports that are ignored; the timeout deadline (Kueue's
admittedNotReadyWorkload); the PodsReadyTimeout eviction with its requeue backoff, the
backoffLimitCount deactivation and reactivation; a lost runner; and the blockAdmission gate.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from admitflow.admission import checks
from admitflow.admission import conditions as cond
from admitflow.admission import pods_ready as pr
from admitflow.admission import pods_ready_gate
from admitflow.admission import workload as wl
from admitflow.api import RequeueState
from admitflow.api.configuration import WaitForPodsReady
from tests.support import messages
from tests.builders import manifest, workload_manifest
from tests.unit.test_workload_status import reserved_notice

T0 = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
MIN = timedelta(minutes=1)
NOT_READY = ("False", "WaitForStart", "Not all pods are ready or succeeded")
STARTED = ("True", "Started", "All pods reached readiness and the workload is running")
RECOVERED = ("True", "Recovered", "All pods reached readiness and the workload is running")
RECOVERING = ("False", "WaitForRecovery", "At least one pod has failed, waiting for recovery")
TIMEOUT_MESSAGE = "Exceeded the PodsReady timeout default/job"
LIMIT_MESSAGE = "The workload is deactivated due to exceeding the maximum number of re-queuing retries"
TEN_MINUTES = WaitForPodsReady(timeout="10m")
WITH_RECOVERY = WaitForPodsReady(timeout="10m", recoveryTimeout="3m")


def submitted() -> wl.WorkloadState:
    st = wl.new_state(manifest(workload_manifest("job", cpu="2")), "uid-1", T0)
    st.cluster_queue, st.claim.ticket, st.claim.queued = "cq", 1, True
    return st


def admitted(at: datetime = T0, admission_checks: list[str] | None = None) -> wl.WorkloadState:
    st = submitted()
    wl.reserve_quota(st, reserved_notice(admission_checks), at)
    return st


def reported(st: wl.WorkloadState, payload: dict, at: datetime) -> wl.WorkloadState:
    messages.pods_ready_report(st, payload, at)
    return st


def condition(st: wl.WorkloadState, type_: str) -> tuple[str, str, str] | None:
    c = cond.find(st.status.conditions, type_)
    return None if c is None else (c.status, c.reason, c.message)


def finished() -> wl.WorkloadState:
    st = admitted()
    wl.finish(st, True, "done", T0 + MIN)
    return st


def inactive() -> wl.WorkloadState:
    st = admitted()
    st.workload.spec.active = False
    return st


def admitted_late() -> wl.WorkloadState:
    """Reserved at T0, admitted when its check turned Ready at T0+7m."""
    st = admitted(admission_checks=["check"])
    st.status.admission_checks[0].state = "Ready"
    wl.sync_admitted(st, T0 + 7 * MIN)
    return st


def recovering() -> wl.WorkloadState:
    """Ready at T0+1m, then a pod failed at T0+4m."""
    return reported(reported(admitted(), {"ready": True}, T0 + MIN), {"ready": False}, T0 + 4 * MIN)


def time_out_at_deadline(st: wl.WorkloadState, settings: WaitForPodsReady, random: float = 0.0) -> bool:
    at, cause = pr.deadline(st, settings)
    return pr.time_out(st, settings, cause, at + timedelta(milliseconds=250), random)


def readmit_after_backoff(st: wl.WorkloadState) -> None:
    at = st.status.requeue_state.requeue_at
    assert checks.finish_backoff_if_due(st, at) is True
    st.claim.queued, st.claim.ticket = True, st.claim.ticket + 1
    notice = reserved_notice(ticket=st.claim.ticket)
    assert wl.accepts(st, notice)
    wl.reserve_quota(st, notice, at)


# --- parse ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "ready", "reason"),
    [
        pytest.param({"ready": True}, True, None, id="ready"),
        pytest.param({"ready": False}, False, None, id="not-ready"),
        pytest.param({"ready": True, "reason": "Started"}, True, "Started", id="ready-started"),
        pytest.param({"ready": True, "reason": "Recovered"}, True, "Recovered", id="ready-recovered"),
        pytest.param({"ready": False, "reason": "WaitForStart"}, False, "WaitForStart", id="not-ready-wait-for-start"),
        pytest.param({"ready": False, "reason": "WaitForRecovery"}, False, "WaitForRecovery", id="not-ready-wait-for-recovery"),
        pytest.param({"ready": "false"}, False, None, id="bool-like-string"),
    ],
)
def test_parse_accepts(payload, ready, reason):
    r = pr.parse(payload)
    assert (r.ready, r.reason) == (ready, reason)


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        pytest.param({}, "ready: Field required", id="missing-ready"),
        pytest.param({"ready": "maybe"}, "ready: Input should be a valid boolean, unable to interpret input", id="ready-not-bool-like"),
        pytest.param({"ready": False, "reason": "Started"}, "reason 'Started' with ready=false: use WaitForStart or WaitForRecovery", id="started-without-ready"),
        pytest.param({"ready": True, "reason": "WaitForStart"}, "reason 'WaitForStart' with ready=true: use Started or Recovered", id="wait-for-start-with-ready"),
        pytest.param({"ready": True, "reason": "Foo"}, "reason 'Foo' with ready=true: use Started or Recovered", id="unknown-reason"),
    ],
)
def test_parse_refuses_with_a_one_line_reason(payload, message):
    with pytest.raises(pr.PodsReadyError) as err:
        pr.parse(payload)
    assert str(err.value) == f"invalid pods-ready report: {message}"


# --- the PodsReady condition ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("previous", "payload", "expected"),
    [
        pytest.param(None, {"ready": True}, STARTED, id="none-then-ready-is-started"),
        pytest.param(None, {"ready": False}, NOT_READY, id="none-then-not-ready-waits-for-start"),
        pytest.param(NOT_READY, {"ready": True}, STARTED, id="wait-for-start-then-ready-is-started"),
        pytest.param(NOT_READY, {"ready": False}, NOT_READY, id="wait-for-start-then-not-ready-waits-for-start"),
        pytest.param(STARTED, {"ready": True}, STARTED, id="started-then-ready-stays-started"),
        pytest.param(STARTED, {"ready": False}, RECOVERING, id="started-then-not-ready-waits-for-recovery"),
        pytest.param(RECOVERING, {"ready": True}, RECOVERED, id="wait-for-recovery-then-ready-is-recovered"),
        pytest.param(RECOVERING, {"ready": False}, RECOVERING, id="wait-for-recovery-then-not-ready-keeps-waiting"),
        pytest.param(RECOVERED, {"ready": True}, RECOVERED, id="recovered-then-ready-stays-recovered"),
        pytest.param(RECOVERED, {"ready": False}, RECOVERING, id="recovered-then-not-ready-waits-for-recovery"),
        pytest.param(RECOVERING, {"ready": True, "reason": "Started"}, STARTED, id="explicit-started-wins"),
        pytest.param(NOT_READY, {"ready": False, "reason": "WaitForRecovery"}, RECOVERING, id="explicit-wait-for-recovery-wins"),
        pytest.param(STARTED, {"ready": False, "reason": "WaitForStart"}, NOT_READY, id="explicit-wait-for-start-wins"),
    ],
)
def test_report_sets_pods_ready_as_kueues_job_controller(previous, payload, expected):
    st = admitted()
    st.status.conditions = cond.remove_condition(st.status.conditions, "PodsReady")
    if previous is not None:
        status, reason, message = previous
        st.status.conditions = cond.set_condition(st.status.conditions, "PodsReady", status == "True", reason, message, T0 + MIN)
    assert pr.condition_for(st, pr.parse(payload)) == (expected[0] == "True", expected[1], expected[2])
    assert messages.pods_ready_report(st, payload, T0 + 2 * MIN) == f"PodsReady={expected[0]} ({expected[1]})"
    assert condition(st, "PodsReady") == expected


@pytest.mark.parametrize(
    ("make", "phase"),
    [
        pytest.param(submitted, "Pending", id="pending"),
        pytest.param(lambda: admitted(admission_checks=["check"]), "QuotaReserved", id="reserved-waiting-for-checks"),
        pytest.param(finished, "Finished", id="finished"),
    ],
)
def test_a_report_for_a_workload_not_admitted_changes_nothing(make, phase):
    st = make()
    before = st.workload.to_wire()
    assert messages.pods_ready_report(st, {"ready": True}, T0 + 2 * MIN) == f"ignored: the workload is {phase}, not admitted"
    assert st.workload.to_wire() == before


def test_admission_sets_pods_ready_false_wait_for_start():
    st = admitted(T0 + timedelta(seconds=7))
    assert condition(st, "PodsReady") == NOT_READY
    assert cond.find(st.status.conditions, "PodsReady").last_transition_time == T0 + timedelta(seconds=7)


# --- deadline -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "settings", "expected"),
    [
        pytest.param(admitted, None, None, id="off-without-settings"),
        pytest.param(submitted, TEN_MINUTES, None, id="not-admitted"),
        pytest.param(finished, TEN_MINUTES, None, id="finished"),
        pytest.param(lambda: reported(admitted(), {"ready": True}, T0 + MIN), TEN_MINUTES, None, id="ready"),
        pytest.param(inactive, TEN_MINUTES, None, id="inactive"),
        pytest.param(admitted_late, TEN_MINUTES, (T0 + 17 * MIN, "WaitForStart"), id="wait-for-start-counts-from-admitted"),
        pytest.param(recovering, WITH_RECOVERY, (T0 + 7 * MIN, "WaitForRecovery"), id="wait-for-recovery-counts-from-pods-ready"),
        pytest.param(recovering, WaitForPodsReady(timeout="10m", recoveryTimeout="0s"), None, id="recovery-disabled"),
        pytest.param(recovering, TEN_MINUTES, (T0 + 14 * MIN, "WaitForRecovery"), id="recovery-defaults-to-timeout"),
    ],
)
def test_deadline(make, settings, expected):
    assert pr.deadline(make(), settings) == expected


# --- time_out -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("strategy", "random", "delays"),
    [
        pytest.param({}, 0.0, [60, 120, 240], id="default-base-60-doubles"),
        pytest.param({"backoffBaseSeconds": 60, "backoffMaxSeconds": 100}, 0.0, [60, 100, 100], id="max-caps"),
        pytest.param({}, 0.999, [60, 120, 240], id="jitter-is-truncated-to-seconds"),
        pytest.param({"backoffBaseSeconds": 10000, "backoffMaxSeconds": 30000}, 0.999, [10000, 20001, 30002], id="jitter-after-the-cap"),
    ],
)
def test_each_timeout_counts_and_backs_off(strategy, random, delays):
    settings = WaitForPodsReady(timeout="10m", requeuingStrategy=strategy)
    st = admitted()
    seen = []
    for _ in delays:
        assert time_out_at_deadline(st, settings, random) is True, "it held quota"
        rs, evicted = st.status.requeue_state, cond.find(st.status.conditions, "Evicted")
        seen.append((rs.count, (rs.requeue_at - evicted.last_transition_time).total_seconds()))
        readmit_after_backoff(st)
    assert seen == [(n, d) for n, d in enumerate(delays, start=1)]


@pytest.mark.parametrize(
    ("make", "cause", "fires_at"),
    [
        pytest.param(admitted, "WaitForStart", T0 + 10 * MIN, id="wait-for-start"),
        pytest.param(recovering, "WaitForRecovery", T0 + 7 * MIN, id="wait-for-recovery"),
    ],
)
def test_a_timeout_evicts_with_pods_ready_timeout(make, cause, fires_at):
    st = make()
    assert pr.deadline(st, WITH_RECOVERY) == (fires_at, cause)
    assert pr.time_out(st, WITH_RECOVERY, cause, fires_at, 0.0) is True
    assert condition(st, "Evicted") == ("True", "PodsReadyTimeout", TIMEOUT_MESSAGE)
    assert condition(st, "Requeued") == ("False", "PodsReadyTimeout", TIMEOUT_MESSAGE)
    assert condition(st, "PodsReady") == NOT_READY
    assert not wl.has_quota(st) and st.status.admission is None
    assert st.status.scheduling_stats.to_wire() == {"evictions": [{"reason": "PodsReadyTimeout", "underlyingCause": cause, "count": 1}]}
    last = st.events[-1]
    assert (last.type, last.reason, last.message) == ("Normal", "EvictedDueToPodsReadyTimeout", TIMEOUT_MESSAGE)
    assert (st.status.requeue_state.count, st.status.requeue_state.requeue_at) == (1, fires_at + MIN)
    assert wl.phase(st) == "Backoff"
    assert pr.deadline(st, WITH_RECOVERY) is None


@pytest.mark.parametrize(
    ("limit", "requeues", "after_reactivation"),
    [
        pytest.param(1, 1, ("True", "PodsReadyTimeout", TIMEOUT_MESSAGE), id="limit-1-deactivates-on-the-second-timeout"),
        pytest.param(0, 0, ("True", "DeactivatedDueToRequeuingLimitExceeded", LIMIT_MESSAGE), id="limit-0-deactivates-on-the-first-timeout"),
    ],
)
def test_past_the_backoff_limit_a_timeout_deactivates(limit, requeues, after_reactivation):
    settings = WaitForPodsReady(timeout="10m", requeuingStrategy={"backoffLimitCount": limit})
    st = admitted()
    for _ in range(requeues):
        assert time_out_at_deadline(st, settings) is True
        readmit_after_backoff(st)
    assert time_out_at_deadline(st, settings) is True, "it held quota"
    assert st.workload.spec.active is False
    assert condition(st, "Evicted") == ("True", "DeactivatedDueToRequeuingLimitExceeded", LIMIT_MESSAGE)
    assert st.status.requeue_state is None
    assert not wl.has_quota(st)
    assert [(e.reason, e.underlying_cause, e.count) for e in st.status.scheduling_stats.evictions] == (
        [("PodsReadyTimeout", "WaitForStart", 1)] * requeues + [("Deactivated", "RequeuingLimitExceeded", 1)]
    )
    assert wl.phase(st) == "Inactive"
    # Reactivated, the count restarts: the next timeout is the first again.
    assert checks.activate(st, T0 + 60 * MIN) is True
    assert st.status.requeue_state is None
    st.claim.queued, st.claim.ticket = True, st.claim.ticket + 1
    wl.reserve_quota(st, reserved_notice(ticket=st.claim.ticket), T0 + 60 * MIN)
    assert time_out_at_deadline(st, settings) is True
    assert condition(st, "Evicted") == after_reactivation
    assert st.status.requeue_state == (None if limit == 0 else RequeueState(count=1, requeue_at=T0 + 71 * MIN))


@pytest.mark.parametrize(
    ("timeouts", "ready_between", "want_active", "want_first"),
    [
        # Each timeout comes 10 minutes after its admission; the backoffs are 1 s, 2 s, 4 s...
        pytest.param(1, False, True, 0, id="the-first-eviction-starts-the-clock"),
        pytest.param(3, False, True, 0, id="within-the-timeout-the-clock-is-kept"),
        pytest.param(7, False, False, None, id="one-past-the-timeout-deactivates-before-the-count-limit"),
        pytest.param(7, True, True, 6, id="pods-ready-between-restarts-the-clock"),
    ],
)
def test_backoff_limit_timeout(timeouts, ready_between, want_active, want_first):
    """Kueue's backoffLimitTimeout (kueue#15255): requeueState.firstEvictedAt is the first
    PodsReady-timeout eviction since the pods were last ready; a timeout at least that long after it
    deactivates the workload (RequeuingLimitExceeded), whatever backoffLimitCount allows."""
    settings = WaitForPodsReady(timeout="10m", requeuingStrategy={
        "backoffLimitCount": 100, "backoffLimitTimeout": "1h", "backoffBaseSeconds": 1, "backoffMaxSeconds": 3600,
    })
    st = admitted()
    evictions: list[datetime] = []
    for n in range(timeouts):
        if n and ready_between and n == timeouts - 1:
            admitted_at = st.status.condition("Admitted").last_transition_time
            reported(st, {"ready": True}, admitted_at + MIN)
            assert st.status.requeue_state.first_evicted_at is None, "ready: the clock is cleared"
            reported(st, {"ready": False}, admitted_at + 2 * MIN)
        at, _ = pr.deadline(st, settings)
        evictions.append(at)
        assert time_out_at_deadline(st, settings) is True
        if st.workload.spec.active is not False and n < timeouts - 1:
            readmit_after_backoff(st)
    assert (st.workload.spec.active is not False) == want_active
    if want_active:
        assert st.status.requeue_state.first_evicted_at == evictions[want_first].replace(microsecond=0)
    else:
        assert condition(st, "Evicted") == (
            "True", "DeactivatedDueToRequeuingLimitExceeded", "exceeding the maximum time 1h0m0s for re-queuing retries"
        )
        assert (evictions[-1] - evictions[0]) >= timedelta(hours=1)


def test_without_backoff_limit_timeout_no_clock_is_kept():
    settings = WaitForPodsReady(timeout="10m", requeuingStrategy={"backoffLimitCount": 3})
    st = admitted()
    assert time_out_at_deadline(st, settings) is True
    assert st.status.requeue_state.first_evicted_at is None


@pytest.mark.parametrize(("value", "error"), [("0s", "must be greater than 0s"), ("-5m", "must be greater than 0s"), ("soon", "soon")])
def test_a_backoff_limit_timeout_that_is_not_valid_is_refused(value, error):
    with pytest.raises(ValueError, match=error):
        WaitForPodsReady(timeout="10m", requeuingStrategy={"backoffLimitTimeout": value})


# --- runner_lost ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "expected", "timer"),
    [
        pytest.param(lambda: reported(admitted(), {"ready": True}, T0 + MIN), RECOVERING, (T0 + 8 * MIN, "WaitForRecovery"), id="ready-waits-for-recovery"),
        pytest.param(admitted, NOT_READY, (T0 + 10 * MIN, "WaitForStart"), id="not-ready-keeps-waiting-for-start"),
        pytest.param(submitted, None, None, id="pending-has-no-pods-ready"),
    ],
)
def test_a_lost_runner_counts_as_failed_pods(make, expected, timer):
    st = make()
    pr.runner_lost(st, "no heartbeat", T0 + 5 * MIN)
    assert condition(st, "PodsReady") == expected
    assert pr.deadline(st, WITH_RECOVERY) == timer
    last = st.events[-1]
    assert (last.type, last.reason, last.message, last.time) == (
        "Warning", "RunnerLost", "The runner stopped running the workload: no heartbeat", T0 + 5 * MIN
    )


# --- the blockAdmission gate ----------------------------------------------------------------------

GATE_OPS = {"request": pods_ready_gate.request, "used": pods_ready_gate.used, "returned": pods_ready_gate.returned, "settled": pods_ready_gate.settled}
W1 = ("default/w1", "uid-1", 1)
UNREADY = {"default/w1": ("uid-1", 1)}


def step(op: str, *args, answers: dict[str, bool], holder: str | None, waiting: list[str], not_ready: dict | None = None):
    return (op, args), answers, (holder, waiting, not_ready or {})


A_HOLDS_B_WAITS = [
    step("request", "a", answers={"a": True}, holder="a", waiting=[]),
    step("request", "b", answers={"b": False}, holder="a", waiting=["b"]),
]


@pytest.mark.parametrize(
    "steps",
    [
        pytest.param([step("request", "a", answers={"a": True}, holder="a", waiting=[])], id="first-request-granted-at-once"),
        pytest.param([
            *A_HOLDS_B_WAITS,
            step("used", "a", *W1, answers={}, holder=None, waiting=["b"], not_ready=UNREADY),
            step("settled", *W1, answers={"b": True}, holder="b", waiting=[]),
        ], id="second-queue-waits-for-used-and-settled"),
        pytest.param([
            *A_HOLDS_B_WAITS,
            step("request", "c", answers={"c": False}, holder="a", waiting=["b", "c"]),
            step("returned", "a", answers={"b": True}, holder="b", waiting=["c"]),
            step("returned", "b", answers={"c": True}, holder="c", waiting=[]),
            step("returned", "c", answers={}, holder=None, waiting=[]),
        ], id="returned-grant-passes-first-come-first"),
        pytest.param([
            *A_HOLDS_B_WAITS,
            step("settled", *W1, answers={}, holder="a", waiting=["b"]),
            step("used", "a", *W1, answers={"b": True}, holder="b", waiting=[]),
        ], id="settled-before-used-leaves-nothing-unready"),
        pytest.param([
            step("request", "a", answers={"a": True}, holder="a", waiting=[]),
            step("used", "a", *W1, answers={}, holder=None, waiting=[], not_ready=UNREADY),
            step("request", "b", answers={"b": False}, holder=None, waiting=["b"], not_ready=UNREADY),
            step("settled", "default/w1", "uid-2", 1, answers={}, holder=None, waiting=["b"], not_ready=UNREADY),
            step("settled", "default/w1", "uid-1", 2, answers={}, holder=None, waiting=["b"], not_ready=UNREADY),
            step("settled", *W1, answers={"b": True}, holder="b", waiting=[]),
        ], id="settled-for-another-uid-or-ticket-keeps-the-entry"),
        pytest.param([
            *A_HOLDS_B_WAITS,
            step("request", "a", answers={"a": True}, holder="a", waiting=["b"]),
            step("request", "b", answers={"b": False}, holder="a", waiting=["b"]),
        ], id="repeated-requests-change-nothing"),
    ],
)
def test_gate(steps):
    gate = pods_ready_gate.GateState()
    for (op, args), answers, (holder, waiting, not_ready) in steps:
        got = GATE_OPS[op](gate, *args)
        assert {cq: a.granted for cq, a in got.items()} == answers, (op, args)
        assert (gate.holder, gate.waiting, {k: tuple(v) for k, v in gate.not_ready.items()}) == (holder, waiting, not_ready), (op, args)


# --- what the runner and the gate are told --------------------------------------------------------


def _with_runner(admitted: bool = True, runner: str = "local") -> wl.WorkloadState:
    st = wl.new_state(manifest(workload_manifest("job", cpu="2")), "uid-1", T0)
    st.cluster_queue, st.claim.ticket, st.claim.queued = "cq", 1, True
    if admitted:
        wl.reserve_quota(st, reserved_notice(), T0)
    st.run.task_queue = runner
    return st


@pytest.mark.parametrize(
    ("case", "running", "expected"),
    [
        pytest.param("admitted", False, "start", id="admitted-and-not-started-starts"),
        pytest.param("admitted", True, None, id="admitted-and-running-is-left-alone"),
        pytest.param("started-this-admission", False, None, id="a-run-that-ended-is-not-started-again"),
        pytest.param("no-runner", False, None, id="without-a-runner-nothing-is-started"),
        pytest.param("pending", False, None, id="not-admitted-nothing-is-started"),
        pytest.param("evicted", True, "stop", id="evicted-while-running-stops"),
        pytest.param("finished", True, "stop", id="finished-while-running-stops"),
        pytest.param("deleted", True, "stop", id="deleted-while-running-stops"),
        pytest.param("evicted", False, None, id="evicted-after-the-run-ended-needs-nothing"),
    ],
)
def test_runner_command(case, running, expected):
    st = _with_runner(admitted=case != "pending", runner="" if case == "no-runner" else "local")
    if case == "started-this-admission":
        st.run.started = st.claim.ticket
    _happen(st, case)
    assert pr.runner_command(st, running) == expected


def _happen(st: wl.WorkloadState, event: str | None) -> None:
    """The admission ends one way or another, or the pods come up."""
    if event == "ready":
        messages.pods_ready_report(st, {"ready": True}, T0 + MIN)
    elif event == "evicted":
        wl.evict(st, "Preempted", "m", T0 + MIN)
    elif event == "finished":
        wl.finish(st, True, "done", T0 + MIN)
    elif event == "deleted":
        wl.delete(st)


def test_the_workloads_own_runner_annotation_wins_over_its_local_queues():
    st = _with_runner(runner="")
    st.workload.metadata.annotations = {"admitflow.io/runner": "mine"}
    assert wl.runner_of(st) == "mine"
    st.run.task_queue = "queue's"
    assert wl.runner_of(st) == "mine"


@pytest.mark.parametrize(
    ("gated", "event", "expected"),
    [
        pytest.param(False, "ready", False, id="not-gated-never-tells-the-gate"),
        pytest.param(True, None, False, id="gated-and-not-ready-keeps-the-gate-shut"),
        pytest.param(True, "ready", True, id="gated-and-ready-tells-the-gate"),
        pytest.param(True, "evicted", True, id="gated-and-evicted-tells-the-gate"),
        pytest.param(True, "finished", True, id="gated-and-finished-tells-the-gate"),
        pytest.param(True, "deleted", True, id="gated-and-deleted-tells-the-gate"),
    ],
)
def test_leaves_gate(gated, event, expected):
    st = _with_runner()
    st.gated = gated
    _happen(st, event)
    assert pr.leaves_gate(st) is expected
