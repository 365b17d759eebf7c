"""The `simulated` ProvisioningRequest backend: requests go to the simulated cluster autoscaler, the
workflow `admitflow/autoscaler` (workflows/autoscaler.py), which pushes every status change to the
watcher as the signal `provisioning_request_status`.

Creating a request starts the autoscaler if it does not run (signal-with-start) and reads the
request back as stored, from the autoscaler's memo (admitflow/memos.py), which the workflow task
that takes the signal writes; deleting a request or reporting its pods never starts it: with no
autoscaler there is nothing to delete or consume. All three are signals, never updates: see the
autoscaler. Nothing here queries the autoscaler or the catalog.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping

from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from admitflow import contract, ids, memos
from admitflow.admission.catalog import node_groups
from admitflow.api.provisioning_request import PodTemplate, ProvisioningRequest
from admitflow.client import AdmitflowClient
from admitflow.messages import (
    AutoscalerInput,
    CreateProvisioningRequest,
    NodeGroupsUpdate,
    ProvisioningRequestCondition,
    ProvisioningRequestRef,
)
from admitflow.simulation.autoscaler import SET_BY_HAND, WORKFLOW_SUMMARY

# How long a created request is waited for in the autoscaler's memo before the create is given up
# (and retried by its activity): the autoscaler's next workflow task writes it.
STORED_WITHIN = 60.0


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
        """False when the autoscaler's memo holds no such request (or no autoscaler runs); else once
        the memo no longer holds it. The deletion is signalled either way: a create the autoscaler
        has not taken yet (its memo does not hold it) is then deleted right after it."""
        ref = ProvisioningRequestRef(namespace=namespace, name=name)
        try:
            held = await self._stored(ref, within=0.0) is not None
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return False
            raise
        if not await self._signal(contract.AUTOSCALER_DELETE_REQUEST, ref) or not held:
            return False
        return await self._stored(ref, within=STORED_WITHIN, gone=True) is None

    async def _stored(self, ref: ProvisioningRequestRef, within: float = STORED_WITHIN, gone: bool = False) -> ProvisioningRequest | None:
        """The request as the autoscaler's memo holds it, once it does (or, with `gone`, None once it
        no longer does): the workflow task that takes a create or delete signal writes the memo.
        Described again, a little later each time, for up to `within` seconds; then what it holds."""
        handle = self.client.get_workflow_handle(ids.AUTOSCALER_ID)
        key = memos.provisioning_request_key(ref.namespace, ref.name)
        loop = asyncio.get_running_loop()
        give_up = loop.time() + within
        wait = 0.05
        while True:
            stored = (await (await handle.describe()).memo()).get(key)
            if (stored is None) is gone or loop.time() >= give_up:
                return ProvisioningRequest.model_validate(stored) if stored is not None else None
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
        """The catalog's SimulatedNodeGroups, from its memo; none (revision 0) when no catalog exists yet."""
        state = await AdmitflowClient(self.client).catalog_state()
        return NodeGroupsUpdate(revision=state.revision, node_groups=node_groups(state))
