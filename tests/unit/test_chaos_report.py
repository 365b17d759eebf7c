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
