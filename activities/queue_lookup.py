"""Where a workload's LocalQueue leads, and putting the workload in that ClusterQueue.

Both read the catalog's memo (admitflow/memos.py, by DescribeWorkflowExecution), never query it."""

from __future__ import annotations

import time

from temporalio import activity
from temporalio.client import Client

from admitflow import contract, ids
from admitflow.activities.delivery import send_signal
from admitflow.activities.mail import Mailer, StartQueue
from admitflow.admission.catalog import QueueResolution, resolve_local_queue, view_of
from admitflow.admission.cluster_queue import ClusterQueueView
from admitflow.client import AdmitflowClient
from admitflow.messages import CatalogInput, ClusterQueueRef, WatchRequest
from admitflow.admission.protocol import EnqueueRequest, Message


# How long a LocalQueue -> ClusterQueue lookup is reused. A LocalQueue never changes its
# ClusterQueue; if it was deleted meanwhile, the ClusterQueue sends the workload back, and the
# workload's next lookup bypasses this cache. Long, because asking the catalog again costs most
# when a backlog keeps the worker busiest.
ROUTE_TTL_SECONDS = 600.0


class QueueLookupActivities:
    def __init__(self, client: Client, mailer: Mailer | None = None, clock=time.monotonic) -> None:
        self.client = client
        self.mailer = mailer or Mailer(client, send_signal)
        self.clock = clock
        self.catalog = AdmitflowClient(client)
        self._routes: dict[tuple[str, str], tuple[str, float]] = {}

    async def _resolve(self, request: EnqueueRequest) -> QueueResolution:
        key = (request.namespace, request.local_queue)
        cached = self._routes.get(key)
        if cached is not None and not request.fresh and self.clock() - cached[1] < ROUTE_TTL_SECONDS:
            return QueueResolution(cluster_queue=cached[0])
        resolution = resolve_local_queue(await self.catalog.catalog_state(), request.namespace, request.local_queue)
        if resolution.reason:
            self._routes.pop(key, None)
        else:
            self._routes[key] = (resolution.cluster_queue, self.clock())
        return resolution

    @activity.defn(name=contract.ENQUEUE_WORKLOAD)
    async def enqueue_workload(self, request: EnqueueRequest) -> QueueResolution:
        """Resolve the LocalQueue; if it leads to a ClusterQueue, enqueue there (starting that
        workflow if the catalog's view has not reached it yet), with the other workloads' messages to
        that queue (activities/mail.py). Otherwise ask the catalog to wake the workload when the
        queue appears. Safe to repeat: the ClusterQueue ignores a ticket it has."""
        resolution = await self._resolve(request)
        if resolution.reason:
            await self.client.start_workflow(
                contract.CATALOG_WORKFLOW,
                CatalogInput(),
                id=ids.CATALOG_ID,
                task_queue=contract.start_task_queue(contract.CATALOG_WORKFLOW, activity.info().task_queue),
                start_signal=contract.WATCH_QUEUE,
                start_signal_args=[
                    WatchRequest(
                        local_queue=f"{request.namespace}/{request.local_queue}",
                        workflow_id=request.workflow_id,
                        seen=resolution.message,
                    )
                ],
            )
            return resolution
        taken = await self.mailer.send(
            ids.cluster_queue_id(resolution.cluster_queue),
            Message(signal=contract.ENQUEUE, payload=request.entry.to_wire(), answer=request.answer),
            StartQueue(name=resolution.cluster_queue, task_queue=activity.info().task_queue),
        )
        answers = (contract.PENDING_STATUS, contract.QUOTA_RESERVED)
        return resolution.model_copy(update={"notices": [n.payload for n in taken.answers if n.signal in answers]})

    @activity.defn(name=contract.FETCH_CLUSTER_QUEUE_VIEW)
    async def fetch_cluster_queue_view(self, ref: ClusterQueueRef) -> ClusterQueueView:
        """The view the catalog would send the ClusterQueue, computed from its memo (revision 0 and
        no spec when no catalog runs)."""
        return view_of(await self.catalog.catalog_state(), ref.name)
