"""What a check's verdict does to a workload: admission, Retry, Rejected, late verdicts, the retry
strategy. Each case id reads like the rule it pins down (Kueue's workload and admission-check controllers; docs/contract.md)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from admitflow.admission import checks
from admitflow.admission import workload as wl
from admitflow.admission.cluster_queue import AdmissionCheckInfo
from admitflow.api.admission_check import AdmissionCheckRetryStrategy
from tests.support import messages
from tests.unit.test_workload_status import T0, conditions, reserved_notice, submitted


def holding(*names: str, at=T0) -> wl.WorkloadState:
    st = submitted()
    wl.reserve_quota(st, reserved_notice(checks=list(names)), at)
    return st


def verdict(name: str, state: str, **more) -> dict:
    return {"name": name, "state": state, **more}


def states(st: wl.WorkloadState) -> list[tuple[str, str]]:
    return [(c.name, c.state) for c in st.status.admission_checks or ()]


# --- while quota is held ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("names", "verdicts", "phase", "admitted_reason"),
    [
        pytest.param(["a"], [("a", "Ready")], "Admitted", "Admitted", id="the-only-check-ready-admits"),
        pytest.param(["a", "b"], [("a", "Ready")], "QuotaReserved", "UnsatisfiedAdmissionChecks", id="one-of-two-ready-waits"),
        pytest.param(["a", "b"], [("a", "Ready"), ("b", "Ready")], "Admitted", "Admitted", id="both-ready-admits"),
        pytest.param(["a", "b"], [("a", "Ready"), ("b", "Pending")], "QuotaReserved", "UnsatisfiedAdmissionChecks", id="pending-keeps-waiting"),
        pytest.param(["a"], [("a", "Retry")], "Pending", "NoReservation", id="retry-gives-the-quota-back"),
        pytest.param(["a", "b"], [("a", "Ready"), ("b", "Retry")], "Pending", "NoReservation", id="one-retry-of-two-evicts"),
        pytest.param(["a"], [("a", "Rejected")], "Inactive", "NoReservation", id="rejected-deactivates"),
    ],
)
def test_verdict_while_quota_is_held(names, verdicts, phase, admitted_reason):
    st = holding(*names)
    for name, state in verdicts:
        messages.verdict(st, verdict(name, state), T0 + timedelta(seconds=5))
    assert wl.phase(st) == phase
    assert conditions(st)["Admitted"][1] == admitted_reason


def test_rejected_wins_over_retry():
    st = holding("a", "b")
    st.status.admission_checks[1] = st.status.admission_checks[1].model_copy(update={"state": "Retry"})
    messages.verdict(st, verdict("a", "Rejected"), T0)
    assert wl.phase(st) == "Inactive"
    assert conditions(st)["Evicted"][1] == "DeactivatedDueToAdmissionCheck"


def test_admission_records_the_wait_since_reservation():
    st = holding("a")
    messages.verdict(st, verdict("a", "Ready"), T0 + timedelta(seconds=42))
    assert conditions(st)["Admitted"] == ("True", "Admitted", "The workload is admitted")
    assert [(e.reason, e.message) for e in st.events][-2:] == [
        ("AdmissionCheckUpdated", "Admission check a updated state from Pending to Ready"),
        ("Admitted", "Admitted by ClusterQueue cq, wait time since reservation was 42s"),
    ]


def test_retry_evicts_resets_every_check_and_backs_off_from_each_checks_own_transition():
    st = holding("a", "b")
    messages.verdict(st, verdict("a", "Retry", requeueAfterSeconds=60, message="no budget"), T0 + timedelta(seconds=10))
    # b turned Retry later with a shorter delay, but its own transition makes it end later: it wins.
    st2 = holding("a", "b")
    messages.verdict(st2, verdict("b", "Ready"), T0)
    messages.verdict(st2, verdict("a", "Retry", requeueAfterSeconds=60, message="no budget"), T0 + timedelta(seconds=10))
    assert wl.phase(st) == "Backoff"
    assert checks.requeue_at(st) == T0 + timedelta(seconds=70)
    assert conditions(st)["Evicted"] == (
        "True", "AdmissionCheck", 'Evicted due to AdmissionCheck in Retry state: "a" (no budget)'
    )
    assert conditions(st)["Requeued"] == (
        "False", "AdmissionCheck", 'Evicted due to AdmissionCheck in Retry state: "a" (no budget)'
    )
    a, b = st.status.admission_checks
    assert (a.state, a.message, a.retry_count, a.requeue_after_seconds) == (
        "Pending", "Reset to Pending after eviction. Previously: Retry", 1, 60
    )
    assert (b.state, b.retry_count) == ("Pending", None), "a Pending check is left as it was"
    assert st.status.admission is None
    assert [e.reason for e in st.events][-1] == "EvictedDueToAdmissionCheck"
    assert st2.status.admission_checks[1].message == "Reset to Pending after eviction. Previously: Ready"


def test_the_latest_end_of_two_retries_wins_measured_from_each_transition():
    st = holding("a", "b")
    st.status.admission_checks[1] = st.status.admission_checks[1].model_copy(
        update={"state": "Retry", "requeue_after_seconds": 100, "last_transition_time": T0}
    )
    messages.verdict(st, verdict("a", "Retry", requeueAfterSeconds=90), T0 + timedelta(seconds=30))
    assert checks.requeue_at(st) == T0 + timedelta(seconds=120), "a: 30 + 90 beats b: 0 + 100"
    assert conditions(st)["Evicted"][2] == 'Evicted due to AdmissionChecks in Retry state: "a"; "b"'
    assert [c.retry_count for c in st.status.admission_checks] == [1, 1]


def test_a_retry_without_delay_goes_straight_back_to_the_queue():
    st = holding("a")
    messages.verdict(st, verdict("a", "Retry"), T0)
    assert checks.requeue_at(st) is None
    assert conditions(st)["Requeued"] == ("True", "BackoffFinished", "The workload backoff was finished")
    assert wl.phase(st) == "Pending"


def test_the_backoff_ends_with_requeued_and_the_eviction_time_as_queue_timestamp():
    st = holding("a")
    messages.verdict(st, verdict("a", "Retry", requeueAfterSeconds=30), T0 + timedelta(seconds=5))
    assert not checks.finish_backoff_if_due(st, T0 + timedelta(seconds=34)), "not before requeueAt"
    assert checks.finish_backoff_if_due(st, T0 + timedelta(seconds=35))
    assert st.status.requeue_state is None
    assert conditions(st)["Requeued"][:2] == ("True", "BackoffFinished")
    assert wl.queue_timestamp(st) == T0 + timedelta(seconds=5)


def test_rejected_deactivates_with_kueues_messages_and_clears_the_requeue_state():
    st = holding("a", "b")
    messages.verdict(st, verdict("b", "Rejected", message="too big"), T0)
    messages.verdict(st, verdict("a", "Rejected"), T0)  # no longer holding: recorded, not applied
    want = 'The workload is deactivated due to AdmissionCheck in Rejected state: "b" (too big)'
    assert conditions(st)["Evicted"] == ("True", "DeactivatedDueToAdmissionCheck", want)
    assert conditions(st)["Requeued"] == ("False", "DeactivatedDueToAdmissionCheck", want)
    assert conditions(st)["QuotaReserved"] == ("False", "Deactivated", "The workload is deactivated")
    assert "DeactivationTarget" not in conditions(st)
    assert st.workload.spec.active is False and st.status.requeue_state is None
    events = [(e.type, e.reason, e.message) for e in st.events]
    assert ("Warning", "AdmissionCheckRejected", 'Deactivated due to AdmissionCheck in Rejected state: "b" (too big)') in events
    assert events[-1][1] == "EvictedDueToDeactivatedDueToAdmissionCheck"
    stats = st.status.scheduling_stats.evictions[0]
    assert (stats.reason, stats.underlying_cause, stats.count) == ("Deactivated", "AdmissionCheck", 1)
    assert (st.verdicts[-1].outcome, st.verdicts[-1].detail) == (
        "ignored", "not applied: the workload is inactive; Rejected counts only while quota is reserved"
    )


def test_two_rejected_checks_are_listed_by_name():
    st = holding("a", "b")
    st.status.admission_checks[1] = st.status.admission_checks[1].model_copy(update={"state": "Rejected", "message": "m2"})
    messages.verdict(st, verdict("a", "Rejected", message="m1"), T0)
    assert conditions(st)["Evicted"][2].endswith('AdmissionChecks in Rejected state: "a" (m1); "b" (m2)')


def test_activate_requeues_a_workload_deactivated_by_a_check():
    st = holding("a")
    messages.verdict(st, verdict("a", "Rejected"), T0)
    assert checks.activate(st, T0 + timedelta(seconds=1))
    assert st.workload.spec.active is True
    assert conditions(st)["Requeued"] == ("True", "Reactivated", "The workload was reactivated")
    assert wl.phase(st) == "Pending"
    assert not checks.activate(st, T0), "already active: nothing changes"


def test_deactivating_a_waiting_workload_takes_it_out_of_the_queue():
    st = submitted()
    checks.deactivate(st, T0)
    assert not st.claim.queued and wl.phase(st) == "Inactive"
    assert conditions(st)["Requeued"] == ("False", "Deactivated", "The workload is deactivated")
    checks.activate(st, T0)
    assert conditions(st)["Requeued"][1] == "Reactivated"


# --- after admission -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "phase", "evicted_reason"),
    [
        pytest.param("Retry", "Pending", "AdmissionCheck", id="ready-then-retry-evicts-the-admitted-workload"),
        pytest.param("Rejected", "Inactive", "DeactivatedDueToAdmissionCheck", id="ready-then-rejected-deactivates-it"),
        pytest.param("Pending", "Admitted", None, id="ready-then-pending-keeps-the-admission"),
    ],
)
def test_a_check_changing_its_mind_after_admission(state, phase, evicted_reason):
    st = holding("a")
    messages.verdict(st, verdict("a", "Ready"), T0)
    messages.verdict(st, verdict("a", state), T0 + timedelta(minutes=5))
    assert wl.phase(st) == phase
    assert conditions(st).get("Evicted", (None, None))[1] == evicted_reason
    if evicted_reason:
        assert st.status.accumulated_past_execution_time_seconds == 300


def test_a_check_added_after_admission_does_not_take_the_admission_back():
    st = holding("a")
    messages.verdict(st, verdict("a", "Ready"), T0)
    wl.take_checks(st, reserved_notice(checks=["a", "z"]), T0)
    checks.reconcile(st, T0)
    assert states(st) == [("a", "Ready"), ("z", "Pending")]
    assert wl.phase(st) == "Admitted"


def test_a_check_removed_while_waiting_admits_when_the_rest_are_ready():
    st = holding("a", "b")
    messages.verdict(st, verdict("a", "Ready"), T0)
    wl.take_checks(st, reserved_notice(checks=["a"]), T0)
    checks.reconcile(st, T0)
    assert states(st) == [("a", "Ready")]
    assert wl.phase(st) == "Admitted"


# --- before quota, and during the backoff -----------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "kept"),
    [
        pytest.param("Ready", "Ready", id="ready-before-quota-is-kept"),
        pytest.param("Pending", "Pending", id="pending-before-quota-is-kept"),
        pytest.param("Retry", "Pending", id="retry-before-quota-is-recorded-not-applied"),
        pytest.param("Rejected", "Pending", id="rejected-before-quota-is-recorded-not-applied"),
    ],
)
def test_a_verdict_while_waiting_for_quota(state, kept):
    st = submitted()
    wl.take_checks_before_reservation(st, ["a"], T0)
    messages.verdict(st, verdict("a", state), T0)
    assert states(st) == [("a", kept)]
    assert wl.phase(st) == "Pending"
    assert st.verdicts[-1].outcome == ("applied" if kept == state else "ignored")


def test_a_check_ready_before_quota_admits_at_reservation():
    st = submitted()
    wl.take_checks_before_reservation(st, ["a"], T0)
    messages.verdict(st, verdict("a", "Ready"), T0)
    wl.reserve_quota(st, reserved_notice(checks=["a"]), T0 + timedelta(seconds=3))
    assert wl.phase(st) == "Admitted"


def test_a_late_retry_during_the_backoff_pushes_the_requeue_later_never_earlier():
    st = holding("a")
    messages.verdict(st, verdict("a", "Retry", requeueAfterSeconds=60), T0)
    messages.verdict(st, verdict("a", "Retry", requeueAfterSeconds=10), T0 + timedelta(seconds=20))
    assert checks.requeue_at(st) == T0 + timedelta(seconds=60), "30 s would be earlier: kept"
    messages.verdict(st, verdict("a", "Retry", requeueAfterSeconds=120), T0 + timedelta(seconds=20))
    assert checks.requeue_at(st) == T0 + timedelta(seconds=140)
    assert states(st) == [("a", "Pending")], "the check never stays in Retry: nothing can leave it stuck"
    assert checks.finish_backoff_if_due(st, T0 + timedelta(seconds=140))


def test_a_verdict_for_an_old_attempt_is_ignored():
    st = holding("a")
    assert checks.hand_out(st, "a") == 1, "its controller is asked about attempt 1"
    messages.verdict(st, verdict("a", "Retry", attempt=1), T0)
    checks.finish_backoff_if_due(st, T0)
    wl.reserve_quota(st, reserved_notice(checks=["a"], ticket=1), T0)
    messages.verdict(st, verdict("a", "Rejected", attempt=1), T0)
    assert wl.phase(st) == "QuotaReserved"
    assert (st.verdicts[-1].outcome, st.verdicts[-1].detail) == (
        "ignored", 'verdict for attempt 1 of check "a", which is at attempt 2: ignored'
    )
    messages.verdict(st, verdict("a", "Ready", attempt=2), T0)
    assert wl.phase(st) == "Admitted"


# --- bad input ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "error"),
    [
        pytest.param(verdict("nope", "Ready"), 'workload default/job has no admission check "nope" (it has: a)', id="unknown-check"),
        pytest.param(verdict("a", "Maybe"), 'unknown state "Maybe" for check "a": must be one of Pending, Ready, Retry, Rejected', id="unknown-state"),
        pytest.param(verdict("a", "Retry", requeueAfterSeconds=-1), "invalid verdict: requeueAfterSeconds: Input should be greater than or equal to 0", id="negative-delay"),
        pytest.param(
            verdict("a", "Retry", requeueAfterSeconds=10**12),
            "invalid verdict: requeueAfterSeconds: Input should be less than or equal to 2147483647", id="a-delay-past-int32",
        ),
        pytest.param(
            verdict("a", "Ready", attempt=2**31), "invalid verdict: attempt: Input should be less than or equal to 2147483647",
            id="an-attempt-past-int32",
        ),
        pytest.param(verdict("a", "Ready", attempt=0), "invalid verdict: attempt: Input should be greater than or equal to 1", id="attempt-zero"),
        pytest.param(
            verdict("a", "Ready", podSetUpdates=[{"name": "workers"}]),
            'podSetUpdates: unknown podSet "workers" (the workload has: main)',
            id="unknown-pod-set",
        ),
        pytest.param(
            verdict("a", "Ready", podSetUpdates=[{"name": "main"}, {"name": "main", "labels": {"x": "y"}}]),
            'podSetUpdates[1].name: Duplicate value: "main": one podSetUpdate per podSet',
            id="two-updates-of-one-pod-set",
        ),
        pytest.param(
            verdict("a", "Ready", podSetUpdates=[{"name": "main", "nodeSelector": {"pool": "not valid!"}}]),
            'podSetUpdates[0].nodeSelector: Invalid value: "not valid!": a valid label must be an empty string or '
            "consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric "
            "character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is "
            "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')",
            id="a-node-selector-value-kubernetes-refuses",
        ),
        pytest.param(
            verdict("a", "Ready", podSetUpdates=[{"name": "main", "tolerations": [{"operator": "Equal", "value": "x"}]}]),
            "podSetUpdates[0].tolerations: Invalid value: \"array\": operator must be Exists when 'key' is empty, "
            "which means 'match all values and all keys'",
            id="a-toleration-kueues-rules-refuse",
        ),
        pytest.param(
            verdict("a", "Ready", podSetUpdates=[{"name": "main", "annotations": {"a/b/c": "x"}}]),
            'podSetUpdates[0].annotations: Invalid value: "a/b/c": a qualified name must consist of alphanumeric '
            "characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or "
            "'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with "
            "an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
            id="an-annotation-key-kubernetes-refuses",
        ),
        pytest.param({"state": "Ready"}, "invalid verdict: name: Field required", id="no-name"),
        pytest.param("Ready", "invalid verdict: verdict: Input should be an object", id="not-an-object"),
        pytest.param(verdict("a", "Ready", requeueAfterSeconds="soon"), "invalid verdict: requeueAfterSeconds: Input should be a valid integer, unable to parse string as an integer", id="delay-not-a-number"),
    ],
)
def test_a_bad_verdict_is_recorded_with_its_reason_and_changes_nothing(payload, error):
    st = holding("a")
    before = st.workload.model_dump()
    assert messages.verdict(st, payload, T0 + timedelta(seconds=9)) == error
    assert st.workload.model_dump() == before
    assert (st.verdicts[-1].outcome, st.verdicts[-1].detail) == ("rejected", error)


def test_the_pod_set_updates_of_a_ready_check_cannot_change_until_it_leaves_ready():
    st = holding("a", "b")
    messages.verdict(st, verdict("a", "Ready", podSetUpdates=[{"name": "main", "labels": {"x": "y"}}]), T0)
    kept = st.status.admission_checks[0].model_dump()
    for changed in ([{"name": "main", "labels": {"x": "z"}}], None):
        assert messages.verdict(st, verdict("a", "Ready", podSetUpdates=changed), T0) == (
            'podSetUpdates: field is immutable while check "a" stays Ready'
        )
    assert st.status.admission_checks[0].model_dump() == kept
    same = verdict("a", "Ready", message="still fine", podSetUpdates=[{"name": "main", "labels": {"x": "y"}}])
    assert messages.verdict(st, same, T0) == "waiting for b"


def test_a_verdict_for_a_finished_workload_is_refused():
    st = holding("a")
    wl.finish(st, True, "", T0)
    with pytest.raises(checks.VerdictError, match="workload default/job is finished"):
        checks.validate(st, checks.parse(verdict("a", "Ready")))


def test_a_long_message_is_cut_at_32_kib():
    st = holding("a")
    messages.verdict(st, verdict("a", "Pending", message="x" * 40000), T0)
    assert len(st.status.admission_checks[0].message.encode()) == 32 * 1024


# --- retry strategy (admitflow's extension) --------------------------------------------------------


@pytest.mark.parametrize(
    ("strategy", "n", "random", "want"),
    [
        pytest.param({"strategy": "Static", "baseDelaySeconds": 30}, 5, 0.0, 30, id="static-waits-the-base-delay-every-time"),
        pytest.param({"baseDelaySeconds": 10, "factor": 2}, 1, 0.0, 10, id="backoff-starts-at-the-base-delay"),
        pytest.param({"baseDelaySeconds": 10, "factor": 2}, 4, 0.0, 80, id="backoff-doubles-per-retry"),
        pytest.param({"baseDelaySeconds": 10, "factor": 2, "maxDelaySeconds": 50}, 4, 0.0, 50, id="backoff-is-capped-at-the-max-delay"),
        pytest.param({"baseDelaySeconds": 100, "jitter": 0.5}, 1, 0.5, 125, id="jitter-stretches-by-up-to-its-fraction"),
    ],
)
def test_retry_delay(strategy, n, random, want):
    assert checks.retry_delay(AdmissionCheckRetryStrategy.model_validate(strategy), n, random) == want


STRATEGY = AdmissionCheckRetryStrategy.model_validate({"baseDelaySeconds": 10, "backoffLimitCount": 1})


def test_a_retry_without_delay_takes_the_checks_strategy_and_past_its_limit_is_rejected():
    st = holding("a")
    st.checks_info = {"a": AdmissionCheckInfo(controller_name="c", retry_strategy=STRATEGY)}
    messages.verdict(st, verdict("a", "Retry"), T0)
    assert checks.requeue_at(st) == T0 + timedelta(seconds=10)
    checks.finish_backoff_if_due(st, T0 + timedelta(seconds=10))
    wl.reserve_quota(st, reserved_notice(checks=["a"]), T0 + timedelta(seconds=11))
    st.checks_info = {"a": AdmissionCheckInfo(controller_name="c", retry_strategy=STRATEGY)}
    messages.verdict(st, verdict("a", "Retry", message="still no"), T0 + timedelta(seconds=12))
    assert wl.phase(st) == "Inactive"
    assert conditions(st)["Evicted"][2].endswith('"a" (retry limit of 1 reached: still no)')


TIMED = AdmissionCheckRetryStrategy.model_validate({"strategy": "Static", "baseDelaySeconds": 600, "backoffLimitTimeout": "1h"})


@pytest.mark.parametrize(
    ("retries_at", "readmitted_before_last", "want"),
    [
        pytest.param([0], False, "Backoff", id="the-first-retry-starts-the-clock"),
        pytest.param([0, 30, 59], False, "Backoff", id="within-the-time-limit-it-keeps-retrying"),
        pytest.param([0, 30, 60], False, "Inactive", id="a-retry-at-the-time-limit-is-rejected"),
        pytest.param([0, 30, 60], True, "Backoff", id="admitted-in-between-the-clock-starts-again"),
        pytest.param([0, 61], False, "Inactive", id="even-with-a-delay-of-its-own"),
    ],
)
def test_a_checks_retry_time_limit(retries_at, readmitted_before_last, want):
    """backoffLimitTimeout on an AdmissionCheck's retryStrategy: a Retry at least that long after the
    check's first Retry since the workload was last admitted becomes Rejected."""
    st = holding("a")
    info = {"a": AdmissionCheckInfo(controller_name="c", retry_strategy=TIMED)}
    st.checks_info = info
    for i, minute in enumerate(retries_at):
        at = T0 + timedelta(minutes=minute)
        if i:
            checks.finish_backoff_if_due(st, at - timedelta(seconds=2))
            st.claim.queued, st.claim.ticket = True, st.claim.ticket + 1
            wl.reserve_quota(st, reserved_notice(checks=["a"], ticket=st.claim.ticket), at - timedelta(seconds=1))
            st.checks_info = info
            if readmitted_before_last and i == len(retries_at) - 1:
                messages.verdict(st, verdict("a", "Ready"), at - timedelta(milliseconds=500))
                assert wl.is_admitted(st) and st.asks.first_retry == {}
        own = {"requeueAfterSeconds": 5} if minute == 61 else {}
        messages.verdict(st, verdict("a", "Retry", message="no", **own), at)
    assert wl.phase(st) == want
    if want == "Inactive":
        assert conditions(st)["Evicted"][2].endswith('"a" (retry time limit of 1h0m0s reached: no)')
    else:
        assert st.asks.first_retry["a"] == T0 + timedelta(minutes=retries_at[-1] if readmitted_before_last else 0)


# --- asking controllers (activity admission_check) ---------------------------------------------------


def served(*names: str, controller: str = "example.com/c", at=T0) -> wl.WorkloadState:
    """A workload holding quota, with checks whose controller is `controller`, each controller asked
    (as lifecycle asks them with the reservation)."""
    st = submitted()
    notice = reserved_notice(checks=list(names))
    notice.checks_info = {n: AdmissionCheckInfo(controller_name=controller, parameters={"n": n}) for n in names}
    wl.reserve_quota(st, notice, at)
    for name in checks.to_ask(st):
        checks.hand_out(st, name)
    return st


def test_a_workload_holding_quota_asks_the_controllers_of_its_pending_checks():
    st = served("a", "b")
    assert checks.to_ask(st) == ["a", "b"]
    req = checks.request(st, "a", "workload/default/job", checks.hand_out(st, "a"))
    assert req.to_wire() == {
        "workload": st.workload.to_wire(), "admissionCheck": "a", "parameters": {"n": "a"}, "attempt": 1,
        "workflowId": "workload/default/job",
    }


def test_nothing_is_asked_while_waiting_for_quota_or_of_the_built_in_provisioning_check():
    st = submitted()
    wl.take_checks_before_reservation(st, ["a"], T0)
    assert checks.to_ask(st) == []
    assert checks.to_ask(served("a", controller="kueue.x-k8s.io/provisioning-request")) == []


@pytest.mark.parametrize(
    ("result", "state", "message", "phase"),
    [
        pytest.param({"state": "Ready", "message": "ok"}, "Ready", "ok", "Admitted", id="ready-admits"),
        pytest.param("Ready", "Ready", "", "Admitted", id="a-bare-state-is-a-verdict"),
        pytest.param({"state": "Pending", "message": "in review"}, "Pending", "in review", "QuotaReserved", id="pending-waits-for-a-signal"),
        pytest.param({"state": "Maybe"}, "Pending", "", "QuotaReserved", id="not-a-verdict-is-asked-again-after-a-backoff"),
        pytest.param({"state": "Ready", "name": "b"}, "Pending", "", "QuotaReserved", id="another-checks-name-is-asked-again-after-a-backoff"),
    ],
)
def test_the_controllers_answer_is_the_first_verdict(result, state, message, phase):
    st = served("a")
    messages.controller_answer(st, "a", 1, result, "", T0 + timedelta(seconds=1))
    assert (st.status.admission_checks[0].state, st.status.admission_checks[0].message, wl.phase(st)) == (state, message, phase)
    assert checks.to_ask(st) == []  # answered, admitted, or waiting out its backoff: nothing to ask now


def test_an_answer_that_is_not_a_verdict_is_asked_again_after_a_backoff_with_the_reason():
    """A controller's answer that is no verdict never evicts: it is recorded, and the same attempt
    asked again once `controller_backoff` has passed."""
    st = served("a")
    messages.controller_answer(st, "a", 1, {"state": "Maybe"}, "", T0)
    assert st.events[-1].reason == checks.CONTROLLER_FAILED and st.events[-1].message == (
        'Controller of check "a" failed on attempt 1: invalid verdict from the controller: '
        'unknown state "Maybe" for check "a": must be one of Pending, Ready, Retry, Rejected; asked again in 5s (1 in a row)'
    )
    assert st.asks.ask_again_at == {"a": T0 + timedelta(seconds=checks.controller_backoff(1))}
    assert "Evicted" not in conditions(st)


def test_a_non_retryable_controller_error_is_asked_again_after_a_backoff_with_its_message():
    st = served("a")
    messages.controller_answer(st, "a", 1, None, "budget service refused: 403", T0 + timedelta(seconds=1))
    assert wl.phase(st) == "QuotaReserved"
    assert (st.verdicts[-1].outcome, st.verdicts[-1].detail) == ("rejected", "budget service refused: 403; asked again in 5s (1 in a row)")
    assert st.status.admission_checks[0].retry_count is None


def test_a_pending_answer_is_not_asked_again_but_a_retry_asks_the_next_attempt_after_requeue():
    st = served("a", "b")
    messages.controller_answer(st, "a", 1, {"state": "Pending"}, "", T0)
    assert checks.to_ask(st) == ["b"]
    messages.controller_answer(st, "b", 1, {"state": "Retry"}, "", T0)
    assert checks.to_ask(st) == []  # evicted: nobody is asked without quota
    notice = reserved_notice(checks=["a", "b"], ticket=2)
    notice.checks_info = {n: AdmissionCheckInfo(controller_name="c") for n in "ab"}
    st.claim.ticket = 2
    wl.reserve_quota(st, notice, T0 + timedelta(seconds=9))
    assert checks.to_ask(st) == ["a", "b"]  # a new reservation asks every Pending check again
    # ... each about an attempt its controller has never been asked about.
    assert [checks.request(st, n, "w", checks.hand_out(st, n)).attempt for n in "ab"] == [2, 2]


def test_a_signalled_verdict_answers_the_check_and_a_later_activity_result_is_ignored():
    st = served("a")
    messages.verdict(st, verdict("a", "Ready", message="by hand"), T0)
    assert checks.to_ask(st) == []
    messages.controller_answer(st, "a", 1, {"state": "Pending", "message": "late"}, "", T0 + timedelta(seconds=1))
    assert (st.status.admission_checks[0].state, wl.phase(st)) == ("Ready", "Admitted")
    assert st.verdicts[-1].outcome == "ignored"


def test_a_signalled_pending_also_stops_the_asking():
    st = served("a")
    messages.verdict(st, verdict("a", "Pending", message="queued for review"), T0)
    assert checks.to_ask(st) == []
