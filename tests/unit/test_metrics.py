"""What a workload's changes add to the metrics (admission.metrics), and a ClusterQueue's gauges."""

from __future__ import annotations

from datetime import timedelta

import pytest

from admitflow import gauges
from admitflow.admission import checks
from admitflow.admission import cluster_queue as cq
from admitflow.admission import metrics as m
from admitflow.admission import lifecycle, pods_ready
from admitflow.admission import workload as wl
from admitflow.admission.checks import Verdict
from admitflow.admission.cluster_queue import ClusterQueueState, ClusterQueueView, LocalQueueInfo
from admitflow.api.configuration import WaitForPodsReady
from tests.support import messages
from tests.unit.test_cluster_queue import NOW, entry, run_pass, state_with, view
from tests.unit.test_workload_status import T0, reserved_notice, submitted


def counted(observations, local_queue: bool = False) -> dict[tuple, float]:
    """Each observation by name and labels; the LocalQueue variants only with `local_queue`
    (test_each_workload_metric_of_kueue_comes_with_its_local_queue_variant checks them); the
    counters added 0 ahead of their events left out (test_counters_are_added_0_ahead_of_their_events)."""
    out: dict[tuple, float] = {}
    for o in observations:
        if o.kind == "counter" and o.value == 0:
            continue
        if local_queue or not o.name.startswith(m.PREFIX + "local_queue_"):
            key = (o.name.removeprefix(m.PREFIX), tuple(sorted(o.labels.items())))
            out[key] = out.get(key, 0) + o.value
    return out


CQ = (("cluster_queue", "cq"), ("priority_class", ""))
VERDICT = (("admission_check", "budget"), ("cluster_queue", "cq"))


def test_a_workload_admitted_after_one_retry_then_finished():
    st = submitted()
    seen = m.snapshot(st)
    wl.reserve_quota(st, reserved_notice(["budget"]), T0 + timedelta(seconds=5))
    seen, obs = m.workload_observations(seen, st)
    assert counted(obs) == {("quota_reserved_workloads_total", CQ): 1, ("quota_reserved_wait_time_seconds", CQ): 5}
    assert m.workload_observations(seen, st)[1] == [], "nothing new, nothing counted"

    checks.apply(st, Verdict(name="budget", state="Retry", requeue_after_seconds=30), T0 + timedelta(seconds=10))
    seen, obs = m.workload_observations(seen, st)
    assert counted(obs) == {
        ("evicted_workloads_total", CQ + (("reason", "AdmissionCheck"), ("underlying_cause", ""))): 1,
        ("evicted_workloads_once_total", CQ + (("reason", "AdmissionCheck"), ("underlying_cause", ""))): 1,
        ("admission_check_verdicts_total", VERDICT + (("outcome", "applied"), ("state", "Retry"))): 1,
        ("admission_check_wait_time_seconds", VERDICT + (("state", "Retry"),)): 5,
        ("admission_check_retries_total", (("admission_check", "budget"), ("cluster_queue", "cq"))): 1,
        ("requeue_delay_seconds", (("cluster_queue", "cq"), ("reason", "AdmissionCheck"))): 30,
    }

    checks.finish_backoff_if_due(st, T0 + timedelta(seconds=40))
    st.claim.queued, st.claim.ticket = True, 2
    wl.reserve_quota(st, reserved_notice(["budget"], ticket=2), T0 + timedelta(seconds=42))
    checks.apply(st, Verdict(name="budget", state="Ready"), T0 + timedelta(seconds=45))
    seen, obs = m.workload_observations(seen, st)
    # Wait times count from the requeue (T0+40), not from creation.
    assert counted(obs) == {
        ("quota_reserved_workloads_total", CQ): 1,
        ("quota_reserved_wait_time_seconds", CQ): 2,
        ("admitted_workloads_total", CQ): 1,
        ("admission_wait_time_seconds", CQ): 5,
        ("admission_checks_wait_time_seconds", CQ): 3,
        ("admission_check_verdicts_total", VERDICT + (("outcome", "applied"), ("state", "Ready"))): 1,
        ("admission_check_wait_time_seconds", VERDICT + (("state", "Ready"),)): 3,
    }
    wl.finish(st, True, "done", T0 + timedelta(minutes=5))
    seen, obs = m.workload_observations(seen, st)
    assert counted(obs) == {("finished_workloads_total", CQ): 1}


def test_a_carried_state_counts_as_counted():
    """After continue-as-new (or a replay) a new run does not count the past again."""
    st = submitted()
    wl.reserve_quota(st, reserved_notice(), T0)
    assert m.workload_observations(m.snapshot(st), st)[1] == []


def _admitted_with_budget(seconds_to_verdict: int = 3) -> tuple[wl.WorkloadState, m.Seen, list]:
    st = submitted()
    seen = m.snapshot(st)
    wl.reserve_quota(st, reserved_notice(["budget"]), T0 + timedelta(seconds=5))
    checks.hand_out(st, "budget")  # its controller is asked about attempt 1, as lifecycle asks it
    seen, _ = m.workload_observations(seen, st)
    messages.verdict(st, {"name": "budget", "state": "Ready"}, T0 + timedelta(seconds=5 + seconds_to_verdict))
    seen, obs = m.workload_observations(seen, st)
    return st, seen, obs


def test_each_verdict_is_counted_by_check_state_and_outcome_and_a_check_s_wait_is_timed():
    st, seen, obs = _admitted_with_budget(seconds_to_verdict=3)
    assert counted(obs) == {
        ("admission_check_verdicts_total", VERDICT + (("outcome", "applied"), ("state", "Ready"))): 1,
        ("admission_check_wait_time_seconds", VERDICT + (("state", "Ready"),)): 3,
        ("admitted_workloads_total", CQ): 1,
        ("admission_wait_time_seconds", CQ): 8,
        ("admission_checks_wait_time_seconds", CQ): 3,
    }
    # A Retry evicts it (12 s after its Ready: no new wait); a Ready for that attempt is then ignored;
    # junk names no check and no state: it adds no series of its own.
    messages.verdict(st, {"name": "budget", "state": "Retry"}, T0 + timedelta(seconds=20))
    messages.verdict(st, {"name": "budget", "state": "Ready", "attempt": 1}, T0 + timedelta(seconds=21))
    messages.verdict(st, {"name": "x" * 300, "state": "Maybe"}, T0 + timedelta(seconds=22))
    messages.verdict(st, "garbage", T0 + timedelta(seconds=23))
    seen, obs = m.workload_observations(seen, st)
    got = counted(obs)
    assert {k: v for k, v in got.items() if k[0] in ("admission_check_verdicts_total", "admission_check_wait_time_seconds")} == {
        ("admission_check_verdicts_total", VERDICT + (("outcome", "applied"), ("state", "Retry"))): 1,
        ("admission_check_verdicts_total", VERDICT + (("outcome", "ignored"), ("state", "Ready"))): 1,
        ("admission_check_verdicts_total", (("admission_check", ""), ("cluster_queue", "cq"), ("outcome", "rejected"),
                                            ("state", "Invalid"))): 2,
    }
    assert m.workload_observations(seen, st)[1] == [], "each verdict counts once"
    assert m.workload_observations(m.snapshot(st), st)[1] == [], "a new run does not count past verdicts"


def test_a_retry_times_the_attempt_it_ends_and_the_next_attempt_is_timed_from_its_own_reservation():
    st = submitted()
    seen = m.snapshot(st)
    wl.reserve_quota(st, reserved_notice(["budget"]), T0 + timedelta(seconds=5))
    seen, _ = m.workload_observations(seen, st)
    messages.verdict(st, {"name": "budget", "state": "Pending", "message": "looking"}, T0 + timedelta(seconds=6))
    messages.verdict(st, {"name": "budget", "state": "Retry", "requeueAfterSeconds": 30}, T0 + timedelta(seconds=9))
    seen, obs = m.workload_observations(seen, st)
    got = counted(obs)
    assert got[("admission_check_verdicts_total", VERDICT + (("outcome", "applied"), ("state", "Pending")))] == 1
    assert got[("admission_check_verdicts_total", VERDICT + (("outcome", "applied"), ("state", "Retry")))] == 1
    assert got[("admission_check_wait_time_seconds", VERDICT + (("state", "Retry"),))] == 4, "from the reservation at +5"
    assert ("admission_check_wait_time_seconds", VERDICT + (("state", "Pending"),)) not in got, "Pending ends no wait"

    checks.finish_backoff_if_due(st, T0 + timedelta(seconds=40))
    st.claim.queued, st.claim.ticket = True, 2
    wl.reserve_quota(st, reserved_notice(["budget"], ticket=2), T0 + timedelta(seconds=50))
    seen, _ = m.workload_observations(seen, st)
    messages.verdict(st, {"name": "budget", "state": "Rejected", "message": "no"}, T0 + timedelta(seconds=57))
    seen, obs = m.workload_observations(seen, st)
    assert counted(obs)[("admission_check_wait_time_seconds", VERDICT + (("state", "Rejected"),))] == 7


def test_pods_ready_times_the_wait_from_the_queue_and_from_admission_once_per_admission():
    st, seen, _ = _admitted_with_budget(seconds_to_verdict=3)  # admitted at +8, queued since creation
    messages.pods_ready_report(st, {"ready": True}, T0 + timedelta(seconds=20))
    seen, obs = m.workload_observations(seen, st)
    assert counted(obs) == {("ready_wait_time_seconds", CQ): 20, ("admitted_until_ready_wait_time_seconds", CQ): 12}
    messages.pods_ready_report(st, {"ready": True}, T0 + timedelta(seconds=30))
    assert m.workload_observations(seen, st)[1] == [], "still ready: nothing new"


def test_an_eviction_counts_once_per_reason_and_cause_in_evicted_workloads_once_total():
    st = submitted()
    seen = m.snapshot(st)
    cause = CQ + (("reason", "AdmissionCheck"), ("underlying_cause", ""))
    for n, at in enumerate((5, 100)):
        st.claim.queued, st.claim.ticket = True, n + 1
        wl.reserve_quota(st, reserved_notice(["budget"], ticket=n + 1), T0 + timedelta(seconds=at))
        messages.verdict(st, {"name": "budget", "state": "Retry"}, T0 + timedelta(seconds=at + 1))
        checks.finish_backoff_if_due(st, T0 + timedelta(seconds=at + 90))
        seen, obs = m.workload_observations(seen, st)
        got = counted(obs)
        assert got[("evicted_workloads_total", cause)] == 1
        assert got.get(("evicted_workloads_once_total", cause)) == (1 if n == 0 else None)


def test_each_workload_metric_of_kueue_comes_with_its_local_queue_variant():
    st, seen, obs = _admitted_with_budget()
    messages.pods_ready_report(st, {"ready": True}, T0 + timedelta(seconds=20))
    seen, more = m.workload_observations(seen, st)
    obs += more
    messages.verdict(st, {"name": "budget", "state": "Retry"}, T0 + timedelta(seconds=21))  # ignored: admitted
    wl.evict(st, "Preempted", "preempted", T0 + timedelta(seconds=22))
    wl.finish(st, True, "done", T0 + timedelta(seconds=30))
    obs += m.workload_observations(seen, st)[1]
    lq = (("name", "lq"), ("namespace", "default"), ("priority_class", ""))
    twins = {(name.removeprefix("local_queue_"), labels): v for (name, labels), v in counted(obs, local_queue=True).items()
             if name.startswith("local_queue_")}
    cq_side = {(name, labels): v for (name, labels), v in counted(obs).items() if name in m.LOCAL_QUEUE_TWINS}
    assert {n for n, _ in cq_side} == set(m.LOCAL_QUEUE_TWINS) - {"quota_reserved_workloads_total",
                                                                  "quota_reserved_wait_time_seconds"}
    assert twins == {(n, tuple(sorted((*lq, *(kv for kv in labels if kv[0] not in ("cluster_queue", "priority_class")))))): v
                     for (n, labels), v in cq_side.items()}
    assert {m.PREFIX + "local_queue_" + n for n in m.LOCAL_QUEUE_TWINS} <= {m.PREFIX + n for n in m.METRICS}


def zeros(observations) -> set[tuple[str, tuple]]:
    return {(o.name.removeprefix(m.PREFIX), tuple(sorted(o.labels.items())))
            for o in observations if o.kind == "counter" and o.value == 0}


def _evictions(*pairs: tuple[str, str]) -> set[tuple[str, tuple]]:
    lq = (("name", "lq"), ("namespace", "default"), ("priority_class", ""))
    out = set()
    for reason, cause in pairs:
        labels = (("reason", reason), ("underlying_cause", cause))
        out |= {("evicted_workloads_total", tuple(sorted(CQ + labels))), ("evicted_workloads_once_total", tuple(sorted(CQ + labels))),
                ("local_queue_evicted_workloads_total", tuple(sorted(lq + labels)))}
    return out


ANY_WORKLOAD = _evictions(("Preempted", ""), ("ClusterQueueStopped", ""), ("LocalQueueStopped", ""), ("Deactivated", ""),
                          ("QuotaForceReleased", ""))
BUDGET = {("admission_check_retries_total", VERDICT)} | {
    ("admission_check_verdicts_total", VERDICT + (("outcome", "applied"), ("state", s))) for s in ("Pending", "Ready", "Retry", "Rejected")
}


def _reserved(checks: list[str] | None = None, **notice) -> wl.WorkloadState:
    st = submitted()
    if notice.get("max_execution"):
        st.workload.spec.maximum_execution_time_seconds = notice.pop("max_execution")
    n = reserved_notice(checks)
    wl.reserve_quota(st, n.model_copy(update=notice), T0 + timedelta(seconds=5))
    return st


@pytest.mark.parametrize(
    ("state", "want"),
    [
        pytest.param(submitted(), {
            (name, labels) for base in ("quota_reserved_workloads_total", "admitted_workloads_total", "finished_workloads_total")
            for name, labels in ((base, CQ), ("local_queue_" + base, (("name", "lq"), ("namespace", "default"), ("priority_class", ""))))
        }, id="a-workload-that-knows-its-cluster-queue-gets-its-reservation-admission-and-finish-counters"),
        pytest.param(_reserved(), ANY_WORKLOAD,
                     id="a-reserved-workload-gets-the-evictions-any-workload-can-have"),
        pytest.param(_reserved(["budget"]), ANY_WORKLOAD | _evictions(("AdmissionCheck", ""), ("Deactivated", "AdmissionCheck")) | BUDGET,
                     id="with-a-check-also-its-evictions-for-checks-and-the-checks-retries-and-applied-verdicts"),
        pytest.param(_reserved(wait_for_pods_ready=WaitForPodsReady(timeout="3s")),
                     ANY_WORKLOAD | _evictions(("PodsReadyTimeout", "WaitForStart"), ("PodsReadyTimeout", "WaitForRecovery"),
                                               ("Deactivated", "RequeuingLimitExceeded")),
                     id="under-wait-for-pods-ready-also-the-timeouts-and-the-requeuing-limit"),
        pytest.param(_reserved(max_execution=60), ANY_WORKLOAD | _evictions(("Deactivated", "MaximumExecutionTimeExceeded")),
                     id="with-a-maximum-execution-time-also-its-deactivation"),
    ],
)
def test_counters_are_added_0_ahead_of_their_events(state, want):
    """A series appears at its first addition: Prometheus' rate and increase would not see the
    event that makes it. What a workload may count later is added 0 as soon as its labels are
    known; once per reservation, and never for what a carried state already counted."""
    seen, obs = m.workload_observations(m.Seen(), state)
    got = zeros(obs)
    if wl.has_quota(state):
        got -= zeros(m.workload_observations(m.Seen(), submitted())[1])  # what knowing the ClusterQueue adds
    assert got == want
    assert zeros(m.workload_observations(seen, state)[1]) == set(), "nothing new: nothing added"
    assert m.workload_observations(m.snapshot(state), state)[1] == [], "a carried state adds nothing"


def test_every_eviction_the_rules_count_is_one_the_metrics_set_up():
    """EVICTIONS spells each reason and cause as the rules that evict do (their constants)."""
    assert {(r, c) for r, c, _ in m.EVICTIONS} == {
        (wl.PREEMPTED, ""), ("ClusterQueueStopped", ""), ("LocalQueueStopped", ""), ("Deactivated", ""),
        (cq.FORCE_RELEASED, ""), ("AdmissionCheck", ""), ("Deactivated", "AdmissionCheck"),
        (pods_ready.TIMEOUT_REASON, wl.WAIT_FOR_START), (pods_ready.TIMEOUT_REASON, pods_ready.WAIT_FOR_RECOVERY),
        ("Deactivated", pods_ready.LIMIT_CAUSE), ("Deactivated", lifecycle.MAX_EXECUTION_CAUSE),
    }


def _after_a_pass(st: ClusterQueueState) -> ClusterQueueState:
    run_pass(st)
    return st


def _deleted() -> ClusterQueueState:
    st = state_with(view())
    cq.set_view(st, ClusterQueueView(name="cq", revision=2), NOW)
    return st


STATUS_ZERO = {("cluster_queue_status", s): 0 for s in ("pending", "active", "terminating")}


@pytest.mark.parametrize(
    ("state", "want"),
    [
        pytest.param(
            _after_a_pass(state_with(view(), entry("a", age=3), entry("b", age=2), entry("big", cpu=9000, age=1))),
            {("pending_workloads", "active"): 0, ("pending_workloads", "inadmissible"): 1,
             ("reserving_active_workloads", ""): 2,
             ("admitted_active_workloads", ""): 2,  # no checks: admitted with the reservation
             **STATUS_ZERO, ("cluster_queue_status", "active"): 1},
            id="two-reserved-and-admitted-one-too-big-to-ever-fit-is-inadmissible",
        ),
        pytest.param(
            state_with(view(), entry("a", age=2), entry("b", age=1)),
            {("pending_workloads", "active"): 2, ("pending_workloads", "inadmissible"): 0,
             ("reserving_active_workloads", ""): 0, ("admitted_active_workloads", ""): 0,
             **STATUS_ZERO, ("cluster_queue_status", "active"): 1},
            id="workloads-not-yet-scheduled-are-active-pending",
        ),
        pytest.param(
            ClusterQueueState(name="cq"),
            {("pending_workloads", "active"): 0, ("pending_workloads", "inadmissible"): 0,
             ("reserving_active_workloads", ""): 0, ("admitted_active_workloads", ""): 0,
             **STATUS_ZERO, ("cluster_queue_status", "pending"): 1},
            id="a-queue-without-its-catalog-view-yet-is-pending-and-empty",
        ),
        pytest.param(
            state_with(view(flavors=())),
            {("pending_workloads", "active"): 0, ("pending_workloads", "inadmissible"): 0,
             ("reserving_active_workloads", ""): 0, ("admitted_active_workloads", ""): 0,
             **STATUS_ZERO, ("cluster_queue_status", "pending"): 1},
            id="a-queue-missing-its-flavor-is-pending",
        ),
        pytest.param(
            _deleted(),
            {("pending_workloads", "active"): 0, ("pending_workloads", "inadmissible"): 0,
             ("reserving_active_workloads", ""): 0, ("admitted_active_workloads", ""): 0,
             **STATUS_ZERO, ("cluster_queue_status", "terminating"): 1},
            id="a-queue-whose-spec-was-deleted-is-terminating",
        ),
    ],
)
def test_cluster_queue_gauges(state, want):
    got = [o for o in m.cluster_queue_gauges(state) if o.name.removeprefix(m.PREFIX) in {n for n, _ in want}]
    assert {(o.name.removeprefix(m.PREFIX), o.labels.get("status", "")): o.value for o in got} == want
    assert all(o.kind == "gauge" and o.labels["cluster_queue"] == "cq" for o in got)


def test_the_resource_unadmitted_and_local_queue_gauges():
    """Two 2-cpu workloads reserved and admitted on 4 cpus, a third waiting for checks (its pass
    reserved it in a second LocalQueue's name), one too big for the queue: Kueue's resource gauges
    in cores, unadmitted_workloads by cause, and the LocalQueue gauges."""
    v = view(lqs={"default/lq": LocalQueueInfo(), "team/other": LocalQueueInfo()}, cohortName="pool")
    st = _after_a_pass(state_with(v, entry("a", age=3), entry("b", age=2), entry("big", cpu=9000, age=1)))
    st.reservations["default/b"].admitted = False  # its checks are not all Ready yet
    got = {(o.name.removeprefix(m.PREFIX), tuple(sorted(o.labels.items()))): o.value for o in m.cluster_queue_gauges(st)}
    res = (("cluster_queue", "cq"), ("cohort", "pool"), ("flavor", "default"), ("resource", "cpu"))
    assert got[("cluster_queue_resource_reservation", res)] == 4.0, "cores, not milli-cores"
    assert got[("cluster_queue_resource_usage", res)] == 2.0, "admitted only"
    assert {k: v for k, v in got.items() if k[0] == "unadmitted_workloads"} == {
        ("unadmitted_workloads", (("cluster_queue", "cq"), ("reason", "NoReservation"), ("underlying_cause", "ExceedsMaxQuota"))): 1,
        ("unadmitted_workloads", (("cluster_queue", "cq"), ("reason", "UnsatisfiedAdmissionChecks"), ("underlying_cause", ""))): 1,
    }
    lq = (("name", "lq"), ("namespace", "default"))
    other = (("name", "other"), ("namespace", "team"))
    gauges_of = ("local_queue_pending_workloads", "local_queue_reserving_active_workloads", "local_queue_admitted_active_workloads")
    assert {k: v for k, v in got.items() if k[0] in gauges_of} == {
        ("local_queue_pending_workloads", lq + (("status", "active"),)): 0,
        ("local_queue_pending_workloads", lq + (("status", "inadmissible"),)): 1,
        ("local_queue_reserving_active_workloads", lq): 2,
        ("local_queue_admitted_active_workloads", lq): 1,
        ("local_queue_pending_workloads", other + (("status", "active"),)): 0,
        ("local_queue_pending_workloads", other + (("status", "inadmissible"),)): 0,
        ("local_queue_reserving_active_workloads", other): 0,
        ("local_queue_admitted_active_workloads", other): 0,
    }
    lq_res = (("flavor", "default"),) + lq + (("resource", "cpu"),)
    assert (got[("local_queue_resource_reservation", lq_res)], got[("local_queue_resource_usage", lq_res)]) == (4.0, 2.0)
    assert {k: v for k, v in got.items() if k[0] == "local_queue_unadmitted_workloads"} == {
        ("local_queue_unadmitted_workloads", (("cluster_queue", "cq"),) + lq + (("reason", "NoReservation"), ("underlying_cause", "ExceedsMaxQuota"))): 1,
        ("local_queue_unadmitted_workloads", (("cluster_queue", "cq"),) + lq + (("reason", "UnsatisfiedAdmissionChecks"), ("underlying_cause", ""))): 1,
    }
    assert {dict(k[1])["active"]: v for k, v in got.items() if k[0] == "local_queue_status" and dict(k[1])["name"] == "lq"} == {
        "True": 1, "False": 0, "Unknown": 0,
    }


# --- the exporter's text (admitflow/gauges.py) ------------------------------------------------------


def test_the_exposition_gives_each_family_its_help_and_type_once_then_its_samples():
    st = _after_a_pass(state_with(view(), entry("a", age=3), entry("big", cpu=9000, age=1)))
    text = gauges.exposition([*m.cluster_queue_gauges(st), gauges.up("cq", True)])
    lines = text.splitlines()
    assert lines[:4] == [
        "# HELP admitflow_pending_workloads Pending workloads, per ClusterQueue and status (active, inadmissible)",
        "# TYPE admitflow_pending_workloads gauge",
        'admitflow_pending_workloads{cluster_queue="cq",status="active"} 0',
        'admitflow_pending_workloads{cluster_queue="cq",status="inadmissible"} 1',
    ]
    families = {line.split()[2] for line in lines if line.startswith("# TYPE ")}
    assert sum(line.startswith("# TYPE ") for line in lines) == len(families) == 15, "each family once"
    assert families == {m.PREFIX + n for n, (kind, _) in m.METRICS.items() if kind == "gauge"} | {gauges.UP}
    assert lines[-3:] == [
        "# HELP admitflow_exporter_cluster_queue_up " + gauges.UP_HELP,
        "# TYPE admitflow_exporter_cluster_queue_up gauge",
        'admitflow_exporter_cluster_queue_up{cluster_queue="cq"} 1',
    ]
    assert text.endswith("\n")
    assert gauges.exposition([]) == "", "no ClusterQueue, nothing to serve"


@pytest.mark.parametrize(
    ("labels", "value", "want"),
    [
        pytest.param({"cluster_queue": "cq"}, 3.0, 'admitflow_pending_workloads{cluster_queue="cq"} 3', id="a-whole-number-has-no-decimals"),
        pytest.param({"cluster_queue": "cq"}, 0.5, 'admitflow_pending_workloads{cluster_queue="cq"} 0.5', id="a-fraction-keeps-them"),
        pytest.param({"cluster_queue": "cq"}, 2.0**53 + 2, 'admitflow_pending_workloads{cluster_queue="cq"} 9007199254740994',
                     id="a-large-count-keeps-every-digit"),
        pytest.param({"status": "a", "cluster_queue": "b"}, 1, 'admitflow_pending_workloads{cluster_queue="b",status="a"} 1',
                     id="labels-are-sorted-by-name"),
        pytest.param({"cluster_queue": 'q"\\\n'}, 1, 'admitflow_pending_workloads{cluster_queue="q\\"\\\\\\n"} 1',
                     id="quotes-backslashes-and-newlines-in-a-label-are-escaped"),
        pytest.param({}, float("nan"), "admitflow_pending_workloads NaN", id="not-a-number-as-prometheus-writes-it"),
    ],
)
def test_a_sample_line(labels, value, want):
    o = m.Observation(kind="gauge", name=m.PREFIX + "pending_workloads", value=value, labels=labels)
    assert gauges.exposition([o]).splitlines()[2] == want


@pytest.mark.parametrize(
    ("had_heads", "reserved", "want"),
    [(True, 2, "success"), (True, 0, "inadmissible"), (False, 0, None)],
    ids=["reserved-some", "reserved-none", "nothing-to-try"],
)
def test_an_admission_attempt(had_heads, reserved, want):
    got = m.admission_attempt(had_heads, reserved, 0.25)
    other = {"success": "inadmissible", "inadmissible": "success"}.get(want)
    assert [(o.name, o.labels["result"], o.value) for o in got] == ([] if want is None else [
        (m.PREFIX + "admission_attempts_total", want, 1), (m.PREFIX + "admission_attempt_duration_seconds", want, 0.25),
        (m.PREFIX + "admission_attempts_total", other, 0),
    ])


def _set_aside(st: ClusterQueueState) -> ClusterQueueState:
    for e in st.pending:
        e.inadmissible = True
    return st


@pytest.mark.parametrize(
    ("states", "want"),
    [
        pytest.param([state_with(view(), entry("a"))], True, id="a-queued-workload"),
        pytest.param([ClusterQueueState(name="cq")], False, id="nothing-queued"),
        pytest.param([_set_aside(state_with(view(), entry("big", cpu=9000)))], False, id="only-set-aside-ones"),
        pytest.param([ClusterQueueState(name="cq"), state_with(view(), entry("a"))], True, id="one-queue-of-a-tree-has-one"),
    ],
)
def test_a_pass_is_an_attempt_when_a_workload_can_be_tried(states, want):
    assert m.has_workloads_to_try(states) is want


# --- the exporter: which memo it serves a ClusterQueue's gauges from ----------------------------

_OBSERVED = [m.Observation(kind="gauge", name=m.PREFIX + "pending_workloads", value=3.0, labels={"cluster_queue": "cq", "status": "active"})]
_HELD = {"status": {}, "localQueues": {}, "gauges": [o.to_wire() for o in _OBSERVED]}


def _listed(memo: dict, failing: bool = False, task_queue: str = "admitflow-entities"):
    from admitflow.client.reads import Listed

    return Listed(memo=memo, failing=failing, task_queue=task_queue)


@pytest.mark.parametrize(
    ("queues", "served", "expected"),
    [
        ({"clusterqueue/cq": _listed({"clusterQueue/cq": _HELD})}, True, _OBSERVED),
        ({"clusterqueue/cq": _listed({"movedTo": "cohort/root"}), "cohort/root": _listed({"clusterQueue/cq": _HELD})}, True, _OBSERVED),
        ({"clusterqueue/cq": _listed({"movedTo": "cohort/root"}), "cohort/root": _listed({})}, True, None),
        ({"clusterqueue/cq": _listed({})}, True, None),
        ({"clusterqueue/cq": _listed({"clusterQueue/cq": _HELD}, failing=True)}, True, None),
        ({"clusterqueue/cq": _listed({"movedTo": "cohort/root"}), "cohort/root": _listed({"clusterQueue/cq": _HELD}, failing=True)}, True, None),
        ({"clusterqueue/cq": _listed({"clusterQueue/cq": _HELD})}, False, None),
        ({}, True, "empty"),
    ],
    ids=[
        "its-home-memo", "its-trees-memo", "on-its-way-to-the-tree", "not-written-yet", "its-task-keeps-failing",
        "its-trees-task-keeps-failing", "no-worker-polls-its-task-queue", "not-started-yet-counts-nothing",
    ],
)
def test_the_exporter_serves_a_queues_gauges_only_from_a_current_memo(queues, served, expected):
    trees = {wid: listed.memo for wid, listed in queues.items()}
    got = gauges._gauges("cq", queues, trees, {"admitflow-entities": served})
    if expected == "empty":
        assert got == m.cluster_queue_gauges(ClusterQueueState(name="cq"))
    else:
        assert got == expected
def test_every_histogram_has_buckets_in_seconds_as_kueue_s():
    """Without buckets of its own a histogram gets the SDK's, made for milliseconds (50 to 10000):
    a pass of half a millisecond then read as 25 s at p50. Kueue's scheduler histogram keeps
    Prometheus' default buckets; its workload histograms use 1, 2.5, 5, 10, ... (16 for the
    admission wait)."""
    histograms = {m.PREFIX + n for n, (kind, _) in m.METRICS.items() if kind == "histogram"}
    workloads = dict(m.BUCKETS)
    assert set(workloads) == histograms
    assert workloads.pop(m.PREFIX + "admission_attempt_duration_seconds") == m.DEFAULT_BUCKETS == [
        0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
    ]
    for name, buckets in workloads.items():
        assert buckets[:5] == [1, 2.5, 5, 10, 20] and len(buckets) == (16 if name.endswith("admission_wait_time_seconds") else 14), name
