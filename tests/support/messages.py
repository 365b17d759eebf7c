"""A workload's messages as its workflow takes them, for tests of the rules that change a state in
place: parsed at the workflow's edge (admitflow.admission.intake), then given to the rule. What does
not parse is recorded as lifecycle records a Refused event."""

from __future__ import annotations

from datetime import datetime

from admitflow.admission import checks, intake, pods_ready, priority
from admitflow.admission import lifecycle as lc
from admitflow.admission.workload import WorkloadState


def _refused(st: WorkloadState, event: lc.Refused, now: datetime) -> str:
    lc.step_refused(st, event, now)
    return event.detail


def verdict(st: WorkloadState, payload: object, now: datetime, random: float = 0.0) -> str:
    """`set_admission_check_state` with `payload`; what became of it, in words."""
    event = intake.verdict(payload)
    if isinstance(event, lc.Refused):
        return _refused(st, event, now)
    return checks.receive(st, event.verdict, now, random)


def controller_answer(st: WorkloadState, name: str, attempt: int, result: object, error: str, now: datetime,
                      random: float = 0.0) -> str:
    """A controller's `admission_check` activity came back with `result` (or failed with `error`)."""
    event = intake.controller_answer(name, attempt, result, error)
    return checks.answer(st, name, attempt, event.verdict, event.said, event.error, now, random)


def pods_ready_report(st: WorkloadState, payload: object, now: datetime) -> str:
    """`set_pods_ready` with `payload`."""
    event = intake.pods_ready_report(payload)
    if isinstance(event, lc.Refused):
        return _refused(st, event, now)
    return pods_ready.report(st, event.report, now)


def priority_change(st: WorkloadState, payload: object, now: datetime) -> bool:
    """`apply_priority` with `payload`: whether the priority or its class changed."""
    event = intake.priority_change(payload)
    if isinstance(event, lc.Refused):
        _refused(st, event, now)
        return False
    return priority.receive(st, event.change, now)

