"""The catalog: cluster-scoped configuration, applied like `kubectl apply` and resolved for queues.

`CatalogState` holds every ResourceFlavor, Cohort, ClusterQueue, LocalQueue, AdmissionCheck,
ProvisioningRequestConfig, SimulatedNodeGroup, WorkloadPriorityClass and PriorityClass (read by the
client when it submits workloads, never sent to a queue) and the Configuration. `apply` and `delete` answer per
object like kubectl (`created`, `configured`, `unchanged`, `deleted`), and `terminating` for a
deleted AdmissionCheck that a ClusterQueue still uses (Kueue's `kueue.x-k8s.io/resource-in-use`
finalizer keeps it until none does); `views` resolves, for each
ClusterQueue, what it references, which is all a ClusterQueue workflow ever learns about the rest of
the configuration: among it the whole cohort tree its `cohortName` belongs to (`cohort_tree`); the
simulated autoscaler gets every SimulatedNodeGroup (`changed_node_groups`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Literal, TypeVar, overload

from pydantic import Field

from admitflow.admission.cluster_queue import (
    AdmissionCheckInfo,
    ClusterQueueView,
    LocalQueueInfo,
    check_rules,
    quota_groups,
)
from admitflow.admission.conditions import is_true, second, set_condition
from admitflow.admission.flavor_assignment import ResourceGroupQuota
from admitflow.admission.quota_tree import CohortInfo, CohortTree
from admitflow.api import (
    CONFIG_TYPES,
    AdmissionCheck,
    CatalogObject,
    ClusterQueue,
    ClusterQueueSpec,
    Cohort,
    CohortSpec,
    LocalQueue,
    ResourceFlavor,
    parse_quantity,
)
from admitflow.api import field_error as fe
from admitflow.api.admission_check import PROVISIONING_REQUEST_CONTROLLER_NAME
from admitflow.api.configuration import SINGLETON_KEY, Configuration, ObjectRetentionPolicies, WaitForPodsReady
from admitflow.api.manifest import ConfigObject
from admitflow.api.meta import ObjectMeta
from admitflow.api.workload import RUNNER_ANNOTATION
from admitflow.api.node_group import SimulatedNodeGroup
from admitflow.api.provisioning_request_config import ProvisioningRequestConfig
from admitflow.kinds import PLURALS
from admitflow.wire import CarriedState, WireModel

CATALOG_KINDS = tuple(t.__name__ for t in CONFIG_TYPES)

# One of the catalog's kinds, by its model.
C = TypeVar("C", bound=ConfigObject)


Action = Literal["created", "configured", "unchanged", "deleted", "terminating"]

# Kueue's ResourceInUseFinalizerName: its AdmissionCheck reconciler puts it on every AdmissionCheck
# and, once the check is deleted, removes it only when no ClusterQueue uses the check.
RESOURCE_IN_USE_FINALIZER = "kueue.x-k8s.io/resource-in-use"


class CatalogError(ValueError):
    """A refused apply or delete; `index` is the position of the offending object in the request."""

    def __init__(self, index: int, message: str) -> None:
        super().__init__(message)
        self.index = index


class Outcome(WireModel):
    kind: str
    key: str
    action: Action
    message: str = Field(default="", description="Why, when the action alone does not say it (terminating).")


class ApplyPreview(WireModel):
    """What an `apply` of these objects would do, as the `dry_run_apply` query answers it: the
    outcomes, or the refusal the apply update would give (`index`: the offending object)."""

    outcomes: list[Outcome] = Field(default_factory=list)
    refused: str = Field(default="", description="The refusal's one line; empty when the apply would go through.")
    index: int | None = Field(default=None, description="Position in the request of the object refused.")


class ObjectRef(WireModel):
    kind: str
    key: str = Field(description="name, or namespace/name for LocalQueues")


class QueueResolution(WireModel):
    """Where a workload's LocalQueue leads. `reason` is empty when the workload can be queued."""

    cluster_queue: str | None = None
    reason: str = ""
    message: str = ""
    notices: list[dict[str, Any]] = Field(
        default_factory=list,
        description="What its ClusterQueue answered to the enqueue: the `pending_status` notices its first pass "
        "decided for the entry, which the queue sends no other way; or, for a ticket the queue had reserved already "
        "(the run was reset to before its notice), that reservation's notice again.",
    )


class CatalogState(CarriedState):
    revision: int = 0
    objects: dict[str, dict[str, CatalogObject]] = Field(default_factory=dict, description="kind -> key -> object")
    published: dict[str, str] = Field(
        default_factory=dict, description="ClusterQueue -> digest of the last view sent to it"
    )
    watchers: dict[str, dict[str, str]] = Field(
        default_factory=dict,
        description="namespace/LocalQueue -> workload workflow ID -> the resolution message it is waiting on",
    )
    published_node_groups: str = Field(
        default="", description="Digest of the SimulatedNodeGroups last sent to the simulated autoscaler."
    )
    terminating: dict[str, dict[str, datetime]] = Field(
        default_factory=dict,
        description=(
            "kind -> key -> when its deletion was asked: deleted objects a ClusterQueue still uses, "
            "kept (still in force) until none does"
        ),
    )

    @overload
    def get(self, kind: type[C], key: str) -> C | None: ...
    @overload
    def get(self, kind: str, key: str) -> CatalogObject | None: ...

    def get(self, kind: type[C] | str, key: str) -> CatalogObject | None:
        """The object of `kind` (its name, or its model for an answer of that type) at `key`."""
        if isinstance(kind, str):
            return self.objects.get(kind, {}).get(key)
        obj = self.objects.get(kind.__name__, {}).get(key)
        return obj if isinstance(obj, kind) else None

    @overload
    def all(self, kind: type[C]) -> list[C]: ...
    @overload
    def all(self, kind: str) -> list[CatalogObject]: ...

    def all(self, kind: type[C] | str) -> list[C] | list[CatalogObject]:
        """Every object of `kind` (its name, or its model for answers of that type)."""
        if isinstance(kind, str):
            return list(self.objects.get(kind, {}).values())
        found: list[C] = []
        for obj in self.objects.get(kind.__name__, {}).values():
            if isinstance(obj, kind):
                found.append(obj)
        return found


def _content(obj: CatalogObject) -> dict[str, Any]:
    """What `apply` compares: spec plus user-owned metadata, never status or server-set fields."""
    wire = obj.to_wire()
    meta = wire.get("metadata", {})
    return {
        "spec": wire.get("spec"),
        "rest": {k: v for k, v in wire.items() if k not in ("metadata", "spec", "status", "apiVersion")},
        "labels": meta.get("labels"),
        "annotations": meta.get("annotations"),
    }


def _immutable(old: CatalogObject, new: CatalogObject) -> list[tuple[str, str | None, str | None]]:
    """Fields Kueue's webhooks refuse to change on update: (path, stored value, applied value)."""
    if isinstance(old, AdmissionCheck) and isinstance(new, AdmissionCheck):
        return [("spec.controllerName", old.spec.controller_name, new.spec.controller_name)]
    if isinstance(old, LocalQueue) and isinstance(new, LocalQueue):
        return [("spec.clusterQueue", old.spec.cluster_queue, new.spec.cluster_queue)]
    return []


def validate_apply(state: CatalogState, objects: Sequence[CatalogObject]) -> None:
    """Refuse the whole request if any object may not be applied over what is stored, or if the
    Cohorts it applies would make a cycle of parents."""
    for i, obj in enumerate(objects):
        old = state.get(obj.kind, obj.key)
        if old is None:
            continue
        for path, stored, applied in _immutable(old, obj):
            if stored != applied:
                raise CatalogError(
                    i, f'{obj.kind} "{obj.key}" is invalid: {path}: Invalid value: "{applied}": field is immutable'
                )
    _refuse_cohort_cycles(state, objects)


def _refuse_cohort_cycles(state: CatalogState, objects: Sequence[CatalogObject]) -> None:
    """Kueue accepts a Cohort that closes a cycle and then holds every ClusterQueue of the tree
    inactive (`CohortCycleDetected`: `Cohort "<name>" has a cycle in hierarchy`) until it is undone;
    admitflow checks whole applies, so it refuses the apply instead, with Kueue's words."""
    applied = [(i, obj) for i, obj in enumerate(objects) if isinstance(obj, Cohort)]
    if not applied:
        return
    parents = _cohort_parents(state)
    parents.update({obj.key: obj.spec.parent_name for _, obj in applied})
    for i, obj in applied:
        chain = _parent_chain(parents, obj.key)
        if len(chain) > 1 and chain[-1] == obj.key:
            detail = f'Cohort "{obj.key}" has a cycle in hierarchy ({" -> ".join(chain)})'
            error = fe.invalid("spec.parentName", obj.spec.parent_name, detail)
            raise CatalogError(i, f'Cohort "{obj.key}" is invalid: {error}')


def apply(
    state: CatalogState, objects: Sequence[CatalogObject], new_uid: Callable[[], str], now: datetime
) -> list[Outcome]:
    validate_apply(state, objects)
    outcomes: list[Outcome] = []
    changed = False
    for obj in objects:
        old = state.get(obj.kind, obj.key)
        new = obj.model_copy(deep=True)
        if new.metadata is None:  # Kueue's Configuration has none; the catalog keeps its own
            new.metadata = ObjectMeta(name=obj.key)
        if old is None:
            new.metadata.uid = new_uid()
            new.metadata.creation_timestamp = second(now)
            new.metadata.generation = 1
            action: Action = "created"
        else:
            if _content(old) == _content(new):
                outcomes.append(Outcome(kind=obj.kind, key=obj.key, action="unchanged"))
                continue
            assert old.metadata is not None  # stored by an apply, which gives every object one
            new.metadata.uid = old.metadata.uid
            new.metadata.creation_timestamp = old.metadata.creation_timestamp
            spec_changed = _content(old)["spec"] != _content(new)["spec"]
            new.metadata.generation = (old.metadata.generation or 1) + (1 if spec_changed else 0)
            action = "configured"
        status_field = type(new).model_fields.get("status")
        if status_field is not None:
            # Status belongs to the controllers, as with `kubectl apply` on a status subresource:
            # whichever kinds have one (old is of new's kind).
            status = getattr(old, "status") if old is not None else status_field.get_default(call_default_factory=True)
            setattr(new, "status", status)
        state.objects.setdefault(obj.kind, {})[obj.key] = new
        outcomes.append(Outcome(kind=obj.kind, key=obj.key, action=action))
        changed = True
    if changed:
        state.revision += 1
        release_unused(state)
        sync_provisioning_checks(state, now)
    return outcomes


def validate_delete(state: CatalogState, refs: Sequence[ObjectRef]) -> None:
    for i, ref in enumerate(refs):
        if ref.kind not in CATALOG_KINDS:
            raise CatalogError(i, f'the server doesn\'t have a resource type "{ref.kind}"')
        if state.get(ref.kind, ref.key) is None:
            raise CatalogError(i, f'{PLURALS[ref.kind]} "{ref.key}" not found')


# --- in use: Kueue's resource-in-use finalizer ---------------------------------------------------


def cluster_queues_using_check(state: CatalogState, name: str) -> list[str]:
    """Kueue's ClusterQueuesUsingAdmissionCheck: the ClusterQueues whose admissionChecksStrategy
    names the check, whatever flavors the rule is for."""
    return sorted(cq.key for cq in state.all(ClusterQueue) if name in check_rules(cq.spec))


# The kinds a ClusterQueue's use protects from deletion, and who uses an object of that kind.
IN_USE_BY: dict[str, Callable[[CatalogState, str], list[str]]] = {
    "AdmissionCheck": cluster_queues_using_check,
}


def in_use_by(state: CatalogState, kind: str, key: str) -> list[str]:
    """The ClusterQueues that keep a deleted object of this kind from going, sorted."""
    users = IN_USE_BY.get(kind)
    return users(state, key) if users is not None else []


def release_unused(state: CatalogState) -> list[ObjectRef]:
    """Kueue's reconciler removing the finalizer: a terminating object no ClusterQueue uses any
    more is deleted now. Returns what went."""
    gone: list[ObjectRef] = []
    for kind in list(state.terminating):
        waiting = state.terminating[kind]
        for key in sorted(waiting):
            if state.get(kind, key) is None or not in_use_by(state, kind, key):
                del waiting[key]
                state.objects.get(kind, {}).pop(key, None)
                gone.append(ObjectRef(kind=kind, key=key))
        if not waiting:
            del state.terminating[kind]
    return gone


def in_use_message(kind: str, key: str, users: Sequence[str]) -> str:
    queues = ", ".join(f'"{u}"' for u in users)
    noun = "ClusterQueue" if len(users) == 1 else "ClusterQueues"
    return (
        f'{PLURALS[kind]} "{key}" is still used by {noun} {queues}: it stays, terminating '
        f"({RESOURCE_IN_USE_FINALIZER}), and is deleted once no ClusterQueue refers to it"
    )


def delete(state: CatalogState, refs: Sequence[ObjectRef], now: datetime) -> list[Outcome]:
    """Delete like `kubectl delete`. An AdmissionCheck that a ClusterQueue uses is not removed: as
    with Kueue's `kueue.x-k8s.io/resource-in-use` finalizer it stays, terminating and still in force
    for the ClusterQueues using it, until the last of them stops referring to it (an apply or a
    delete of the ClusterQueue), and its outcome is `terminating` with the reason. An object
    deleted and freed by the same request is `deleted`."""
    validate_delete(state, refs)
    for ref in refs:
        if in_use_by(state, ref.kind, ref.key):
            state.terminating.setdefault(ref.kind, {}).setdefault(ref.key, second(now))
        else:
            state.objects[ref.kind].pop(ref.key, None)
            state.terminating.get(ref.kind, {}).pop(ref.key, None)
    if refs:
        state.revision += 1
        release_unused(state)
        sync_provisioning_checks(state, now)
    outcomes = []
    for r in refs:
        if state.get(r.kind, r.key) is None:
            outcomes.append(Outcome(kind=r.kind, key=r.key, action="deleted"))
        else:
            message = in_use_message(r.kind, r.key, in_use_by(state, r.kind, r.key))
            outcomes.append(Outcome(kind=r.kind, key=r.key, action="terminating", message=message))
    return outcomes


# --- resolution ---------------------------------------------------------------------------------


# What an AdmissionCheck's `spec.parameters` may refer to: (apiGroup, kind) -> the catalog kind.
PARAMETER_KINDS = {
    ("admitflow.io", "AdmissionCheckParameters"): "AdmissionCheckParameters",
    ("kueue.x-k8s.io", "ProvisioningRequestConfig"): "ProvisioningRequestConfig",
}


def parameters_of(state: CatalogState, ac: AdmissionCheck) -> dict[str, Any] | None:
    """The `spec` of the object the check's parameters refer to, or None (no reference, or nothing
    there: its controller reports that as `BadParametersRef`)."""
    ref = ac.spec.parameters
    if ref is None:
        return None
    kind = PARAMETER_KINDS.get((ref.api_group, ref.kind))
    obj = state.get(kind, ref.name) if kind is not None else None
    return obj.to_wire().get("spec", {}) if obj is not None else None


def admission_check_info(state: CatalogState, ac: AdmissionCheck) -> AdmissionCheckInfo:
    conditions = (ac.status.conditions if ac.status else None) or []
    return AdmissionCheckInfo(
        controller_name=ac.spec.controller_name,
        active=is_true(conditions, "Active"),
        retry_strategy=ac.spec.retry_strategy,
        parameters=parameters_of(state, ac),
        pending_timeout=ac.spec.pending_timeout,
    )


def provisioning_config_error(state: CatalogState, ac: AdmissionCheck) -> str:
    """Why a ProvisioningRequest check's parameters do not lead to a ProvisioningRequestConfig
    (Kueue's ConfigFromRef errors), or "" when they do."""
    ref = ac.spec.parameters
    if ref is None:
        return "missing parameters reference"
    if (ref.api_group, ref.kind) != ("kueue.x-k8s.io", "ProvisioningRequestConfig"):
        return "bad parameters reference"
    if state.get(ProvisioningRequestConfig, ref.name) is None:
        return f'provisioningrequestconfigs.kueue.x-k8s.io "{ref.name}" not found'
    return ""


def sync_provisioning_checks(state: CatalogState, now: datetime) -> None:
    """The built-in ProvisioningRequest controller's AdmissionCheck reconciler: `Active=True` when
    the parameters lead to a ProvisioningRequestConfig, else `Active=False` with reason
    `BadParametersRef`; written only when the status changes, as Kueue does."""
    for ac in state.all(AdmissionCheck):
        if ac.spec.controller_name != PROVISIONING_REQUEST_CONTROLLER_NAME:
            continue
        error = provisioning_config_error(state, ac)
        active = not error
        if any(c.type == "Active" for c in ac.status.conditions) and is_true(ac.status.conditions, "Active") == active:
            continue
        updated = ac.model_copy(deep=True)
        updated.status.conditions = set_condition(
            ac.status.conditions, "Active", active, "Active" if active else "BadParametersRef",
            "The admission check is active" if active else error, now,
        )
        state.objects["AdmissionCheck"][ac.key] = updated


def validate_set_admission_check_active(state: CatalogState, name: str) -> AdmissionCheck:
    ac = state.get(AdmissionCheck, name)
    if ac is None:
        raise CatalogError(0, f'admissionchecks "{name}" not found')
    if ac.spec.controller_name == PROVISIONING_REQUEST_CONTROLLER_NAME:
        raise CatalogError(
            0, f'admissionchecks "{name}" is managed by the built-in {PROVISIONING_REQUEST_CONTROLLER_NAME} controller'
        )
    return ac


def set_admission_check_active(
    state: CatalogState, name: str, active: bool, reason: str, message: str, now: datetime
) -> bool:
    """A check controller reports whether its AdmissionCheck is `Active` (as in Kueue); the
    condition is written only when its status changes. Returns whether it changed."""
    ac = validate_set_admission_check_active(state, name)
    conditions = ac.status.conditions
    if is_true(conditions, "Active") == active and any(c.type == "Active" for c in conditions):
        return False
    updated = ac.model_copy(deep=True)
    updated.status.conditions = set_condition(conditions, "Active", active, reason, message, now)
    state.objects["AdmissionCheck"][name] = updated
    state.revision += 1
    return True


def view_of(state: CatalogState, name: str, forest: CohortForest | None = None) -> ClusterQueueView:
    """What the ClusterQueue `name` is sent. `forest` shares the cohort trees among the views of
    one publication (each is built once, not once per ClusterQueue)."""
    cq = state.get(ClusterQueue, name)
    if cq is None:
        return ClusterQueueView(name=name, revision=state.revision)
    spec = cq.spec
    flavor_names = {fq.name for rg in spec.resource_groups or () for fq in rg.flavors}
    strategy = spec.admission_checks_strategy
    check_names = {r.name for r in (strategy.admission_checks if strategy else None) or ()}
    flavors = {n: rf.spec for n in sorted(flavor_names) if (rf := state.get(ResourceFlavor, n))}
    checks = {n: admission_check_info(state, ac) for n in sorted(check_names) if (ac := state.get(AdmissionCheck, n))}
    local_queues = {
        lq.key: LocalQueueInfo(
            stop_policy=lq.spec.stop_policy or "None", runner=(lq.metadata.annotations or {}).get(RUNNER_ANNOTATION, "")
        )
        for lq in state.all(LocalQueue)
        if lq.spec.cluster_queue == name
    }
    return ClusterQueueView(
        name=name, revision=state.revision, spec=spec, flavors=flavors, admission_checks=checks,
        local_queues=dict(sorted(local_queues.items())), wait_for_pods_ready=wait_for_pods_ready(state),
        workload_retention=(_configuration(state).object_retention_policies or ObjectRetentionPolicies()).workloads,
        cohort_tree=(forest or CohortForest(state)).tree(spec.cohort_name) if spec.cohort_name else None,
        fair_sharing=_configuration(state).fair_sharing_strategies(),
    )


def _configuration(state: CatalogState) -> Configuration:
    """The applied Configuration, or Kueue's defaults without one."""
    return state.get(Configuration, SINGLETON_KEY) or Configuration()


def wait_for_pods_ready(state: CatalogState) -> WaitForPodsReady | None:
    """The settings in force: the applied Configuration's, or Kueue's defaults without one (on since
    Kueue's config v1beta2); None when the DisableWaitForPodsReady gate turns it off."""
    config = _configuration(state)
    return config.wait_for_pods_ready if config.wait_for_pods_ready_enabled else None


# --- cohort trees -------------------------------------------------------------------------------


def _cohort_parents(state: CatalogState) -> dict[str, str | None]:
    """Each Cohort object's parentName (None at a root)."""
    return {c.key: c.spec.parent_name for c in state.all(Cohort)}


def _parent_chain(parents: dict[str, str | None], start: str) -> list[str]:
    """`start`, its parent, the parent's parent... up to a root; should the parents loop, up to the
    first name seen twice, which ends the list a second time."""
    chain, seen = [start], {start}
    while (parent := parents.get(chain[-1])) is not None:
        chain.append(parent)
        if parent in seen:
            break
        seen.add(parent)
    return chain


def cohort_root(parents: dict[str, str | None], name: str) -> str:
    """The root of the Cohort `name`, up the `parents` (each Cohort's parentName, None at a root)."""
    chain = _parent_chain(parents, name)
    if chain[-1] in chain[:-1]:
        # No root in a cycle (the catalog refuses them): name the loop by its smallest member.
        return min(chain[chain.index(chain[-1]) :])
    return chain[-1]


def cohort_quota_groups(spec: CohortSpec) -> tuple[ResourceGroupQuota, ...]:
    """A Cohort's resource groups as quota, by the ClusterQueue's conversion: a Cohort's
    resourceGroups are a ClusterQueue's, field for field."""
    return tuple(quota_groups(ClusterQueueSpec.model_construct(resource_groups=spec.resource_groups)))


def cohort_info(name: str, cohort: Cohort | None) -> CohortInfo:
    """What the scheduler needs of one Cohort; one never created (only named by a ClusterQueue's
    cohortName or a Cohort's parentName) is implicit: no quota, weight 1, no parent."""
    if cohort is None:
        return CohortInfo(name=name)
    fair = cohort.spec.fair_sharing
    return CohortInfo(
        name=name,
        parent=cohort.spec.parent_name,
        groups=cohort_quota_groups(cohort.spec),
        weight=float(parse_quantity(fair.weight)) if fair is not None else 1.0,
        explicit=True,
    )


class CohortForest:
    """Every Cohort of the catalog, created or only named (by a ClusterQueue's cohortName or a
    Cohort's parentName), grouped in trees by their root; each tree is built when first asked."""

    def __init__(self, state: CatalogState) -> None:
        self._state = state
        self._parents = _cohort_parents(state)
        named = (
            set(self._parents)
            | {p for p in self._parents.values() if p is not None}
            | {cq.spec.cohort_name for cq in state.all(ClusterQueue) if cq.spec.cohort_name}
        )
        self._roots = {n: cohort_root(self._parents, n) for n in named}
        self._trees: dict[str, CohortTree] = {}

    def tree(self, name: str) -> CohortTree:
        """The whole tree the Cohort `name` belongs to: its root (up the parentNames) and every
        Cohort whose root that is. A deleted Cohort still named by a ClusterQueue or a Cohort stays
        in its tree as an implicit one, as in Kueue."""
        if name not in self._roots:  # named by nothing: a tree of its own
            self._roots[name] = cohort_root(self._parents, name)
        root = self._roots[name]
        if root not in self._trees:
            members = sorted(n for n, r in self._roots.items() if r == root)
            cohorts = {n: cohort_info(n, self._state.get(Cohort, n)) for n in members}
            self._trees[root] = CohortTree(root=root, cohorts=cohorts)
        return self._trees[root]


def cohort_tree(state: CatalogState, name: str) -> CohortTree:
    """The tree the Cohort `name` belongs to (see `CohortForest.tree`)."""
    return CohortForest(state).tree(name)


def _digest(view: ClusterQueueView) -> str:
    body = view.to_wire()
    body.pop("revision", None)
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]


def changed_views(state: CatalogState) -> list[ClusterQueueView]:
    """Views that differ from what each ClusterQueue was last sent, marking them sent. Deleted
    ClusterQueues get one last view without a spec, so they stop admitting."""
    names = set(state.objects.get("ClusterQueue", {})) | set(state.published)
    forest = CohortForest(state)
    out = []
    for name in sorted(names):
        view = view_of(state, name, forest)
        digest = _digest(view)
        if state.published.get(name) != digest:
            state.published[name] = digest
            out.append(view)
    return out


def node_groups(state: CatalogState) -> list[SimulatedNodeGroup]:
    return sorted(state.all(SimulatedNodeGroup), key=lambda g: g.key)


def changed_node_groups(state: CatalogState) -> list[SimulatedNodeGroup] | None:
    """Every SimulatedNodeGroup, when they differ from what the simulated autoscaler was last sent
    (marking them sent); None when they do not. Nothing is sent while there never were any."""
    groups = node_groups(state)
    body = json.dumps([g.to_wire() for g in groups], sort_keys=True)
    digest = hashlib.sha256(body.encode()).hexdigest()[:16] if groups else ""
    if digest == state.published_node_groups:
        return None
    state.published_node_groups = digest
    return groups


def resolve_local_queue(state: CatalogState, namespace: str, name: str) -> QueueResolution:
    lq = state.get(LocalQueue, f"{namespace}/{name}")
    if lq is None:
        return QueueResolution(reason="Misconfigured", message=f"LocalQueue {name} is terminating or missing")
    cq = lq.spec.cluster_queue
    if cq is None or state.get(ClusterQueue, cq) is None:
        return QueueResolution(
            cluster_queue=cq, reason="Misconfigured", message=f"ClusterQueue {cq} is terminating or missing"
        )
    return QueueResolution(cluster_queue=cq)


def add_watcher(state: CatalogState, lq_key: str, workflow_id: str, seen: str) -> None:
    """`seen` is the message the workload got when it looked its queue up."""
    state.watchers.setdefault(lq_key, {})[workflow_id] = seen


def woken_watchers(state: CatalogState) -> list[str]:
    """Workloads whose LocalQueue now resolves differently from what they saw (it exists now, or its
    ClusterQueue does); they look it up again, and register again if it is still not usable."""
    woken: list[str] = []
    for lq_key in list(state.watchers):
        ns, name = lq_key.split("/", 1)
        now = resolve_local_queue(state, ns, name).message
        waiting = state.watchers[lq_key]
        for workflow_id, seen in list(waiting.items()):
            if seen != now:
                woken.append(workflow_id)
                del waiting[workflow_id]
        if not waiting:
            del state.watchers[lq_key]
    return woken
