"""What the scheduling entities' workflows do for `admission.queue_owner.Owner` that only a workflow
can: wait for an update's answer, and keep the timer that tells again reservations told only in an
enqueue's answer."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from admitflow import contract, memos
    from admitflow.admission.cluster_queue import ForceReleaseOutcome
    from admitflow.api.cohort import CohortStatus, FairSharingStatus
    from admitflow.admission.queue_owner import ForceReleaseCall, Owner
    from admitflow.admission.protocol import ForceRelease

    from admitflow.workflows import arguments
    from admitflow.workflows.metrics import emit

# A queue's memo (its status, its LocalQueues' and its gauges: admitflow/memos.py) is written at most
# this often: lists and the exporter read it (Prometheus scrapes every 15 s by default), and a queue
# that changes with every message would otherwise write it with every workflow task.
MEMO_EVERY = timedelta(seconds=10)


def memo_of(owner: Owner) -> dict[str, Any]:
    """What the memo of the workflow holding the owner's queues says of them (admitflow/memos.py):
    each queue's status, LocalQueues and gauges, and each Cohort's status under fair sharing."""
    shares = owner.weighted_shares()
    queues, cohorts = shares if shares is not None else ({}, {})
    out = {memos.cluster_queue_key(name): memos.cluster_queue(state, queues.get(name)) for name, state in owner.members.items()}
    for cohort, share in cohorts.items():
        out[memos.cohort_key(cohort)] = CohortStatus(fair_sharing=FairSharingStatus(weighted_share=share)).to_wire()
    return out


async def force_release_answered(inbox: list, payload: tuple[Any, ...]) -> ForceReleaseOutcome:
    """The body of a `force_release` update: it waits in the inbox like every message, in order,
    until the loop has answered it."""
    call = ForceReleaseCall(arguments.update(contract.FORCE_RELEASE, payload, ForceRelease))
    inbox.append(call)
    await workflow.wait_condition(lambda: call.outcome is not None)
    assert call.outcome is not None
    return call.outcome


class Retelling:
    """The one durable timer that wakes a queue's loop when a reservation told only in an enqueue's
    answer is due to be told again (`Owner.retell`). While the queue keeps answering, it fires about
    once per scheduler.RETELL_AFTER."""

    def __init__(self) -> None:
        self.timer: asyncio.Future[None] | None = None

    def woke(self) -> bool:
        return self.timer is not None and self.timer.done()

    def step(self, owner: Owner) -> None:
        if self.woke():
            self.timer = None
        now = workflow.now()
        owner.retell(now)
        due = owner.next_retell()
        # One already due waits for the outbox, whose delivery wakes the loop when it ends.
        if due is not None and due > now and self.timer is None:
            self.timer = asyncio.ensure_future(workflow.sleep(due - now, summary="tell again reservations told only in answers"))


def run_pass(owner: Owner) -> None:
    """The owner's scheduling pass, now, and what it measured emitted."""
    owner.run_pass(workflow.now())
    emit(owner.observed)
    owner.observed = []
