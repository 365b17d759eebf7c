"""WaitForPodsReady (KEP-1282, docs/pods-ready.md): the PodsReady condition, and the timeouts that
evict an admitted workload whose pods do not come up, with the requeue backoff and limit. The gate
that enforces `blockAdmission` across ClusterQueues is `admission.pods_ready_gate`.

The workload workflow keeps one durable timer on `deadline(...)`; when it fires, `time_out` evicts
(or deactivates) the workload exactly as Kueue's workload controller does.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import Field

from admitflow.admission import checks
from admitflow.admission import conditions as cond
from admitflow.admission import workload as wl
from admitflow.admission.backoff import backoff_seconds
from admitflow.admission.conditions import second
from admitflow.admission.workload import NOT_READY_MESSAGE, PODS_READY, WAIT_FOR_START, WorkloadState
from admitflow.api import RequeueState
from admitflow.api.configuration import WaitForPodsReady
from admitflow.api.duration import format_duration, parse_duration
from admitflow.wire import PayloadRefused, WireModel, parse_model

STARTED = "Started"
WAIT_FOR_RECOVERY = "WaitForRecovery"
RECOVERED = "Recovered"
REASONS = {True: (STARTED, RECOVERED), False: (WAIT_FOR_START, WAIT_FOR_RECOVERY)}
READY_MESSAGE = "All pods reached readiness and the workload is running"
RECOVERY_MESSAGE = "At least one pod has failed, waiting for recovery"

TIMEOUT_REASON = "PodsReadyTimeout"
LIMIT_CAUSE = "RequeuingLimitExceeded"
LIMIT_MESSAGE = "The workload is deactivated due to exceeding the maximum number of re-queuing retries"

# What a ClusterQueue tells the workload it would admit while blockAdmission holds it (Kueue's
# scheduler, waitForPodsReadyIfNeeded).
WAITING_REASON = "WaitingForPodsReady"
WAITING_MESSAGE = "waiting for all admitted workloads to be in PodsReady condition"


class PodsReadyError(ValueError):
    """A `set_pods_ready` payload that cannot be applied; the message is the one-line reason."""


class PodsReadyReport(WireModel):
    """The payload of signal `set_pods_ready` (the contract): whether all of the workload's pods
    are ready, and optionally which of Kueue's reasons says so."""

    ready: bool = Field(description="All pods are ready (or succeeded).")
    reason: str | None = Field(
        default=None,
        description="Started or Recovered with ready; WaitForStart or WaitForRecovery without. "
        "Left out, it follows from the condition before, as Kueue's job controller decides it.",
    )
    admission: int | None = Field(
        default=None, ge=1, le=2147483647,
        description="The admission it is about (a runner's `start_workload` carries it): a report about another "
        "admission is ignored, so a runner cut off from Temporal cannot speak for a later one. Left out, it is "
        "taken as about the current one.",
    )


def parse(value: Any) -> PodsReadyReport:
    """The report a `set_pods_ready` carries (its one decoded argument), or a PodsReadyError saying
    what is wrong with it."""
    try:
        report = parse_model(value, PodsReadyReport, "report")
    except PayloadRefused as err:
        raise PodsReadyError(f"invalid pods-ready report: {err}") from None
    if report.reason is not None and report.reason not in REASONS[report.ready]:
        allowed = " or ".join(REASONS[report.ready])
        raise PodsReadyError(f"invalid pods-ready report: reason {report.reason!r} with ready={str(report.ready).lower()}: use {allowed}")
    return report


def condition_for(state: WorkloadState, report: PodsReadyReport) -> tuple[bool, str, str]:
    """Kueue's generatePodsReadyCondition: what the PodsReady condition becomes after a report."""
    old = cond.find(state.status.conditions, PODS_READY)
    if report.ready:
        recovering = old is not None and old.reason in (WAIT_FOR_RECOVERY, RECOVERED)
        return True, report.reason or (RECOVERED if recovering else STARTED), READY_MESSAGE
    if report.reason == WAIT_FOR_RECOVERY or (
        report.reason is None and old is not None and (old.status == "True" or old.reason == WAIT_FOR_RECOVERY)
    ):
        return False, WAIT_FOR_RECOVERY, RECOVERY_MESSAGE
    return False, WAIT_FOR_START, NOT_READY_MESSAGE


def report(state: WorkloadState, r: PodsReadyReport, now: datetime) -> str:
    """Apply a `set_pods_ready` report. Only an admitted workload has pods; for any other the report
    changes nothing. Returns what became of it, in one line."""
    if wl.is_finished(state) or not wl.is_admitted(state):
        return f"ignored: the workload is {wl.phase(state)}, not admitted"
    if r.admission is not None and r.admission != state.claim.ticket:
        return f"ignored: about admission {r.admission}, and the workload is at admission {state.claim.ticket}"
    status, reason, message = condition_for(state, r)
    st = state.status
    st.conditions = cond.set_condition(st.conditions, PODS_READY, status, reason, message, now)
    if status and st.requeue_state is not None and st.requeue_state.first_evicted_at is not None:
        st.requeue_state.first_evicted_at = None  # ready: backoffLimitTimeout counts afresh
    return f"PodsReady={status} ({reason})"


def runner_lost(state: WorkloadState, error: str, now: datetime) -> None:
    """The runner running the workload stopped heartbeating (it died, or its machine did): its pods
    count as failed, so a ready workload waits for recovery (and its recovery timeout runs); one not
    ready yet keeps waiting for start."""
    wl.record(state, "RunnerLost", f"The runner stopped running the workload: {error}", now, "Warning")
    if wl.is_admitted(state) and is_ready(state):
        st = state.status
        st.conditions = cond.set_condition(st.conditions, PODS_READY, False, WAIT_FOR_RECOVERY, RECOVERY_MESSAGE, now)


def runner_command(state: WorkloadState, running: bool) -> Literal["start", "stop"] | None:
    """What the workload's runner must be told (docs/runners.md): start an admitted workload it has
    not been asked to run in this admission; stop a run whose admission is over (evicted,
    deactivated, finished, deleted). `running`: its `start_workload` is still in flight."""
    wanted = bool(wl.runner_of(state)) and wl.is_admitted(state) and not wl.is_finished(state) and not state.deleted
    if wanted and not running and state.run.started != state.claim.ticket:
        return "start"
    if not wanted and running:
        return "stop"
    return None


def leaves_gate(state: WorkloadState) -> bool:
    """A workload reserved with a blockAdmission grant is ready, or gave its quota back: the gate
    must hear it (once: the caller clears `gated`)."""
    return state.gated and (is_ready(state) or not wl.has_quota(state) or wl.is_finished(state) or state.deleted)


def is_ready(state: WorkloadState) -> bool:
    return cond.is_true(state.status.conditions, PODS_READY)


def deadline(state: WorkloadState, settings: WaitForPodsReady | None) -> tuple[datetime, str] | None:
    """When an admitted workload that is not ready times out, and the cause (Kueue's
    admittedNotReadyWorkload): `WaitForStart` counts from the Admitted transition, `WaitForRecovery`
    from the PodsReady transition, when a recovery timeout is set. None when nothing is timed."""
    if settings is None or not wl.is_admitted(state) or wl.is_finished(state) or state.workload.spec.active is False:
        return None
    st = state.status
    pods = cond.find(st.conditions, PODS_READY)
    if pods is not None and pods.status == "True":
        return None
    if pods is None or pods.reason in (WAIT_FOR_START, "PodsReady"):
        admitted = cond.find(st.conditions, wl.ADMITTED)
        assert admitted is not None and admitted.last_transition_time is not None
        return admitted.last_transition_time + timedelta(seconds=settings.timeout_seconds), WAIT_FOR_START
    recovery = settings.recovery_timeout_seconds
    if pods.reason == WAIT_FOR_RECOVERY and recovery is not None and pods.last_transition_time is not None:
        return pods.last_transition_time + timedelta(seconds=recovery), WAIT_FOR_RECOVERY
    return None


def time_out(state: WorkloadState, settings: WaitForPodsReady, cause: str, now: datetime, random: float) -> bool:
    """The PodsReady timeout fired (Kueue's reconcileNotReadyTimeout and
    triggerDeactivationOrBackoffRequeue). Past `backoffLimitCount` the workload is deactivated;
    otherwise it is evicted with `PodsReadyTimeout`, `requeueState.count` + 1 and
    `requeueAt` = now + min(base·2^(n−1), max)·(1+U·0.0001). Returns whether it held quota (its
    ClusterQueue must be told)."""
    held = wl.has_quota(state)
    strategy = settings.requeuing_strategy
    st = state.status
    count = (st.requeue_state.count if st.requeue_state and st.requeue_state.count is not None else 0) + 1
    limit = strategy.backoff_limit_count
    if limit is not None and count > limit:
        checks.deactivate(state, now, cause=LIMIT_CAUSE, message=LIMIT_MESSAGE)
        return held
    # Kueue's backoffLimitTimeout: the first eviction starts the clock; one past it deactivates.
    timeout, budget = strategy.backoff_limit_timeout, strategy.backoff_limit_timeout_seconds
    first = st.requeue_state.first_evicted_at if st.requeue_state else None
    if timeout is not None and budget is not None and first is not None and (now - first).total_seconds() >= budget:
        checks.deactivate(state, now, cause=LIMIT_CAUSE, message=time_limit_message(timeout))
        return held
    delay = backoff_seconds(strategy.backoff_base_seconds, strategy.backoff_max_seconds, count, random)
    # Kubernetes keeps times to the second: the eviction's transition time plus the whole delay.
    st.requeue_state = RequeueState(
        count=count, requeue_at=second(now) + timedelta(seconds=delay),
        first_evicted_at=(first or second(now)) if budget is not None else None,
    )
    meta = state.workload.metadata
    wl.evict(state, TIMEOUT_REASON, f"Exceeded the PodsReady timeout {meta.namespace}/{meta.name}", now, underlying_cause=cause)
    checks.finish_backoff_if_due(state, now)  # a zero base requeues at once
    return held


def time_limit_message(timeout: str) -> str:
    """Kueue's message when backoffLimitTimeout deactivates a workload (Go's duration format)."""
    return f"exceeding the maximum time {format_duration(parse_duration(timeout))} for re-queuing retries"


def timer_summary(settings: WaitForPodsReady, cause: str) -> str:
    """How the timer reads in the workload's history."""
    if cause == WAIT_FOR_RECOVERY:
        return f"PodsReady recovery timeout {settings.recovery_timeout}"
    return f"PodsReady timeout {settings.timeout}"
