"""The chaos run's double-admission check (tests/chaos.py `readmissions`) over the events the
engine's own transitions record: every eviction lets the next admission count as new, and an `Admitted`
with nothing ending the one before is caught."""

from __future__ import annotations

from datetime import timedelta

import pytest

from admitflow.admission import checks
from admitflow.admission import workload as wl
from tests.chaos import readmissions
from tests.unit.test_workload_status import T0, reserved_notice, submitted


def admitted(ticket: int = 1, at=T0) -> wl.WorkloadState:
    st = submitted()
    readmit(st, ticket, at)
    return st


def readmit(st: wl.WorkloadState, ticket: int, at) -> None:
    st.claim.ticket, st.claim.queued = ticket, True
    wl.reserve_quota(st, reserved_notice(ticket=ticket), at)
    assert wl.is_admitted(st)


def evicted_for_pods_ready(st, at):
    wl.evict(st, "PodsReadyTimeout", "Exceeded the PodsReady timeout", at)


def preempted(st, at):
    wl.evict(st, "Preempted", "Preempted to accommodate a workload", at, preemption_reason="InClusterQueue")


def evicted_by_hand(st, at):
    wl.evict(st, "Evicted", "evicted by hand", at)


def retried(st, at):
    wl.evict(st, "AdmissionCheck", 'Evicted due to AdmissionCheck in Retry state: "a"', at)


def deactivated_and_activated(st, at):
    checks.deactivate(st, at)
    checks.activate(st, at)


@pytest.mark.parametrize(
    "end",
    [evicted_for_pods_ready, preempted, evicted_by_hand, retried, deactivated_and_activated],
)
def test_an_admission_that_ended_lets_the_next_one_count_as_new(end):
    st = admitted()
    end(st, T0 + timedelta(seconds=10))
    readmit(st, 2, T0 + timedelta(seconds=20))
    assert [e.reason for e in st.events].count("Admitted") == 2
    assert readmissions(st.events) == []


def test_an_admitted_event_while_the_last_admission_holds_is_caught():
    st = admitted()
    again = T0 + timedelta(seconds=30)
    events = [*st.events, wl.Event(type="Normal", reason="QuotaReserved", message="", time=again), wl.Event(type="Normal", reason="Admitted", message="", time=again)]
    assert readmissions(events) == [again]


@pytest.mark.parametrize(
    ("waited", "queries", "observers", "ok"),
    [
        pytest.param(3.0, 40, 40, True, id="heard-within-seconds-and-only-the-observers-queried"),
        pytest.param(15.0, 40, 40, False, id="a-reservation-unheard-of-for-15-s"),
        pytest.param(3.0, 41, 40, False, id="something-else-than-the-observers-queried"),
        pytest.param(3.0, 38, 40, True, id="observers-queries-lost-in-a-server-kill"),
    ],
)
def test_a_chaos_run_fails_on_a_reservation_heard_of_late_or_a_machines_query(waited, queries, observers, ok):
    from tests.chaos import Plan, Report
    from tests.histories import Audit, Lag

    decided = T0
    report = Report(Plan(workloads=1, worker_kills=0, server_kills=0))
    report.history = Audit(runs=1, reservations=[
        Lag(key="default/a", ticket=1, decided=decided, heard=decided + timedelta(seconds=1)),
        Lag(key="default/b", ticket=1, decided=decided, heard=decided + timedelta(seconds=waited)),
        Lag(key="default/c", ticket=1, decided=decided, heard=None),
    ])
    report.queries, report.observers_queries = queries, observers
    assert report.ok is ok
    assert "held at most" in report.history.summary()
