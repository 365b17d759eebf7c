"""The `simulated` ProvisioningRequest backend: requests go to the simulated cluster autoscaler, the
workflow `admitflow/autoscaler` (workflows/autoscaler.py), which pushes every status change to the
watcher as the signal `provisioning_request_status`.

Creating a request starts the autoscaler if it does not run (signal-with-start) and reads the
request back as stored; deleting a request or reporting its pods never starts it: with no autoscaler
there is nothing to delete or consume. All three are signals, never updates: see the autoscaler.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping

from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from admitflow import contract, ids
from admitflow.api.provisioning_request import PodTemplate, ProvisioningRequest
from admitflow.client import AdmitflowClient
from admitflow.messages import (
    AutoscalerInput,
    CreateProvisioningRequest,
    NodeGroupsUpdate,
    ProvisioningRequestCondition,
    ProvisioningRequestRef,
    StoredProvisioningRequest,
)
from admitflow.simulation.autoscaler import SET_BY_HAND, WORKFLOW_SUMMARY


class SimulatedBackend:
    name = "simulated"
    push = True

    def __init__(self, client: Client, task_queue: str | None = None) -> None:
        self.client = client
        self._task_queue = task_queue

    @property
    def task_queue(self) -> str:
        """The engine's task queue: the activity's own inside the worker, else the configured one."""
        if self._task_queue:
            return self._task_queue
        if activity.in_activity():
            return activity.info().task_queue
        return ids.task_queue()

    async def create(self, request: ProvisioningRequest, pod_templates: list[PodTemplate], watcher: str) -> ProvisioningRequest:
        await self.client.start_workflow(
            contract.SIMULATED_AUTOSCALER_WORKFLOW,
            AutoscalerInput(),
            id=ids.AUTOSCALER_ID,
            task_queue=self.task_queue,
            static_summary=WORKFLOW_SUMMARY,
            start_signal=contract.AUTOSCALER_CREATE_REQUEST,
            start_signal_args=[CreateProvisioningRequest(request=request, pod_templates=pod_templates, watcher=watcher)],
        )
        found = await self._stored(ProvisioningRequestRef(namespace=request.metadata.namespace, name=request.metadata.name))
        if found is None:
            raise ApplicationError(f"the simulated autoscaler did not store ProvisioningRequest {request.metadata.namespace}/{request.metadata.name}")
        return found

    async def delete(self, namespace: str, name: str) -> bool:
        ref = ProvisioningRequestRef(namespace=namespace, name=name)
        try:
            if await self._stored(ref) is None:
                return False
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return False
            raise
        return await self._signal(contract.AUTOSCALER_DELETE_REQUEST, ref)

    async def _stored(self, ref: ProvisioningRequestRef) -> ProvisioningRequest | None:
        """The request as the autoscaler stores it. A query waits for the workflow task that takes
        the signals sent before it, so it reads them applied. While signals keep a workflow task
        pending the server buffers only a few queries and refuses the others (RESOURCE_EXHAUSTED):
        those are asked again a little later."""
        handle = self.client.get_workflow_handle(ids.AUTOSCALER_ID)
        wait = 0.05
        while True:
            try:
                found = await handle.query(contract.PROVISIONING_REQUEST_QUERY, ref, result_type=StoredProvisioningRequest)
                return found.request
            except RPCError as err:
                if err.status != RPCStatusCode.RESOURCE_EXHAUSTED:
                    raise
            await asyncio.sleep(random.uniform(wait, 2 * wait))
            wait = min(wait * 2, 1.0)

    async def watch(self, namespace: str, name: str, resource_version: str, timeout_seconds: float) -> ProvisioningRequest | None:
        raise NotImplementedError("the simulated backend pushes status changes to the watcher; nothing to watch")

    async def pods_scheduled(self, namespace: str, name: str) -> None:
        await self._signal(contract.AUTOSCALER_PODS_SCHEDULED, ProvisioningRequestRef(namespace=namespace, name=name))

    async def _signal(self, signal: str, ref: ProvisioningRequestRef) -> bool:
        """False when no autoscaler runs."""
        try:
            await self.client.get_workflow_handle(ids.AUTOSCALER_ID).signal(signal, ref)
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return False
            raise
        return True

    # --- driving it by hand (`admitflow provreq`, tests) ---------------------------------------

    async def list(self, namespace: str | None = None) -> list[ProvisioningRequest]:
        return await AdmitflowClient(self.client, self.task_queue).provisioning_requests(namespace)

    async def set_condition(
        self,
        namespace: str,
        name: str,
        type_: str,
        status: str = "True",
        reason: str | None = None,
        message: str = "",
        details: Mapping[str, str] | None = None,
    ) -> ProvisioningRequest:
        """Set a condition as Kueue's integration tests do; raises AdmitflowError (one line) when refused."""
        request = ProvisioningRequestCondition(
            namespace=namespace, name=name, type=type_, status=status, reason=reason or SET_BY_HAND,
            message=message, details=dict(details or {}),
        )
        return await AdmitflowClient(self.client, self.task_queue).set_provisioning_request_condition(request)


class AutoscalerActivities:
    """What the autoscaler workflow asks of the rest of the system."""

    def __init__(self, client: Client) -> None:
        self.client = client

    @activity.defn(name=contract.FETCH_NODE_GROUPS)
    async def fetch_node_groups(self) -> NodeGroupsUpdate:
        """The catalog's SimulatedNodeGroups; none (revision 0) when no catalog exists yet."""
        try:
            return await self.client.get_workflow_handle(ids.CATALOG_ID).query(contract.CATALOG_NODE_GROUPS, result_type=NodeGroupsUpdate)
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return NodeGroupsUpdate(revision=0)
            raise
