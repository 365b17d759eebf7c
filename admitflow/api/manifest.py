"""The kinds admitflow accepts (Kueue's, admitflow's own, and Kubernetes' batch/v1 Job and
scheduling.k8s.io/v1 PriorityClass), and how an (apiVersion, kind) pair maps to a model."""

from __future__ import annotations

from typing import Annotated, Union, get_args

from pydantic import Field

from .admission_check import AdmissionCheck
from .check_parameters import API_VERSION as PARAMETERS_API_VERSION
from .check_parameters import AdmissionCheckParameters
from .cluster_queue import ClusterQueue
from .cohort import Cohort
from .configuration import Configuration
from .job import API_VERSION as JOB_API_VERSION
from .job import Job
from .local_queue import LocalQueue
from .node_group import API_VERSION as NODE_GROUP_API_VERSION
from .node_group import SimulatedNodeGroup
from .priority_class import API_VERSION as PRIORITY_CLASS_API_VERSION
from .priority_class import PriorityClass
from .provisioning_request_config import ProvisioningRequestConfig
from .resource_flavor import ResourceFlavor
from .workload import Workload
from .workload_priority_class import WorkloadPriorityClass

ConfigObject = (
    ResourceFlavor
    | Cohort
    | ClusterQueue
    | LocalQueue
    | AdmissionCheck
    | ProvisioningRequestConfig
    | AdmissionCheckParameters
    | Configuration
    | SimulatedNodeGroup
    | WorkloadPriorityClass
    | PriorityClass
)
"""One of the configuration kinds, as a type (the catalog's objects)."""

CONFIG_TYPES: tuple[type, ...] = get_args(ConfigObject)
"""The configuration kinds (held by the catalog). Their status belongs to the system: a status given
on input is dropped."""

MANIFEST_TYPES: tuple[type, ...] = (*CONFIG_TYPES, Workload, Job)
"""Every kind admitflow accepts, for isinstance checks."""

CatalogObject = Annotated[ConfigObject, Field(discriminator="kind")]
"""Any configuration object, told apart by `kind` (usable as a pydantic field type)."""

Manifest = Annotated[Union[MANIFEST_TYPES], Field(discriminator="kind")]  # noqa: UP007
"""Any object admitflow accepts, told apart by `kind` (usable as a pydantic field type)."""

NAMESPACED_TYPES: tuple[type, ...] = (LocalQueue, Workload, Job)

STATUS_IGNORED_TYPES: tuple[type, ...] = (*CONFIG_TYPES, Job)
"""Kinds whose status given on input is dropped: the catalog's, and a Job's, which the apiserver
resets when the Job is created."""

GENERATE_NAME_TYPES: tuple[type, ...] = (Job,)
"""Kinds a manifest may give `metadata.generateName` instead of a name (for `create`)."""

_KUEUE_KINDS = {
    t.__name__: t
    for t in MANIFEST_TYPES
    if t not in (Configuration, AdmissionCheckParameters, SimulatedNodeGroup, Job, PriorityClass)
}
# Kubernetes' own kinds, by (apiVersion, kind).
_BUILTIN_KINDS = {(JOB_API_VERSION, "Job"): Job, (PRIORITY_CLASS_API_VERSION, "PriorityClass"): PriorityClass}


def model_for(api_version: object, kind: object) -> type | None:
    """The model for an apiVersion and kind as written (v1beta1 or v1beta2), or None."""
    if api_version in ("kueue.x-k8s.io/v1beta1", "kueue.x-k8s.io/v1beta2") and isinstance(kind, str):
        return _KUEUE_KINDS.get(kind)
    if api_version in ("config.kueue.x-k8s.io/v1beta1", "config.kueue.x-k8s.io/v1beta2") and kind == "Configuration":
        return Configuration
    if api_version == PARAMETERS_API_VERSION and kind == "AdmissionCheckParameters":
        return AdmissionCheckParameters
    if api_version == NODE_GROUP_API_VERSION and kind == "SimulatedNodeGroup":
        return SimulatedNodeGroup
    if isinstance(api_version, str) and isinstance(kind, str):
        return _BUILTIN_KINDS.get((api_version, kind))
    return None
