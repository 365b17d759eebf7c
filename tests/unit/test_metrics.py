"""What a workload's changes add to the metrics (admission.metrics), and a ClusterQueue's gauges."""

from __future__ import annotations

from datetime import timedelta

from admitflow.admission import checks
from admitflow.admission import metrics as m
from admitflow.admission import workload as wl
from admitflow.admission.checks import Verdict
from tests.unit.test_cluster_queue import entry, run_pass, state_with, view
from tests.unit.test_workload_status import T0, reserved_notice, submitted


def counted(observations) -> dict[tuple, float]:
    return {(o.name.removeprefix(m.PREFIX), tuple(sorted(o.labels.items()))): o.value for o in observations}


CQ = (("cluster_queue", "cq"), ("priority_class", ""))


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
        ("admission_check_retries_total", (("admission_check", "budget"), ("cluster_queue", "cq"))): 1,
        ("requeue_delay_seconds", (("cluster_queue", "cq"), ("reason", "AdmissionCheck"))): 30,
    }

    checks.finish_backoff_if_due(st, T0 + timedelta(seconds=40))
    st.queued, st.ticket = True, 2
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
    }
    wl.finish(st, True, "done", T0 + timedelta(minutes=5))
    seen, obs = m.workload_observations(seen, st)
    assert counted(obs) == {("finished_workloads_total", CQ): 1}


def test_a_carried_state_counts_as_counted():
    """After continue-as-new (or a replay) a new run does not count the past again."""
    st = submitted()
    wl.reserve_quota(st, reserved_notice(), T0)
    assert m.workload_observations(m.snapshot(st), st)[1] == []


def test_cluster_queue_gauges():
    st = state_with(view(), entry("a", age=3), entry("b", age=2), entry("big", cpu=9000, age=1))
    run_pass(st)
    gauges = {(o.name.removeprefix(m.PREFIX), o.labels.get("status", "")): o.value for o in m.cluster_queue_gauges(st)}
    assert gauges == {
        ("pending_workloads", "active"): 0,
        ("pending_workloads", "inadmissible"): 1,
        ("reserving_active_workloads", ""): 2,
        ("admitted_active_workloads", ""): 2,  # no checks: admitted with the reservation
        ("cluster_queue_status", "pending"): 0,
        ("cluster_queue_status", "active"): 1,
        ("cluster_queue_status", "terminating"): 0,
    }

