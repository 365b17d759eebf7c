"""A workload's conditions, events and phase through reservation, admission and finish."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from admitflow.admission import explain
from admitflow.admission import conditions as cond
from admitflow.admission import workload as wl
from admitflow.admission.cluster_queue import Notice
from admitflow.admission.flavor_assignment import Assignment, PodSetAssignment
from admitflow.api import WorkloadStatus
from admitflow.api.configuration import WaitForPodsReady
from tests.builders import manifest, workload_manifest

T0 = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)


def submitted(name: str = "job") -> wl.WorkloadState:
    st = wl.new_state(manifest(workload_manifest(name, cpu="2")), "uid-1", T0)
    st.cluster_queue = "cq"
    st.claim.ticket = 1
    st.claim.queued = True
    return st


def reserved_notice(checks: list[str] | None = None, ticket: int = 1, uid: str = "uid-1") -> Notice:
    return Notice(
        key="default/job", uid=uid, ticket=ticket, kind="reserved", admission_checks=checks or [],
        assignment=Assignment(
            mode="Fit",
            pod_sets=[PodSetAssignment(name="main", flavors={"cpu": "default"}, resource_usage={"cpu": 2000}, count=1)],
        ),
    )


def conditions(st: wl.WorkloadState) -> dict[str, tuple[str, str, str]]:
    return {c.type: (c.status, c.reason, c.message) for c in st.status.conditions}


def test_a_new_workload_is_pending_evaluation_without_reservation():
    st = submitted()
    assert conditions(st) == {
        "QuotaReserved": ("False", "PendingEvaluation", "Workload is pending evaluation in the scheduling queue"),
        "Admitted": ("False", "NoReservation", "The workload has no reservation"),
    }
    assert st.workload.metadata.uid == "uid-1"
    assert st.workload.metadata.creation_timestamp == T0
    assert wl.phase(st) == "Pending"


def test_without_checks_reservation_admits_in_the_same_step():
    st = submitted()
    wl.reserve_quota(st, reserved_notice(), T0 + timedelta(seconds=7))
    assert conditions(st) == {
        "QuotaReserved": ("True", "QuotaReserved", "Quota reserved in ClusterQueue cq"),
        "Admitted": ("True", "Admitted", "The workload is admitted"),
        "PodsReady": ("False", "WaitForStart", "Not all pods are ready or succeeded"),
    }
    admission = st.status.admission.to_wire()
    assert admission == {
        "clusterQueue": "cq",
        "podSetAssignments": [{"name": "main", "flavors": {"cpu": "default"}, "resourceUsage": {"cpu": "2"}, "count": 1}],
    }
    assert [(e.reason, e.message) for e in st.events] == [
        ("QuotaReserved", "Quota reserved in ClusterQueue cq, wait time since queued was 7s"),
        ("Admitted", "Admitted by ClusterQueue cq, wait time since reservation was 0s"),
    ]
    assert wl.phase(st) == "Admitted"
    assert not st.claim.queued


@pytest.mark.parametrize(
    ("in_manifest", "stamped"),
    [(None, "2026-11-22T09:59:57Z"), ("2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z")],
    ids=["acceptance", "manifest"],
)
def test_creation_is_stamped_at_the_starts_acceptance_not_the_first_task(in_manifest, stamped):
    m = workload_manifest("job", cpu="2")
    if in_manifest:
        m["metadata"]["creationTimestamp"] = in_manifest
    submitted_ = manifest(m)
    st = wl.new_state(submitted_, "uid-1", T0)  # the first task, 3 s after the start was accepted
    wl.stamp_submission(st, submitted_, T0 - timedelta(seconds=2, milliseconds=700))
    assert st.workload.to_wire()["metadata"]["creationTimestamp"] == stamped
    assert wl.queue_timestamp(st) == wl.queued_since(st) == st.workload.metadata.creation_timestamp, "queue order and wait time"
    assert st.status.conditions[0].last_transition_time == T0, "conditions are the first reconcile's"


def test_with_checks_reservation_waits_for_them():
    st = submitted()
    wl.reserve_quota(st, reserved_notice(checks=["b", "a"]), T0)
    assert conditions(st)["Admitted"] == ("False", "UnsatisfiedAdmissionChecks", "The workload has not all checks ready")
    assert [(c.name, c.state) for c in st.status.admission_checks] == [("a", "Pending"), ("b", "Pending")]
    assert wl.phase(st) == "QuotaReserved"


def test_reservation_closes_an_earlier_eviction():
    st = submitted()
    st.status.conditions = cond.set_condition(st.status.conditions, "Evicted", True, "Preempted", "Preempted by x", T0)
    wl.reserve_quota(st, reserved_notice(), T0 + timedelta(minutes=1))
    assert conditions(st)["Evicted"] == ("False", "QuotaReserved", "Previously: Preempted by x")


@pytest.mark.parametrize(
    ("notice", "accepted"),
    [
        pytest.param(reserved_notice(), True, id="a-notice-for-the-current-ticket-counts"),
        pytest.param(reserved_notice(ticket=0), False, id="a-notice-for-an-older-ticket-is-stale"),
        pytest.param(reserved_notice(uid="uid-other"), False, id="a-notice-for-another-run-of-the-same-name-is-ignored"),
    ],
)
def test_accepts(notice, accepted):
    assert wl.accepts(submitted(), notice) is accepted


def test_finish_keeps_the_admission_and_says_whether_quota_was_held():
    st = submitted()
    wl.reserve_quota(st, reserved_notice(), T0)
    assert wl.finish(st, True, "done", T0 + timedelta(hours=1)) is True, "its quota must be given back"
    assert conditions(st)["Finished"] == ("True", "Succeeded", "done")
    assert conditions(st)["Admitted"][0] == "True"
    assert wl.phase(st) == "Finished"
    assert wl.finish(st, False, "again", T0) is False


def test_a_failed_finish_without_message_says_failed():
    st = submitted()
    assert wl.finish(st, False, "", T0) is True, "its place in the queue must be given back"
    assert conditions(st)["Finished"] == ("True", "Failed", "Failed")
    assert not st.claim.queued


@pytest.mark.parametrize(
    ("queued", "cluster_queue", "tell"),
    [
        pytest.param(True, "cq", True, id="a-queued-workload-tells-its-queue"),
        pytest.param(False, "cq", False, id="a-workload-waiting-for-its-local-queue-has-no-queue-to-tell"),
        pytest.param(False, None, False, id="a-workload-whose-queue-never-resolved-has-no-queue-to-tell"),
    ],
)
def test_delete_says_whether_the_queue_must_be_told(queued, cluster_queue, tell):
    st = submitted()
    st.claim.queued, st.cluster_queue = queued, cluster_queue
    assert wl.delete(st) is tell
    assert st.deleted and not st.claim.queued


def test_condition_transition_time_moves_only_when_status_flips():
    cs = cond.set_condition([], "X", False, "A", "a", T0)
    cs = cond.set_condition(cs, "X", False, "B", "b", T0 + timedelta(minutes=1))
    assert cs[0].last_transition_time == T0 and cs[0].reason == "B"
    cs = cond.set_condition(cs, "X", True, "C", "c", T0 + timedelta(minutes=2))
    assert cs[0].last_transition_time == T0 + timedelta(minutes=2)


def test_messages_are_cut_at_32_kib_with_kueues_marker():
    cs = cond.set_condition([], "X", False, "A", "é" * 40000, T0)
    assert len(cs[0].message.encode()) <= 32 * 1024
    assert cs[0].message.endswith(" ...")


def test_the_report_carries_events_and_the_deleted_mark():
    st = submitted()
    wl.record(st, "Something", "happened", T0)
    st.deleted = True
    report = st.report().to_wire()
    assert report["kind"] == "Workload" and report["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    assert report["events"] == [{"type": "Normal", "reason": "Something", "message": "happened", "time": "2026-11-22T10:00:00Z"}]
    assert report["deleted"] is True


def preempted(st, at):
    n = Notice(key="default/job", uid="uid-1", ticket=1, kind="evicted", reason="Preempted", message="Preempted to x",
               preemption_reason="InClusterQueue")
    assert wl.accepts_eviction(st, n)
    return wl.evict(st, n.reason, n.message, at, preemption_reason=n.preemption_reason)


def test_preemption_evicts_releases_and_requeues_at_once_keeping_the_place():
    st = submitted()
    wl.reserve_quota(st, reserved_notice(checks=["ready-check"]), T0)
    st.status.admission_checks[0].state = "Ready"
    wl.sync_admitted(st, T0)
    assert preempted(st, T0 + timedelta(minutes=10)) is True, "the queue must get the quota back"
    assert conditions(st)["Evicted"] == ("True", "Preempted", "Preempted to x")
    assert conditions(st)["Preempted"] == ("True", "InClusterQueue", "Preempted to x")
    assert conditions(st)["QuotaReserved"] == ("False", "PendingEvaluation", "Preempted to x")
    assert conditions(st)["Admitted"] == ("False", "NoReservation", "The workload has no reservation")
    assert conditions(st)["Requeued"] == ("True", "Preempted", "Preempted to x")
    assert st.status.admission is None
    (check,) = st.status.admission_checks
    assert (check.state, check.message) == ("Pending", "Reset to Pending after eviction. Previously: Ready")
    assert st.status.accumulated_past_execution_time_seconds == 600
    assert [(e.reason) for e in st.events][-2:] == ["Preempted", "EvictedDueToPreempted"]
    assert st.status.scheduling_stats.to_wire() == {"evictions": [{"reason": "Preempted", "underlyingCause": "", "count": 1}]}
    assert wl.queue_timestamp(st) == T0, "a preempted workload keeps its creation time"
    assert wl.phase(st) == "Pending"


def test_a_finished_workload_is_not_evicted():
    st = submitted()
    wl.reserve_quota(st, reserved_notice(), T0)
    wl.sync_admitted(st, T0)
    n = Notice(key="default/job", uid="uid-1", ticket=1, kind="evicted", reason="Preempted", message="m")
    assert wl.accepts_eviction(st, n)
    assert wl.finish(st, True, "done", T0)
    assert not wl.accepts_eviction(st, n), "its quota is on its way back already"


def test_an_eviction_for_another_reservation_is_ignored():
    st = submitted()
    n = Notice(key="default/job", uid="uid-1", ticket=1, kind="evicted", reason="Preempted", message="m")
    assert not wl.accepts_eviction(st, n), "no quota held: nothing to evict"


@pytest.mark.parametrize(
    ("reason", "strategy", "from_eviction"),
    [
        pytest.param("AdmissionCheck", "Creation", True, id="an-admission-check-eviction-always-goes-to-the-back"),
        pytest.param("PodsReadyTimeout", "Eviction", True, id="a-pods-ready-timeout-goes-to-the-back-with-eviction-strategy"),
        pytest.param("PodsReadyTimeout", "Creation", False, id="a-pods-ready-timeout-keeps-its-place-with-creation-strategy"),
        pytest.param("Preempted", "Eviction", False, id="a-preempted-workload-keeps-its-place"),
    ],
)
def test_queue_timestamp(reason, strategy, from_eviction):
    st = submitted()
    evicted_at = T0 + timedelta(hours=1)
    st.status.conditions = cond.set_condition(st.status.conditions, "Evicted", True, reason, "m", evicted_at)
    st.wait_for_pods_ready = WaitForPodsReady(requeuingStrategy={"timestamp": strategy})
    assert wl.queue_timestamp(st) == (evicted_at if from_eviction else T0)


def test_a_retry_check_counts_one_more_retry_when_reset():
    from admitflow.api import AdmissionCheckState

    checks = [
        AdmissionCheckState.model_validate({"name": "a", "state": "Retry", "retryCount": 2, "requeueAfterSeconds": 60, "message": "x", "lastTransitionTime": T0}),
        AdmissionCheckState.model_validate({"name": "b", "state": "Pending", "message": "", "lastTransitionTime": T0}),
    ]
    a, b = wl.reset_checks_on_eviction(checks, T0)
    assert (a.state, a.retry_count, a.requeue_after_seconds, a.message) == (
        "Pending", 3, 60, "Reset to Pending after eviction. Previously: Retry"
    )
    assert b is checks[1]


@pytest.mark.parametrize(
    ("conditions", "holds"),
    [
        pytest.param({"QuotaReserved": "True"}, True, id="reserved"),
        pytest.param({"QuotaReserved": "True", "Finished": "True"}, False, id="finished-with-its-reservation-left"),
        pytest.param({"QuotaReserved": "False"}, False, id="waiting-for-quota"),
        pytest.param({}, False, id="new"),
    ],
)
def test_holds_quota_while_its_checks_are_decided(conditions, holds):
    status = WorkloadStatus.model_validate(
        {"conditions": [
            {"type": t, "status": s, "reason": "R", "message": "", "lastTransitionTime": "2026-01-05T09:00:00Z"}
            for t, s in conditions.items()
        ]}
    )
    assert wl.holds_quota(status) is holds


# --- what the Temporal UI shows (admission.workload / admission.checks) ------------------------------


def test_the_ui_reads_the_backoff_and_the_current_details():
    from admitflow.admission import checks
    from admitflow.admission.checks import Verdict

    st = submitted()
    wl.reserve_quota(st, reserved_notice(["budget", "security"]), T0)
    checks.apply(st, Verdict(name="security", state="Ready"), T0 + timedelta(seconds=1))
    assert wl.current_details(st) == "**QuotaReserved** Quota reserved in ClusterQueue cq\n\nchecks not Ready: budget (Pending)"
    assert explain.current_details(st) == (
        "**QuotaReserved** Quota reserved in ClusterQueue cq\n\n"
        "why not admitted (WaitingForChecks): quota reserved in ClusterQueue cq; waits for AdmissionCheck budget "
        "(Pending) since 2026-11-22T10:00:00Z\n\n"
        "checks not Ready: budget (Pending)"
    )
    checks.apply(st, Verdict(name="budget", state="Retry", requeue_after_seconds=120), T0 + timedelta(seconds=10))
    assert checks.backoff_summary(st) == "backoff 2m0s after Retry from budget"
    assert wl.current_details(st).splitlines()[0].startswith("**Backoff** Evicted due to AdmissionCheck in Retry state")
    assert "back in the queue at 2026-11-22T10:02:10+00:00" in wl.current_details(st)
