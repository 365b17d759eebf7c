"""Two-stage admission: what a check's verdict does to a workload (KEP-993, KEP-3258; docs/contract.md).

A verdict changes one check's state; what follows depends on where the workload stands:

- holding quota: any `Rejected` check deactivates it, else any `Retry` check evicts it with a
  backoff, else all `Ready` admits it;
- in its backoff after an eviction: a `Retry` may only push the requeue later (Kueue's late-verdict
  race, issue #3543, cannot leave it stuck: the check itself stays `Pending`);
- waiting in the queue or inactive: `Ready` and `Pending` are kept (a check may approve before quota
  is reserved); `Retry` and `Rejected` are recorded, not applied, instead of blocking it as Kueue does.

Every verdict, applied or not, is kept in the workload's verdict log, which `describe` shows.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from pydantic import Field

from admitflow.admission import conditions as cond
from admitflow.admission import workload as wl
from admitflow.admission.conditions import MAX_CONDITION_MESSAGE, second, truncate
from admitflow.admission.workload import VerdictOutcome, VerdictRecord, WorkloadState
from admitflow.api import AdmissionCheckState, RequeueState
from admitflow.api.duration import format_duration, parse_duration
from admitflow.api.bounds import INT32_MAX
from admitflow.api.admission_check import PROVISIONING_REQUEST_CONTROLLER_NAME, AdmissionCheckRetryStrategy
from admitflow.api import field_error as fe
from admitflow.api.duration import format_duration_nanos
from admitflow.api.pod import toleration_rule_errors
from admitflow.api.workload import PodSetUpdate, pod_set_update_errors
from admitflow.wire import PayloadRefused, WireModel, parse_model

STATES = ("Pending", "Ready", "Retry", "Rejected")
DEACTIVATION_TARGET = "DeactivationTarget"
# Verdicts kept for `describe`; the full story is the workflow history.
MAX_VERDICTS = 50


class Verdict(WireModel):
    """A check controller's verdict, as the contract's `set_admission_check_state` carries it."""

    name: str = Field(description="The AdmissionCheck.")
    state: str = Field(description="Pending, Ready, Retry or Rejected.")
    message: str = ""
    requeue_after_seconds: int | None = Field(
        default=None, ge=0, le=INT32_MAX, description="With Retry: wait at least this long (0 to 2147483647)."
    )
    pod_set_updates: list[PodSetUpdate] | None = None
    attempt: int | None = Field(
        default=None, ge=1, le=INT32_MAX, description="The attempt the controller was asked about (the request's `attempt`)."
    )


class VerdictError(ValueError):
    """A verdict that cannot be applied; the message is the one-line reason. `stale` when it is
    well-formed but about an attempt that is over: ignored rather than wrong."""

    def __init__(self, message: str, stale: bool = False) -> None:
        super().__init__(message)
        self.stale = stale


class CheckRequest(WireModel):
    """The input of activity `admission_check`, run on the task queue named by the AdmissionCheck's
    `controllerName` (the contract, docs/controllers.md)."""

    workload: dict[str, Any] = Field(description="The Workload in Kueue's shape, with its status.")
    admission_check: str = Field(description="The AdmissionCheck asked about.")
    parameters: dict[str, Any] | None = Field(description="The spec of the check's parameters object, if any.")
    attempt: int = Field(
        description="Which attempt of this check this is: a new number for every reservation it is asked about, "
        "never reused; verdicts may carry it back."
    )
    workflow_id: str = Field(description="Where verdicts go: signal or update this workflow.")


def parse(value: Any) -> Verdict:
    """The verdict a message carries (its one decoded argument), or a VerdictError saying what is
    wrong with it."""
    try:
        return parse_model(value, Verdict, "verdict")
    except PayloadRefused as err:
        raise VerdictError(f"invalid verdict: {err}") from None


def attempt_of(check: AdmissionCheckState) -> int:
    return (check.retry_count or 0) + 1


def validate(state: WorkloadState, v: Verdict) -> AdmissionCheckState:
    """The check the verdict is about, or a VerdictError naming the first problem."""
    key = state.key
    if wl.is_finished(state) or state.deleted:
        raise VerdictError(f"workload {key} is finished; verdicts no longer apply")
    check = next((c for c in state.status.admission_checks or () if c.name == v.name), None)
    if check is None:
        have = ", ".join(c.name for c in state.status.admission_checks or ()) or "none"
        raise VerdictError(f'workload {key} has no admission check "{v.name}" (it has: {have})')
    if v.state not in STATES:
        raise VerdictError(f'unknown state "{v.state}" for check "{v.name}": must be one of {", ".join(STATES)}')
    pod_sets = [ps.name for ps in state.workload.spec.pod_sets]
    seen: set[str] = set()
    for i, update in enumerate(v.pod_set_updates or ()):
        if update.name not in pod_sets:
            raise VerdictError(f'podSetUpdates: unknown podSet "{update.name}" (the workload has: {", ".join(pod_sets)})')
        path = f"podSetUpdates[{i}]"
        if update.name in seen:
            # Kueue would take only the first one; saying so beats dropping the second unseen.
            raise VerdictError(f"{fe.duplicate(f'{path}.name', update.name)}: one podSetUpdate per podSet")
        seen.add(update.name)
        errors = toleration_rule_errors(update.tolerations, f"{path}.tolerations") + pod_set_update_errors(update, path)
        if errors:
            raise VerdictError(str(errors[0]))
    at = wl.current_attempt(state, v.name)
    if v.attempt is not None and v.attempt < at and not is_late_retry(state, v):
        raise VerdictError(f'verdict for attempt {v.attempt} of check "{v.name}", which is at attempt {at}: ignored', stale=True)
    if v.attempt is not None and v.attempt > at:
        raise VerdictError(f'verdict for attempt {v.attempt} of check "{v.name}", which is at attempt {at}: not asked yet')
    if check.state == "Ready" and v.state == "Ready" and (v.pod_set_updates or None) != (check.pod_set_updates or None):
        raise VerdictError(f'podSetUpdates: field is immutable while check "{v.name}" stays Ready')
    return check


def is_late_retry(state: WorkloadState, v: Verdict) -> bool:
    """A Retry for the attempt that an admission-check eviction just ended (KEP-3258's race): it
    may still push the requeue later, while the workload has not been reserved again."""
    return (
        v.state == "Retry"
        and v.attempt is not None
        and v.attempt == state.asks.handed.get(v.name)
        and after_check_eviction(state)
    )


def after_check_eviction(state: WorkloadState) -> bool:
    """Evicted by its checks' Retry and not reserved since (in its backoff, or back in its queue)."""
    evicted = cond.find(state.status.conditions, wl.EVICTED)
    return (
        evicted is not None
        and evicted.status == "True"
        and evicted.reason == "AdmissionCheck"
        and not wl.has_quota(state)
        and state.workload.spec.active is not False
        and not wl.is_finished(state)
    )


def remember(
    state: WorkloadState, v: Verdict | None, raw_name: str, raw_state: str, outcome: VerdictOutcome, detail: str, now: datetime,
    asked_since: datetime | None = None,
) -> None:
    state.verdicts.append(
        VerdictRecord(
            time=second(now),
            check=v.name if v else raw_name,
            state=v.state if v else raw_state,
            outcome=outcome,
            detail=truncate(detail, 1024),
            waited=None if asked_since is None else max(0.0, (second(now) - asked_since).total_seconds()),
        )
    )
    del state.verdicts[:-MAX_VERDICTS]


def receive(state: WorkloadState, v: Verdict, now: datetime, random: float = 0.0) -> str:
    """A verdict from a signal or an update: applied if it applies to the workload as it stands,
    recorded either way; never raises. Returns what became of it, in words."""
    try:
        validate(state, v)
    except VerdictError as err:
        outcome: VerdictOutcome = "ignored" if err.stale else "rejected"
        remember(state, None, v.name, v.state, outcome, str(err), now)
        return str(err)
    return apply(state, v, now, random)


def apply(state: WorkloadState, v: Verdict, now: datetime, random: float = 0.0) -> str:
    """Apply a validated verdict. `random` in [0, 1) draws the jitter of a retry strategy."""
    admission_checks = state.status.admission_checks
    assert admission_checks is not None  # validate found the check there
    index, check = next((i, c) for i, c in enumerate(admission_checks) if c.name == v.name)
    v = _with_strategy(state, check, v, now, random)
    holding = wl.has_quota(state)
    backoff = in_backoff(state) or after_check_eviction(state)
    if not holding and v.state in ("Retry", "Rejected"):
        outcome: VerdictOutcome
        if backoff and v.state == "Retry":
            outcome, detail = "applied", _push_backoff(state, index, v, now)
        else:
            where = "inactive" if state.workload.spec.active is False else "waiting for quota"
            outcome, detail = "ignored", f"not applied: the workload is {where}; {v.state} counts only while quota is reserved"
        remember(state, v, v.name, v.state, outcome, detail, now)
        return detail

    new = check.model_copy(
        update={
            "state": v.state,
            "message": truncate(v.message, MAX_CONDITION_MESSAGE),
            "last_transition_time": second(now) if v.state != check.state else check.last_transition_time,
            "requeue_after_seconds": v.requeue_after_seconds,
            "pod_set_updates": v.pod_set_updates,
        }
    )
    admission_checks[index] = new
    asked_since = waited_since(state, check) if holding and check.state == "Pending" and v.state != "Pending" else None
    if v.state != check.state:
        note = f"Admission check {v.name} updated state from {check.state} to {v.state}"
        wl.record(state, "AdmissionCheckUpdated", note + (f" with message: {v.message}" if v.message else ""), now)
    if holding:
        state.asks.answered[v.name] = wl.current_attempt(state, v.name)  # the controller spoke: no need to ask it
    detail = reconcile(state, now) if holding else "kept until quota is reserved"
    remember(state, v, v.name, v.state, "applied", detail, now, asked_since)
    return detail


def waited_since(state: WorkloadState, check: AdmissionCheckState) -> datetime | None:
    """Since when a check of a workload holding quota has been waited for: the reservation, or the
    check's own last transition if later (a check that came meanwhile, or was reset)."""
    reserved = cond.find(state.status.conditions, wl.QUOTA_RESERVED)
    at = reserved.last_transition_time if reserved is not None else None
    if at is None or check.last_transition_time is None:
        return at or check.last_transition_time
    return max(at, check.last_transition_time)


def _with_strategy(state: WorkloadState, check: AdmissionCheckState, v: Verdict, now: datetime, random: float) -> Verdict:
    """A Retry without its own delay takes the AdmissionCheck's retry strategy, and past its limit
    (`backoffLimitCount` retries, or `backoffLimitTimeout` after its first Retry since the workload
    was last admitted) becomes Rejected (admitflow's extension, KEP-3258 "Future outlook")."""
    info = state.checks_info.get(v.name)
    strategy = info.retry_strategy if info is not None else None
    if v.state != "Retry" or strategy is None:
        return v
    first = state.asks.first_retry.get(v.name)
    if strategy.backoff_limit_timeout is not None and first is not None and wl.has_quota(state):
        budget = parse_duration(strategy.backoff_limit_timeout)
        if now - first >= budget:
            message = f"retry time limit of {format_duration(budget)} reached" + (f": {v.message}" if v.message else "")
            return v.model_copy(update={"state": "Rejected", "message": message})
    if v.requeue_after_seconds is not None:
        return v
    n = (check.retry_count or 0) + 1
    if strategy.backoff_limit_count is not None and n > strategy.backoff_limit_count:
        message = f"retry limit of {strategy.backoff_limit_count} reached" + (f": {v.message}" if v.message else "")
        return v.model_copy(update={"state": "Rejected", "message": message})
    return v.model_copy(update={"requeue_after_seconds": retry_delay(strategy, n, random)})


def retry_delay(strategy: AdmissionCheckRetryStrategy, n: int, random: float) -> int:
    """Seconds before the n-th retry: Static waits baseDelaySeconds; Backoff waits
    min(base * factor^(n-1), max); both stretched by up to `jitter` of that."""
    if strategy.strategy == "Static":
        delay = float(strategy.base_delay_seconds)
    else:
        # The growth stops at the max: a factor of 2 past n = 1024 would overflow a float.
        growth = strategy.factor ** min(n - 1, 64) if strategy.factor > 1 else 1.0
        delay = min(strategy.base_delay_seconds * growth, float(strategy.max_delay_seconds))
    return min(int(round(delay * (1 + random * strategy.jitter))), INT32_MAX)


def reconcile(state: WorkloadState, now: datetime) -> str:
    """What the check states mean for a workload holding quota: Rejected deactivates, Retry evicts,
    all Ready admits. Returns it in words."""
    checks = state.status.admission_checks or []
    rejected = [c for c in checks if c.state == "Rejected"]
    retrying = [c for c in checks if c.state == "Retry"]
    if rejected:
        deactivate_for_checks(state, rejected, now)
        return "deactivated"
    if retrying:
        evict_for_retry(state, retrying, now)
        at = requeue_at(state)
        return f"evicted; back to the queue at {at.isoformat()}" if at else "evicted; back to the queue now"
    before = wl.is_admitted(state)
    wl.sync_admitted(state, now)
    if wl.is_admitted(state):
        return "admitted" if not before else "still admitted"
    waiting = ", ".join(c.name for c in checks if c.state != "Ready")
    return f"waiting for {waiting}"


def checks_message(checks: Sequence[AdmissionCheckState], state_name: str) -> str:
    """Kueue's buildAdmissionChecksMessage: sorted by name, the message in parentheses if any."""
    parts = [f'"{c.name}"' + (f" ({c.message})" if c.message else "") for c in sorted(checks, key=lambda c: c.name)]
    noun = "AdmissionCheck" if len(parts) == 1 else "AdmissionChecks"
    return f"{noun} in {state_name} state: {'; '.join(parts)}"


def deactivate_for_checks(state: WorkloadState, rejected: Sequence[AdmissionCheckState], now: datetime) -> None:
    """Kueue's DeactivationTarget, spec.active=false and the deactivation eviction, in one write."""
    message = checks_message(rejected, "Rejected")
    st = state.status
    st.conditions = cond.set_condition(st.conditions, DEACTIVATION_TARGET, True, "AdmissionCheck", message, now)
    wl.record(state, "AdmissionCheckRejected", f"Deactivated due to {message}", now, "Warning")
    deactivate(state, now, cause="AdmissionCheck", message=f"The workload is deactivated due to {message}")


def deactivate(state: WorkloadState, now: datetime, cause: str = "", message: str = "The workload is deactivated") -> None:
    """spec.active=false: evicted (with the cause, if any), requeueState cleared, not in any queue.
    Without quota (waiting, or in its backoff), Kueue's eviction steps still apply: checks go back
    to Pending; an eviction already recorded keeps its reason and time, so that the workload keeps
    its place in the queue order when it is activated again."""
    st = state.status
    state.workload.spec.active = False
    reason = "Deactivated" + (f"DueTo{cause}" if cause else "")
    if wl.has_quota(state):
        wl.evict(state, "Deactivated", message, now, underlying_cause=cause)
    else:
        st.admission_checks = wl.reset_checks_on_eviction(st.admission_checks, now)
        wl.next_attempts(state)
        if not cond.is_true(st.conditions, wl.EVICTED):
            st.conditions = cond.set_condition(st.conditions, wl.EVICTED, True, reason, message, now)
        st.conditions = cond.set_condition(st.conditions, wl.REQUEUED, False, reason, message, now)
        wl.record(state, f"EvictedDueTo{reason}", message, now)
    state.claim.queued = False
    st.requeue_state = None
    st.conditions = cond.remove_condition(st.conditions, DEACTIVATION_TARGET)
    st.conditions = cond.set_condition(st.conditions, wl.QUOTA_RESERVED, False, "Deactivated", "The workload is deactivated", now)


def activate(state: WorkloadState, now: datetime) -> bool:
    """spec.active=true; a workload deactivated for any cause is requeued (Kueue matches the
    `Deactivated` prefix since PR #14874). Returns whether anything changed."""
    if state.workload.spec.active is not False:
        return False
    st = state.status
    state.workload.spec.active = True
    requeued = cond.find(st.conditions, wl.REQUEUED)
    if requeued is not None and requeued.status == "False" and (requeued.reason or "").startswith("Deactivated"):
        st.conditions = cond.set_condition(st.conditions, wl.REQUEUED, True, "Reactivated", "The workload was reactivated", now)
    wl.set_pending(state, "PendingEvaluation", "Workload is pending evaluation in the scheduling queue", now)
    return True


def evict_for_retry(state: WorkloadState, retrying: Sequence[AdmissionCheckState], now: datetime) -> None:
    """Kueue's check-based eviction for Retry: requeueAt from each Retry check's own transition
    time plus its delay (the latest wins), then the eviction resets the checks."""
    _push_requeue_at(state, max_retry_time(retrying), now)
    for c in retrying:
        info = state.checks_info.get(c.name)
        if info is not None and info.retry_strategy is not None and info.retry_strategy.backoff_limit_timeout is not None:
            state.asks.first_retry.setdefault(c.name, second(now))  # its retry time budget counts from here
    wl.evict(state, "AdmissionCheck", f"Evicted due to {checks_message(retrying, 'Retry')}", now)
    finish_backoff_if_due(state, now)


def max_retry_time(checks: Sequence[AdmissionCheckState]) -> datetime | None:
    """Kueue's GetMaxRetryTime: the latest lastTransitionTime + requeueAfterSeconds of Retry checks."""
    times = [
        c.last_transition_time + timedelta(seconds=c.requeue_after_seconds)
        for c in checks
        if c.state == "Retry" and c.requeue_after_seconds is not None and c.last_transition_time
    ]
    return max(times, default=None)


def _push_requeue_at(state: WorkloadState, at: datetime | None, now: datetime) -> bool:
    """requeueAt only moves later, and only to a time still ahead (Kueue's SetRequeueState)."""
    if at is None or at <= now:
        return False
    rs = state.status.requeue_state or RequeueState()
    if rs.requeue_at is not None and rs.requeue_at >= at:
        return False
    state.status.requeue_state = rs.model_copy(update={"requeue_at": second(at)})
    return True


def _push_backoff(state: WorkloadState, index: int, v: Verdict, now: datetime) -> str:
    """A Retry that arrives while the workload waits out its backoff: it may push the requeue
    later, never earlier, and the check stays Pending so nothing can leave the workload stuck."""
    admission_checks = state.status.admission_checks
    assert admission_checks is not None  # apply found the check there
    check = admission_checks[index]
    if v.requeue_after_seconds is not None:
        admission_checks[index] = check.model_copy(update={"requeue_after_seconds": v.requeue_after_seconds})
    at = now + timedelta(seconds=v.requeue_after_seconds or 0)
    if _push_requeue_at(state, at, now):
        requeued = cond.find(state.status.conditions, wl.REQUEUED)
        if requeued is not None and requeued.status == "True":
            # Already requeued (an earlier Retry had no delay): it leaves its queue again and waits
            # for the longest delay, whatever the order the verdicts came in.
            state.claim.queued = False
            st = state.status
            message = f"Evicted due to {checks_message([check.model_copy(update={'message': v.message})], 'Retry')}"
            st.conditions = cond.set_condition(st.conditions, wl.REQUEUED, False, "AdmissionCheck", message, now)
        return f"applied to the backoff: requeue pushed to {second(at).isoformat()}"
    return "applied to the backoff: the requeue stays as it was"


def backoff_summary(state: WorkloadState) -> str:
    """How a backoff timer reads in the workload's history: `backoff 2m0s after Retry from prov`,
    or `backoff 1m0s after PodsReadyTimeout (requeue 2)`."""
    at = requeue_at(state)
    evicted = cond.find(state.status.conditions, wl.EVICTED)
    if at is None or evicted is None or evicted.last_transition_time is None:
        return f"backoff until {at.isoformat() if at else '?'}"
    delay = format_duration_nanos(int((at - evicted.last_transition_time).total_seconds()) * 10**9)
    if evicted.reason == "AdmissionCheck":
        retried = [c.name for c in state.status.admission_checks or () if c.message.endswith("Previously: Retry")]
        return f"backoff {delay} after Retry from {', '.join(retried) or 'a check'}"
    count = state.status.requeue_state.count if state.status.requeue_state else None
    return f"backoff {delay} after {evicted.reason}" + (f" (requeue {count})" if count else "")


def requeue_at(state: WorkloadState) -> datetime | None:
    rs = state.status.requeue_state
    return rs.requeue_at if rs is not None else None


def in_backoff(state: WorkloadState) -> bool:
    """Evicted and waiting for requeueAt before going back to the queue."""
    return requeue_at(state) is not None and not wl.has_quota(state)


def finish_backoff_if_due(state: WorkloadState, now: datetime) -> bool:
    """Kueue's requeue after a backoff: once requeueAt has passed (or there is none), it is cleared
    and `Requeued=True` (`BackoffFinished`); the workload goes back to its queue. Returns whether
    the backoff ended now."""
    at = requeue_at(state)
    if at is not None and at > now:
        return False
    requeued = cond.find(state.status.conditions, wl.REQUEUED)
    if requeued is None or requeued.status == "True" or requeued.reason not in ("AdmissionCheck", "PodsReadyTimeout"):
        return False
    rs = state.status.requeue_state
    if rs is not None:
        state.status.requeue_state = None if rs.count is None else rs.model_copy(update={"requeue_at": None})
    st = state.status
    st.conditions = cond.set_condition(st.conditions, wl.REQUEUED, True, "BackoffFinished", "The workload backoff was finished", now)
    return True


# --- asking controllers ---------------------------------------------------------------------------


def to_ask(state: WorkloadState) -> list[str]:
    """The checks whose controller must be asked now: the workload holds quota, the check is
    Pending, and its controller has not answered this attempt in this reservation. The built-in
    ProvisioningRequest check is answered by the engine itself. A controller that failed is not
    asked again while its backoff runs (until its timer takes it out of `ask_again_at`)."""
    if not wl.has_quota(state) or wl.is_finished(state) or state.deleted:
        return []
    out = []
    for c in state.status.admission_checks or ():
        info = state.checks_info.get(c.name)
        attempt = state.asks.asked_now.get(c.name, 0)
        if (
            c.state == "Pending"
            and info is not None
            and info.controller_name != PROVISIONING_REQUEST_CONTROLLER_NAME
            and state.asks.answered.get(c.name) != attempt
            and c.name not in state.asks.ask_again_at
        ):
            out.append(c.name)
    return out


def hand_out(state: WorkloadState, name: str) -> int:
    """The attempt to ask a check's controller about in this reservation: the same one again after
    it failed, else one it has never been asked about."""
    if name in state.asks.asked_now:
        return state.asks.asked_now[name]
    n = state.asks.attempts.get(name, 1)
    if state.asks.handed.get(name, 0) >= n:
        n = state.asks.handed[name] + 1
    state.asks.attempts[name] = state.asks.handed[name] = state.asks.asked_now[name] = n
    return n


def request(state: WorkloadState, name: str, workflow_id: str, attempt: int) -> CheckRequest:
    info = state.checks_info[name]
    return CheckRequest(
        workload=state.workload.to_wire(),
        admission_check=name,
        parameters=info.parameters,
        attempt=attempt,
        workflow_id=workflow_id,
    )


def answer(
    state: WorkloadState, name: str, attempt: int, v: Verdict | None, said: str, error: str, now: datetime,
    random: float = 0.0,
) -> str:
    """What a controller's activity came back with (admission.intake.controller_answer): its first
    verdict for that attempt (`Pending`: it will send one later), or why it is none (its
    non-retryable error, or an answer that is no verdict); `said` is the state it answered, as it
    said it. An answer that comes after a verdict for that attempt, or after the workload lost its
    quota, is recorded and ignored. A failure, or a verdict that does not apply, is recorded and the
    controller asked again after a backoff (`controller_backoff`)."""
    awaited = state.asks.asked_now.get(name) == attempt and name in to_ask(state)
    if not awaited:
        detail = "ignored: a verdict for this attempt came first, or the workload no longer holds quota"
        remember(state, None, name, said, "ignored", detail, now)
        return detail
    if v is not None and not error:
        try:
            if v.name != name:
                raise VerdictError(f'answered for check "{v.name}"')
            if v.attempt != attempt:
                raise VerdictError(f"answered for attempt {v.attempt}, asked about {attempt}")
            validate(state, v)
        except VerdictError as err:
            error = f"invalid verdict from the controller: {err}"
        else:
            state.asks.controller_failures.pop(name, None)
            state.asks.ask_again_at.pop(name, None)
            return apply(state, v, now, random)
    return _controller_failed(state, name, attempt, error, now)


# A controller that fails or answers something that is not a verdict is asked again after
# min(BASE * 2^(n-1), MAX) seconds, n its failures in a row: it never evicts the workload.
CONTROLLER_BACKOFF_BASE = 5
CONTROLLER_BACKOFF_MAX = 300
CONTROLLER_FAILED = "AdmissionCheckControllerFailed"


def controller_backoff(failures: int) -> int:
    """Seconds before a controller that failed `failures` (at least 1) times in a row is asked again."""
    growth: int = 2 ** min(failures - 1, 16)
    return min(CONTROLLER_BACKOFF_BASE * growth, CONTROLLER_BACKOFF_MAX)


def _controller_failed(state: WorkloadState, name: str, attempt: int, error: str, now: datetime) -> str:
    failures = state.asks.controller_failures[name] = state.asks.controller_failures.get(name, 0) + 1
    delay = controller_backoff(failures)
    state.asks.ask_again_at[name] = second(now) + timedelta(seconds=delay)
    detail = f"{error}; asked again in {delay}s ({failures} in a row)"
    wl.record(state, CONTROLLER_FAILED, f'Controller of check "{name}" failed on attempt {attempt}: {detail}', now, "Warning")
    remember(state, None, name, "Error", "rejected", detail, now)
    return detail

