"""One scheduling pass: reserve quota for as many pending workloads as fit, in queue order.

Written over a set of ClusterQueues that could share quota (a cohort); a standalone ClusterQueue is a
cohort of one. Kueue's scheduler takes one head per queue per cycle and loops; a pass here runs
those cycles to the end in one go, which gives the same result with one workflow task.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from pydantic import Field

from admitflow.wire import WireModel

from admitflow.admission.cluster_queue import (
    ClusterQueueState,
    send_back_strangers,
    Notice,
    QueueEntry,
    Reservation,
    active_condition,
    checks_for,
    flavor_infos,
    namespace_allowed,
    quota_groups,
    usage,
)
from admitflow.admission.conditions import second
from admitflow.admission.flavor_assignment import assign_flavors

REASON_SUSPENDED = "Suspended"
REASON_MISCONFIGURED = "Misconfigured"


class PassResult(WireModel):
    reserved: list[Reservation] = Field(default_factory=list)
    notices: list[Notice] = Field(default_factory=list)


def schedule(cohort: Sequence[ClusterQueueState], now: datetime) -> dict[str, PassResult]:
    return {cq.name: _schedule_queue(cq, now) for cq in cohort}


def _schedule_queue(state: ClusterQueueState, now: datetime) -> PassResult:
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
    active, _, _ = active_condition(view)
    stopped = spec.stop_policy not in (None, "None")
    strict = spec.queueing_strategy == "StrictFIFO"
    groups = quota_groups(spec)
    flavors = flavor_infos(view)
    used = usage(state.reservations.values())
    still_pending: list[QueueEntry] = []

    for i, e in enumerate(state.pending):
        if e.inadmissible:
            still_pending.append(e)
            continue
        lq = view.local_queues.get(e.local_queue_key)
        blocked = None
        if lq is not None and lq.stop_policy not in (None, "None"):
            blocked = (REASON_SUSPENDED, f"LocalQueue {e.local_queue} is stopped")
        elif stopped:
            blocked = (REASON_SUSPENDED, f"ClusterQueue {state.name} is stopped")
        elif not active:
            blocked = (REASON_SUSPENDED, f"ClusterQueue {state.name} is inactive")
        elif not namespace_allowed(spec, e.namespace):
            blocked = (REASON_MISCONFIGURED, "Workload namespace doesn't match ClusterQueue selector")
        if blocked is not None:
            # Waiting on the queue's configuration, not on quota: such a workload never holds up
            # the ones behind it, in either queueing strategy.
            _tell(result, e, *blocked)
            e.inadmissible = True
            still_pending.append(e)
            continue

        assignment = assign_flavors(e.pod_sets, groups, flavors, used)
        if assignment.mode == "Fit":
            checks = checks_for(spec, {f for ps in assignment.pod_sets for f in ps.flavors.values()})
            reservation = Reservation(
                key=e.key,
                uid=e.uid,
                ticket=e.ticket,
                local_queue=e.local_queue,
                priority=e.priority,
                assignment=assignment,
                reserved_at=second(now),
                admitted=not checks,
            )
            state.reservations[e.key] = reservation
            for fr, v in assignment.usage().items():
                used[fr] = used.get(fr, 0) + v
            result.reserved.append(reservation)
            result.notices.append(
                Notice(
                    key=e.key, uid=e.uid, ticket=e.ticket, kind="reserved",
                    assignment=assignment, admission_checks=checks,
                )
            )
            continue

        _tell(result, e, assignment.reason, assignment.message)
        still_pending.append(e)
        if strict:
            # StrictFIFO: the head that does not fit blocks everything behind it.
            still_pending.extend(state.pending[i + 1 :])
            break
        e.inadmissible = True

    state.pending = still_pending
    return result


def _tell(result: PassResult, e: QueueEntry, reason: str, message: str) -> None:
    """Tell a workload why it waits, once per change: repeating it would only cost history."""
    if e.notice == (reason, message):
        return
    e.notice = (reason, message)
    result.notices.append(Notice(key=e.key, uid=e.uid, ticket=e.ticket, kind="pending", reason=reason, message=message))


def positions(state: ClusterQueueState) -> list[tuple[int, QueueEntry]]:
    """Position of each pending workload in its ClusterQueue, from 0, as Kueue's visibility API."""
    return list(enumerate(state.pending))
