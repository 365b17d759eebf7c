"""The kinds admitflow accepts, and how an (apiVersion, kind) pair maps to a model."""

from __future__ import annotations

from typing import Annotated, Union

from pydantic import Field

from .admission_check import AdmissionCheck
from .cluster_queue import ClusterQueue
from .configuration import Configuration
from .local_queue import LocalQueue
from .provisioning_request_config import ProvisioningRequestConfig
from .resource_flavor import ResourceFlavor
from .workload import Workload

Manifest = Annotated[
    Union[
        ResourceFlavor,
        ClusterQueue,
        LocalQueue,
        AdmissionCheck,
        ProvisioningRequestConfig,
        Workload,
        Configuration,
    ],
    Field(discriminator="kind"),
]
"""Any object admitflow accepts, told apart by `kind` (usable as a pydantic field type)."""

MANIFEST_TYPES: tuple[type, ...] = (
    ResourceFlavor,
    ClusterQueue,
    LocalQueue,
    AdmissionCheck,
    ProvisioningRequestConfig,
    Workload,
    Configuration,
)
"""The same kinds as a tuple, for isinstance checks."""

CONFIG_TYPES: tuple[type, ...] = (
    ResourceFlavor,
    ClusterQueue,
    LocalQueue,
    AdmissionCheck,
    ProvisioningRequestConfig,
    Configuration,
)
"""Kinds whose status belongs to the system: a status given on input is dropped."""

NAMESPACED_TYPES: tuple[type, ...] = (LocalQueue, Workload)

_KUEUE_KINDS = {
    t.__name__: t for t in (ResourceFlavor, ClusterQueue, LocalQueue, AdmissionCheck, ProvisioningRequestConfig, Workload)
}


def model_for(api_version: object, kind: object) -> type | None:
    """The model for an apiVersion and kind as written (v1beta1 or v1beta2), or None."""
    if api_version in ("kueue.x-k8s.io/v1beta1", "kueue.x-k8s.io/v1beta2") and isinstance(kind, str):
        return _KUEUE_KINDS.get(kind)
    if api_version in ("config.kueue.x-k8s.io/v1beta1", "config.kueue.x-k8s.io/v1beta2") and kind == "Configuration":
        return Configuration
    return None
