"""Worker Versioning: each build of the engine worker is a Temporal Worker Deployment version.

The engine's workers poll as version `<deployment>.<build>` (deployment `admitflow` and the
release's version unless configured), and every workflow they run is pinned to the build that
started it: a workload, a ProvisioningRequest attempt and the forever-running entities (catalog,
ClusterQueues, cohort trees, the PodsReady gate, the simulated autoscaler) carry on on their build
until they end or continue as new. Each continue-as-new moves to the deployment's current version
(`initial_versioning_behavior=AUTO_UPGRADE`), its state read by the new build (admitflow.schema);
an entity continues as new as soon as its target version changes, a workload once no runner runs
it. Making a build current (`set_current`) wakes every run pinned to another build (`wake`), so an
idle one notices too.

The Python SDK has no client for deployments yet: these are the raw workflow-service calls the
`temporal worker deployment` commands make.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from dataclasses import dataclass

from temporalio.api.batch.v1 import BatchOperationSignal
from temporalio.api.enums.v1 import RoutingConfigUpdateState, WorkerDeploymentVersionStatus
from temporalio.api.workflowservice.v1 import (
    CountWorkflowExecutionsRequest,
    DescribeWorkerDeploymentRequest,
    SetWorkerDeploymentCurrentVersionRequest,
    StartBatchOperationRequest,
)
from temporalio.client import Client
from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import WorkerDeploymentConfig

from admitflow import contract

DEFAULT_DEPLOYMENT = "admitflow"
# What Temporal takes: a deployment name holds neither "." nor ":" (the SDK's and visibility's
# separators in `dep.build` and `dep:build`), a build id no ":"; a worker given a bad name polls
# without error and never shows up, so it is refused here.
_DEPLOYMENT = re.compile(r"^[A-Za-z0-9_-]{1,255}$")
_BUILD = re.compile(r"^[A-Za-z0-9_.+-]{1,255}$")
# A version's workers must have polled before it can be made current: how long `set_current` waits.
POLL_WAIT = 30.0


class VersioningError(ValueError):
    """A deployment name or build id Temporal refuses, or a version it cannot make current."""


def default_build_id() -> str:
    """The installed release (`0.2.0`): the build a worker runs unless told otherwise."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("admitflow")
    except PackageNotFoundError:
        return "dev"


def deployment_version(deployment: str = DEFAULT_DEPLOYMENT, build_id: str | None = None) -> WorkerDeploymentVersion:
    """The version `deployment`/`build_id` (the installed release by default), or VersioningError."""
    build = build_id or default_build_id()
    if not _DEPLOYMENT.match(deployment):
        raise VersioningError(f'deployment name "{deployment}": letters, digits, "_" and "-" only, at most 255 characters')
    if not _BUILD.match(build):
        raise VersioningError(f'build id "{build}": letters, digits, "_", "-", "." and "+" only, at most 255 characters')
    return WorkerDeploymentVersion(deployment_name=deployment, build_id=build)


def worker_config(version: WorkerDeploymentVersion) -> WorkerDeploymentConfig:
    """The SDK worker's deployment options for `version`: versioned, every workflow pinned."""
    return WorkerDeploymentConfig(
        version=version, use_worker_versioning=True, default_versioning_behavior=VersioningBehavior.PINNED,
    )


def visibility_name(version: WorkerDeploymentVersion) -> str:
    """The version as visibility spells it (`TemporalWorkerDeploymentVersion='admitflow:0.2.0'`)."""
    return f"{version.deployment_name}:{version.build_id}"


def pinned_query(version: WorkerDeploymentVersion) -> str:
    """The runs still pinned to `version`: what keeps its workers needed."""
    return (
        f"TemporalWorkerDeploymentVersion='{visibility_name(version)}' AND TemporalWorkflowVersioningBehavior='Pinned' "
        "AND ExecutionStatus='Running'"
    )


@dataclass
class VersionSummary:
    build_id: str
    status: str  # current, ramping, draining, drained, inactive
    pinned: int  # runs still pinned to it (visibility; it lags a few seconds)


@dataclass
class Deployment:
    name: str
    current: str | None
    versions: list[VersionSummary]


async def describe(client: Client, deployment: str = DEFAULT_DEPLOYMENT) -> Deployment | None:
    """The deployment's versions, its current one and what still runs pinned to each; None when
    no versioned worker of it ever polled."""
    try:
        resp = await client.workflow_service.describe_worker_deployment(
            DescribeWorkerDeploymentRequest(namespace=client.namespace, deployment_name=deployment)
        )
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
    info = resp.worker_deployment_info
    current = info.routing_config.current_deployment_version.build_id or None
    versions = []
    for v in info.version_summaries:
        build = v.deployment_version.build_id
        status = WorkerDeploymentVersionStatus.Name(v.status).removeprefix("WORKER_DEPLOYMENT_VERSION_STATUS_").lower()
        count = await client.workflow_service.count_workflow_executions(
            CountWorkflowExecutionsRequest(namespace=client.namespace, query=pinned_query(WorkerDeploymentVersion(deployment, build)))
        )
        versions.append(VersionSummary(build_id=build, status=status, pinned=count.count))
    return Deployment(name=info.name, current=current, versions=versions)


async def set_current(client: Client, version: WorkerDeploymentVersion, wait: float = POLL_WAIT, identity: str = "admitflow") -> int:
    """Make `version` the deployment's current version, once its workers have polled (waiting up to
    `wait` seconds for them); once the server has propagated the change to every task queue of the
    deployment, wake every run pinned to another version of it, so that it continues as new onto
    this one when it can. Returns the number of runs woken."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    while True:
        try:
            await client.workflow_service.set_worker_deployment_current_version(
                SetWorkerDeploymentCurrentVersionRequest(
                    namespace=client.namespace, deployment_name=version.deployment_name, build_id=version.build_id,
                    identity=identity,
                )
            )
            break
        except RPCError as err:
            # The version does not exist until one of its workers has polled.
            if err.status not in (RPCStatusCode.NOT_FOUND, RPCStatusCode.FAILED_PRECONDITION) or loop.time() > deadline:
                raise VersioningError(f"cannot make {version.to_canonical_string()} current: {err.message}") from None
        await asyncio.sleep(0.5)
    # A workflow task reads its run's target version from the task queue's routing: woken before the
    # change reached it, a run would see no change, and wait for none.
    while True:
        resp = await client.workflow_service.describe_worker_deployment(
            DescribeWorkerDeploymentRequest(namespace=client.namespace, deployment_name=version.deployment_name)
        )
        info = resp.worker_deployment_info
        if (
            info.routing_config.current_deployment_version.build_id == version.build_id
            and info.routing_config_update_state != RoutingConfigUpdateState.ROUTING_CONFIG_UPDATE_STATE_IN_PROGRESS
        ):
            break
        if loop.time() > deadline:
            raise VersioningError(f"{version.to_canonical_string()} is current, but the server has not propagated it yet")
        await asyncio.sleep(0.2)
    return await wake(client, version)


async def wake(client: Client, current: WorkerDeploymentVersion) -> int:
    """Signal `version_changed` to every running workflow of the deployment pinned to another
    version (a batch operation the server carries out): a run that waits for nothing learns of its
    new target version only from a workflow task. Returns how many it found."""
    query = (
        f"TemporalWorkerDeployment='{current.deployment_name}' AND TemporalWorkflowVersioningBehavior='Pinned' "
        f"AND TemporalWorkerDeploymentVersion!='{visibility_name(current)}' AND ExecutionStatus='Running'"
    )
    found = await client.workflow_service.count_workflow_executions(
        CountWorkflowExecutionsRequest(namespace=client.namespace, query=query)
    )
    if found.count:
        await client.workflow_service.start_batch_operation(
            StartBatchOperationRequest(
                namespace=client.namespace, visibility_query=query, job_id=str(uuid.uuid4()),
                reason=f"{current.to_canonical_string()} is current",
                signal_operation=BatchOperationSignal(signal=contract.VERSION_CHANGED, identity="admitflow"),
            )
        )
    return found.count


async def set_current_if_none(client: Client, version: WorkerDeploymentVersion) -> bool:
    """A deployment's first version becomes current by itself (a fresh `admitflow worker`); later
    ones are made current by whoever rolls them out (`admitflow deployment set-current`). Returns
    whether this call made `version` current."""
    found = await describe(client, version.deployment_name)
    if found is not None and found.current:
        return False
    await set_current(client, version)
    return True
