"""An update the server rejects because a worker completed its workflow task without taking it
(`UnprocessedUpdate`: a worker too old to know updates, or one that ended the task without reading
it) changed nothing: admitflow's client sends it again instead of failing the command, and the
engine's mail sends its messages as signals.

The worker that leaves the update unread is played here by hand, with the same two calls a real
worker makes (poll a workflow task, complete it), against the real dev server.
"""

from __future__ import annotations

import asyncio

from temporalio.api.enums.v1 import TaskQueueKind
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import PollWorkflowTaskQueueRequest, RespondWorkflowTaskCompletedRequest

from admitflow import contract, ids
from admitflow.activities.delivery import send_signal
from admitflow.activities.mail import Mailer
from admitflow.admission.catalog import Outcome
from admitflow.api import LoadedManifest, parse_manifest
from admitflow.client import AdmitflowClient
from admitflow.worker.main import build_worker
from tests.builders import flavor_manifest
from tests.integration.test_mail import enqueue, messages_in_history, new_queue


async def _complete_one_task_unread(client, task_queue: str) -> list[str]:
    """Poll one workflow task from `task_queue` and complete it with nothing, as a worker that does
    not know updates would; returns the type of each protocol message the task carried (an update's
    request, for one)."""
    service = client.workflow_service
    task = await service.poll_workflow_task_queue(
        PollWorkflowTaskQueueRequest(
            namespace=client.namespace, task_queue=TaskQueue(name=task_queue, kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL),
            identity="a worker that does not read updates",
        )
    )
    await service.respond_workflow_task_completed(
        RespondWorkflowTaskCompletedRequest(namespace=client.namespace, task_token=task.task_token, identity="a worker that does not read updates")
    )
    return [m.body.type_url for m in task.messages]


async def test_an_update_a_worker_completed_unread_is_asked_again(engine) -> None:
    task_queue = "unprocessed-updates"
    admitflow = AdmitflowClient(engine.client, task_queue)

    def flavor(name: str) -> list[LoadedManifest]:
        obj, _ = parse_manifest(flavor_manifest(name))
        return [LoadedManifest("<test>", 1, obj)]

    # The catalog's first task runs its code (it writes its memo); the hand-played worker then takes
    # a later one, as a worker that runs the code but does not know updates would leave it.
    async with build_worker(engine.client, task_queue):
        await admitflow.apply(flavor("on-demand"))
    applying = asyncio.ensure_future(admitflow.apply(flavor("spot")))
    carried = await _complete_one_task_unread(engine.client, task_queue)
    assert carried == ["type.googleapis.com/temporal.api.update.v1.Request"], "the task carried the apply"
    async with build_worker(engine.client, task_queue):
        outcomes = await asyncio.wait_for(applying, 60)
        objects = await admitflow.catalog_objects("ResourceFlavor")
    assert outcomes == [Outcome(kind="ResourceFlavor", key="spot", action="created")]
    assert sorted(o.metadata.name for o in objects) == ["on-demand", "spot"]
    # Each apply is in the catalog's history once: the rejected sending left nothing there.
    history = await engine.client.get_workflow_handle(ids.CATALOG_ID).fetch_history()
    accepted = [e for e in history.events if e.HasField("workflow_execution_update_accepted_event_attributes")]
    assert len(accepted) == 2


async def test_messages_a_worker_left_unread_go_as_signals(engine) -> None:
    client, (_, queue) = engine.client, new_queue("unread")
    task_queue = f"unread-{queue[-6:]}"
    # A queue whose worker does not read updates (a helper type: the audit does not replay it).
    await client.start_workflow("queue-that-reads-no-updates", id=queue, task_queue=task_queue)
    assert await _complete_one_task_unread(client, task_queue) == []
    mailer = Mailer(client, send_signal, accept_within=60.0)  # not the timeout's road to signals
    taken, carried = await asyncio.gather(mailer.send(queue, enqueue(0)), _complete_one_task_unread(client, task_queue))
    assert carried == ["type.googleapis.com/temporal.api.update.v1.Request"]
    assert taken.ran
    assert await messages_in_history(client, queue) == ([], [contract.ENQUEUE])
    await client.get_workflow_handle(queue).terminate("test over")
