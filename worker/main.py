"""The engine worker: every admitflow workflow and activity, on the engine's task queue and on the
entities' (ClusterQueues and cohort trees, `ids.entity_task_queue`), one SDK worker for each; with a
deployment version, both poll as that build of the Worker Deployment (admitflow.versioning)."""

from __future__ import annotations

import asyncio
import gc
import importlib.util
import signal
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from datetime import timedelta
from typing import Any

import structlog
from temporalio.client import Client
from temporalio.common import WorkerDeploymentVersion
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig
from temporalio.worker import PollerBehaviorSimpleMaximum, Replayer, UnsandboxedWorkflowRunner, Worker, WorkflowRunner

from admitflow import ids, versioning
from admitflow.activities.delivery import DeliveryActivities, send_signal
from admitflow.activities.mail import Mailer
from admitflow.activities.provisioning import ProvisioningActivities
from admitflow.activities.provisioning.backend import ProvisioningBackend
from admitflow.activities.provisioning.simulated import AutoscalerActivities
from admitflow.activities.queue_lookup import QueueLookupActivities
from admitflow.admission import metrics
from admitflow.codec import data_converter, for_workers
from admitflow.worker.stale_activations import StaleActivationGuard
from admitflow.workflows.autoscaler import SimulatedAutoscalerWorkflow
from admitflow.workflows.catalog import CatalogWorkflow
from admitflow.workflows.cluster_queue import ClusterQueueWorkflow
from admitflow.workflows.cohort_tree import CohortWorkflow
from admitflow.workflows.job_store import JobWorkflow
from admitflow.workflows.pods_ready_gate import PodsReadyGateWorkflow
from admitflow.workflows.provisioning_attempt import ProvisioningCheckWorkflow
from admitflow.workflows.lifecycle import WorkloadWorkflow

WORKFLOWS: Sequence[type] = (
    CatalogWorkflow, ClusterQueueWorkflow, CohortWorkflow, WorkloadWorkflow, ProvisioningCheckWorkflow, SimulatedAutoscalerWorkflow,
    PodsReadyGateWorkflow, JobWorkflow,
)

PROVISIONING_BACKENDS = ("simulated", "kubernetes")

# The SDK's default: how long the server waits for this worker to take a task (or answer a query)
# for a run it has cached before it gives the task to any worker. Kept on purpose (issue 19): a
# worker killed without a goodbye holds its runs' tasks that long, which sets the floor of recovery
# (about 10 s, bench/recovery.py); but a live worker on a loaded 2-core machine takes its sticky
# tasks up to 8.1 s late (bench/kueue_baseline.py), and a task that times out here goes to the
# normal queue, behind everything else, and replays from scratch. docs/operations.md, "When a
# worker dies".
STICKY_TIMEOUT = timedelta(seconds=10)

log = structlog.get_logger("admitflow.worker")

# Python's cyclic garbage collector in a process that runs the worker (`tune_collector`): its
# youngest generation is collected after this many new container objects instead of 700 (and so
# the older generations, which count the younger one's collections, as much less often).
GC_YOUNGEST = 10_000


def workflow_runner() -> WorkflowRunner:
    """Workflow code runs outside the SDK's sandbox. The sandbox cost a workload 5-10 % of the
    worker's CPU (its import hooks and restricted builtins applied around every activation, an
    instance built for every run; docs/performance-log.md), and it guarded little: admitflow's modules,
    the workflow code's own included, were passed through it, where its proxies that refuse
    `datetime.datetime.now()` and the like do not see their calls; it refused three builtins (`open`,
    `input`, `breakpoint`). What guards determinism instead:
    tests/unit/test_workflow_determinism.py refuses, in every module workflow code imports, any use of
    what the sandbox restricts (builtins such as `open` included), and the replay tests check what the
    code does against every recorded history. The workflow modules' pass-through imports stay, so
    that the code runs unchanged in a sandboxed worker."""
    return UnsandboxedWorkflowRunner()


def tune_collector() -> None:
    """Once a process that runs the worker has started (its modules imported, its client made),
    before the worker runs: what it holds then (modules, pydantic's schemas, the SDK) is frozen out of
    every later collection, and collections come less often (GC_YOUNGEST). A worker allocates
    container objects fast (every activation decodes and validates pydantic models), so the
    collector ran about 30 times a second and, every few seconds, a full collection walked every
    object of the process, for about a tenth of a second with the GIL held. Measured to take the
    collector's share of the process's CPU from about 6 % to 2 %, and its CPU per workload down by 7 %
    (docs/performance-log.md). The test suite's workers leave the collector alone: what a test process
    holds when it starts a worker is dropped later, and frozen it would never be freed."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNGEST, *gc.get_threshold()[1:])


def replayer(workflows: Sequence[type] = WORKFLOWS) -> Replayer:
    """Replays recorded histories against the current workflow code (or `workflows`, a test's other
    build), with the worker's settings (and its encryption keys, from the environment, for histories
    written encrypted).

    Without the SDK's deadlock detection (`debug_mode`): a replay asks whether the code makes the
    same commands, not how fast. The detection fails any activation that has not yielded within
    2 s of wall-clock time, and a replay in a loaded test process (a full garbage collection on
    a machine whose two cores run two test processes and their servers) was failed so once, in
    CI. A workflow that truly never yields is still caught where it matters, by the workers."""
    return Replayer(
        workflows=list(workflows),
        data_converter=for_workers(data_converter()),
        workflow_runner=workflow_runner(),
        debug_mode=True,
    )


def provisioning_backend(
    name: str, client: Client, kubeconfig: str | None = None, context: str | None = None
) -> ProvisioningBackend:
    """The ProvisioningRequest backend the worker's configuration names; `kubeconfig` and
    `context` (kubectl's) say where the kubernetes backend finds its cluster."""
    if name == "kubernetes":
        from admitflow.activities.provisioning.kubernetes import KubernetesBackend

        if importlib.util.find_spec("kubernetes") is None:
            raise ValueError("needs the Kubernetes client: pip install 'admitflow[kubernetes]'")
        return KubernetesBackend.from_config(kubeconfig, context)
    if name == "simulated":
        from admitflow.activities.provisioning.simulated import SimulatedBackend

        return SimulatedBackend(client)
    raise ValueError(f'unknown provisioning backend "{name}": must be one of {", ".join(PROVISIONING_BACKENDS)}')


def sdk_options(**settings: int) -> dict[str, Any]:
    """`admitflow worker`'s settings as the SDK Worker's options: each is the option of its name,
    but `workflow_task_pollers` and `activity_task_pollers`, which set the simple poller behaviour
    (at most N polls open at once)."""
    options: dict[str, Any] = dict(settings)
    for kind in ("workflow", "activity"):
        pollers = options.pop(f"{kind}_task_pollers", None)
        if pollers is not None:
            options[f"{kind}_task_poller_behavior"] = PollerBehaviorSimpleMaximum(maximum=pollers)
    return options


class EngineWorker:
    """The engine's SDK workers, run together (`async with`): one polls the engine's task queue,
    one the entities' (`ids.entity_task_queue`). Both run every workflow and activity, each with
    its own workflow task slots and cache: a workload's local activity that waits for its
    ClusterQueue to take a message holds one of the first's slots, and the queue's (or its cohort
    tree's) workflow task then runs in one of the second's, which no workload can hold. On one task
    queue, workloads waiting for their queue held every slot under a burst, and the queue answered
    only once their wait ran out (activities/mail.py, ACCEPT_WITHIN)."""

    def __init__(self, workers: Sequence[Worker]) -> None:
        self.workers = list(workers)
        self._running: AsyncExitStack | None = None

    @property
    def task_queue(self) -> str:
        return self.workers[0].task_queue

    async def __aenter__(self) -> EngineWorker:
        async with AsyncExitStack() as stack:
            for worker in self.workers:
                await stack.enter_async_context(worker)
            self._running = stack.pop_all()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        running, self._running = self._running, None
        if running is not None:
            await running.__aexit__(*exc)


def build_worker(
    client: Client, task_queue: str, provisioning: ProvisioningBackend | None = None,
    deployment: WorkerDeploymentVersion | None = None, workflows: Sequence[type] = WORKFLOWS, **options,
) -> EngineWorker:
    """The engine worker; ProvisioningRequests go to the simulated autoscaler unless another
    backend is given. Its workflows decode with `for_workers` of the client's converter (a message
    that cannot be decoded is refused and recorded, not a failed workflow task); its activities
    call Temporal through `client` itself. With `deployment`, it polls as that build of the Worker
    Deployment, every workflow pinned to it (admitflow.versioning); without, unversioned (the
    time-skipping test server has no deployments). `workflows` replaces the workflow classes (a
    test's second build). `options` are the SDK worker's, for both."""
    mailer = Mailer(client, send_signal)  # one per worker: its workloads' messages to a queue leave together
    delivery = DeliveryActivities(client, mailer)
    lookup = QueueLookupActivities(client, mailer)
    autoscaler = AutoscalerActivities(client)
    provreq = ProvisioningActivities(provisioning or provisioning_backend("simulated", client))
    polling = Client(**{**client.config(), "data_converter": for_workers(client.data_converter)})
    options.setdefault("sticky_queue_schedule_to_start_timeout", STICKY_TIMEOUT)
    # The pollers are the SDK's default, 5 simple pollers per task queue (one of the workflow ones on
    # the task queue, four on the worker's own sticky queue, which carries the runs it caches). The
    # SDK's autoscaling pollers (the default on 2026-12-03) took new workloads' first tasks faster
    # than the worker could finish the running ones: 10,000 submitted at once through one
    # ClusterQueue, tasks waited over 10 s in the worker and timed out, thousands of entries piled up
    # in the queue, and half of the workloads or fewer got through in the time 5 pollers took all of
    # them through (docs/performance-log.md, "Autoscaled pollers, withdrawn").
    activities = [
        delivery.deliver_signals, lookup.enqueue_workload, lookup.fetch_cluster_queue_view,
        autoscaler.fetch_node_groups, *provreq.all(),
    ]
    # Never run workflow code on the stale clock of a query's fallback (worker/stale_activations.py),
    # whichever runner a workflow takes (one declared `sandboxed=False` takes the unsandboxed one).
    runner = StaleActivationGuard(workflow_runner())
    if deployment is not None:
        options["deployment_config"] = versioning.worker_config(deployment)
    return EngineWorker([
        Worker(
            polling, task_queue=queue, workflows=list(workflows), activities=activities, workflow_runner=runner,
            unsandboxed_workflow_runner=runner, graceful_shutdown_timeout=timedelta(seconds=10), **options,
        )
        for queue in (ids.engine_task_queue(task_queue), ids.entity_task_queue(task_queue))
    ])


def metrics_runtime(port: int | None, host: str = "0.0.0.0") -> Runtime | None:
    """A Temporal runtime that serves Prometheus metrics on `host`:`port` (admitflow's, with
    Kueue's histogram buckets, and the SDK's own); None without a port."""
    if port is None:
        return None
    return Runtime(
        telemetry=TelemetryConfig(
            metrics=PrometheusConfig(bind_address=f"{host}:{port}", histogram_bucket_overrides=metrics.BUCKETS)
        )
    )


async def run_until_signalled(worker: EngineWorker, started: Callable[[], Awaitable[Any]] | None = None) -> None:
    """Run until SIGINT or SIGTERM, then let running activities finish and stop polling. `started`
    runs once the worker polls (it makes a deployment's first build current); if it fails, the
    worker goes on, with a warning."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with worker:
        log.info("worker_started", task_queue=worker.task_queue)
        if started is not None:
            try:
                await started()
            except Exception as err:  # noqa: BLE001 - the worker serves its build whoever routes to it
                log.warning("deployment_not_set", error=str(err))
        await stop.wait()
        log.info("worker_stopping", task_queue=worker.task_queue)
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.remove_signal_handler(sig)
