"""One scheduling pass: reserve quota for as many pending workloads as fit, in queue order.

Written over a set of ClusterQueues that could share quota (a cohort); a standalone ClusterQueue is a
cohort of one. Kueue's scheduler takes one head per queue per cycle and loops; a pass here runs
those cycles to the end in one go, which gives the same result with one workflow task.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

from pydantic import Field

from admitflow.wire import WireModel

from admitflow.admission.cluster_queue import (
    ClusterQueueState,
    Notice,
    checks_info,
    send_back_strangers,
    sync_reservation_checks,
    Reservation,
    active_condition,
    checks_for,
    flavor_infos,
    namespace_allowed,
    quota_groups,
    usage,
)
from admitflow.admission import pods_ready, preemption
from admitflow.admission.conditions import second
from admitflow.admission.flavor_assignment import assign_flavors, covers_pods
from admitflow.admission.pending_queue import QueueEntry

REASON_SUSPENDED = "Suspended"
REASON_MISCONFIGURED = "Misconfigured"
REASON_WAITING_FOR_PREEMPTED = "WaitingForPreemptedWorkloads"

# Only this many workloads at the head of a queue are told why they wait. Each notice costs the
# workload a workflow task; telling 10,000 at once would double their cost when load is highest.
# Deeper workloads keep "pending evaluation" until they come within reach; the pending-workloads
# view shows every position live.
NOTIFY_WINDOW = 1000

BYPASSED = "Bypassed scheduling evaluation because an equivalent workload recently failed"
# Reasons the scheduler itself writes; a workload keeps such a detailed message when it is bypassed.
SCHEDULER_REASONS = frozenset(
    {"WaitingForQuota", "NoMatchingFlavor", "ExceedsMaxQuota", "WaitingForPreemptedWorkloads", "PendingEvaluation"}
)


class PassResult(WireModel):
    reserved: list[Reservation] = Field(default_factory=list)
    notices: list[Notice] = Field(default_factory=list)
    ask_gate: bool = Field(default=False, description="blockAdmission: ask the gate for a grant.")
    gate_used: Reservation | None = Field(default=None, description="blockAdmission: the reservation the grant went to.")
    return_grant: bool = Field(default=False, description="blockAdmission: hand the unused grant back.")


def schedule(
    cohort: Sequence[ClusterQueueState], now: datetime, hold_for_preemptor: Callable[[], bool] = lambda: True
) -> dict[str, PassResult]:
    """`hold_for_preemptor` is asked when a preemptor waits for its victims; it answers False only to
    replay histories recorded before a preemptor kept its queue's head (they gave the quota it
    waited for to the workloads behind it). A workflow passes `workflow.patched`, asked only then, so
    a run whose history never reached that point takes the fix at once."""
    results = {}
    for cq in cohort:
        result = results[cq.name] = _schedule_queue(cq, now, hold_for_preemptor)
        if cq.gate == "granted":
            # A blockAdmission grant never outlives the pass that received it: nothing used it.
            cq.gate, result.return_grant = "none", True
    return results


def _schedule_queue(state: ClusterQueueState, now: datetime, hold_for_preemptor: Callable[[], bool]) -> PassResult:
    result = PassResult()
    view = state.view
    if view is None:
        return result  # the catalog has not described this queue yet; nothing can be decided
    spec = view.spec
    if spec is None:
        for e in state.pending:
            _tell(result, e, REASON_MISCONFIGURED, f"ClusterQueue {state.name} is terminating or missing")
        return result

    result.notices.extend(send_back_strangers(state))
    result.notices.extend(sync_reservation_checks(state))
    _drain_stopped(result, state)
    active, _, _ = active_condition(view)
    strict = spec.queueing_strategy == "StrictFIFO"
    groups = quota_groups(spec)
    flavors = flavor_infos(view)
    used = usage(state.reservations.values())
    policy = spec.preemption.within_cluster_queue if spec.preemption else None
    never_preempts = policy in (None, "Never")
    nominal = {(fq.name, res): v for g in groups for fq in g.flavors for res, v in fq.nominal.items()}
    with_pods = covers_pods(groups)
    free = _free_by_resource(groups, used)
    # Shapes that failed in this pass: usage only grows during a pass, so an equivalent workload
    # would fail too (Kueue's scheduling equivalence hashing).
    failed_shapes: dict[tuple, str] = {}

    for position, e in enumerate(state.pending):
        if e.inadmissible:
            continue
        tell = _tell if position < NOTIFY_WINDOW else _tell_nothing
        blocked = _blocked(state.name, view, e, active)
        if blocked is not None:
            # Waiting on the queue's configuration, not on quota: such a workload never holds up
            # the ones behind it, in either queueing strategy.
            tell(result, e, *blocked)
            e.inadmissible = True
            continue

        # With preemption, priority and age decide who can make room, so they are part of the shape.
        shape = e.shape() if never_preempts else (e.shape(), e.priority, e.timestamp)
        # A bypass is not an evaluation: such a workload is evaluated in full when its turn comes.
        known = e.evaluated is not None and e.evaluated[0] in SCHEDULER_REASONS and e.evaluated[1] != BYPASSED
        if never_preempts and known and _cannot_fit(e, free, with_pods):
            # Known to wait, and nothing could make room for it in this pass: no need to evaluate.
            tell(result, e, *e.evaluated)  # in case it has just come within the notify window
            if strict:
                break
            e.inadmissible = True
            continue
        if shape in failed_shapes and not strict:
            if e.notice is None or e.notice[0] not in SCHEDULER_REASONS:
                tell(result, e, failed_shapes[shape], BYPASSED)
            if e.evaluated is None:
                e.evaluated = (failed_shapes[shape], BYPASSED)
            e.inadmissible = True
            continue

        assignment = assign_flavors(e.pod_sets, groups, flavors, used)
        cands: list[Reservation] = []
        if assignment.mode == "Preempt" and not never_preempts:
            cands = preemption.candidates(policy, e, state.reservations.values())
            if cands:
                assignment = assign_flavors(e.pod_sets, groups, flavors, used, preemption.preemptible_usage(cands))
        if assignment.mode == "Fit":
            if view.block_admission and state.gate != "granted":
                # Kueue's scheduler blocks its loop until every workload it admitted is ready; here
                # the gate says whether any is not (pods_ready.py).
                if state.gate == "waiting":
                    tell(result, e, pods_ready.WAITING_REASON, pods_ready.WAITING_MESSAGE)
                elif state.gate == "none":
                    state.gate, result.ask_gate = "asked", True
                break
            reservation = _reserve(result, state, e, assignment, now)
            if view.block_admission:
                state.gate, result.gate_used = "none", reservation
                reservation.gated = result.notices[-1].gated = True
            for fr, v in assignment.usage().items():
                used[fr] = used.get(fr, 0) + v
                free[fr[1]] = free.get(fr[1], 0) - v
            continue

        if assignment.mode == "Preempt" and assignment.preemption_possible:
            victims = preemption.select_victims(assignment.usage(), used, nominal, cands)
            if victims:
                _preempt(result, state.name, e, victims)
                _tell(
                    result, e, REASON_WAITING_FOR_PREEMPTED,
                    f"{assignment.message}. Pending the preemption of {len(victims)} workload(s)",
                )
                if strict or hold_for_preemptor():
                    # Kueue puts a workload pending preemption straight back at the head of its
                    # ClusterQueue (sticky in BestEffortFIFO) and takes one head per queue per cycle,
                    # so nothing behind it is reserved, not even where it would not compete, until
                    # its victims have left and it is. Reserving behind it would hand out the quota
                    # the victims free, only for it to preempt those workloads again.
                    break
                continue

        e.evaluated = (assignment.reason, assignment.message)
        tell(result, e, assignment.reason, assignment.message)
        if strict:
            # StrictFIFO: the head that does not fit blocks everything behind it.
            break
        failed_shapes[shape] = assignment.reason
        e.inadmissible = True

    # A waiting workload has the checks that apply whatever flavor it gets, so that a controller
    # may approve it before quota is reserved.
    before_reservation = checks_for(spec, None)
    for n in result.notices:
        if n.kind == "pending":
            n.admission_checks = before_reservation
    return result


def _tell(result: PassResult, e: QueueEntry, reason: str, message: str) -> None:
    """Tell a workload why it waits when that changes. Waiting for quota is told once per reason:
    the amounts in the message go stale as quota moves (the pending-workloads view shows the live
    position), and re-telling 10,000 workloads after every release would cost more than it says.
    Other reasons name what blocks (which queue is stopped), so a changed message is told, and so
    is the first real evaluation of a workload that was only told it was bypassed."""
    if e.notice is not None and e.notice[0] == reason:
        if e.notice[1] == message or (reason in SCHEDULER_REASONS and e.notice[1] != BYPASSED):
            return
    e.notice = (reason, message)
    result.notices.append(Notice(key=e.key, uid=e.uid, ticket=e.ticket, kind="pending", reason=reason, message=message))


def _blocked(name: str, view, e: QueueEntry, active: bool) -> tuple[str, str] | None:
    """Why the queue's configuration keeps this workload waiting, whatever the quota."""
    spec = view.spec
    if view.local_queues[e.local_queue_key].stop_policy not in (None, "None"):
        return REASON_SUSPENDED, f"LocalQueue {e.local_queue} is stopped"
    if spec.stop_policy not in (None, "None"):
        return REASON_SUSPENDED, f"ClusterQueue {name} is stopped"
    if not active:
        return REASON_SUSPENDED, f"ClusterQueue {name} is inactive"
    if not namespace_allowed(spec, e.namespace):
        return REASON_MISCONFIGURED, "Workload namespace doesn't match ClusterQueue selector"
    return None


def _reserve(result: PassResult, state: ClusterQueueState, e: QueueEntry, assignment, now: datetime) -> Reservation:
    """Quota reserved: the entry becomes a reservation and the workload is told, with the
    admission checks it gets for the flavors it was assigned."""
    used = {f for ps in assignment.pod_sets for f in ps.flavors.values()}
    checks = checks_for(state.view.spec, used)
    reservation = Reservation(
        key=e.key,
        uid=e.uid,
        ticket=e.ticket,
        local_queue=e.local_queue,
        priority=e.priority,
        timestamp=e.timestamp,
        assignment=assignment,
        reserved_at=second(now),
        admitted=not checks,
        checks=checks,
    )
    state.pending.remove(e.key)
    state.reservations[e.key] = reservation
    result.reserved.append(reservation)
    result.notices.append(
        Notice(
            key=e.key, uid=e.uid, ticket=e.ticket, kind="reserved", assignment=assignment, admission_checks=checks,
            checks_info=checks_info(state.view, checks),
            flavors={f: state.view.flavors[f] for f in sorted(used) if f in state.view.flavors},
            wait_for_pods_ready=state.view.wait_for_pods_ready,
            runner=state.view.local_queues[e.local_queue_key].runner,
        )
    )
    return reservation


def _drain_stopped(result: PassResult, state: ClusterQueueState) -> None:
    """`stopPolicy: HoldAndDrain` on the ClusterQueue or a LocalQueue evicts what they hold."""
    view = state.view
    for r in state.reservations.values():
        if r.evicting:
            continue
        lq = view.local_queues.get(r.local_queue_key)
        if view.spec.stop_policy == "HoldAndDrain":
            reason, message = "ClusterQueueStopped", "The ClusterQueue is stopped"
        elif lq is not None and lq.stop_policy == "HoldAndDrain":
            reason, message = "LocalQueueStopped", "The LocalQueue is stopped"
        else:
            continue
        r.evicting = True
        result.notices.append(Notice(key=r.key, uid=r.uid, ticket=r.ticket, kind="evicted", reason=reason, message=message))


def _preempt(result: PassResult, cluster_queue: str, preemptor: QueueEntry, victims: list[Reservation]) -> None:
    """Tell each victim to leave; it keeps its quota until it releases it (Kueue waits for the
    preempted workloads likewise), and is not told twice."""
    message = preemption.preemption_message(preemptor, cluster_queue)
    for v in victims:
        if v.evicting:
            continue
        v.evicting = True
        result.notices.append(
            Notice(
                key=v.key, uid=v.uid, ticket=v.ticket, kind="evicted", reason="Preempted", message=message,
                preemption_reason=preemption.REASON_IN_CLUSTER_QUEUE,
            )
        )


def _free_by_resource(groups, used: dict[tuple[str, str], int]) -> dict[str, int]:
    free: dict[str, int] = {}
    for g in groups:
        for fq in g.flavors:
            for res, nominal in fq.nominal.items():
                free[res] = free.get(res, 0) + max(0, nominal - used.get((fq.name, res), 0))
    return free


def _tell_nothing(result: PassResult, e: QueueEntry, reason: str, message: str) -> None:
    pass


def _cannot_fit(e: QueueEntry, free: dict[str, int], with_pods: bool) -> bool:
    """Some resource the workload needs exceeds what is free across all flavors together."""
    need: dict[str, int] = {}
    for ps in e.pod_sets:
        for res, v in ps.total(with_pods).items():
            need[res] = need.get(res, 0) + v
    return any(v > free.get(res, 0) for res, v in need.items() if v)
