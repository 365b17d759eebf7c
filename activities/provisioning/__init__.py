"""The activities of the built-in ProvisioningRequest check, over the configured backend."""

from __future__ import annotations

from temporalio import activity
from temporalio.exceptions import ApplicationError

from admitflow.activities.heartbeat import heartbeating
from admitflow.activities.provisioning.backend import ProvisioningBackend
from admitflow import contract
from admitflow.messages import (
    CreatedProvisioningRequest,
    CreateProvisioningRequest,
    ProvisioningRequestRef,
    WatchedProvisioningRequest,
    WatchProvisioningRequest,
)

# A watch returns at least this often, so that a lost worker is noticed by the heartbeat timeout
# and the watch is started again elsewhere.
WATCH_SECONDS = 50.0


class ProvisioningActivities:
    def __init__(self, backend: ProvisioningBackend) -> None:
        self.backend = backend

    # Create, delete and pods_scheduled are a few API calls each: they heartbeat while they run, so
    # that a worker that dies in one costs the heartbeat timeout its workflow sets (seconds), not
    # the start-to-close (a minute).

    @activity.defn(name=contract.CREATE_PROVISIONING_REQUEST)
    async def create(self, req: CreateProvisioningRequest) -> CreatedProvisioningRequest:
        async with heartbeating():
            stored = await self.backend.create(req.request, req.pod_templates, req.watcher)
        return CreatedProvisioningRequest(request=stored, push=self.backend.push)

    @activity.defn(name=contract.DELETE_PROVISIONING_REQUEST)
    async def delete(self, ref: ProvisioningRequestRef) -> bool:
        async with heartbeating():
            return await self.backend.delete(ref.namespace, ref.name)

    @activity.defn(name=contract.WATCH_PROVISIONING_REQUEST)
    async def watch(self, req: WatchProvisioningRequest) -> WatchedProvisioningRequest:
        if self.backend.push:
            raise ApplicationError(f"the {self.backend.name} backend pushes status changes; nothing to watch", non_retryable=True)
        activity.heartbeat()
        found = await self.backend.watch(req.namespace, req.name, req.resource_version, WATCH_SECONDS)
        return WatchedProvisioningRequest(request=found)

    @activity.defn(name=contract.PROVISIONING_PODS_SCHEDULED)
    async def pods_scheduled(self, ref: ProvisioningRequestRef) -> None:
        async with heartbeating():
            await self.backend.pods_scheduled(ref.namespace, ref.name)

    def all(self) -> list:
        return [self.create, self.delete, self.watch, self.pods_scheduled]
