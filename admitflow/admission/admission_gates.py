"""AdmissionGatedBy (Kueue KEP-6915): the `kueue.x-k8s.io/admission-gated-by` annotation keeps a
workload out of admission until every gate it names is removed.

The annotation is a comma-separated list of gate names, each a domain-prefixed path
(`example.com/budget-approver`) of at most 63 characters. It may only be given when the workload is
created; afterwards gates can only be removed (Kueue's webhook refuses adding one). While any gate
remains the workload takes no quota and no place in its queue, and `QuotaReserved=False` says
`AdmissionGated` with the gates; once the last one is removed it enters its queue as any new
workload does, at the place its creation time gives it.

The annotation itself is the state: removing a gate rewrites it (and drops it with the last gate),
so `get -o yaml`, `describe` and the `workload` query show what remains, as Kueue's Workload does.
Removals arrive as messages (`remove_admission_gates`, `apply_admission_gate_removal`); `receive`
applies one or records why not, and `sync` keeps the condition and events in step with the
annotation, as Kueue's workload controller does.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pydantic import Field

from admitflow.admission import conditions as cond
from admitflow.admission import workload as wl
from admitflow.admission.workload import WorkloadState
from admitflow.api import Workload
from admitflow.api import field_error as fe
from admitflow.api.field_error import FieldError
from admitflow.api.names import domain_prefixed_path_errors
from admitflow.wire import PayloadRefused, WireModel, parse_model

ANNOTATION = "kueue.x-k8s.io/admission-gated-by"
PATH = f"metadata.annotations[{ANNOTATION}]"
# The same bound as a Job's spec.managedBy, which Kueue took the gate names' rule from.
MAX_GATE_LENGTH = 63
# Kueue's words (pkg/controller/core/workload_controller.go, mayUpdateConditionForAdmissionGatedBy).
GATED = "AdmissionGated"
CLEARED = "AdmissionGateCleared"
PENDING_EVALUATION = "PendingEvaluation"
CLEARED_MESSAGE = "AdmissionGatedBy cleared, waiting for quota reservation"
CLEARED_NOTE = "Admission gate cleared, workload is now admissible"
# The Warning event of a removal that was refused (a signal: an update's validator answers instead).
REFUSED = "InvalidAdmissionGateRemoval"


class GateRemoval(WireModel):
    """What `remove_admission_gates` (signal) and `apply_admission_gate_removal` (update) carry:
    the gates to remove, by name, or all of them."""

    gates: list[str] = Field(default_factory=list, description="Gates to remove; each must be one the workload has.")
    all: bool = Field(default=False, description="Remove every gate (the annotation goes).")


class AdmissionGates(WireModel):
    """What `apply_admission_gate_removal` answers: the gates that remain (none: it may be admitted)."""

    gates: list[str] = Field(default_factory=list)


class GateError(ValueError):
    """A removal that cannot be applied; the message is the one-line reason."""


# --- the annotation ----------------------------------------------------------------------------


def split(value: str | None) -> list[str]:
    """Kueue's csv.Parse: the names between commas, spaces around them trimmed; a blank value names
    none (an empty name stays, for validation to refuse)."""
    if value is None or not value.strip():
        return []
    return [part.strip() for part in value.split(",")]


def annotation(workload: Workload) -> str | None:
    return (workload.metadata.annotations or {}).get(ANNOTATION)


def gates(workload: Workload) -> list[str]:
    """The gates a workload waits for, in the annotation's order. Lenient (empty names and repeats
    dropped): what a client that skipped validation started must still gate, never fail."""
    out: list[str] = []
    for g in split(annotation(workload)):
        if g and g not in out:
            out.append(g)
    return out


def may_enter_admission(workload: Workload) -> bool:
    """No gate remains: the workload may take a place in its queue and quota."""
    return not gates(workload)


def format_errors(value: str | None) -> list[FieldError]:
    """Kueue's webhook on a Workload's annotation (create and update alike): every name non-empty,
    no name twice, each a domain-prefixed path of at most 63 characters."""
    errors: list[FieldError] = []
    seen: set[str] = set()
    for gate in split(value):
        if not gate:
            errors.append(fe.invalid(PATH, value, "cannot contain empty gate names"))
            continue
        if gate in seen:
            errors.append(fe.invalid(PATH, value, f"duplicate gate name: {gate}"))
            continue
        seen.add(gate)
        errors += [fe.invalid(PATH, part, msg) for part, msg in domain_prefixed_path_errors(gate)]
        if len(gate) > MAX_GATE_LENGTH:
            errors.append(FieldError(PATH, fe.too_long_body(MAX_GATE_LENGTH)))
    return errors


def update_errors(old: str | None, new: str | None) -> list[FieldError]:
    """Kueue's webhook on an update of the annotation: no gate added after creation, only removed
    (reordering is fine), and the new value well-formed."""
    errors: list[FieldError] = []
    if not old and new:
        errors.append(fe.forbidden(PATH, "cannot add admission gate after creation"))
    if old and new and any(g not in split(old) for g in split(new)):
        errors.append(fe.forbidden(PATH, "can only remove gates, not add new ones"))
    return errors + format_errors(new)


def removed_by_update(old: str | None, new: str | None) -> list[str]:
    """The gates an update of the annotation from `old` to `new` removes (it passed update_errors)."""
    kept = set(split(new))
    return [g for g in split(old) if g and g not in kept]


# --- removal -------------------------------------------------------------------------------------


def parse(value: Any) -> GateRemoval:
    """The removal a signal or an update carries (its one decoded argument), or a GateError saying
    what is wrong with it."""
    try:
        removal = parse_model(value, GateRemoval, "removal")
    except PayloadRefused as err:
        raise GateError(f"invalid admission gate removal: {err}") from None
    if removal.all and removal.gates:
        raise GateError("invalid admission gate removal: give either gates or all, not both")
    if not removal.all and not removal.gates:
        raise GateError("invalid admission gate removal: name the gates to remove (gates), or all")
    names = [g.strip() for g in removal.gates]
    if "" in names:
        raise GateError("invalid admission gate removal: gates: cannot contain empty gate names")
    twice = next((g for i, g in enumerate(names) if g in names[:i]), None)
    if twice is not None:
        raise GateError(f"invalid admission gate removal: gates: duplicate gate name: {twice}")
    return removal.model_copy(update={"gates": names})


def remaining(current: Sequence[str], removal: GateRemoval, key: str) -> list[str]:
    """The gates left once `removal` is applied to `current`, or a GateError: a workload that is not
    gated, or a gate it does not have, is refused whole (nothing is removed)."""
    if not current:
        raise GateError(f"workload {key} is not gated: it has no {ANNOTATION} annotation")
    if removal.all:
        return []
    missing = [g for g in removal.gates if g not in current]
    if missing:
        raise GateError(f"workload {key} is not gated by {', '.join(missing)} (its gates: {', '.join(current)})")
    return [g for g in current if g not in removal.gates]


def validate(state: WorkloadState, removal: GateRemoval) -> list[str]:
    """The gates that would remain, or a GateError naming the first problem."""
    if wl.is_finished(state) or state.deleted:
        raise GateError(f"workload {state.key} is finished; its admission gates no longer apply")
    return remaining(gates(state.workload), removal, state.key)


def receive(state: WorkloadState, removal: GateRemoval, now: datetime) -> str:
    """A removal from a signal or an update: applied if it applies to the workload, else a Warning
    event says why and nothing changes. Never raises. Returns what became of it, in words."""
    try:
        left = validate(state, removal)
    except GateError as err:
        wl.record(state, REFUSED, str(err), now, "Warning")
        return str(err)
    _rewrite(state.workload, left)
    return f"gates left: {', '.join(left) or 'none'}"


def _rewrite(workload: Workload, left: Sequence[str]) -> None:
    annotations = dict(workload.metadata.annotations or {})
    if left:
        annotations[ANNOTATION] = ",".join(left)  # Kueue's csv.Serialize
    else:
        annotations.pop(ANNOTATION, None)
    workload.metadata.annotations = annotations or None


# --- what the gates do to the workload -------------------------------------------------------------


def holds_back(state: WorkloadState) -> bool:
    """The workload stays out of its queue for its gates: its annotation names some."""
    return not may_enter_admission(state.workload)


def sync(state: WorkloadState, now: datetime) -> None:
    """The `QuotaReserved` condition follows the annotation, as Kueue's workload controller keeps it:
    a pending gated workload says `AdmissionGated` with its gates (again, with the gates left, after
    one is removed), and says `PendingEvaluation` once the last one goes. A workload that is
    inactive, holds quota or has ended keeps what its own state says."""
    st = state.status
    reserved = cond.find(st.conditions, wl.QUOTA_RESERVED)
    waiting = (
        not wl.has_quota(state) and not wl.is_finished(state) and not state.deleted
        and state.workload.spec.active is not False
    )
    left = gates(state.workload)
    if left and waiting:
        value = ",".join(left)
        message = f"Admission is gated by: {value}"
        if reserved is None or reserved.reason != GATED or reserved.message != message:
            wl.set_pending(state, GATED, message, now)
            wl.record(state, GATED, f"Workload admission is gated by: {value}", now)
    elif not left and reserved is not None and reserved.status == "False" and reserved.reason == GATED:
        wl.set_pending(state, PENDING_EVALUATION, CLEARED_MESSAGE, now)
        wl.record(state, CLEARED, CLEARED_NOTE, now)


def details(state: WorkloadState) -> str | None:
    """The line of the UI's current details about the gates, while any remain."""
    left = gates(state.workload)
    if not left or wl.is_finished(state) or state.deleted:
        return None
    names = ", ".join(f"`{g}`" for g in left)
    return (
        f"admission gated by {names}: removed by `admitflow ungate workload {state.key} GATE` "
        "or the signal `remove_admission_gates`"
    )
