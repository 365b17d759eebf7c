"""The `simulated` ProvisioningRequest backend: requests go to the simulated cluster autoscaler, the
workflow `admitflow/autoscaler` (workflows/autoscaler.py), which pushes every status change to the
watcher as the signal `provisioning_request_status`.

Creating a request starts the autoscaler if it does not run (update-with-start); deleting a request
or reporting its pods never does: with no autoscaler there is nothing to delete or consume.
"""

from __future__ import annotations

from collections.abc import Mapping

from temporalio import activity
from temporalio.client import Client, WithStartWorkflowOperation
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RPCError, RPCStatusCode

from admitflow import ids
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

    def _start(self) -> WithStartWorkflowOperation:
        return WithStartWorkflowOperation(
            "SimulatedAutoscalerWorkflow",
            AutoscalerInput(),
            id=ids.AUTOSCALER_ID,
            task_queue=self.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            static_summary=WORKFLOW_SUMMARY,
        )

    async def create(self, request: ProvisioningRequest, pod_templates: list[PodTemplate], watcher: str) -> ProvisioningRequest:
        return await self.client.execute_update_with_start_workflow(
            "create_provisioning_request",
            CreateProvisioningRequest(request=request, pod_templates=pod_templates, watcher=watcher),
            start_workflow_operation=self._start(),
            result_type=ProvisioningRequest,
        )

    async def delete(self, namespace: str, name: str) -> bool:
        return await self._update("delete_provisioning_request", ProvisioningRequestRef(namespace=namespace, name=name))

    async def watch(self, namespace: str, name: str, resource_version: str, timeout_seconds: float) -> ProvisioningRequest | None:
        raise NotImplementedError("the simulated backend pushes status changes to the watcher; nothing to watch")

    async def pods_scheduled(self, namespace: str, name: str) -> None:
        await self._update("provisioning_pods_scheduled", ProvisioningRequestRef(namespace=namespace, name=name))

    async def _update(self, update: str, ref: ProvisioningRequestRef) -> bool:
        """False when no autoscaler runs."""
        try:
            return await self.client.get_workflow_handle(ids.AUTOSCALER_ID).execute_update(update, ref, result_type=bool)
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return False
            raise

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

    @activity.defn(name="fetch_node_groups")
    async def fetch_node_groups(self) -> NodeGroupsUpdate:
        """The catalog's SimulatedNodeGroups; none (revision 0) when no catalog exists yet."""
        try:
            return await self.client.get_workflow_handle(ids.CATALOG_ID).query("node_groups", result_type=NodeGroupsUpdate)
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return NodeGroupsUpdate(revision=0)
            raise
