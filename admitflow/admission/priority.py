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

A submitted workload's spec cannot be changed in admitflow yet. A change of its priority fields
only is refused with Kueue's own words where Kueue refuses it too (the Workload CRD's rules while
quota is reserved: the reference may not be set or removed, its group and kind stay, a pod
PriorityClass's name stays), and otherwise says that Kueue allows the change and admitflow does
not yet (`change_refusal`).

`class_name` is Kueue's `workload.PriorityClassName`: the `priority_class` label of the metrics.
"""

from __future__ import annotations

from collections.abc import Mapping

from admitflow.api import field_error as fe
from admitflow.api.field_error import FieldError
from admitflow.api.workload import WorkloadSpec
from admitflow.api.workload_priority_class import GROUP, RESOURCE

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
    """Why `wanted` may not replace the running workload's `submitted` spec when the two differ in
    their priority fields only; None when they do not (nothing changed there, or other fields
    changed too, which is refused as any change of a submitted workload's spec is)."""
    fields = {"priority": submitted.priority, "priority_class_ref": submitted.priority_class_ref}
    if wanted.model_copy(update=fields).to_wire() != submitted.to_wire():
        return None
    if (wanted.priority, wanted.priority_class_ref) == (submitted.priority, submitted.priority_class_ref):
        return None
    errors = update_errors(submitted, wanted, quota_reserved)
    if errors:
        return str(errors[0])
    what = "priority class" if wanted.priority_class_ref != submitted.priority_class_ref else "priority"
    path = "spec.priorityClassRef" if what == "priority class" else "spec.priority"
    return str(
        fe.forbidden(
            path,
            f"Kueue allows this change of a submitted workload's {what}, admitflow does not make it yet: "
            "delete the workload and apply it again",
        )
    )
