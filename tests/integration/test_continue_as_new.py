"""Continue-as-new in the middle of a run loses nothing: a dev server that suggests it every few
dozen events, and workloads admitted, finished and replaced across many runs of each workflow."""

from __future__ import annotations

import asyncio

import pytest
import pytest_asyncio
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from admitflow import contract, ids
from admitflow.admission import workload as wl
from admitflow.admission.workload import WorkloadState
from admitflow.client import AdmitflowClient
from admitflow.codec import DATA_CONVERTER
from admitflow.devserver import DevServer
from admitflow.admission.protocol import ClusterQueueReport, StatusQuery
from admitflow.admission.protocol import ReleaseRequest
from tests.builders import (
    cluster_queue_manifest,
    flavor_manifest,
    local_queue_manifest,
    workload_manifest,
)
from tests.conftest import free_port
from tests.integration.test_admission import eventually, loaded
from admitflow.worker.main import build_worker

pytestmark = pytest.mark.integration

SUGGEST_AT = 40  # history events; the default is 4096


@pytest_asyncio.fixture
async def af():
    server = DevServer(
        port=free_port(), db=None, headless=True, namespaces=("can",),
        dynamic_config={"limit.historyCount.suggestContinueAsNew": str(SUGGEST_AT)},
    )
    await server.start()
    client = await Client.connect(server.address, namespace="can", data_converter=DATA_CONVERTER)
    try:
        async with build_worker(client, "admitflow"):
            yield AdmitflowClient(client, "admitflow")
    finally:
        server.stop()


async def runs(client: Client, workflow_id: str) -> list[WorkflowExecutionStatus]:
    return [wf.status async for wf in client.list_workflows(f"WorkflowId = '{workflow_id}'")]


async def test_queue_state_survives_continue_as_new(af):
    await af.apply(loaded(flavor_manifest(), cluster_queue_manifest(quotas={"default": {"cpu": "3"}}), local_queue_manifest()))
    # A filler holds all the quota until the twelve are queued, so priority alone orders them.
    await af.apply(loaded(workload_manifest("filler", cpu="3", priority=1000)))
    await eventually(lambda: _phase_is(af, "filler", "Admitted"))
    names = [f"w{i:02d}" for i in range(12)]
    await af.apply(loaded(*(workload_manifest(n, cpu="1", priority=100 - i) for i, n in enumerate(names))))
    await eventually(lambda: _pending(af, 12))
    await af.finish("default/filler")

    finished: list[str] = []
    deadline = asyncio.get_running_loop().time() + 60
    while len(finished) < len(names):
        if asyncio.get_running_loop().time() > deadline:
            report = await af.cluster_queue_report("cq")
            raise AssertionError(f"stuck after finishing {finished}; queue: {report.to_wire() if report else None}")
        reports = await asyncio.gather(*(af.workload(f"default/{n}") for n in names))
        admitted = [n for n, r in zip(names, reports, strict=True) if wl.phase(WorkloadState(workload=r)) == "Admitted"]
        for n in admitted:
            await af.finish(f"default/{n}")
            finished.append(n)
        if not admitted:
            await asyncio.sleep(0.2)
        assert len(finished) <= len(names)

    async def drained():
        report = await af.cluster_queue_report("cq")
        return report.status.pending_workloads == 0 and report.status.reserving_workloads == 0

    await eventually(drained)
    # Highest priority first, three at a time: the queue's order held across its runs. Within a
    # three, the order is the one in which this loop saw them admitted: each workload applies its
    # reservation in a workflow task of its own, so one reserved in the same pass may show first.
    assert [sorted(finished[i : i + 3]) for i in range(0, 12, 3)] == [names[i : i + 3] for i in range(0, 12, 3)]
    cq_runs = await eventually(lambda: _runs_at_least(af.client, ids.cluster_queue_id("cq"), 3))
    assert cq_runs.count(WorkflowExecutionStatus.CONTINUED_AS_NEW) >= 2
    for n in names:
        report = await af.workload(f"default/{n}")
        assert [e.reason for e in report.events] == ["QuotaReserved", "Admitted", "Finished"], n


async def test_a_queue_continues_as_new_while_its_workloads_keep_talking(af):
    """Sixty workloads enqueue at once and later finish at once, while the queue is told to continue
    as new every few dozen events: their messages are updates, which a continue-as-new does not
    wait for, so no workflow task of the queue fails (a signal arriving during the task that
    continues as new fails it, and the queue replays its run: temporal#1289)."""
    n = 60
    await af.apply(loaded(flavor_manifest(), cluster_queue_manifest(quotas={"default": {"cpu": str(n)}}), local_queue_manifest()))
    names = [f"s{i:02d}" for i in range(n)]
    await af.apply(loaded(*(workload_manifest(name, cpu="1") for name in names)))

    async def all_admitted():
        report = await af.cluster_queue_report("cq")
        return report is not None and report.status.admitted_workloads == n

    await eventually(all_admitted, timeout=90)
    await asyncio.gather(*(af.finish(f"default/{name}") for name in names))

    async def drained():
        report = await af.cluster_queue_report("cq")
        return report.status.reserving_workloads == 0

    await eventually(drained, timeout=90)
    queue = ids.cluster_queue_id("cq")
    assert WorkflowExecutionStatus.CONTINUED_AS_NEW in await eventually(lambda: _runs_at_least(af.client, queue, 2))
    assert await _failed_tasks(af.client, queue) == []


async def test_a_cohort_tree_continues_as_new_while_its_queues_keep_talking(af):
    """The same for a cohort tree: two ClusterQueues in one cohort, whose homes forward their
    sixty workloads' enqueues and releases to the tree as they come. Those are updates too, so no
    workflow task of the tree fails while it continues as new.

    The workloads come once the tree holds both queues. A home hands its queue over by signal (it
    starts the tree), and a handover that arrives while the tree continues as new fails that task
    like any signal (temporal#1289; the retried task takes it, nothing is lost): seen in CI when
    queue a's handover came after the tree's first forty events of b's enqueues."""
    n = 60
    queues = [cluster_queue_manifest(name, quotas={"default": {"cpu": str(n // 2)}}, cohortName="team") for name in ("a", "b")]
    lqs = [local_queue_manifest(f"lq-{name}", cluster_queue=name) for name in ("a", "b")]
    await af.apply(loaded(flavor_manifest(), *queues, *lqs))
    tree = ids.cohort_id("team")
    await eventually(lambda: _holds(af.client, tree, ("a", "b")))
    names = [f"s{i:02d}" for i in range(n)]
    await af.apply(loaded(*(workload_manifest(name, cpu="1", queue=f"lq-{'ab'[i % 2]}") for i, name in enumerate(names))))

    async def all_admitted(count: int):
        reports = [await af.cluster_queue_report(q) for q in ("a", "b")]
        return all(r is not None for r in reports) and sum(r.status.admitted_workloads for r in reports) == count

    await eventually(lambda: all_admitted(n), timeout=90)
    await asyncio.gather(*(af.finish(f"default/{name}") for name in names))
    await eventually(lambda: all_admitted(0), timeout=90)
    assert WorkflowExecutionStatus.CONTINUED_AS_NEW in await eventually(lambda: _runs_at_least(af.client, tree, 2))
    assert await _failed_tasks(af.client, tree) == []
    assert await _events(af.client, tree, EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED), "nothing forwarded by update"


async def _events(client: Client, workflow_id: str, event_type: int) -> list[tuple[str, HistoryEvent]]:
    """Every event of that type in every run of `workflow_id`, with its run's ID."""
    found = []
    async for wf in client.list_workflows(f"WorkflowId = '{workflow_id}'"):
        async for e in client.get_workflow_handle(workflow_id, run_id=wf.run_id).fetch_history_events():
            if e.event_type == event_type:
                found.append((wf.run_id, e))
    return found


async def _failed_tasks(client: Client, workflow_id: str) -> list[tuple[str, int, int]]:
    """Every failed workflow task of every run of `workflow_id`: run, event and cause."""
    failed = await _events(client, workflow_id, EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED)
    return [(run, e.event_id, e.workflow_task_failed_event_attributes.cause) for run, e in failed]


async def _holds(client: Client, tree: str, queues: tuple[str, ...]) -> bool:
    """Whether the cohort tree `tree` runs and holds every one of `queues` (it points nowhere else)."""
    handle = client.get_workflow_handle(tree)
    for q in queues:
        try:
            report = await handle.query(
                contract.CLUSTER_QUEUE_STATUS, StatusQuery(cluster_queue=q, limit=0), result_type=ClusterQueueReport
            )
        except RPCError:  # not started yet
            return False
        if report.moved_to:
            return False
    return True


async def _runs_at_least(client: Client, workflow_id: str, n: int):
    found = await runs(client, workflow_id)
    return found if len(found) >= n else None


async def _phase_is(af: AdmitflowClient, name: str, phase: str) -> bool:
    return wl.phase(WorkloadState(workload=await af.workload(f"default/{name}"))) == phase


async def _pending(af: AdmitflowClient, n: int) -> bool:
    report = await af.cluster_queue_report("cq")
    return report is not None and report.status.pending_workloads == n


@pytest_asyncio.fixture
async def capped():
    """A server whose workflows accept only 10 signals per run (and that never suggests continuing
    as new this early), so a test can put a queue at its signal limit."""
    server = DevServer(
        port=free_port(), db=None, headless=True, namespaces=("capped",),
        dynamic_config={"history.maximumSignalsPerExecution": "10"},
    )
    await server.start()
    client = await Client.connect(server.address, namespace="capped", data_converter=DATA_CONVERTER)
    try:
        async with build_worker(client, "admitflow"):
            yield AdmitflowClient(client, "admitflow")
    finally:
        server.stop()


async def test_workloads_still_reach_a_queue_that_takes_no_more_signals(capped):
    """A workload's enqueue and release are updates (activities/mail.py): a queue at its per-run
    signal limit (where its continue-as-new, refused while signals arrive, used to go through) still
    takes them. With signals, the release below was refused until the queue continued as new."""
    af = capped
    await af.apply(loaded(flavor_manifest(), cluster_queue_manifest(), local_queue_manifest(), workload_manifest("a")))
    await eventually(lambda: _phase_is(af, "a", "Admitted"))
    queue = af.client.get_workflow_handle(ids.cluster_queue_id("cq"))
    with pytest.raises(RPCError, match="exceeded workflow execution limit for signal events"):
        for _ in range(20):  # harmless releases, until the queue takes no more signals
            await queue.signal("release", ReleaseRequest(key="default/nobody", uid="x", ticket=1))

    await af.finish("default/a")
    await eventually(lambda: _phase_is(af, "a", "Finished"))

    async def released():
        report = await af.cluster_queue_report("cq")
        return report.status.reserving_workloads == 0

    await eventually(released)
    await af.apply(loaded(workload_manifest("b")))
    await eventually(lambda: _phase_is(af, "b", "Admitted"))
    assert len(await runs(af.client, ids.cluster_queue_id("cq"))) == 1, "the queue never continued as new"
