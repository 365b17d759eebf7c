"""A workload's priority from the WorkloadPriorityClass it names, and which changes of it Kueue allows.

In Kueue the job controller builds each Workload: it looks up the WorkloadPriorityClass its job
names and writes `priorityClassRef` and `priority` (the class's value) into the new Workload; a
class that does not exist stops the Workload from being created, with the apiserver's
`workloadpriorityclasses.kueue.x-k8s.io "<name>" not found` (pkg/controller/jobframework
`ExtractPriority`, pkg/util/priority). admitflow is given Workloads, not jobs, so `admitflow apply`
plays that part when it submits them (`resolve`):

- a workload that gives `spec.priority` keeps it, whatever class it names: Kueue's Workload API
  takes a priority as written;
- one that names a WorkloadPriorityClass without `priority` gets the class's value, or is refused
  when there is no such class;
- applied again while it runs, naming the same class and still without `priority`, it keeps the
  priority it was submitted with: a class whose value changed since does not reach it ("changing
  the value of workloadPriorityClass doesn't affect the priority of workloads that were already
  created", the field's documentation in Kueue);
- no class, or a pod PriorityClass (scheduling.k8s.io, which admitflow does not hold and which
  therefore needs `priority`): nothing to resolve.

A submitted workload's priority may change as Kueue allows (`change_refusal` says when it may
not, in Kueue's words: the Workload CRD's rules while quota is reserved: the reference may not be
set or removed, its group and kind stay, a pod PriorityClass's name stays). `admitflow apply` sends
the change to the workload (`PriorityChange`, update `apply_priority`); the workload checks it again
against its own state (`receive`), takes it, and tells its ClusterQueue, which reorders its entry
(and takes it out of the inadmissible set, as Kueue's queue does for a changed spec) or, for a
workload holding quota, the reservation's priority that preemption compares. Any other change of
a submitted workload's spec is refused by the client.

`class_name` is Kueue's `workload.PriorityClassName`: the `priority_class` label of the metrics.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import Field

from admitflow.admission import workload as wl
from admitflow.admission.workload import WorkloadState
from admitflow.api import field_error as fe
from admitflow.api.bounds import INT32_MAX, INT32_MIN
from admitflow.api.field_error import FieldError
from admitflow.api.workload import PriorityClassRef, WorkloadSpec
from admitflow.api.workload_priority_class import GROUP, RESOURCE
from admitflow.wire import PayloadRefused, WireModel, parse_model

KIND = "WorkloadPriorityClass"
POD_PRIORITY_CLASS = ("scheduling.k8s.io", "PriorityClass")


class PriorityError(ValueError):
    """A workload whose priority cannot be resolved; the message is one line, Kueue's."""


def names_class(spec: WorkloadSpec) -> bool:
    """True when the workload refers to a WorkloadPriorityClass."""
    ref = spec.priority_class_ref
    return ref is not None and (ref.group, ref.kind) == (GROUP, KIND)


def needs_class(spec: WorkloadSpec) -> bool:
    """True when the priority has to come from a WorkloadPriorityClass's value."""
    return names_class(spec) and spec.priority is None


def class_name(spec: WorkloadSpec) -> str:
    """The name of the priority class the workload refers to (either kind), or ""."""
    ref = spec.priority_class_ref
    return ref.name if ref is not None else ""


def not_found(name: str) -> str:
    return f'{RESOURCE} "{name}" not found'


def resolve(spec: WorkloadSpec, values: Mapping[str, int], submitted: WorkloadSpec | None = None) -> WorkloadSpec:
    """The spec to submit: `spec` with its priority filled in from `values` (WorkloadPriorityClass
    name -> value) when it names a class and gives none. `submitted` is the spec of the same
    workload already running, if any. Raises PriorityError when the class is not there."""
    if not needs_class(spec):
        return spec
    ref = spec.priority_class_ref
    assert ref is not None
    if submitted is not None and submitted.priority_class_ref == ref and submitted.priority is not None:
        return spec.model_copy(update={"priority": submitted.priority})
    if ref.name not in values:
        raise PriorityError(not_found(ref.name))
    return spec.model_copy(update={"priority": values[ref.name]})


def update_errors(old: WorkloadSpec, new: WorkloadSpec, quota_reserved: bool) -> list[FieldError]:
    """The Workload CRD's rules on `priorityClassRef` when a workload holding quota is updated
    (apis/kueue/v1beta2/workload_types.go). `priority` itself may always change."""
    if not quota_reserved:
        return []
    was, now = old.priority_class_ref, new.priority_class_ref
    if (was is None) != (now is None):
        return [fe.cel("", "object", "priorityClassRef is immutable while workload quota reserved")]
    if was is None or now is None:
        return []
    errors = []
    if was.group != now.group:
        errors.append(fe.cel("", "object", "priorityClassRef.group is immutable while workload quota reserved"))
    if was.kind != now.kind:
        errors.append(fe.cel("", "object", "priorityClassRef.kind is immutable while workload quota reserved"))
    if (now.group, now.kind) == POD_PRIORITY_CLASS and was.name != now.name:
        message = "priorityClassRef.name is immutable for scheduling.k8s.io/priorityclass while workload quota reserved"
        errors.append(fe.cel("", "object", message))
    return errors


def change_refusal(submitted: WorkloadSpec, wanted: WorkloadSpec, quota_reserved: bool) -> str | None:
    """Why `wanted` may not replace the running workload's `submitted` spec, when the two differ in
    their priority fields only (Kueue's words); None when the change is allowed, or when other
    fields changed too (refused by the caller, as any change of a submitted workload's spec is)."""
    if not priority_only(submitted, wanted):
        return None
    errors = update_errors(submitted, wanted, quota_reserved)
    return str(errors[0]) if errors else None


def priority_only(submitted: WorkloadSpec, wanted: WorkloadSpec) -> bool:
    """`wanted` differs from `submitted` in `priority` or `priorityClassRef`, and in nothing else."""
    fields = {"priority": submitted.priority, "priority_class_ref": submitted.priority_class_ref}
    if wanted.model_copy(update=fields).to_wire() != submitted.to_wire():
        return False
    return (wanted.priority, wanted.priority_class_ref) != (submitted.priority, submitted.priority_class_ref)


# --- the change, as the workload takes it ------------------------------------------------------------

CHANGED = "PriorityChanged"
REFUSED = "InvalidPriorityChange"


class PriorityChange(WireModel):
    """`apply_priority` (update): a submitted workload's new priority fields, resolved by `admitflow
    apply` (a class named without `priority` has its value filled in)."""

    priority: int = Field(ge=INT32_MIN, le=INT32_MAX, description="The new priority; an int32.")
    priority_class_ref: PriorityClassRef | None = Field(default=None, description="The class it comes from, if any.")


def parse(value: Any) -> PriorityChange:
    """The change an update carries (its one decoded argument), or a PriorityError saying what is
    wrong with it."""
    try:
        return parse_model(value, PriorityChange, "change")
    except PayloadRefused as err:
        raise PriorityError(f"invalid priority change: {err}") from None


def validate(state: WorkloadState, change: PriorityChange) -> WorkloadSpec:
    """The workload's spec with the change made, or a PriorityError: an ended workload, or a change
    the Workload CRD refuses while quota is reserved."""
    if wl.is_finished(state) or state.deleted:
        raise PriorityError(f"workload {state.key} is finished; its priority no longer matters")
    spec = state.workload.spec
    wanted = spec.model_copy(update={"priority": change.priority, "priority_class_ref": change.priority_class_ref})
    errors = update_errors(spec, wanted, wl.has_quota(state))
    if errors:
        raise PriorityError(f"workload {state.key}: {errors[0]}")
    return wanted


def receive(state: WorkloadState, change: PriorityChange, now: datetime) -> bool:
    """A change from an update: made if it applies (a Normal event `PriorityChanged` says from what
    to what), else a Warning event says why and nothing changes. Never raises. Returns whether the
    priority or its class changed."""
    try:
        wanted = validate(state, change)
    except PriorityError as err:
        wl.record(state, REFUSED, str(err), now, "Warning")
        return False
    spec = state.workload.spec
    if (wanted.priority, wanted.priority_class_ref) == (spec.priority, spec.priority_class_ref):
        return False
    was, to = class_name(spec), class_name(wanted)
    classes = f" (class {was or 'none'} -> {to or 'none'})" if was != to else ""
    wl.record(state, CHANGED, f"Priority changed from {spec.priority or 0} to {wanted.priority}{classes}", now)
    state.workload.spec = wanted
    return True
