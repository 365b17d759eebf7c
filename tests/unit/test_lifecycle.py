"""`lifecycle.step` case by case: the findings that wedged, stormed or fooled the loop before it,
each as the sentence it proves. The whole lifecycle under random interleavings is
`test_lifecycle_model.py`."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from admitflow.admission import checks
from admitflow.admission import conditions as cond
from admitflow.admission import lifecycle as lc
from admitflow.admission import intake
from admitflow.admission import workload as wl
from admitflow.admission.catalog import QueueResolution
from admitflow.admission.cluster_queue import AdmissionCheckInfo, Notice
from admitflow.api.configuration import WaitForPodsReady
from admitflow.workflows.outbox import Outbox
from admitflow.admission.queue_owner import Owner
from tests.builders import manifest, workload_manifest
from tests.unit.test_workload_status import T0, reserved_notice

INFO = {name: AdmissionCheckInfo(controller_name=f"ctl-{name}", active=True) for name in "ab"}


class World:
    """One workload stepped as its workflow steps it, through lifecycle's Driver: each batch of
    events, then Settle; an Enqueue is answered at once with `resolution` (by default: the queue
    exists); commands are kept for the asserts. `annotations` are the workload's at creation."""

    def __init__(self, annotations: dict[str, str] | None = None, resolution: QueueResolution | None = None, **spec: Any) -> None:
        m = workload_manifest("job", cpu="2")
        m["spec"].update(spec)
        if annotations:
            m["metadata"]["annotations"] = annotations
        self.resolution = resolution or QueueResolution(cluster_queue="cq")
        self.state = wl.new_state(manifest(m), "uid-1", T0)
        self.now = T0
        self.commands: list[Any] = []
        self.batch(lc.Started())

    def batch(self, *events: Any, after: float = 0) -> list[Any]:
        self.now += timedelta(seconds=after)
        out: list[Any] = []
        driver = lc.Driver(self.state, list(events), self.now, lambda: 0.5)
        while (c := driver.next()) is not None:
            out.append(c)
            if isinstance(c, lc.Enqueue):
                driver.answer([lc.EnqueueResolved(ticket=c.request.entry.ticket, resolution=self.resolution)])
        self.state = driver.state
        self.commands += out
        return out

    def reserve(self, *names: str, after: float = 0, **more: Any) -> list[Any]:
        notice = reserved_notice(checks=list(names), ticket=self.state.claim.ticket).model_copy(
            update={"checks_info": {n: INFO[n] for n in names}, **more}
        )
        return self.batch(intake.notice("quota_reserved", notice.to_wire()), after=after)

    def verdict(self, name: str, state: str, **more: Any) -> dict:
        return {"name": name, "state": state, **more}

    def asked(self, commands: list[Any]) -> list[tuple[str, int]]:
        return [(c.request.admission_check, c.request.attempt) for c in commands if isinstance(c, lc.AskController)]

    def told(self, commands: list[Any]) -> list[str]:
        return [c.signal for c in commands if isinstance(c, lc.TellQueue)]

    def phase(self) -> str:
        return wl.phase(self.state)


def evictions(st: wl.WorkloadState) -> int:
    stats = st.status.scheduling_stats
    return sum(e.count for e in (stats.evictions if stats else None) or ())


# --- 1. nothing a message carries can wedge the workload ------------------------------------------


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param({"name": "a", "state": "Retry", "requeueAfterSeconds": 10**12}, id="a-delay-past-int32"),
        pytest.param({"name": "a", "state": "Retry", "requeueAfterSeconds": -1}, id="a-negative-delay"),
        pytest.param({"name": "a", "state": "Ready", "attempt": 2**31}, id="an-attempt-past-int32"),
        pytest.param({"name": "a", "state": "Ready", "attempt": "one"}, id="an-attempt-that-is-no-number"),
        pytest.param({"name": "a", "state": "Ready", "podSetUpdates": [{"name": "main", "tolerations": "x"}]}, id="junk-pod-set-updates"),
        pytest.param([1, 2, 3], id="a-list"),
        pytest.param(None, id="nothing"),
        pytest.param("Ready", id="a-bare-string"),
    ],
)
def test_a_poison_verdict_is_refused_recorded_and_changes_nothing(payload):
    w = World()
    w.reserve("a")
    before = w.state.status.model_copy(deep=True)
    w.batch(intake.verdict(payload))
    assert w.state.status == before
    assert w.state.verdicts[-1].outcome == "rejected"
    assert not [e for e in w.state.events if e.reason == lc.NOT_APPLIED]
    w.batch(intake.verdict(w.verdict("a", "Ready")))
    assert w.phase() == "Admitted", "the workload still admits afterwards"


@pytest.mark.parametrize(
    "event",
    [
        pytest.param(intake.notice("quota_reserved", {"ticket": "x"}), id="a-junk-reservation"),
        pytest.param(intake.notice("evicted", [1]), id="a-junk-eviction"),
        pytest.param(intake.provisioning_report({"check": 1}), id="a-junk-provisioning-report"),
        pytest.param(intake.provisioning_deleted("gone"), id="a-junk-provisioning-end"),
        pytest.param(intake.pods_ready_report({"ready": "maybe"}), id="a-junk-pods-report"),
        pytest.param(intake.finish({"succeeded": "perhaps"}), id="a-junk-finish"),
    ],
)
def test_a_malformed_message_from_anyone_is_recorded_as_a_warning_and_changes_nothing(event):
    w = World()
    w.reserve("a")
    before = w.state.status.model_copy(deep=True)
    w.batch(event)
    assert w.state.status == before
    assert w.state.events[-1].type == "Warning"


def test_an_exception_inside_step_leaves_the_state_as_it_was_with_a_warning(monkeypatch):
    w = World()
    before = w.state.model_copy(deep=True)

    def boom(*_: Any) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(lc, "_activated", boom)
    state, commands = lc.step(w.state, lc.Activated(), w.now, 0.5)
    assert commands == []
    assert state.events[-1].reason == lc.NOT_APPLIED and "RuntimeError: a bug" in state.events[-1].message
    assert state.model_copy(update={"events": before.events}) == before


# --- 2. a controller that fails backs off, and never evicts ---------------------------------------


@pytest.mark.parametrize(
    ("result", "error"),
    [
        pytest.param({"state": "Bogus"}, "", id="an-unknown-state"),
        pytest.param(42, "", id="a-number"),
        pytest.param({"state": "Retry", "requeueAfterSeconds": 10**12}, "", id="a-delay-past-int32"),
        pytest.param(None, "controller crashed", id="a-non-retryable-error"),
    ],
)
def test_a_controller_that_answers_garbage_is_asked_again_with_backoff_and_never_evicts(result, error):
    w = World()
    (check, attempt), = w.asked(w.reserve("a"))
    delays = []
    for n in range(1, 5):
        w.batch(intake.controller_answer(check, attempt, result, error))
        at, summary = lc.next_wake(w.state)
        delays.append(int((at - w.now).total_seconds()))
        assert "ask the controller of a again" in summary
        assert w.asked(w.batch(lc.TimerFired(), after=delays[-1] - 1)) == [], "not before its backoff"
        assert w.asked(w.batch(lc.TimerFired(), after=1)) == [("a", attempt)], "the same attempt, in the same reservation"
    assert delays == [5, 10, 20, 40]
    assert evictions(w.state) == 0 and w.phase() == "QuotaReserved"
    assert [e.reason for e in w.state.events].count(checks.CONTROLLER_FAILED) == 4
    w.batch(intake.controller_answer(check, attempt, {"state": "Ready"}))
    assert w.phase() == "Admitted"


def test_the_controller_backoff_is_capped_at_five_minutes():
    assert [checks.controller_backoff(n) for n in (1, 2, 6, 7, 100, 2**31)] == [5, 10, 160, 300, 300, 300]


# --- 3. attempts never go backwards ---------------------------------------------------------------


def test_an_attempt_a_controller_saw_is_never_asked_again_whatever_evicted_the_workload():
    w = World()
    assert w.asked(w.reserve("a", "b")) == [("a", 1), ("b", 1)]
    w.batch(intake.controller_answer("a", 1, {"state": "Ready"}))
    w.batch(intake.verdict(w.verdict("b", "Retry", requeueAfterSeconds=3)))
    w.batch(lc.TimerFired(), after=3)
    assert w.asked(w.reserve("a", "b")) == [("a", 2), ("b", 2)], "another check's Retry"
    w.batch(intake.notice("evicted", {
        "key": "default/job", "uid": "uid-1", "ticket": w.state.claim.ticket, "kind": "evicted", "reason": "Preempted",
        "message": "preempted", "preemptionReason": "InClusterQueue",
    }))
    assert w.asked(w.reserve("a", "b")) == [("a", 3), ("b", 3)], "a preemption"
    w.batch(lc.Deactivated())
    w.batch(lc.Activated())
    assert w.asked(w.reserve("a", "b")) == [("a", 4), ("b", 4)], "a deactivation"
    assert [c.retry_count for c in w.state.status.admission_checks] == [None, 1], "b's retry is still counted"
    assert w.state.report().check_attempts == {"a": 4, "b": 4}


@pytest.mark.parametrize(
    ("attempt", "outcome", "detail"),
    [
        pytest.param(1, "ignored", 'verdict for attempt 1 of check "a", which is at attempt 2: ignored', id="an-older-attempt"),
        pytest.param(3, "rejected", 'verdict for attempt 3 of check "a", which is at attempt 2: not asked yet', id="a-future-attempt"),
    ],
)
def test_a_verdict_for_an_attempt_other_than_the_current_one_changes_nothing(attempt, outcome, detail):
    w = World()
    w.reserve("a", "b")
    w.batch(intake.verdict(w.verdict("b", "Retry")))  # evicted: a's attempt 1 is over
    w.reserve("a", "b")
    w.batch(intake.verdict(w.verdict("a", "Rejected", attempt=attempt)))
    assert (w.state.verdicts[-1].outcome, w.state.verdicts[-1].detail) == (outcome, detail)
    assert w.phase() == "QuotaReserved"


# --- 4. the longest delay wins, whatever the order -------------------------------------------------


@pytest.mark.parametrize("together", [True, False], ids=["in-one-task", "in-two-tasks"])
@pytest.mark.parametrize("order", ["a-then-b", "b-then-a"])
def test_the_requeue_waits_for_the_longest_retry_delay(order, together):
    w = World()
    w.reserve("a", "b")
    a = intake.verdict(w.verdict("a", "Retry"))
    b = intake.verdict(w.verdict("b", "Retry", requeueAfterSeconds=20))
    events = [a, b] if order == "a-then-b" else [b, a]
    arrived = {}
    for i, group in enumerate([events] if together else [[e] for e in events]):
        w.batch(*group, after=i)
        arrived.update({id(e): w.now for e in group})
    due = arrived[id(b)] + timedelta(seconds=20)
    assert w.phase() == "Backoff"
    assert checks.requeue_at(w.state) == due
    assert w.state.claim.holder is None, "its place in the queue was given back"
    w.batch(lc.TimerFired(), after=(due - w.now).total_seconds() - 1)
    assert w.phase() == "Backoff"
    w.batch(lc.TimerFired(), after=1)
    assert w.phase() == "Pending" and w.state.claim.queued


# --- 5. blockAdmission counts a workload each time it is not ready ---------------------------------


def test_the_gate_hears_whenever_a_workload_loses_and_regains_readiness():
    w = World()
    gate = lambda cs: [c.signal for c in cs if isinstance(c, lc.TellGate)]  # noqa: E731
    assert gate(w.reserve(gated=True)) == [], "the gate counted it when it granted the reservation"
    assert gate(w.batch(intake.pods_ready_report({"ready": True}))) == ["settled"]
    assert gate(w.batch(intake.pods_ready_report({"ready": False}))) == ["unsettled"]
    assert gate(w.batch(intake.pods_ready_report({"ready": False}))) == []
    assert gate(w.batch(intake.pods_ready_report({"ready": True}))) == ["settled"]
    w.batch(intake.pods_ready_report({"ready": False}))
    assert gate(w.batch(intake.finish({"succeeded": True}))) == ["settled"]


# --- 6. deactivating a workload without quota -----------------------------------------------------


def test_deactivating_a_waiting_workload_resets_its_checks_as_an_eviction_does():
    w = World()
    w.batch(intake.notice("pending_status", {
        "key": "default/job", "uid": "uid-1", "ticket": w.state.claim.ticket, "kind": "pending", "reason": "Pending",
        "message": "no room", "admissionChecks": ["a"],
    }))
    w.batch(intake.verdict(w.verdict("a", "Ready")))
    w.batch(lc.Deactivated())
    (c,) = w.state.status.admission_checks
    assert (c.state, c.message) == ("Pending", "Reset to Pending after eviction. Previously: Ready")
    assert w.told(w.commands)[-1] == "release" and not w.state.claim.queued


def test_deactivating_a_workload_in_backoff_keeps_its_eviction_and_its_place_in_the_queue_order():
    w = World()
    w.reserve("a")
    w.batch(intake.verdict(w.verdict("a", "Retry", requeueAfterSeconds=30)), after=100)
    evicted_at = cond.find(w.state.status.conditions, wl.EVICTED).last_transition_time
    w.batch(lc.Deactivated(), after=5)
    evicted = cond.find(w.state.status.conditions, wl.EVICTED)
    assert (evicted.reason, evicted.last_transition_time) == ("AdmissionCheck", evicted_at)
    assert w.state.status.requeue_state is None
    enqueued = w.batch(lc.Activated(), after=60)
    (entry,) = [c.request.entry for c in enqueued if isinstance(c, lc.Enqueue)]
    assert entry.timestamp == evicted_at, "not its creation time: it does not jump the queue"


# --- 7. an attempt's workflow that vanishes is noticed --------------------------------------------


def test_a_provisioning_workflow_found_gone_counts_as_ended():
    w = World()
    w.state.provisioning.current["prov"] = wl.ProvisioningAttempt(
        check="prov", attempt=1, name="job-prov-1", workflow_id="provisioning/default/job/prov/1", class_name="c",
    )
    probes = w.batch(lc.Started())
    assert [(c.signal, c.workflow_id) for c in probes if isinstance(c, lc.TellProvisioning)] == [
        ("probe", "provisioning/default/job/prov/1")
    ]
    assert lc.next_wake(w.state)[1] == "check that its ProvisioningRequest workflows run"
    w.batch(lc.ProvisioningEnded(workflow_id="provisioning/default/job/prov/1"))
    assert "prov" not in w.state.provisioning.current


def test_a_refused_start_probes_the_run_holding_its_id_within_seconds():
    """The attempt's earlier run reported its request deleted and was still closing when the next
    start came (its ID taken): the workload told it to delete and waited for it to report again,
    which a run that is done never does, so only the probe five minutes later restarted the attempt
    (CI saw a config change not remade within 20 s)."""
    w = World()
    wid = "provisioning/default/job/prov/1"
    w.state.provisioning.probe_at = w.now + lc.PROBE_INTERVAL  # as the start that was refused set it
    out = w.batch(lc.ProvisioningStartRefused(check="prov", attempt=1, workflow_id=wid))
    assert [(c.signal, c.workflow_id) for c in out if isinstance(c, lc.TellProvisioning)] == [("delete_provisioning_request", wid)]
    at, summary = lc.next_wake(w.state)
    assert (at - w.now, summary) == (lc.REFUSED_PROBE, "check that its ProvisioningRequest workflows run")
    probes = w.batch(lc.TimerFired(at=at), after=lc.REFUSED_PROBE.total_seconds())
    assert [(c.signal, c.workflow_id) for c in probes if isinstance(c, lc.TellProvisioning)] == [("probe", wid)]
    w.batch(lc.ProvisioningEnded(workflow_id=wid))  # found gone
    assert w.state.provisioning.stopping == []


# --- 8. Kueue details ------------------------------------------------------------------------------


def test_the_maximum_execution_time_deactivates_with_kueues_reason():
    w = World(maximumExecutionTimeSeconds=60)
    w.reserve()
    at, summary = lc.next_wake(w.state)
    assert (at - w.now, summary) == (timedelta(seconds=60), "maximum execution time 60s")
    w.batch(lc.TimerFired(), after=60)
    evicted = cond.find(w.state.status.conditions, wl.EVICTED)
    assert (w.phase(), evicted.reason) == ("Inactive", "DeactivatedDueToMaximumExecutionTimeExceeded")
    assert w.told(w.commands)[-1] == "release"


def test_one_wait_has_one_timer():
    w = World()
    w.reserve("a")
    w.batch(intake.verdict(w.verdict("a", "Retry", requeueAfterSeconds=60)))
    first = lc.next_wake(w.state)
    w.batch(intake.verdict(w.verdict("a", "Ready")), after=5)  # kept while it waits
    assert lc.next_wake(w.state)[0] == first[0], "the same deadline: the workflow keeps its timer"


def test_pods_ready_timeout_is_a_timer_too():
    w = World()
    w.reserve(wait_for_pods_ready=WaitForPodsReady(timeout="5m"))
    at, summary = lc.next_wake(w.state)
    assert (at - w.now, summary) == (timedelta(minutes=5), "PodsReady timeout 5m")


@pytest.mark.parametrize(("admission", "finished"), [(None, True), (1, True), (2, False)], ids=["no-admission", "this-admission", "another-admission"])
def test_a_runners_report_about_another_admission_is_ignored(admission, finished):
    """A runner cut off from Temporal may report after its admission is over: a report that says
    which admission it is about (the local runner's do) counts only for that one."""
    w = World()
    w.reserve()
    assert w.phase() == "Admitted" and w.state.claim.ticket == 1
    w.batch(intake.pods_ready_report({"ready": True, **({"admission": admission} if admission else {})}))
    assert (w.state.status.condition(wl.PODS_READY).status == "True") == finished
    w.batch(intake.finish({"succeeded": True, "message": "done", **({"admission": admission} if admission else {})}))
    assert wl.is_finished(w.state) == finished
    stale = [e.message for e in w.state.events if e.reason == lc.STALE_REPORT]
    assert stale == ([] if finished else ["finish about admission 2 ignored: the workload is at admission 1"])


@pytest.mark.parametrize(
    ("ending", "stopped"),
    [
        pytest.param("returned", [], id="a-run-that-returned-is-not-stopped-again"),
        pytest.param("lost", [1], id="a-lost-run-is-stopped-when-its-admission-ends"),
        pytest.param("failed", [1], id="a-failed-run-is-stopped-when-its-admission-ends"),
    ],
)
def test_a_run_the_runner_lost_is_told_to_stop_when_its_admission_ends(ending, stopped):
    """A runner cut off from Temporal (its `start_workload` timed out) may still run the command,
    as a node's pods run on when it loses the API server: evicting the workload tells it to stop."""
    w = World(annotations={wl.RUNNER_ANNOTATION: "local"})
    started = w.reserve()
    assert [c.request.admission for c in started if isinstance(c, lc.StartRunner)] == [1]
    w.batch(lc.RunnerStopped(admission=1, ending=ending, error="" if ending == "returned" else "heartbeat timeout"))
    out = w.batch(intake.notice("evicted", {
        "key": "default/job", "uid": "uid-1", "ticket": 1, "kind": "evicted", "reason": "Preempted", "message": "p",
    }))
    assert w.phase() != "Admitted"
    assert [c.request.admission for c in out if isinstance(c, lc.StopRunner)] == stopped
    assert [c for c in w.batch(lc.Settle()) if isinstance(c, lc.StopRunner)] == [], "told once"


def preempted(ticket: int) -> lc.QueueNoticed:
    return intake.notice("evicted", {
        "key": "default/job", "uid": "uid-1", "ticket": ticket, "kind": "evicted", "reason": "Preempted", "message": "p",
    })


def started(commands: list[Any]) -> list[int]:
    return [c.request.admission for c in commands if isinstance(c, lc.StartRunner)]


# A `start_workload` for admission 1 whose heartbeats stopped.
LOST = lc.RunnerStopped(admission=1, ending="lost", error="activity Heartbeat timeout")


@pytest.mark.parametrize(
    ("ending", "evicted_too", "starts", "stops"),
    [
        pytest.param("lost", False, [1], [], id="a-run-lost-by-its-heartbeats-is-started-again"),
        pytest.param("drained", False, [1], [], id="a-run-its-runners-shutdown-ended-is-started-again"),
        pytest.param("failed", False, [], [], id="a-run-that-failed-is-not-started-again"),
        pytest.param("lost", True, [], [1], id="not-when-its-admission-ended-in-the-same-task"),
    ],
)
def test_a_run_its_runner_lost_is_started_again_for_the_same_admission(ending, evicted_too, starts, stops):
    """A `start_workload` whose heartbeats stopped (the runner died, or the task was lost with its
    poll in a server restart) is started again for the same admission, as a Job's controller
    replaces a lost pod: without it the workload held its quota until a PodsReady timeout, and for
    good without WaitForPodsReady."""
    w = World(annotations={wl.RUNNER_ANNOTATION: "local"})
    assert started(w.reserve()) == [1]
    events: list[Any] = [lc.RunnerStopped(admission=1, ending=ending, error="it ended")]
    out = w.batch(*events, *([preempted(1)] if evicted_too else []))
    assert started(out) == starts
    assert [c.request.admission for c in out if isinstance(c, lc.StopRunner)] == stops
    assert [e.reason for e in w.state.events if e.type == "Warning"][:1] == ["RunnerLost"]
    assert (lc.RUNNER_RESTARTED in [e.reason for e in w.state.events]) == bool(starts)
    assert w.state.run.running == (1 if starts else None)


def test_a_lost_run_is_started_again_at_most_runner_restarts_times_per_admission():
    """Each restart needs a heartbeat timeout (10 s of silence), and an admission gets at most
    RUNNER_RESTARTS of them, as a Job's backoffLimit bounds its pods' failures: a runner that takes
    the task and never heartbeats cannot grow the history for ever. The next admission starts
    counting again."""
    w = World(annotations={wl.RUNNER_ANNOTATION: "local"})
    starts = started(w.reserve())
    for _ in range(lc.RUNNER_RESTARTS + 3):
        starts += started(w.batch(LOST, after=10))
    assert starts == [1] * (1 + lc.RUNNER_RESTARTS)
    assert w.state.run.running is None and w.phase() == "Admitted", "the PodsReady timeouts decide from here"
    assert [c.request.admission for c in w.batch(preempted(1)) if isinstance(c, lc.StopRunner)] == [1]
    assert started(w.reserve(after=60)) == [2]
    assert started(w.batch(lc.RunnerStopped(admission=2, ending="lost", error="activity Heartbeat timeout"))) == [2]
    assert w.state.run.restarts == 1


def test_a_restarted_run_that_ends_itself_still_stops_the_copy_that_was_cut_off():
    """The lost run may still run where it was cut off, and the restart may reach another runner
    process on the same task queue: when the admission ends, even by the restarted run's own finish,
    `stop_workload` goes out for it."""
    w = World(annotations={wl.RUNNER_ANNOTATION: "local"})
    w.reserve()
    assert started(w.batch(LOST)) == [1]
    out = w.batch(intake.finish({"succeeded": True, "message": "done", "admission": 1}))
    assert w.phase() == "Finished"
    assert [c.request.admission for c in out if isinstance(c, lc.StopRunner)] == [1]
    assert [c for c in w.batch(lc.Settle()) if isinstance(c, (lc.StopRunner, lc.StartRunner))] == [], "told once"


@pytest.mark.parametrize(
    ("admission", "stopped"),
    [
        pytest.param(1, [], id="its-runners-own-finish-ends-the-run-with-nothing-to-stop"),
        pytest.param(None, [1], id="a-finish-from-someone-else-stops-the-runner"),
    ],
)
def test_a_runner_that_reports_the_finish_is_not_told_to_stop(admission, stopped):
    """A runner reports `finish` about the admission it runs and returns from `start_workload`:
    that run ends by itself. Only a finish from someone else (`admitflow finish`) cancels the run and
    sends `stop_workload`, as for an eviction."""
    w = World(annotations={wl.RUNNER_ANNOTATION: "local"})
    w.reserve()
    out = w.batch(intake.finish({"succeeded": True, "message": "done", **({"admission": admission} if admission else {})}))
    assert w.phase() == "Finished"
    assert [c.request.admission for c in out if isinstance(c, lc.StopRunner)] == stopped
    assert w.state.run.running is None
    assert w.batch(lc.RunnerStopped(admission=1)) == [], "its activity's end, arriving after, is not news"


@pytest.mark.parametrize(
    ("returned", "ending", "phase", "warnings"),
    [
        pytest.param({"succeeded": True, "message": "done"}, "returned", "Finished", [], id="its-finish-ends-the-workload"),
        pytest.param({"succeeded": False, "message": "oom"}, "returned", "Finished", ["Finished"], id="a-failed-run"),
        pytest.param({"succeeded": True, "admission": 7}, "returned", "Finished", [], id="about-its-own-admission-whatever-it-names"),
        pytest.param(None, "returned", "Admitted", [], id="returning-nothing-finishes-nothing"),
        pytest.param({"succeeded": "maybe"}, "returned", "Admitted", ["InvalidFinishRequest"], id="a-value-that-is-no-finish-is-refused"),
        pytest.param(42, "returned", "Admitted", ["InvalidFinishRequest"], id="a-number-is-refused"),
        pytest.param(None, "failed", "Admitted", ["RunnerLost"], id="a-failed-run-returns-nothing"),
    ],
)
def test_what_start_workload_returns_is_its_finish(returned, ending, phase, warnings):
    """A runner that runs the workload inside `start_workload` may return its finish instead of
    sending `finish` and returning: the workload finishes in the task that has the activity's
    completion, and nothing is told to stop."""
    w = World(annotations={wl.RUNNER_ANNOTATION: "local"})
    w.reserve()
    assert w.state.run.running == 1
    out = w.batch(*intake.runner_ended(1, returned, ending, "" if ending == "returned" else "the runner failed"))
    assert w.phase() == phase
    assert [c for c in out if isinstance(c, lc.StopRunner)] == []
    assert w.state.run.running is None
    assert [e.reason for e in w.state.events if e.type == "Warning"] == warnings
    if phase == "Finished":
        assert w.state.status.condition("Finished").reason == ("Succeeded" if returned["succeeded"] else "Failed")
        assert [c.signal for c in out if isinstance(c, lc.TellQueue)] == ["release"]


def test_a_queue_notice_that_comes_before_the_enqueues_answer_waits_for_it():
    """The queue took the enqueue and reserved quota, and its signal reaches the workload before the
    enqueue's local activity answers (the task that ran it timed out after the queue took it, and the
    next attempt gets the signal first). The reservation waits for the answer, then holds."""
    m = workload_manifest("job", cpu="2")
    w = World.__new__(World)
    w.resolution, w.now, w.commands = QueueResolution(cluster_queue="cq"), T0, []
    w.state = wl.new_state(manifest(m), "uid-1", T0)
    w.state, enqueue = lc.step(w.state, lc.Started(), T0, 0.5)
    w.state, enqueue = lc.step(w.state, lc.Settle(), T0, 0.5)
    [request] = [c.request for c in enqueue if isinstance(c, lc.Enqueue)]
    w.batch(
        intake.notice("quota_reserved", reserved_notice(ticket=request.entry.ticket).to_wire()),
        lc.EnqueueResolved(ticket=request.entry.ticket, resolution=QueueResolution(cluster_queue="cq")),
    )
    assert w.phase() == "Admitted"
    assert w.state.claim.early_notices == []


def test_the_next_tickets_reservation_in_the_batch_of_its_eviction_waits_for_the_enqueue():
    """The task that took an eviction timed out after its local activity had enqueued the next
    ticket, and the queue reserved that ticket at once. The next attempt gets the eviction and that
    reservation in one batch, before the Settle that enqueues the ticket again: the reservation waits
    for the enqueue's answer, then holds (dropped, the queue would hold the quota of a workload that
    waits in it for good)."""
    w = World()
    w.reserve()
    ticket = w.state.claim.ticket
    evicted = Notice(key="default/job", uid="uid-1", ticket=ticket, kind="evicted", reason="Preempted", message="preempted")
    out = w.batch(
        intake.notice("evicted", evicted.to_wire()),
        intake.notice("quota_reserved", reserved_notice(ticket=ticket + 1).to_wire()),
    )
    assert [c.request.entry.ticket for c in out if isinstance(c, lc.Enqueue)] == [ticket + 1]
    assert w.phase() == "Admitted"
    assert w.state.claim.early_notices == []


@pytest.mark.parametrize("together", [True, False], ids=["in-the-batch-of-the-deactivation", "in-a-later-batch"])
def test_a_next_ticket_the_run_decided_not_to_enqueue_is_taken_and_released(together):
    """The task that took an eviction timed out after its local activity had enqueued the next
    ticket; the next attempt got a deactivation too, and does not enqueue. The queue reserves the
    ticket nobody wants: its notice makes the run take that ticket and release it (kept, the queue
    would hold the quota of an inactive workload), and the next enqueue takes the one after."""
    w = World()
    w.reserve()
    evicted = Notice(key="default/job", uid="uid-1", ticket=1, kind="evicted", reason="Preempted", message="preempted")
    unasked = intake.notice("quota_reserved", reserved_notice(ticket=2).to_wire())
    out = w.batch(intake.notice("evicted", evicted.to_wire()), lc.Deactivated(), *([unasked] if together else []))
    if not together:
        out += w.batch(unasked)
    released = [c.request.ticket for c in out if isinstance(c, lc.TellQueue) and c.signal == "release"]
    assert not [c for c in out if isinstance(c, lc.Enqueue)]
    assert w.phase() == "Inactive"
    assert released == [1, 2]
    assert (w.state.claim.ticket, w.state.claim.holder, len(w.state.claim.early_notices)) == (2, None, 0)
    enqueued = [c.request.entry.ticket for c in w.batch(lc.Activated()) if isinstance(c, lc.Enqueue)]
    assert enqueued == [3]


@pytest.mark.parametrize(("named", "known", "released"), [
    ("cq", None, [("cq", 1)]),
    (None, None, []),
    ("cq-2", "cq", [("cq-2", 1)]),
    (None, "cq", [("cq", 1)]),
], ids=["its-very-first-ticket-goes-to-the-queue-that-names-itself", "a-notice-that-names-no-queue-with-none-known-is-kept",
        "the-queue-its-localqueue-now-leads-to", "a-notice-without-a-name-goes-to-the-last-queue"])
def test_an_unasked_ticket_goes_back_to_the_queue_its_notice_names(named, known, released):
    """The enqueue that the run never heard back from (its task timed out after the local activity)
    looked the LocalQueue up afresh: the ticket is in the queue the notice names, even when that
    enqueue was the run's very first and the run knows no ClusterQueue at all. A ticket is released
    once, and the next enqueue takes the ticket after it."""
    w = World(active=False)
    w.state.cluster_queue = known
    notice = reserved_notice(ticket=1).model_copy(update={"cluster_queue": named})
    out = w.batch(intake.notice("quota_reserved", notice.to_wire()))
    assert [(c.cluster_queue, c.request.ticket) for c in out if isinstance(c, lc.TellQueue)] == released
    assert (w.state.claim.ticket, len(w.state.claim.early_notices)) == ((1, 0) if released else (0, 1))
    enqueued = [c.request.entry.ticket for c in w.batch(lc.Activated()) if isinstance(c, lc.Enqueue)]
    assert enqueued == [2 if released else 1]
    assert len([c for c in w.commands if isinstance(c, lc.TellQueue) and c.signal == "release"]) == len(released)


@pytest.mark.parametrize("early", [False, True], ids=["after-its-enqueue", "in-the-batch-before-its-enqueue"])
def test_an_eviction_of_a_reservation_the_run_never_heard_of_counts(early):
    """A ClusterQueue tells a reservation that fits at once in the enqueue's answer. A workflow task
    that fails after the enqueue (or a reset to before it) loses the answer; the enqueue sent again
    finds the reservation evicted or released (`admitflow release`), and the eviction's signal is
    about a reservation the run never heard of. It counts: the workload is evicted, gives the ticket
    back (an eviction waits for it) and queues with the next, rather than staying queued with a
    ticket its queue no longer has. `early`: as a reset run sees it, the eviction comes in the batch
    before the run enqueues that ticket again, and waits for the enqueue's answer."""
    w = World(active=False)
    evicted = Notice(
        key="default/job", uid="uid-1", ticket=1, kind="evicted", reason="QuotaForceReleased", message="released by an operator",
        cluster_queue="cq",
    ).to_wire()
    if early:
        out = w.batch(intake.notice("evicted", evicted), lc.Activated())
    else:
        w.batch(lc.Activated())
        assert (w.state.claim.ticket, w.state.claim.queued) == (1, True)
        out = w.batch(intake.notice("evicted", evicted))
    released = [(c.cluster_queue, c.request.ticket) for c in out if isinstance(c, lc.TellQueue) and c.signal == "release"]
    enqueued = [c.request.entry.ticket for c in out if isinstance(c, lc.Enqueue)]
    c = cond.find(w.state.status.conditions, wl.EVICTED)
    assert (c.status, c.reason, c.message) == ("True", "QuotaForceReleased", "released by an operator")
    assert evictions(w.state) == 1
    assert released == [("cq", 1)] and enqueued[-1] == 2
    assert (w.state.claim.ticket, w.state.claim.queued, w.phase()) == (2, True, "Pending")


@pytest.mark.parametrize("signal_first", [False, True], ids=["answered-with-it", "its-signal-came-first-too"])
def test_a_reservation_in_the_enqueues_answer_is_taken_once(signal_first):
    """A run reset to before its reservation notice enqueues the ticket again, and the queue answers
    with the reservation it holds; with the signals given again, the notice came by signal too, before
    the answer. The workload is admitted once, with one QuotaReserved event."""
    notice = reserved_notice(ticket=1).to_wire()
    w = World(active=False)
    w.state, _ = lc.step(w.state, lc.Activated(), w.now, 0.5)
    w.state, commands = lc.step(w.state, lc.Settle(), w.now, 0.5)
    (enqueue,) = [c for c in commands if isinstance(c, lc.Enqueue)]
    out = w.batch(
        *([intake.notice("quota_reserved", notice)] if signal_first else []),
        # As the workflow steps the enqueue's answer: the resolution, then each notice it carries.
        lc.EnqueueResolved(ticket=enqueue.request.entry.ticket, resolution=QueueResolution(cluster_queue="cq", notices=[notice])),
        intake.notice("pending_status", notice),
    )
    assert w.phase() == "Admitted"
    assert [e.reason for e in w.state.events].count("QuotaReserved") == 1
    assert not [c for c in out if isinstance(c, lc.TellQueue) and c.signal == "release"]


def test_a_notice_that_names_no_clusterqueue_is_refused_and_changes_nothing():
    """Whoever sends it: a Warning event with one line, no ticket taken, nothing released or kept."""
    w = World(active=False)
    notice = {**reserved_notice(ticket=1).to_wire(), "clusterQueue": "No Such Queue!"}
    out = w.batch(intake.notice("quota_reserved", notice))
    assert [c for c in out if isinstance(c, lc.TellQueue)] == []
    assert (w.state.claim.ticket, w.state.claim.early_notices) == (0, [])
    event = w.state.events[-1]
    assert (event.type, event.reason) == ("Warning", "InvalidQueueNotice")
    assert event.message.startswith("quota_reserved: clusterQueue: String should match pattern") and "\n" not in event.message


def test_a_queue_names_itself_in_every_notice_it_sends():
    """What an older workload ignores (an unknown field), and what a run that never heard back from its
    first enqueue needs to give that ticket back."""
    owner = Owner(Outbox(), {})
    owner.notify([reserved_notice(ticket=1), reserved_notice(ticket=2).model_copy(update={"kind": "evicted"})], "cq", T0)
    assert [(d.cluster_queue, Notice.model_validate(d.payload).cluster_queue) for d in owner.outbox.undelivered()] == [("cq", "cq")] * 2


def _priority_told(commands: list[Any]) -> list[tuple[str, int, int]]:
    return [(c.cluster_queue, c.request.ticket, c.request.priority) for c in commands
            if isinstance(c, lc.TellQueue) and c.signal == "reprioritize"]


@pytest.mark.parametrize("where", ["queued", "reserved", "inactive"])
def test_a_new_priority_reaches_the_queue_that_holds_the_workload_and_its_next_enqueue(where):
    """`apply_priority`: the workload's spec takes it; the ClusterQueue that holds its place or its
    quota is told (`reprioritize`, with the ticket it holds); a later enqueue carries it."""
    w = World()
    if where == "reserved":
        w.reserve()
    if where == "inactive":
        w.batch(lc.Deactivated())
    out = w.batch(intake.priority_change({"priority": 42}))
    assert w.state.workload.spec.priority == 42
    assert _priority_told(out) == ([] if where == "inactive" else [("cq", 1, 42)])
    assert [e.reason for e in w.state.events][-1] == "PriorityChanged"
    if where == "inactive":
        enqueued = [c for c in w.batch(lc.Activated()) if isinstance(c, lc.Enqueue)]
        assert [c.request.entry.priority for c in enqueued] == [42]


def test_a_refused_priority_change_tells_nobody():
    w = World()
    w.reserve()
    out = w.batch(intake.priority_change({"priority": "high"}))
    assert (_priority_told(out), w.state.workload.spec.priority) == ([], None)
    assert w.state.events[-1].reason == "InvalidPriorityChange"


# --- the `admitted` notice waits for the next workflow task ------------------------------------------


def admitted_held() -> World:
    """A workload just admitted by its check's Ready: its queue is not told yet."""
    w = World()
    w.reserve("a")
    out = w.batch(intake.verdict(w.verdict("a", "Ready")))
    assert w.phase() == "Admitted" and "admitted" not in w.told(out)
    assert lc.notice_due(w.state) == (w.now + lc.ADMITTED_DELAY, "admitted to ClusterQueue cq")
    assert not lc.may_continue_as_new(w.state), "not while the notice waits"
    return w


def test_the_admitted_notice_goes_with_the_next_workflow_task_first_and_once():
    w = admitted_held()
    out = w.batch(intake.pods_ready_report({"ready": True}), after=0.2)
    assert isinstance(out[0], lc.TellQueue) and (out[0].signal, out[0].request.ticket) == ("admitted", 1)
    assert lc.notice_due(w.state) is None and lc.may_continue_as_new(w.state)
    assert "admitted" not in w.told(w.batch(intake.pods_ready_report({"ready": True}), after=1))


def test_the_admitted_notice_goes_at_its_deadline_when_no_task_comes_first():
    w = admitted_held()
    due, _ = lc.notice_due(w.state)
    assert w.told(w.batch(lc.TimerFired(at=due), after=lc.ADMITTED_DELAY.total_seconds())) == ["admitted"]


def test_a_release_of_its_reservation_replaces_the_waiting_admitted_notice():
    w = admitted_held()
    assert w.told(w.batch(preempted(1))) == ["release"]
    assert lc.notice_due(w.state) is None


def test_a_new_priority_goes_after_the_waiting_admitted_notice():
    w = admitted_held()
    assert w.told(w.batch(intake.priority_change({"priority": 7}))) == ["admitted", "reprioritize"]


def test_a_workload_admitted_with_its_reservation_holds_no_notice():
    """No checks: its queue counts it admitted along with the reservation."""
    w = World()
    w.reserve()
    assert w.phase() == "Admitted" and lc.notice_due(w.state) is None
