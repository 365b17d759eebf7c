"""Per-check timeouts (admitflow extension; kueue#3231, #3245): an AdmissionCheck's, or its
ProvisioningRequestConfig's, `spec.pendingTimeout` says how long the check may stay `Pending` while
the workload holds quota. Past it the check is treated as the configured verdict, `Retry` (the
quota goes back, the backoff applies) or `Rejected` (the workload is deactivated), with a message
saying so.

Pure and durable: the deadline is computed from the state (the reservation's and the check's
lastTransitionTime), so a worker restart, a replay or a continue-as-new keeps the clock; the
workflow's one timer wakes it (`lifecycle.next_wake`).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from admitflow.admission import conditions as cond
from admitflow.admission import provisioning
from admitflow.admission import workload as wl
from admitflow.admission import checks
from admitflow.admission.checks import Verdict
from admitflow.admission.workload import WorkloadState
from admitflow.api.admission_check import PendingTimeout
from admitflow.api.duration import parse_duration


def pending_timeout(state: WorkloadState, check: str) -> PendingTimeout | None:
    """The check's timeout: its ProvisioningRequestConfig's, else its AdmissionCheck's."""
    info = state.checks_info.get(check)
    if info is None:
        return None
    config = provisioning.config_of(state, check) if provisioning.is_provisioning(state, check) else None
    if config is not None and config.pending_timeout is not None:
        return config.pending_timeout
    return info.pending_timeout


def deadlines(state: WorkloadState) -> dict[str, datetime]:
    """When each `Pending` check of a workload holding quota runs out of time: its timeout after the
    reservation, or after the check came if it came later (a check added to the queue meanwhile)."""
    if not wl.has_quota(state) or wl.is_finished(state) or state.deleted:
        return {}
    reserved = cond.find(state.status.conditions, wl.QUOTA_RESERVED)
    if reserved is None or reserved.last_transition_time is None:
        return {}
    out: dict[str, datetime] = {}
    for c in state.status.admission_checks or ():
        timeout = pending_timeout(state, c.name) if c.state == "Pending" else None
        if timeout is None:
            continue
        try:
            length = parse_duration(timeout.duration)
        except ValueError:
            continue  # refused at apply; a state from elsewhere changes nothing
        since = checks.waited_since(state, c)
        assert since is not None  # the reservation's time, or later
        out[c.name] = since + max(length, timedelta(seconds=1))
    return out


def next_deadline(state: WorkloadState) -> tuple[datetime, str] | None:
    """The earliest deadline, with the timer's summary."""
    found = deadlines(state)
    if not found:
        return None
    name = min(found, key=lambda n: (found[n], n))
    return found[name], f"pendingTimeout of check {name}"


def due(state: WorkloadState, now: datetime, random: float) -> list[Verdict]:
    """The verdicts for the checks whose time is up at `now`, in check order."""
    out: list[Verdict] = []
    for name, at in sorted(deadlines(state).items()):
        if at > now:
            continue
        timeout = pending_timeout(state, name)
        assert timeout is not None  # deadlines found it
        check = next(c for c in state.status.admission_checks or () if c.name == name)
        message = (
            f"Pending for longer than its pendingTimeout ({timeout.duration}): treated as {timeout.verdict}"
            + (f"; last message: {check.message}" if check.message else "")
        )
        if timeout.verdict == "Retry" and provisioning.is_provisioning(state, name):
            v = provisioning.retry_verdict(state, check, message, random)
        else:
            v = Verdict(name=name, state=timeout.verdict, message=message)
        if v is not None:
            out.append(v)
    return out
