"""A workload's runner under random interleavings: its `start_workload` lost by its heartbeats or
its runner's shutdown (started again for the same admission, at most `lifecycle.RUNNER_RESTARTS`
times), failing, returning, ending its run with its own finish; the workload preempted, finished
by hand, admitted again. The whole lifecycle's model (`test_lifecycle_model.py`) reaches a running
runner too rarely to exercise its restarts, so this one keeps the workload admitted most of the
time. The docs' bound on restarts is checked against the engine's at the end.

Invariants, after every workflow task:

1. At most one `start_workload` runs at a time, and the state says which (`runner_running`).
2. An admission is started again only after a run of it was lost by its heartbeats or its runner's
   shutdown, and at most `RUNNER_RESTARTS` times; a run lost so while its admission still wants it
   (admitted, holding quota, not finished) and under that bound runs again after the task.
3. `stop_workload` goes only to an admission that runs or whose run was lost; once an admission
   with a lost run is over, its runner was told to stop it (a copy may run where it was cut off).
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from admitflow.admission import lifecycle as lc
from admitflow.admission import intake
from admitflow.admission import workload as wl
from tests.unit.test_lifecycle import World, preempted
from tests.unit.test_workload_status import reserved_notice


def wanted(s: wl.WorkloadState) -> bool:
    return wl.is_admitted(s) and wl.has_quota(s) and not wl.is_finished(s) and not s.deleted


class RunnerModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.w = World(annotations={wl.RUNNER_ANNOTATION: "local"})
        self.w.state, _ = lc.step(self.w.state, lc.Started(runner_finish_ends_run=True), self.w.now, 0.5)
        self.running: int | None = None
        self.lost: set[int] = set()  # admissions whose run was lost or failed, not told to stop yet
        self.restart_due: int | None = None
        self.starts: Counter[int] = Counter()
        self.restarted: Counter[int] = Counter()

    def task(self, *events: Any) -> None:
        for c in self.w.batch(*events, after=11):
            if isinstance(c, lc.StartRunner):
                a = c.request.admission
                assert self.running is None, f"admission {a} started while {self.running} runs"
                if self.starts[a]:
                    assert self.restart_due == a, f"admission {a} started again, its run not lost by its heartbeats"
                    self.restarted[a] += 1
                    assert self.restarted[a] <= lc.RUNNER_RESTARTS, f"admission {a} started again {self.restarted[a]} times"
                self.starts[a] += 1
                self.running, self.restart_due = a, None
            elif isinstance(c, lc.StopRunner):
                a = c.request.admission
                assert a == self.running or a in self.lost, f"told to stop admission {a}: runs {self.running}, lost {self.lost}"
                self.lost.discard(a)
                if a == self.running:
                    self.running = None
        s = self.w.state
        if self.restart_due == s.claim.ticket and wanted(s) and self.restarted[s.claim.ticket] < lc.RUNNER_RESTARTS:
            assert self.running == s.claim.ticket, f"the run of admission {s.claim.ticket} was lost and not started again"

    def stopped(self, ending: str, error: str = "") -> None:
        a, self.running = self.running, None
        if ending != "returned" and a == self.w.state.claim.ticket:
            self.lost.add(a)
            if ending in ("lost", "drained"):
                self.restart_due = a
        self.task(lc.RunnerStopped(admission=a, ending=ending, error=error))

    @precondition(lambda self: self.w.state.claim.queued)
    @rule()
    def reserved(self):
        """Its queue reserves the ticket it is queued with (no checks: admitted with it)."""
        self.task(intake.notice("quota_reserved", reserved_notice(ticket=self.w.state.claim.ticket).to_wire()))

    @precondition(lambda self: self.running is not None)
    @rule(ending=st.sampled_from(["lost", "drained"]))
    def runner_lost(self, ending):
        """Its heartbeats stopped (the runner died, or the task was lost with its poll), or its
        runner's shutdown ended it (`WorkerShutdown`): both are started again."""
        self.stopped(ending, "activity Heartbeat timeout" if ending == "lost" else "Worker is shutting down")

    @precondition(lambda self: self.running is not None)
    @rule(returned=st.booleans())
    def runner_stops(self, returned):
        """It failed, or returned nothing (it handed the workload to something that reports later)."""
        if returned:
            self.stopped("returned")
        else:
            self.stopped("failed", "the runner failed")

    @precondition(lambda self: self.running is not None)
    @rule()
    def runner_finishes_its_run(self):
        a, self.running = self.running, None
        self.task(intake.finish({"succeeded": True, "message": "done", "admission": a}))

    @precondition(lambda self: wl.has_quota(self.w.state) and not wl.is_finished(self.w.state))
    @rule()
    def preempted(self):
        self.task(preempted(self.w.state.claim.ticket))

    @precondition(lambda self: not wl.is_finished(self.w.state))
    @rule()
    def finished_by_hand(self):
        self.task(intake.finish({"succeeded": False, "message": "by hand"}))

    @rule(offset=st.sampled_from([-1, 1]))
    def a_stale_loss(self, offset):
        if self.running != self.w.state.claim.ticket + offset:
            self.task(lc.RunnerStopped(admission=max(0, self.w.state.claim.ticket + offset), ending="lost",
                                       error="activity Heartbeat timeout"))

    @invariant()
    def agrees(self):
        assert self.running == self.w.state.run.running, (self.running, self.w.state.run.running)
        if wl.is_finished(self.w.state):
            assert self.running is None and not self.lost, f"finished with {self.running} running, {self.lost} not stopped"


# Derandomized, with no example database, as the other models: CI sees the same examples every time.
RunnerModel.TestCase.settings = settings(max_examples=300, stateful_step_count=50, deadline=None, derandomize=True,
                                         database=None, suppress_health_check=[HealthCheck.too_slow])
TestRunnerRestarts = RunnerModel.TestCase


DOCS = Path(__file__).parents[2] / "docs"


def test_the_docs_state_the_bound_the_engine_has():
    """Each page that gives the bound on restarts gives `RUNNER_RESTARTS`."""
    for page, said in (("runners.md", r"started again at most (\d+) times"),
                       ("contract.md", r"at most (\d+) times per admission"),
                       ("architecture.md", r"ends it: at most (\d+) times")):
        text = " ".join((DOCS / page).read_text().split())
        assert re.findall(said, text) == [str(lc.RUNNER_RESTARTS)], page
