"""The simulated cluster autoscaler: ProvisioningRequests answered from SimulatedNodeGroups, with the
real cluster autoscaler's conditions, reasons, messages and timers (reference
`provisioning-request-api.md` §1.3-1.6; docs/simulated-autoscaler.md).

Every function takes the state and `now` and returns the writes it made as `Push`es: the request as
it is after each write (its resourceVersion bumped), for the workflow to signal to the request's
watcher. A request moves through these phases:

    waiting ──fits──> provisioning ──delay──> booked ──pods scheduled──> consumed
       │ noRetry / 7 days / bad template         │ 10 minutes
       └──────────────> done <───────────────────┘   (and revoked, from anything that holds capacity)

`stopped` is a request a person took over with a condition set by hand. Capacity is held in one
node group from the moment a request fits (`provisioning`, `booked`, `consumed`) until it is
released; a release, a change of node groups or a group coming online makes every waiting request
try again at once.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

from pydantic import Field

from admitflow.admission.conditions import MAX_CONDITION_MESSAGE, is_true, second
from admitflow.admission.requests import Requests, add, format_requests, pod_requests, scale
from admitflow.api import Condition, resource_value
from admitflow.api.meta import CONDITION_REASON_PATTERN
from admitflow.api.node_group import SimulatedNodeGroup
from admitflow.api.provisioning_request import (
    ACCEPTED,
    BOOKING_EXPIRED,
    CAPACITY_REVOKED,
    CONDITION_TYPES,
    FAILED,
    PROVISIONED,
    PodTemplate,
    ProvisioningRequest,
    ProvisioningRequestStatus,
)
from admitflow.wire import CarriedState, WireModel

CHECK_CAPACITY_CLASS = "check-capacity.autoscaling.x-k8s.io"

# The static summary of the autoscaler workflow, whoever starts it.
WORKFLOW_SUMMARY = "simulated cluster autoscaler: ProvisioningRequests answered from SimulatedNodeGroups"

# The cluster autoscaler's constants (its ProvisioningRequest processors; docs/simulated-autoscaler.md).
BOOKING = timedelta(minutes=10)  # defaultReservationTime
EXPIRY = timedelta(days=7)  # defaultExpirationTime
INITIAL_BACKOFF = timedelta(minutes=1)  # --provisioning-request-initial-backoff-time
MAX_BACKOFF = timedelta(minutes=10)  # --provisioning-request-max-backoff-time

# Reasons and messages as the cluster autoscaler writes them (docs/simulated-autoscaler.md).
ACCEPTED_MESSAGE = "ProvisioningRequest is accepted by ClusterAutoscaler"
FOUND_MESSAGE = "Capacity is found in the cluster"
NOT_FOUND_MESSAGE = "Capacity is not found, CA will try to find it later."
FAILED_MESSAGE = "CA could not find requested capacity"
EXPIRED_MESSAGE = "ProvisioningRequest is expired"
BOOKING_EXPIRED_MESSAGE = "Capacity reservation time is expired"
CONSUMED_MESSAGE = "Capacity booking consumed: all pods scheduled"

# The reason of a condition set by hand when none is given.
SET_BY_HAND = "SetByHand"
CONDITION_STATUSES = ("True", "False", "Unknown")
# Conditions that, set to True by hand, take the request out of the simulator's hands.
STOPPING = (PROVISIONED, FAILED, BOOKING_EXPIRED, CAPACITY_REVOKED)

Phase = Literal["waiting", "provisioning", "booked", "consumed", "done", "stopped"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class AutoscalerError(ValueError):
    """A refused request; `str(err)` is one line for the person who sent it."""


class SimulatedRequest(WireModel):
    """One ProvisioningRequest and what the simulator needs to decide about it."""

    request: ProvisioningRequest = Field(description="As stored: metadata, spec, status.")
    watcher: str = Field(description="Workflow ID every write is pushed to.")
    sequence: int = Field(description="Creation order; older requests are tried first and revoked last.")
    created_at: datetime
    demand: dict[str, int] = Field(default_factory=dict, description="Sum of count x per-pod requests (Kueue's integers).")
    node_selectors: list[dict[str, str]] = Field(default_factory=list, description="Each PodTemplate's nodeSelector.")
    template_error: str = Field(default="", description="Why pods cannot be built from the PodTemplates.")
    phase: Phase = "waiting"
    node_group: str | None = Field(default=None, description="Where its capacity is held, if anywhere.")
    due: datetime | None = Field(default=None, description="Next try (waiting), Provisioned (provisioning), booking end (booked).")
    attempts: int = Field(default=0, description="Tries that found no capacity, for the backoff.")
    attempted_at: datetime | None = None

    @property
    def key(self) -> str:
        return self.request.key


class AutoscalerState(CarriedState):
    node_groups: dict[str, SimulatedNodeGroup] = Field(default_factory=dict)
    node_groups_revision: int = Field(default=0, description="The catalog revision the node groups are from.")
    node_groups_known: bool = Field(default=False, description="The catalog's node groups arrived at least once.")
    requests: dict[str, SimulatedRequest] = Field(default_factory=dict, description="namespace/name -> request")
    resource_version: int = Field(default=0, description="Bumped on every write, as etcd's revision.")
    sequence: int = 0


class Push(WireModel):
    """A write to tell the request's watcher about."""

    watcher: str
    request: ProvisioningRequest


@dataclass(frozen=True)
class Due:
    """The next moment something happens by itself, and what."""

    at: datetime
    summary: str


# --- reading ------------------------------------------------------------------------------------


def key_of(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


def backoff(attempts: int) -> timedelta:
    """The cluster autoscaler's wait before trying a request again: 1 min, doubling, at most 10."""
    return min(INITIAL_BACKOFF * 2 ** max(attempts - 1, 0), MAX_BACKOFF)


def available_at(group: SimulatedNodeGroup) -> datetime:
    first_applied = group.metadata.creation_timestamp or _EPOCH
    return first_applied + timedelta(seconds=group.spec.available_after_seconds)


def capacity_of(group: SimulatedNodeGroup | None) -> Requests:
    if group is None:
        return {}
    return {name: resource_value(name, q) for name, q in group.spec.capacity.items()}


def held(state: AutoscalerState, group: str) -> Requests:
    total: Requests = {}
    for r in state.requests.values():
        if r.node_group == group:
            total = add(total, r.demand)
    return total


def demand_of(request: ProvisioningRequest, templates: Iterable[PodTemplate]) -> tuple[Requests, list[dict[str, str]], str]:
    """What a request asks for in total, its PodTemplates' nodeSelectors, and why pods cannot be
    made from them ("" when they can)."""
    by_name = {t.metadata.name: t for t in templates if t.metadata.namespace == request.metadata.namespace}
    total: Requests = {}
    selectors: list[dict[str, str]] = []
    for ps in request.spec.pod_sets:
        template = by_name.get(ps.pod_template_ref.name)
        if template is None:
            return {}, [], f'Couldn\'t create pods, err: podtemplates "{ps.pod_template_ref.name}" not found'
        spec = template.template.spec.to_wire()
        total = add(total, scale(pod_requests(spec), ps.count))
        selectors.append(dict(spec.get("nodeSelector") or {}))
    return {k: v for k, v in total.items() if v > 0}, selectors, ""


def fits(state: AutoscalerState, r: SimulatedRequest, group: SimulatedNodeGroup, now: datetime) -> bool:
    """The group is online, its labels satisfy every nodeSelector, and every resource the request
    asks for fits beside what the group already holds."""
    if now < available_at(group):
        return False
    labels = group.spec.labels or {}
    if any(labels.get(k) != v for selector in r.node_selectors for k, v in selector.items()):
        return False
    capacity, used = capacity_of(group), held(state, group.metadata.name)
    return all(name in capacity and used.get(name, 0) + q <= capacity[name] for name, q in r.demand.items())


def _within(demand: Mapping[str, int], capacity: Mapping[str, int]) -> bool:
    return all(name in capacity and q <= capacity[name] for name, q in demand.items() if q > 0)


def requests_in(state: AutoscalerState, namespace: str | None = None) -> list[ProvisioningRequest]:
    """Stored requests, by namespace and name."""
    found = [r.request for k, r in sorted(state.requests.items()) if namespace is None or r.request.metadata.namespace == namespace]
    return [r.model_copy(deep=True) for r in found]


def usage(state: AutoscalerState) -> dict[str, dict[str, str]]:
    """node group -> resource -> held quantity."""
    return {name: format_requests(held(state, name)) for name in sorted(state.node_groups)}


def summary(state: AutoscalerState) -> str:
    counts: dict[str, int] = {}
    for r in state.requests.values():
        counts[r.phase] = counts.get(r.phase, 0) + 1
    phases = ", ".join(f"{n} {p}" for p, n in sorted(counts.items()))
    n = len(state.requests)
    return (
        f"{n} request{'s' if n != 1 else ''}{': ' + phases if phases else ''}; "
        f"{len(state.node_groups)} node groups (catalog revision {state.node_groups_revision})"
    )


# --- writing ------------------------------------------------------------------------------------


def _write(
    state: AutoscalerState,
    r: SimulatedRequest,
    now: datetime,
    type_: str,
    status: str,
    reason: str,
    message: str,
    details: Mapping[str, str] | None = None,
) -> Push:
    """The cluster autoscaler's AddOrUpdateCondition: the transition time is always now, so a
    repeated `Provisioned=False` tells when the last try was (as the cluster autoscaler does)."""
    condition = Condition(
        type=type_, status=status, reason=reason, message=message, last_transition_time=second(now)
    )
    st = r.request.status
    conditions = [c for c in st.conditions if c.type != type_]
    index = next((i for i, c in enumerate(st.conditions) if c.type == type_), len(conditions))
    conditions.insert(index, condition)
    st.conditions = conditions
    if details:
        st.provisioning_class_details = {**(st.provisioning_class_details or {}), **details}
    return _stored(state, r)


def _stored(state: AutoscalerState, r: SimulatedRequest) -> Push:
    state.resource_version += 1
    r.request.metadata.resource_version = str(state.resource_version)
    return Push(watcher=r.watcher, request=r.request.model_copy(deep=True))


def _release(state: AutoscalerState, r: SimulatedRequest, now: datetime) -> None:
    """Give the request's capacity back; every waiting request tries again at once."""
    if r.node_group is None:
        return
    r.node_group = None
    _wake_waiting(state, now)


def _wake_waiting(state: AutoscalerState, now: datetime) -> None:
    for w in state.requests.values():
        if w.phase == "waiting":
            w.due = now


def create(
    state: AutoscalerState,
    request: ProvisioningRequest,
    templates: Iterable[PodTemplate],
    watcher: str,
    now: datetime,
    new_uid: Callable[[], str],
) -> tuple[ProvisioningRequest, list[Push]]:
    """Store a request (`Accepted=True`); one of that namespace and name is returned as it is."""
    key = key_of(request.metadata.namespace, request.metadata.name)
    existing = state.requests.get(key)
    if existing is not None:
        return existing.request.model_copy(deep=True), []
    stored = request.model_copy(deep=True)
    stored.metadata.uid = new_uid()
    stored.metadata.creation_timestamp = second(now)
    stored.metadata.generation = 1
    stored.status = ProvisioningRequestStatus()
    demand, selectors, error = demand_of(stored, templates)
    state.sequence += 1
    r = SimulatedRequest(
        request=stored, watcher=watcher, sequence=state.sequence, created_at=now, demand=demand,
        node_selectors=selectors, template_error=error, due=now,
    )
    state.requests[key] = r
    push = _write(state, r, now, ACCEPTED, "True", "Accepted", ACCEPTED_MESSAGE)
    return push.request.model_copy(deep=True), [push]


def delete(state: AutoscalerState, namespace: str, name: str, now: datetime) -> bool:
    """Forget a request and give its capacity back; False when there was none."""
    r = state.requests.pop(key_of(namespace, name), None)
    if r is None:
        return False
    _release(state, r, now)
    return True


def pods_scheduled(state: AutoscalerState, namespace: str, name: str, now: datetime) -> list[Push]:
    """The request's pods were placed: a live booking is consumed (`BookingExpired=True`,
    `CapacityBookingConsumed`, autoscaler#9806) and the capacity stays held until the request goes."""
    r = state.requests.get(key_of(namespace, name))
    if r is None:
        return []
    conditions = r.request.status.conditions
    if not is_true(conditions, PROVISIONED) or any(is_true(conditions, t) for t in (BOOKING_EXPIRED, FAILED, CAPACITY_REVOKED)):
        return []
    if r.phase == "booked":
        r.phase, r.due = "consumed", None
    return [_write(state, r, now, BOOKING_EXPIRED, "True", "CapacityBookingConsumed", CONSUMED_MESSAGE)]


def validate_set_condition(state: AutoscalerState, namespace: str, name: str, type_: str, status: str, reason: str, message: str) -> None:
    """What `set_condition` refuses, each as one line."""
    if key_of(namespace, name) not in state.requests:
        raise AutoscalerError(f'provisioningrequests.autoscaling.x-k8s.io "{name}" not found')
    if type_ not in CONDITION_TYPES:
        raise AutoscalerError(f'unknown condition type "{type_}": must be one of {", ".join(CONDITION_TYPES)}')
    if status not in CONDITION_STATUSES:
        raise AutoscalerError(f'condition status "{status}": must be True, False or Unknown')
    if reason and not (len(reason) <= 1024 and re.match(CONDITION_REASON_PATTERN, reason)):
        raise AutoscalerError(
            f'condition reason "{reason}": must be CamelCase: a letter, then letters, digits, "_", "," or ":"'
        )
    if len(message) > MAX_CONDITION_MESSAGE:
        raise AutoscalerError(f"condition message: may not be longer than {MAX_CONDITION_MESSAGE} characters")


def set_condition(
    state: AutoscalerState,
    namespace: str,
    name: str,
    type_: str,
    now: datetime,
    status: str = "True",
    reason: str = "",
    message: str = "",
    details: Mapping[str, str] | None = None,
) -> tuple[ProvisioningRequest, list[Push]]:
    """Write a condition by hand, as Kueue's integration tests do. `Provisioned`, `Failed`,
    `BookingExpired` or `CapacityRevoked` set to True take the request out of the simulator's
    hands: it holds no capacity any more, except a consumed booking (its pods run there) unless the
    capacity is revoked. Anything else is written as it is and the simulator carries on."""
    validate_set_condition(state, namespace, name, type_, status, reason, message)
    r = state.requests[key_of(namespace, name)]
    push = _write(state, r, now, type_, status, reason or SET_BY_HAND, message, details)
    if status == "True" and type_ in STOPPING and r.phase != "done":
        keeps = r.phase == "consumed" and type_ != CAPACITY_REVOKED
        r.phase, r.due = "stopped", None
        if not keeps:
            _release(state, r, now)
    return push.request.model_copy(deep=True), [push]


def set_node_groups(
    state: AutoscalerState, groups: Iterable[SimulatedNodeGroup], revision: int, now: datetime
) -> list[Push]:
    """Take the catalog's node groups (an older revision than the one held is ignored). A group
    that no longer has room for what it holds revokes its requests, newest first, until the rest
    fits; every waiting request tries again at once."""
    if state.node_groups_known and revision <= state.node_groups_revision:
        return []
    state.node_groups = {g.metadata.name: g.model_copy(deep=True) for g in sorted(groups, key=lambda g: g.metadata.name)}
    state.node_groups_revision = revision
    state.node_groups_known = True
    pushes: list[Push] = []
    for name in sorted({r.node_group for r in state.requests.values() if r.node_group is not None}):
        group = state.node_groups.get(name)
        capacity = capacity_of(group)
        holders = sorted((r for r in state.requests.values() if r.node_group == name), key=lambda r: r.sequence)
        while holders and not _within(held(state, name), capacity):
            pushes.extend(_revoke(state, holders.pop(), "was deleted" if group is None else "shrank", now))
    _wake_waiting(state, now)
    return pushes


def _revoke(state: AutoscalerState, r: SimulatedRequest, why: str, now: datetime) -> list[Push]:
    """A provisioned request loses its capacity for good (`CapacityRevoked=True`); a scale-up still
    in progress is cut short and the request waits for capacity again, as a failed scale-up would."""
    group = r.node_group
    r.node_group = None
    if r.phase == "provisioning":
        r.phase, r.due = "waiting", now
        return []
    r.phase, r.due = "done", None
    return [_write(state, r, now, CAPACITY_REVOKED, "True", "CapacityRevoked", f"Capacity revoked: node group {group} {why}")]


# --- time -----------------------------------------------------------------------------------------


def _is_due(state: AutoscalerState, r: SimulatedRequest, now: datetime) -> bool:
    if r.phase == "waiting":
        if r.due is not None and r.due <= now:
            return True
        since = r.attempted_at or r.created_at
        return any(since < available_at(g) <= now for g in state.node_groups.values())
    return r.phase in ("provisioning", "booked") and r.due is not None and r.due <= now


def step(state: AutoscalerState, now: datetime) -> list[Push]:
    """Everything due by `now`: expiries first (they free capacity), then waiting requests, oldest
    first."""
    pushes: list[Push] = []
    ordered = sorted(state.requests.values(), key=lambda r: r.sequence)
    for r in ordered:
        if r.phase in ("waiting", "provisioning") and now >= r.created_at + EXPIRY:
            r.phase, r.due = "done", None
            _release(state, r, now)
            pushes.append(_write(state, r, now, FAILED, "True", "Expired", EXPIRED_MESSAGE))
        elif r.phase == "provisioning" and _is_due(state, r, now):
            pushes.append(_provisioned(state, r, now))
        elif r.phase == "booked" and _is_due(state, r, now):
            r.phase, r.due = "done", None
            _release(state, r, now)
            pushes.append(_write(state, r, now, BOOKING_EXPIRED, "True", "CapacityReservationTimeExpired", BOOKING_EXPIRED_MESSAGE))
    for r in ordered:
        if r.phase == "waiting" and _is_due(state, r, now):
            pushes.extend(_try(state, r, now))
    return pushes


def _try(state: AutoscalerState, r: SimulatedRequest, now: datetime) -> list[Push]:
    if r.template_error:
        r.phase, r.due = "done", None
        return [_write(state, r, now, FAILED, "True", "FailedToCreatePods", r.template_error)]
    r.attempted_at = now
    group = next((g for _, g in sorted(state.node_groups.items()) if fits(state, r, g, now)), None)
    if group is not None:
        r.node_group = group.metadata.name
        delay = group.spec.provisioning_delay_seconds
        if r.request.spec.provisioning_class_name == CHECK_CAPACITY_CLASS or delay == 0:
            return [_provisioned(state, r, now)]
        r.phase, r.due = "provisioning", now + timedelta(seconds=delay)
        return []
    if (r.request.spec.parameters or {}).get("noRetry") == "true":
        r.phase, r.due = "done", None
        return [_write(state, r, now, FAILED, "True", "CapacityIsNotFound", FAILED_MESSAGE)]
    r.attempts += 1
    r.due = now + backoff(r.attempts)
    return [_write(state, r, now, PROVISIONED, "False", "CapacityIsNotFound", NOT_FOUND_MESSAGE)]


def _provisioned(state: AutoscalerState, r: SimulatedRequest, now: datetime) -> Push:
    group = state.node_groups.get(r.node_group or "")
    details = {"nodeGroup": r.node_group or "", **((group.spec.class_details or {}) if group else {})}
    reason = "CapacityIsFound" if r.request.spec.provisioning_class_name == CHECK_CAPACITY_CLASS else "CapacityIsProvisioned"
    r.phase, r.due = "booked", now + BOOKING
    return _write(state, r, now, PROVISIONED, "True", reason, FOUND_MESSAGE, details)


def next_due(state: AutoscalerState, now: datetime) -> Due | None:
    """The earliest moment after which `step` has something to do."""
    candidates: list[tuple[datetime, int, str]] = []
    waiting = False
    for r in state.requests.values():
        name = r.request.metadata.name
        if r.phase == "waiting":
            waiting = True
            if r.due is not None:
                what = f"try {name} again" if r.attempts else f"try {name}"
                candidates.append((r.due, r.sequence, what))
        elif r.phase == "provisioning" and r.due is not None:
            candidates.append((r.due, r.sequence, f"{name} provisioned in {r.node_group}"))
        elif r.phase == "booked" and r.due is not None:
            candidates.append((r.due, r.sequence, f"booking of {name} expires"))
        if r.phase in ("waiting", "provisioning"):
            candidates.append((r.created_at + EXPIRY, r.sequence, f"{name} expires unprovisioned"))
    if waiting:
        for g in state.node_groups.values():
            at = available_at(g)
            if at > now:
                candidates.append((at, 0, f"node group {g.metadata.name} comes online"))
    if not candidates:
        return None
    at, _, what = min(candidates)
    return Due(at=at, summary=what)
