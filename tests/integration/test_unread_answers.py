"""A reservation reaches its workload whatever road its enqueue took (issue 51, item 4).

A workload's enqueue asks its ClusterQueue for its answer in the worker's `take_messages` update
(activities/mail.py); a sender that gives up on the update (it took longer than ACCEPT_WITHIN, as
11-16 s after a worker restart in the chaos run) sends its messages again as signals. If the queue
had decided the reservation into the answer nobody read, the workload held quota without knowing
it, and heard of it only from the queue's retelling 5 minutes later. Here a sender gives up on
every enqueue's update at the moment the queue answers it, the update first or its signals first:
the workload is admitted within seconds all the same.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from admitflow import contract
from admitflow.activities.mail import Mailer, Taken, _starting
from admitflow.client import AdmitflowClient
from admitflow.admission.protocol import Messages, Receipt
from admitflow.worker import main
from tests.histories import audit
from tests.integration.test_admission_checks import setup, submit, until

pytestmark = pytest.mark.integration

TASK_QUEUE = "unread"
# Far below scheduler.RETELL_AFTER (5 minutes), which was the only way the reservation arrived.
WITHIN = 15.0


class GivesUpAtTheAnswer(Mailer):
    """Sends each batch that asks for an answer by update, waits for the queue's answer and drops
    it, then sends the batch again as signals (or the signals first, then the update), as a sender
    whose wait ran out at that very moment does. Every other batch goes as usual."""

    order = "update-first"
    given_up = 0

    async def _deliver(self, workflow_id, batch):
        if not any(letter.message.answer for letter in batch):
            return await super()._deliver(workflow_id, batch)
        type(self).given_up += 1
        if self.order == "signals-first":
            taken = [Taken(ran=await self._signal(workflow_id, letter)) for letter in batch]
            await self._update(workflow_id, batch)
            return taken
        await self._update(workflow_id, batch)
        return [Taken(ran=await self._signal(workflow_id, letter)) for letter in batch]

    async def _update(self, workflow_id, batch) -> Receipt:
        messages = Messages(messages=[letter.message for letter in batch])
        start = next((letter.start for letter in batch if letter.start is not None), None)
        if start is None:
            return await self.client.get_workflow_handle(workflow_id).execute_update(contract.TAKE_MESSAGES, messages, result_type=Receipt)
        return await self.client.execute_update_with_start_workflow(
            contract.TAKE_MESSAGES, messages, start_workflow_operation=_starting(workflow_id, start), result_type=Receipt
        )


@pytest.mark.parametrize("order", ["update-first", "signals-first"], ids=["the-update-answered-then-its-signals", "its-signals-then-the-update-answered"])
async def test_a_reservation_answered_into_an_update_nobody_reads_reaches_its_workload_within_seconds(engine, monkeypatch, order):
    monkeypatch.setattr(GivesUpAtTheAnswer, "order", order)
    monkeypatch.setattr(GivesUpAtTheAnswer, "given_up", 0)
    monkeypatch.setattr(main, "Mailer", GivesUpAtTheAnswer)
    af = AdmitflowClient(engine.client, TASK_QUEUE)
    async with main.build_worker(engine.client, TASK_QUEUE):
        await setup(af)
        began = datetime.now(UTC)
        await submit(af)
        admitted = await until(af, "Admitted", timeout=WITHIN)
        took = (datetime.now(UTC) - began).total_seconds()
    assert GivesUpAtTheAnswer.given_up >= 1, "the enqueue went through the sender that gives up"
    assert took < WITHIN
    assert [e.reason for e in admitted.events].count("QuotaReserved") == 1
    # The measure the chaos run reports, read from the queue's and the workload's histories.
    found = await audit(engine.client, reservations=True)
    (lag,) = found.reservations
    assert lag.key == "default/job" and lag.seconds is not None and 0 <= lag.seconds < WITHIN
