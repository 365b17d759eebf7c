"""Where ProvisioningRequests live: one small interface, two backends chosen in the worker's
configuration (`admitflow worker --provisioning-backend simulated|kubernetes`).

- `simulated` (activities/provisioning/simulated.py): the durable simulated cluster autoscaler,
  a Temporal workflow; it pushes every status change to the watcher workflow as the signal
  `provisioning_request_status` (`push = True`).
- `kubernetes` (activities/provisioning/kubernetes.py): real `autoscaling.x-k8s.io/v1`
  ProvisioningRequests and PodTemplates through the official Kubernetes client; the watcher calls
  `watch` in a loop (`push = False`).

Every method is idempotent: Temporal may run an activity more than once.
"""

from __future__ import annotations

from typing import Protocol

from admitflow import contract
from admitflow.api.provisioning_request import PodTemplate, ProvisioningRequest

# The signal a push backend sends to the watcher workflow, with the ProvisioningRequest (wire form).
STATUS_SIGNAL = contract.PROVISIONING_REQUEST_STATUS


class ProvisioningBackend(Protocol):
    name: str
    push: bool
    """True: the backend signals `STATUS_SIGNAL` to the watcher itself; False: the watcher polls `watch`."""

    async def create(self, request: ProvisioningRequest, pod_templates: list[PodTemplate], watcher: str) -> ProvisioningRequest:
        """Create the PodTemplates, then the request (Kueue's order); return the request as stored,
        with its status and resourceVersion. Objects that already exist under these names are kept
        and returned as they are (a retried activity, or Kueue's AlreadyExists reuse). `watcher` is
        the workflow ID to signal status changes to (push backends)."""
        ...

    async def delete(self, namespace: str, name: str) -> bool:
        """Delete the request and its PodTemplates (`ppt-<name>-*`); False when nothing was there."""
        ...

    async def watch(self, namespace: str, name: str, resource_version: str, timeout_seconds: float) -> ProvisioningRequest | None:
        """Wait until the stored request's resourceVersion differs from `resource_version`, at
        most `timeout_seconds`, and return it as it is then (unchanged on timeout); None when it is
        gone. Only called on backends with `push = False`."""
        ...

    async def pods_scheduled(self, namespace: str, name: str) -> None:
        """The workload was admitted and its pods placed on the provisioned capacity. The simulated
        autoscaler marks the booking consumed (`BookingExpired=True`, `CapacityBookingConsumed`);
        a real cluster sees the pods themselves, so the kubernetes backend does nothing."""
        ...
