"""What Kubernetes' apiserver and Job controller do to a stored batch/v1 Job, as pure functions: the
rules admitflow's own Job store (workflows/job_store.py) keeps, and tests/k8s_fake.py's Jobs follow.

- `created`: a Job as the apiserver stores it on create: its generated name (from `generateName`),
  UID, creation time, resourceVersion and generation, its defaults (`admitflow.api.job.with_defaults`),
  the labels it puts on the pod template and the selector it generates from them, no status.
- `patched`: a JSON merge patch applied to the Job or to its status subresource, refused with a
  409 Conflict when it names another resourceVersion than the stored one, and with the apiserver's
  field errors when the result is not a valid Job or breaks an update rule (`update_errors`).
- `with_suspension`: the Job controller's bookkeeping of suspension, which admitflow's store does
  itself for its Jobs: the `Suspended` condition, and `startTime` when the Job is resumed.

Sources: kubernetes pkg/registry/batch/job/strategy.go (PrepareForCreate, generateSelector,
PrepareForUpdate, the status strategy), pkg/apis/batch/validation/validation.go
(ValidateJobSpecUpdate, validatePodTemplateUpdate), pkg/controller/job/job_controller.go (the
Suspended condition).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import datetime
from typing import Any, Literal

from pydantic import ValidationError

from admitflow.api import field_error as fe
from admitflow.api import merge_patch
from admitflow.api.field_error import FieldError
from admitflow.api.job import (
    CONTROLLER_UID_LABEL,
    JOB_NAME_LABEL,
    LEGACY_CONTROLLER_UID_LABEL,
    LEGACY_JOB_NAME_LABEL,
    SUSPENDED,
    Job,
    with_defaults,
)
from admitflow.api.names import generated_name

RESOURCE = "jobs.batch"
Subresource = Literal["", "status"]

# The fields of a suspended Job's pod template that may change while it has never started
# (Kubernetes' mutable scheduling directives): everything else of the template is immutable.
MUTABLE_SCHEDULING_DIRECTIVES = (
    ("metadata", "labels"),
    ("metadata", "annotations"),
    ("spec", "nodeSelector"),
    ("spec", "tolerations"),
    ("spec", "schedulingGates"),
)
# Immutable spec fields beside the template (ValidateJobSpecUpdate, and managedBy's own rule).
IMMUTABLE_SPEC_FIELDS = ("completions", "selector", "completionMode", "podFailurePolicy", "backoffLimitPerIndex", "managedBy")


class JobStoreError(ValueError):
    """A request the store refuses; `status` is the HTTP status an apiserver answers with, and the
    message its text (kubectl's `Error from server (...)` wording without that prefix)."""

    status = 422
    reason = "Invalid"


class JobConflict(JobStoreError):
    status = 409
    reason = "Conflict"

    def __init__(self, name: str) -> None:
        super().__init__(
            f'Operation cannot be fulfilled on {RESOURCE} "{name}": the object has been modified; '
            "please apply your changes to the latest version and try again"
        )


class JobNotFound(JobStoreError):
    status = 404
    reason = "NotFound"

    def __init__(self, name: str) -> None:
        super().__init__(f'{RESOURCE} "{name}" not found')


class JobAlreadyExists(JobStoreError):
    status = 409
    reason = "AlreadyExists"

    def __init__(self, name: str) -> None:
        super().__init__(f'{RESOURCE} "{name}" already exists')


class JobInvalid(JobStoreError):
    def __init__(self, name: str, errors: list[FieldError]) -> None:
        self.errors = errors
        shown = "; ".join(map(str, errors)) if len(errors) > 1 else str(errors[0])
        super().__init__(f'Job.batch "{name}" is invalid: {shown}')


def created(job: Job, uid: str, now: datetime, choice: Callable[[str], str] | None = None) -> Job:
    """The Job as the apiserver stores it on create. A Job with only `generateName` gets its name
    from `choice` (one character of a string, as `random.Random().choice`)."""
    meta = job.metadata
    name = meta.name
    if not name:
        if choice is None or not meta.generate_name:
            raise JobInvalid(meta.generate_name or "", [fe.required("metadata.name", "name or generateName is required")])
        name = generated_name(meta.generate_name, choice)
    job = with_defaults(job)
    wire = job.to_wire()
    wire.pop("status", None)
    metadata = wire["metadata"]
    metadata.update(name=name, uid=uid, resourceVersion="1", generation=1, creationTimestamp=_time(now))
    # generateSelector: the pods carry the Job's UID and name, and the Job selects them by UID.
    template_meta = wire["spec"]["template"].setdefault("metadata", {})
    labels = template_meta.setdefault("labels", {})
    labels.update({
        LEGACY_CONTROLLER_UID_LABEL: uid, CONTROLLER_UID_LABEL: uid, LEGACY_JOB_NAME_LABEL: name, JOB_NAME_LABEL: name,
    })
    if not wire["spec"].get("manualSelector"):
        wire["spec"]["selector"] = {"matchLabels": {CONTROLLER_UID_LABEL: uid}}
    stored = _valid(name, wire)
    errors = stored.validation_errors()
    if errors:
        raise JobInvalid(name, errors)
    return stored


def patched(job: Job, patch: dict[str, Any], subresource: Subresource = "") -> Job:
    """The Job after a JSON merge patch: of its spec and metadata (its status as it was), or of its
    status alone through the status subresource. A patch naming another resourceVersion is a
    conflict; one that changes nothing keeps the resourceVersion, as the apiserver does."""
    name = job.metadata.name or ""
    wanted = (patch.get("metadata") or {}).get("resourceVersion")
    if wanted is not None and wanted != job.metadata.resource_version:
        raise JobConflict(name)
    before = job.to_wire()
    after = merge_patch.apply(before, patch)
    # What a request may not change (the identity), and what the other half of the object keeps.
    for field in ("name", "namespace", "uid", "creationTimestamp", "resourceVersion", "generation"):
        if field in before["metadata"]:
            after.setdefault("metadata", {})[field] = before["metadata"][field]
    if subresource == "status":
        after = {**before, "status": after.get("status") or {}}
    else:
        after["status"] = before.get("status") or {}
    if after == before:
        return job
    new = _valid(name, after)
    errors = new.validation_errors() + update_errors(job, new)
    if errors:
        raise JobInvalid(name, errors)
    wire = new.to_wire()
    wire["metadata"]["resourceVersion"] = str(int(job.metadata.resource_version or "0") + 1)
    if before["spec"] != wire["spec"]:
        wire["metadata"]["generation"] = (job.metadata.generation or 0) + 1
    return Job.model_validate(wire)


def update_errors(old: Job, new: Job) -> list[FieldError]:
    """The update rules the Job's schema does not carry (ValidateJobSpecUpdate): completions,
    selector, completionMode, podFailurePolicy, backoffLimitPerIndex and managedBy never change; the
    pod template changes only while the Job is suspended and has never started (no
    status.startTime), and then only its scheduling directives (labels, annotations, nodeSelector,
    tolerations, schedulingGates: what Kueue's admission injects and its eviction restores)."""
    errors: list[FieldError] = []
    old_spec, new_spec = old.to_wire()["spec"], new.to_wire()["spec"]
    for field in IMMUTABLE_SPEC_FIELDS:
        if old_spec.get(field) != new_spec.get(field):
            errors.append(fe.invalid(f"spec.{field}", new_spec.get(field), "field is immutable"))
    old_template, new_template = copy.deepcopy(old_spec["template"]), new_spec["template"]
    if old.spec.suspend is True and old.status.start_time is None:
        for part, key in MUTABLE_SCHEDULING_DIRECTIVES:
            holder = old_template.setdefault(part, {})
            holder.pop(key, None)
            if key in (new_template.get(part) or {}):
                holder[key] = new_template[part][key]
        if not old_template["metadata"]:
            del old_template["metadata"]
    if old_template != new_template:
        errors.append(fe.invalid("spec.template", "[omitted]", "field is immutable"))
    return errors


def with_suspension(job: Job, now: datetime) -> Job:
    """The Job controller's status for a Job's suspension: a `Suspended` condition, True (reason
    JobSuspended) while `suspend` is set, False (JobResumed) once it is resumed, which also sets
    `startTime`; a finished Job is left alone. The Job itself when nothing changes."""
    status = job.status
    if any(c.type in ("Complete", "Failed") and c.status == "True" for c in status.conditions or ()):
        return job
    wire = job.to_wire()
    st = wire.setdefault("status", {})
    conditions = st.setdefault("conditions", [])
    current = next((c for c in conditions if c["type"] == SUSPENDED), None)
    suspend = job.spec.suspend is True
    if suspend and (current is None or current["status"] != "True"):
        _set_condition(conditions, current, "True", "JobSuspended", "Job suspended", now)
    elif not suspend and current is not None and current["status"] == "True":
        _set_condition(conditions, current, "False", "JobResumed", "Job resumed", now)
    if not suspend and "startTime" not in st:
        st["startTime"] = _time(now)
    if not conditions:
        del st["conditions"]
    if wire == job.to_wire():
        return job
    return Job.model_validate(wire)


def _set_condition(conditions: list[dict], current: dict | None, status: str, reason: str, message: str, now: datetime) -> None:
    entry = {"type": SUSPENDED, "status": status, "lastProbeTime": _time(now), "lastTransitionTime": _time(now),
             "reason": reason, "message": message}
    if current is None:
        conditions.append(entry)
    else:
        current.clear()
        current.update(entry)


def _valid(name: str, wire: dict[str, Any]) -> Job:
    try:
        return Job.model_validate(wire)
    except ValidationError as err:
        raise JobInvalid(name, [fe.from_pydantic(err.errors()[0], Job)]) from None


def _time(now: datetime) -> str:
    return now.replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")
