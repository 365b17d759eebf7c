"""The workload workflow's edge: each message's raw arguments, parsed once into the typed event that
`lifecycle.step` takes, or a `Refused` event saying in one line why not. A message whose payload the
worker could not decode (an `Undecodable`, admitflow.codec) is refused with the reason: a verdict
into the verdict log, any other as `EventNotApplied`.

Every function takes what the SDK handed the handler (`*payload`, decoded without a type: a handler
with a typed parameter would fail its workflow task on no argument, two, or a null), so nothing a
message carries can fail a task: a malformed one becomes `Refused`, which `step` records (a verdict
in the verdict log, anything else as a Warning event) and which changes nothing else. What is
refused here is what can be told from the message alone; what depends on the workload's state (a
check it does not have, an attempt that is over) is refused by `step` itself.
"""

from __future__ import annotations

from typing import Any, Literal

from admitflow import contract
from admitflow.admission import admission_gates, checks, pods_ready, priority
from admitflow.admission.cluster_queue import Notice
from admitflow.admission.lifecycle import (
    NOT_APPLIED,
    Activated,
    AdmissionGatesRemoved,
    ControllerAnswered,
    Deactivated,
    DeleteRequested,
    Event,
    FinishRequested,
    PodsReadyReported,
    PriorityChangeRequested,
    ProvisioningEnded,
    ProvisioningReported,
    QueueAppeared,
    QueueNoticed,
    Refused,
    RunnerStopped,
    VerdictReceived,
)
from admitflow.admission.protocol import FinishRequest, ProvisioningUpdate
from admitflow.wire import PayloadRefused, Undecodable, one_argument, parse_model

# The Warning event of each refused message (a refused verdict goes to the verdict log instead).
INVALID_NOTICE = "InvalidQueueNotice"
INVALID_PROVISIONING_REPORT = "InvalidProvisioningReport"
INVALID_PODS_READY_REPORT = "InvalidPodsReadyReport"
INVALID_FINISH = "InvalidFinishRequest"


def verdict(*payload: Any) -> VerdictReceived | Refused:
    """`set_admission_check_state` (signal) or `apply_admission_check_state` (update)."""
    try:
        return VerdictReceived(verdict=checks.parse(one_argument(payload)))
    except (PayloadRefused, checks.VerdictError) as err:
        raw = payload[0] if len(payload) == 1 and isinstance(payload[0], dict) else {}
        detail = str(err) if isinstance(err, checks.VerdictError) else f"invalid verdict: {err}"
        return Refused(
            message=contract.SET_ADMISSION_CHECK_STATE, reason="", detail=detail,
            check=str(raw.get("name", "?")), state=str(raw.get("state", "?")),
        )


def notice(signal: str, *payload: Any) -> QueueNoticed | Refused:
    """A ClusterQueue's notice (`quota_reserved`, `pending_status`, `dequeued`, `evicted`,
    `admission_checks_changed`, or one carried in an enqueue's answer)."""
    if _undecodable(payload):
        return _not_applied(QueueNoticed, payload)
    try:
        return QueueNoticed(notice=parse_model(one_argument(payload), Notice, "notice"))
    except PayloadRefused as err:
        return Refused(message=signal, reason=INVALID_NOTICE, detail=f"{signal}: {err}")


def provisioning_report(*payload: Any) -> ProvisioningReported | Refused:
    """`provisioning_request_updated`: an attempt's workflow says how its request is now."""
    if _undecodable(payload):
        return _not_applied(ProvisioningReported, payload)
    try:
        return ProvisioningReported(update=parse_model(one_argument(payload), ProvisioningUpdate, "report"))
    except PayloadRefused as err:
        return Refused(message=contract.PROVISIONING_REQUEST_UPDATED, reason=INVALID_PROVISIONING_REPORT, detail=str(err))


def provisioning_deleted(*payload: Any) -> ProvisioningEnded | Refused:
    """`provisioning_request_deleted`: an attempt's workflow says it is gone."""
    if _undecodable(payload):
        return _not_applied(ProvisioningEnded, payload)
    try:
        return ProvisioningEnded(update=parse_model(one_argument(payload), ProvisioningUpdate, "report"))
    except PayloadRefused as err:
        return Refused(message=contract.PROVISIONING_REQUEST_DELETED, reason=INVALID_PROVISIONING_REPORT, detail=str(err))


def pods_ready_report(*payload: Any) -> PodsReadyReported | Refused:
    """`set_pods_ready`."""
    if _undecodable(payload):
        return _not_applied(PodsReadyReported, payload)
    try:
        return PodsReadyReported(report=pods_ready.parse(one_argument(payload)))
    except PayloadRefused as err:
        detail = f"invalid pods-ready report: {err}"
    except pods_ready.PodsReadyError as err:
        detail = str(err)
    return Refused(message=contract.SET_PODS_READY, reason=INVALID_PODS_READY_REPORT, detail=detail)


def gate_removal(*payload: Any) -> AdmissionGatesRemoved | Refused:
    """`remove_admission_gates` (signal) or `apply_admission_gate_removal` (update)."""
    if _undecodable(payload):
        return _not_applied(AdmissionGatesRemoved, payload)
    try:
        return AdmissionGatesRemoved(removal=admission_gates.parse(one_argument(payload)))
    except PayloadRefused as err:
        detail = f"invalid admission gate removal: {err}"
    except admission_gates.GateError as err:
        detail = str(err)
    return Refused(message=contract.REMOVE_ADMISSION_GATES, reason=admission_gates.REFUSED, detail=detail)


def priority_change(*payload: Any) -> PriorityChangeRequested | Refused:
    """`apply_priority` (update)."""
    if _undecodable(payload):
        return _not_applied(PriorityChangeRequested, payload)
    try:
        return PriorityChangeRequested(change=priority.parse(one_argument(payload)))
    except PayloadRefused as err:
        detail = f"invalid priority change: {err}"
    except priority.PriorityError as err:
        detail = str(err)
    return Refused(message=contract.APPLY_PRIORITY, reason=priority.REFUSED, detail=detail)


def finish(*payload: Any) -> FinishRequested | Refused:
    """`finish`; a null payload is a plain successful finish."""
    if _undecodable(payload):
        return _not_applied(FinishRequested, payload)
    try:
        request = parse_model({} if payload == (None,) else one_argument(payload), FinishRequest, "finish")
    except PayloadRefused as err:
        return Refused(message=contract.FINISH, reason=INVALID_FINISH, detail=str(err))
    return FinishRequested(request=request)


def deletion(*payload: Any) -> DeleteRequested | Refused:
    """`delete`: it needs nothing from its payload (one that cannot be decoded is refused)."""
    return _not_applied(DeleteRequested, payload) if _undecodable(payload) else DeleteRequested()


def deactivation(*payload: Any) -> Deactivated | Refused:
    return _not_applied(Deactivated, payload) if _undecodable(payload) else Deactivated()


def activation(*payload: Any) -> Activated | Refused:
    return _not_applied(Activated, payload) if _undecodable(payload) else Activated()


def queue_available(*payload: Any) -> QueueAppeared | Refused:
    """The catalog: the workload's LocalQueue now leads somewhere."""
    return _not_applied(QueueAppeared, payload) if _undecodable(payload) else QueueAppeared()


def controller_answer(check: str, attempt: int, result: Any, error: str = "") -> ControllerAnswered:
    """What a controller's `admission_check` activity came back with: a verdict (a bare state stands
    for one; the check's name and the attempt are filled in when it leaves them out), or why it is
    none. `lifecycle.step` decides whether the answer was awaited and what it does."""
    if isinstance(result, Undecodable) and not error:
        return ControllerAnswered(check=check, attempt=attempt, said="Error", error=f"its answer cannot be decoded: {result.reason}")
    if error:
        return ControllerAnswered(check=check, attempt=attempt, said="Error", error=error)
    answer = dict(result) if isinstance(result, dict) else {"state": result}
    answer.setdefault("name", check)
    answer.setdefault("attempt", attempt)
    said = str(answer.get("state", "?"))
    try:
        return ControllerAnswered(check=check, attempt=attempt, said=said, verdict=checks.parse(answer))
    except checks.VerdictError as err:
        return ControllerAnswered(check=check, attempt=attempt, said=said, error=f"invalid verdict from the controller: {err}")


Ending = Literal["returned", "failed", "lost", "drained"]


def runner_ended(admission: int, result: Any, ending: Ending, error: str = "") -> list[Event]:
    """The events the end of `start_workload` for `admission` stands for. A run that returned a value
    returned its finish (docs/runners.md: `succeeded`, `message`), about that admission whatever it
    names; a value that is no finish is refused as a `finish` signal would be."""
    events: list[Event] = []
    if ending == "returned" and result is not None:
        events.append(finish({**result, "admission": admission} if isinstance(result, dict) else result))
    events.append(RunnerStopped(admission=admission, ending=ending, error=error))
    return events


def _undecodable(payload: tuple[Any, ...]) -> Undecodable | None:
    return next((p for p in payload if isinstance(p, Undecodable)), None)


def _not_applied(kind: type, payload: tuple[Any, ...]) -> Refused:
    """A message whose payload the worker could not decode (admitflow.codec): refused with why."""
    bad = _undecodable(payload)
    assert bad is not None
    return Refused(message=kind.__name__, reason=NOT_APPLIED, detail=f"{kind.__name__} not applied: {bad.reason}")
