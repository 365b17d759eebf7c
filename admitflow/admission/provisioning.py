"""The built-in ProvisioningRequest check (KEP-1136), as Kueue's provisioning controller implements it
(reference `kueue-behaviour.md` §2): which request an attempt creates, what its conditions mean for
the check, and which requests must go.

The workload workflow is the controller. `reconcile` runs whenever the workload changes: it says
which attempts start (one `ProvisioningCheckWorkflow` each) and which are deleted, and sets the
check states that need no request (`the check is not active`, `the provisioning request is not
needed`). `on_status` maps a request's conditions to the check's state, in Kueue's order: Failed,
CapacityRevoked, BookingExpired, Provisioned, Accepted.

Pure and deterministic: the workflow passes `now` and a random number for the jitter.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pydantic import Field, ValidationError

from admitflow import ids
from admitflow.admission import backoff, checks, pod_set_updates, semantic_equality
from admitflow.admission import workload as wl
from admitflow.admission.checks import Verdict
from admitflow.admission.workload import ProvisioningAttempt as Attempt
from admitflow.admission.workload import WorkloadState
from admitflow.api import AdmissionCheckState
from admitflow.api.admission_check import PROVISIONING_REQUEST_CONTROLLER_NAME
from admitflow.api.names import DNS1123_SUBDOMAIN_MAX_LENGTH
from admitflow.api.pod import PodTemplateSpec
from admitflow.api.provisioning_request import (
    ACCEPTED,
    BOOKING_EXPIRED,
    CAPACITY_REVOKED,
    CLASS_NAME_ANNOTATION,
    CONSUME_ANNOTATION,
    FAILED,
    MANAGED_LABEL,
    PROVISIONED,
    WORKLOAD_ANNOTATION,
    PodTemplate,
    ProvisioningRequest,
    annotation_parameters,
    parameter_errors,
)
from admitflow.api.provisioning_request_config import ProvisioningRequestConfigSpec, ProvisioningRequestRetryStrategy
from admitflow.api.workload import PodSet, PodSetUpdate
from admitflow.wire import WireModel, first_error

NOT_NEEDED_MESSAGE = "the provisioning request is not needed"
PARAMETERS_FROM = "the ProvisioningRequestConfig's parameters with the workload's provreq.kueue.x-k8s.io/ annotations"
INACTIVE_MESSAGE = "the check is not active"
WORKFLOW_PREFIX = "provisioning/"


class Plan(WireModel):
    """What one attempt creates."""

    attempt: Attempt
    request: ProvisioningRequest
    pod_templates: list[PodTemplate]


class Unsendable(WireModel):
    """An attempt whose request an API server would refuse (`message` says why): none is made, and
    the check says so."""

    message: str


class Commands(WireModel):
    """What `reconcile` asks the workflow to carry out."""

    start: list[Plan] = Field(default_factory=list)
    stop: list[Attempt] = Field(default_factory=list, description="Delete their requests and end their workflows.")


# --- names ----------------------------------------------------------------------------------------


# Kueue's objNameHashLength and objNameMaxPrefixLength (252 - objNameHashLength).
OBJECT_NAME_HASH_LENGTH = 5
OBJECT_NAME_MAX_PREFIX_LENGTH = DNS1123_SUBDOMAIN_MAX_LENGTH - 1 - OBJECT_NAME_HASH_LENGTH


def limit_object_name(full: str) -> str:
    """Kueue's limitObjectName: a name of up to 247 characters is kept; a longer one (even one of
    248 to 253, which would fit) becomes its first 247 characters, `-` and the first 5 hex digits
    of the SHA-1 of the whole name: 253 characters.

    One difference, so that every name is one an API server takes: a head that ends in `.` (a
    check `p.rov` cut after its `p.`) loses its trailing dots, as `p.-819fe` is not a DNS
    subdomain (`.` must be followed by an alphanumeric). Kueue would send that name and record
    the API server's refusal. A `-` at the cut is kept (`p--819fe` is valid)."""
    cut = ids.shorten(full, DNS1123_SUBDOMAIN_MAX_LENGTH, OBJECT_NAME_HASH_LENGTH, keep=OBJECT_NAME_MAX_PREFIX_LENGTH)
    if cut == full:
        return full
    head, _, digest = cut.rpartition("-")
    return f"{head.rstrip('.')}-{digest}"


def newer(seen: ProvisioningRequest, than: ProvisioningRequest) -> bool:
    """Whether a pushed request is a later state than one already known. A backend that reads a
    request back after creating it may already see a later state than its first pushes carry;
    those stale pushes are not news. Resource versions are compared as numbers where both are
    (the simulated autoscaler's), else any difference is news."""
    a, b = seen.metadata.resource_version, than.metadata.resource_version
    if a is not None and b is not None and a.isdigit() and b.isdigit():
        return int(a) > int(b)
    return a != b


def request_name(workload: str, check: str, attempt: int) -> str:
    return limit_object_name(f"{workload}-{check}-{attempt}")


def pod_template_name(request: str, pod_set: str) -> str:
    return limit_object_name(f"ppt-{request}-{pod_set}")


def workflow_id(namespace: str, workload: str, check: str, attempt: int) -> str:
    """`provisioning/<namespace>/<workload>/<check>/<attempt>`, cut to ids.MAX_ID_LENGTH with a hash
    when longer (a workload and a check may have names of 253 characters)."""
    return ids.limit_id(f"{WORKFLOW_PREFIX}{namespace}/{workload}/{check}/{attempt}")


# --- config -----------------------------------------------------------------------------------------


def is_provisioning(state: WorkloadState, check: str) -> bool:
    info = state.checks_info.get(check)
    return info is not None and info.controller_name == PROVISIONING_REQUEST_CONTROLLER_NAME


def config_of(state: WorkloadState, check: str) -> ProvisioningRequestConfigSpec | None:
    """The check's ProvisioningRequestConfig, or None when it is missing (the check is inactive)."""
    info = state.checks_info.get(check)
    if info is None or info.parameters is None:
        return None
    try:
        return ProvisioningRequestConfigSpec.model_validate(info.parameters)
    except ValidationError:
        return None  # the parameters reference names another kind


def parameters(config: ProvisioningRequestConfigSpec, annotations: dict[str, str] | None) -> dict[str, str]:
    """The config's parameters, overridden by `provreq.kueue.x-k8s.io/<key>` workload annotations."""
    return {**(config.parameters or {}), **annotation_parameters(annotations)}


def in_sync(attempt: Attempt, config: ProvisioningRequestConfigSpec) -> bool:
    """Kueue keeps a request only while it matches its config: same class, and every parameter of
    the config present with the same value."""
    if attempt.class_name != config.provisioning_class_name:
        return False
    return all(attempt.parameters.get(k) == v for k, v in (config.parameters or {}).items())


def backoff_seconds(strategy: ProvisioningRequestRetryStrategy, n: int, random: float) -> int:
    """Kueue's delay before the n-th retry of a request (admitflow.admission.backoff)."""
    return backoff.backoff_seconds(strategy.backoff_base_seconds, strategy.backoff_max_seconds, n, random)


# --- what a request holds ---------------------------------------------------------------------------


def _needs(pod_set: PodSet, managed: Sequence[str]) -> bool:
    """Without managedResources every podSet counts; with them, those whose containers or init
    containers request or limit one of them."""
    if not managed:
        return True
    spec = pod_set.template.spec
    for c in [*spec.containers, *(spec.init_containers or [])]:
        r = c.resources
        names = set((r.requests or {}) if r else {}) | set((r.limits or {}) if r else {})
        if names & set(managed):
            return True
    return False


def _template(pod_set: PodSet, node_selector: dict[str, str], tolerations: list[dict[str, Any]]) -> PodTemplateSpec:
    """The podSet's template with its flavors' node labels and tolerations merged in, and limits
    standing in for missing requests (Kueue's podset.Merge and UseLimitsAsMissingRequestsInPod)."""
    wire = pod_set.template.to_wire()
    spec = wire.setdefault("spec", {})
    if node_selector:
        spec["nodeSelector"] = {**node_selector, **(spec.get("nodeSelector") or {})}
    if tolerations:
        have = spec.setdefault("tolerations", [])
        for t in tolerations:
            if t not in have:
                have.append(t)
    for key in ("containers", "initContainers"):
        for c in spec.get(key) or ():
            resources = c.get("resources") or {}
            limits = resources.get("limits") or {}
            if limits:
                resources["requests"] = {**limits, **(resources.get("requests") or {})}
                c["resources"] = resources
    return PodTemplateSpec.model_validate(wire)


def _scheduling_requirements(template: dict[str, Any]) -> tuple[object, ...]:
    """What Kueue's arePodSetsSimilar compares: each container's and init container's requests,
    the pod's resources, nodeSelector, tolerations, affinity and resourceClaims."""
    spec = template.get("spec") or {}
    return (
        _requests(spec.get("containers")),
        _requests(spec.get("initContainers")),
        *(spec.get(k) for k in ("resources", "nodeSelector", "tolerations", "affinity", "resourceClaims")),
    )


def _requests(containers: list[dict[str, Any]] | None) -> list[object]:
    """Each container's requests (wire JSON)."""
    return [(c.get("resources") or {}).get("requests") for c in containers or ()]


def _same(policy: str | None, a: PodSet, b: PodSet) -> bool:
    """Kueue's canMergePodSets: the podSets' templates as written (before flavors and limits are
    merged in), compared with Kubernetes' semantic equality (quantities by value)."""
    if policy is None:
        return False
    ta, tb = semantic_equality.normalized(a.template.to_wire()), semantic_equality.normalized(b.template.to_wire())
    if policy == "IdenticalPodTemplates":
        return ta == tb
    return _scheduling_requirements(ta) == _scheduling_requirements(tb)


def plan(state: WorkloadState, check: str, attempt: int, config: ProvisioningRequestConfigSpec) -> Plan | Unsendable | None:
    """The request an attempt creates, or None when no podSet needs one (then the check is Ready
    without a request), or Unsendable when the request would be refused (more than 100 parameters
    or a value over 255 characters, from the config and the workload's annotations together).
    Podsets of interest: admitted with pods, and (with managedResources) asking for one of them;
    merged by podSetMergePolicy, the first one standing for the group."""
    meta = state.workload.metadata
    admission = state.status.admission
    if admission is None:
        return None
    assigned = {a.name: a for a in admission.pod_set_assignments}
    infos = {i.name: i for i in pod_set_updates.merge(admission, state.flavors, [])}
    merged: list[tuple[PodSet, int]] = []
    for ps in state.workload.spec.pod_sets:
        a = assigned.get(ps.name)
        count = a.count if a is not None and a.count is not None else ps.count
        if ps.count <= 0 or count <= 0 or not _needs(ps, config.managed_resources or []):
            continue
        for i, (first, n) in enumerate(merged):
            if _same(config.pod_set_merge_policy, first, ps):
                merged[i] = (first, n + count)
                break
        else:
            merged.append((ps, count))
    if not merged:
        return None
    groups: list[tuple[str, PodTemplateSpec, int]] = []
    for ps, count in merged:
        # A merged group's template is its first podSet's, with that podSet's flavors (Kueue's).
        info = infos.get(ps.name)
        template = _template(ps, info.node_selector if info else {}, [t.to_wire() for t in info.tolerations] if info else [])
        groups.append((ps.name, template, count))
    name = request_name(meta.name, check, attempt)
    params = parameters(config, meta.annotations)
    refused = parameter_errors(params, "spec.parameters", why=PARAMETERS_FROM)
    if refused:
        return Unsendable(message=f'ProvisioningRequest "{name}" is not created, it would be invalid: {refused[0]}')
    try:
        templates, request = _objects(state, name, params, config, groups)
    except ValidationError as err:
        return Unsendable(message=f'ProvisioningRequest "{name}" is not created, it would be invalid: {first_error(err)}')
    return Plan(
        attempt=Attempt(
            check=check,
            attempt=attempt,
            name=name,
            workflow_id=workflow_id(meta.namespace, meta.name, check, attempt),
            class_name=config.provisioning_class_name,
            parameters=params,
            pod_sets=[ps for ps, _, _ in groups],
        ),
        request=request,
        pod_templates=templates,
    )


def _objects(
    state: WorkloadState,
    name: str,
    params: dict[str, str],
    config: ProvisioningRequestConfigSpec,
    groups: list[tuple[str, PodTemplateSpec, int]],
) -> tuple[list[PodTemplate], ProvisioningRequest]:
    meta = state.workload.metadata
    labels = {MANAGED_LABEL: "true"}
    templates = [
        PodTemplate.model_validate(
            {
                "metadata": {"name": pod_template_name(name, ps), "namespace": meta.namespace, "labels": labels},
                "template": t.to_wire(),
            }
        )
        for ps, t, _ in groups
    ]
    request = ProvisioningRequest.model_validate(
        {
            "metadata": {
                "name": name,
                "namespace": meta.namespace,
                "labels": labels,
                "annotations": {WORKLOAD_ANNOTATION: state.key},
            },
            "spec": {
                "provisioningClassName": config.provisioning_class_name,
                "parameters": params or None,
                "podSets": [
                    {"podTemplateRef": {"name": tpl.metadata.name}, "count": n} for tpl, (_, _, n) in zip(templates, groups)
                ],
            },
        }
    )
    return templates, request


# --- reconcile ---------------------------------------------------------------------------------------


def reconcile(state: WorkloadState) -> tuple[Commands, list[Verdict]]:
    """Kueue's provisioning Reconcile for this workload: the attempts to start and to delete, and
    the verdicts for checks that need no request. `state.provisioning.current` and `state.provisioning.stopping` are
    updated; the verdicts are for the caller to apply. An attempt whose workflow ID is still
    stopping (the same attempt number again, after a config change or a preemption) starts on a
    later call, once that workflow has ended."""
    cmds = Commands()
    verdicts: list[Verdict] = []
    current = state.provisioning.current
    if not wl.has_quota(state) or wl.is_finished(state) or state.deleted:
        # Finished, evicted, deactivated or deleted: every request goes (Kueue's cleanup on
        # eviction is on by default). Quota released without an eviction keeps them.
        evicted = any(c.type == wl.EVICTED and c.status == "True" for c in state.status.conditions or ())
        if wl.is_finished(state) or state.deleted or evicted or state.workload.spec.active is False:
            for name in list(current):
                _stop(state, cmds, name)
        return cmds, verdicts
    checks = {c.name: c for c in state.status.admission_checks or () if is_provisioning(state, c.name)}
    for name in [n for n in current if n not in checks]:
        _stop(state, cmds, name)  # the queue no longer asks for this check
    for name, check in checks.items():
        config = config_of(state, name)
        attempt = current.get(name)
        if config is None:
            _stop(state, cmds, name)
            verdicts += _change(check, "Pending", INACTIVE_MESSAGE)
            continue
        p = plan(state, name, (check.retry_count or 0) + 1, config)
        if p is None:
            _stop(state, cmds, name)
            verdicts += _change(check, "Ready", NOT_NEEDED_MESSAGE)
            continue
        if attempt is not None and not in_sync(attempt, config):
            _stop(state, cmds, name)
            attempt = None
        if check.state == "Ready":
            continue  # a request deleted after Ready is not made again
        if isinstance(p, Unsendable):
            if attempt is None:
                verdicts += _change(check, "Pending", p.message)
            continue
        if attempt is None:
            number = (check.retry_count or 0) + 1
        elif check.state == "Pending" and attempt.request is not None and (
            attempt.request.is_true(FAILED) or (attempt.request.is_true(BOOKING_EXPIRED) and not wl.is_admitted(state))
        ):
            number = attempt.attempt + 1
            _stop(state, cmds, name)
        else:
            continue
        p = p if number == p.attempt.attempt else plan(state, name, number, config)
        if isinstance(p, Unsendable):
            verdicts += _change(check, "Pending", p.message)
            continue
        if p is None or _still_stopping(state, p.attempt):
            continue
        current[name] = p.attempt
        cmds.start.append(p)
    return cmds, verdicts


def _stop(state: WorkloadState, cmds: Commands, check: str) -> None:
    attempt = state.provisioning.current.pop(check, None)
    if attempt is not None:
        cmds.stop.append(attempt)
        if attempt.workflow_id not in state.provisioning.stopping:
            state.provisioning.stopping.append(attempt.workflow_id)


def _attempt_id(state: WorkloadState, check: str, attempt: int) -> str:
    meta = state.workload.metadata
    return workflow_id(meta.namespace, meta.name, check, attempt)


def _still_stopping(state: WorkloadState, attempt: Attempt) -> bool:
    return _attempt_id(state, attempt.check, attempt.attempt) in state.provisioning.stopping


def stopped(state: WorkloadState, check: str, attempt: int) -> None:
    """An attempt's workflow ended (its request deleted, by us or by someone else): a current
    attempt that vanished is made again by the next reconcile."""
    current = attempt_for(state, check, attempt)
    if current is not None:
        del state.provisioning.current[check]
    state.provisioning.stopping = [wid for wid in state.provisioning.stopping if wid != _attempt_id(state, check, attempt)]


def _change(check: AdmissionCheckState, state: str, message: str) -> list[Verdict]:
    if check.state == state and check.message == message:
        return []
    return [Verdict(name=check.name, state=state, message=message)]


# --- conditions -> check state ------------------------------------------------------------------------


def stale(state: WorkloadState, check: str, number: int) -> bool:
    """Whether an attempt is older than the check's current one: its number is at most the check's
    retryCount (the current attempt is retryCount + 1). Kueue's syncCheckStates retries only a
    request whose attempt is above retryCount ("We don't want to Retry on old
    ProvisioningRequests")."""
    c = next((c for c in state.status.admission_checks or () if c.name == check), None)
    return c is not None and number <= (c.retry_count or 0)


def on_status(state: WorkloadState, attempt: Attempt, random: float) -> Verdict | None:
    """Kueue's syncCheckStates for one check: what the request's conditions make of the check, or
    None when nothing changes.

    The request of an attempt older than the check's current one (`stale`) changes nothing,
    whatever its conditions. When such a request is the newest Kueue finds (left over when
    requests are not deleted on eviction), Kueue keeps the check's state but still writes
    `Retrying after failure: ...` as its message, and rejects the check when the old attempt is
    past a lowered backoffLimitCount; here only the current attempt's request speaks for it."""
    check = next((c for c in state.status.admission_checks or () if c.name == attempt.check), None)
    config = config_of(state, attempt.check)
    pr = attempt.request
    if check is None or config is None or pr is None or not wl.has_quota(state):
        return None
    if stale(state, attempt.check, attempt.attempt):
        return None
    admitted = wl.is_admitted(state)

    def failed(condition: str, prefix: str) -> Verdict | None:
        return _retry_or_reject(check, config, attempt.attempt, _message(pr, condition), prefix, random)

    if pr.is_true(FAILED):
        return failed(FAILED, "Retrying after failure")
    if pr.is_true(CAPACITY_REVOKED):
        if state.workload.spec.active is False or wl.is_finished(state):
            return None
        return _verdict(check, "Rejected", _message(pr, CAPACITY_REVOKED))
    if pr.is_true(BOOKING_EXPIRED):
        return None if admitted else failed(BOOKING_EXPIRED, "Retrying after booking expired")
    if pr.is_true(PROVISIONED):
        if check.state == "Ready":
            return None
        return _verdict(check, "Ready", _message(pr, PROVISIONED), pod_set_updates=_pod_set_updates(attempt, config))
    provisioned = pr.condition(PROVISIONED)
    if pr.is_true(ACCEPTED):
        return _verdict(check, "Pending", provisioned.message) if provisioned is not None else None
    return _verdict(check, "Pending", "")


def _retry_or_reject(
    check: AdmissionCheckState, config: ProvisioningRequestConfigSpec, attempt: int, message: str, prefix: str, random: float
) -> Verdict | None:
    """Kueue's verdict for a failed attempt: Rejected past the config's backoffLimitCount, else
    Retry after its backoff."""
    if attempt > config.retry_strategy.backoff_limit_count:
        return _verdict(check, "Rejected", message)
    delay = backoff_seconds(config.retry_strategy, (check.retry_count or 0) + 1, random)
    return _verdict(check, "Retry", f"{prefix}: {message}", requeue_after_seconds=delay)


def retry_verdict(state: WorkloadState, check: AdmissionCheckState, message: str, random: float) -> Verdict | None:
    """A Retry of a ProvisioningRequest check that did not come from its request (its pendingTimeout
    ran out): as a failed request's, with the config's backoff and limit."""
    config = config_of(state, check.name)
    if config is None:
        return Verdict(name=check.name, state="Retry", message=message)
    return _retry_or_reject(check, config, (check.retry_count or 0) + 1, message, "Retrying", random)


def _message(pr: ProvisioningRequest, type_: str) -> str:
    c = pr.condition(type_)
    return c.message if c is not None else ""


def _verdict(check: AdmissionCheckState, state: str, message: str, **extra: Any) -> Verdict | None:
    v = Verdict(name=check.name, state=state, message=message, **extra)
    same = (
        check.state == v.state
        and check.message == v.message
        and (check.pod_set_updates or None) == (v.pod_set_updates or None)
        and (v.requeue_after_seconds is None or check.requeue_after_seconds == v.requeue_after_seconds)
    )
    return None if same else v


def _pod_set_updates(attempt: Attempt, config: ProvisioningRequestConfigSpec) -> list[PodSetUpdate]:
    """What pods need to land on the provisioned capacity: the consume and class annotations on the
    podSet each request podSet stands for, and node selectors from the class details."""
    details = (attempt.request.status.provisioning_class_details if attempt.request else None) or {}
    selectors = (config.pod_set_updates.node_selector if config.pod_set_updates else None) or []
    node_selector = {s.key: details[s.value_from_provisioning_class_detail] for s in selectors if s.value_from_provisioning_class_detail in details}
    return [
        PodSetUpdate.model_validate(
            {
                "name": ps,
                "annotations": {CONSUME_ANNOTATION: attempt.name, CLASS_NAME_ANNOTATION: attempt.class_name},
                **({"nodeSelector": node_selector} if selectors else {}),
            }
        )
        for ps in attempt.pod_sets
    ]


def report(
    state: WorkloadState, check: str, number: int, request: ProvisioningRequest | None, error: str, now: datetime, random: float
) -> None:
    """What an attempt's workflow reported: its request as it is now, or why it could not be
    created (Kueue's `FailedCreate` warning, with the error as the check's message and its state
    unchanged). Reports of an attempt that is no longer current, or after the quota is gone, are
    ignored; the first report of a request records `ProvisioningRequestCreated`. A report of an
    attempt older than the check's current one (`stale`) changes neither the check nor the
    events: only the request is kept, so that `reconcile` sees it failed and moves on."""
    attempt = attempt_for(state, check, number)
    if attempt is None or not wl.has_quota(state):
        return
    if stale(state, check, number):
        if not error:
            attempt.request = request
        return
    if error:
        wl.record(state, "FailedCreate", error, now, "Warning")
        current = next(c for c in state.status.admission_checks or () if c.name == check)
        v = _verdict(current, current.state, error)
    else:
        if attempt.request is None and request is not None:
            wl.record(state, "ProvisioningRequestCreated", f'Created ProvisioningRequest: "{attempt.name}"', now)
        attempt.request = request
        v = on_status(state, attempt, random)
    if v is not None:
        checks.apply(state, v, now, random)


def attempt_for(state: WorkloadState, check: str, number: int) -> Attempt | None:
    """The current attempt of a check, if it is that one."""
    a = state.provisioning.current.get(check)
    return a if a is not None and a.attempt == number else None
