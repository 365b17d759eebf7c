"""A wedged workload (issue 19): its workflow task keeps failing, so its workflow answers no query
and handles no message while its ClusterQueue holds its quota. Reads show it (STATUS TaskFailing)
without waiting for it; writes refuse with one line instead of claiming success; an operator gives
its quota to others (`admitflow release`, recorded as the ClusterQueue's event) or resets it to its
last completed workflow task once the fault is gone (`admitflow reset`); the SDK's metric counts
the failing tasks.

The fault is real, on the dev server: the worker running these workflows has one more workflow
interceptor, which raises a plain exception (not an ApplicationError, so the workflow task fails,
as a bug in a handler would) in every signal handler of the workflows named in WEDGED.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from dataclasses import dataclass
from datetime import timedelta

import pytest
import pytest_asyncio
from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowUpdateFailedError
from temporalio.worker import (
    HandleSignalInput,
    Interceptor,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

from admitflow import contract, ids
from admitflow.admission import cluster_queue as cq
from admitflow.admission import pods_ready
from admitflow.client import FAILING_ATTEMPTS, AdmitflowClient
from admitflow.codec import DATA_CONVERTER
from tests.builders import cluster_queue_manifest, flavor_manifest, local_queue_manifest, workload_manifest
from tests.conftest import free_port
from tests.integration.test_admission import eventually, loaded
from tests.integration.test_cli import run, until
from tests.unit.test_cluster_queue import NOW, entry, run_pass, state_with, view
from admitflow.worker.main import build_worker, metrics_runtime

pytestmark = [
    pytest.mark.integration,
    # The wedging interceptor raises before the SDK awaits the signal handler's coroutine.
    pytest.mark.filterwarnings("ignore:coroutine '_WorkflowInstanceImpl._process_signal_job.<locals>.run_signal' was never awaited:RuntimeWarning"),
]
# The tests that wedge a workload fail its workflow tasks on purpose: the engine fixture's audit of
# their histories then checks determinism only.
WEDGES = pytest.mark.fails_workflow_tasks

TASK_QUEUE = "wedge"  # its own: the engine fixture's worker, without the fault, serves the default one
STUCK = "workload/default/stuck"
FAULT = "injected fault: a bug in a signal handler"

# (namespace, workflow ID, run ID or "" for every run) of the workflows whose signal handlers fail.
WEDGED: set[tuple[str, str, str]] = set()


class _FailingSignals(WorkflowInboundInterceptor):
    async def handle_signal(self, input: HandleSignalInput) -> None:
        info = workflow.info()
        if {(info.namespace, info.workflow_id, ""), (info.namespace, info.workflow_id, info.run_id)} & WEDGED:
            raise RuntimeError(FAULT)
        await super().handle_signal(input)


class Wedge(Interceptor):
    def workflow_interceptor_class(self, input: WorkflowInterceptorClassInput) -> type[WorkflowInboundInterceptor]:
        return _FailingSignals


@dataclass
class Wedged:
    engine: object
    client: Client
    admitflow: AdmitflowClient
    metrics_port: int

    async def run(self, *args: str):
        return await run(self.engine, *args)

    async def fix(self) -> None:
        """A worker without the fault is deployed. The wedged run itself keeps failing: Temporal
        retries it only after a backoff that grows to ten minutes, so left alone it would come back
        in minutes, not now. Its next retry is held off here so that only a reset brings it back."""
        run_id = (await self.client.get_workflow_handle(STUCK).describe()).run_id
        WEDGED.discard((self.engine.namespace, STUCK, ""))
        WEDGED.add((self.engine.namespace, STUCK, run_id))


async def admitted(af: AdmitflowClient, name: str) -> bool:
    report = await af.workload(f"default/{name}")
    c = report.status.condition("Admitted")
    return c is not None and c.status == "True"


async def wedged_for_reads(client: Client, workflow_id: str) -> bool:
    """Its workflow task is on the attempt from which admitflow's reads call it failing, and the
    server has marked it so in visibility (TemporalReportedProblems), where lists read it."""
    desc = await client.get_workflow_handle(workflow_id).describe()
    if desc.raw_description.pending_workflow_task.attempt < FAILING_ATTEMPTS:
        return False
    async for wf in client.list_workflows(f"WorkflowId = '{workflow_id}' AND TemporalReportedProblems IS NOT NULL"):
        return wf.status == WorkflowExecutionStatus.RUNNING
    return False


@pytest_asyncio.fixture(params=["by-signal"])
async def wedged(engine, request):
    """ClusterQueue cq (4 cpu); `stuck` (3 cpu) admitted, then wedged by a signal it cannot handle;
    `next` (3 cpu) waits behind it for quota `stuck` will never give back by itself.

    `stuck` is admitted `by-signal` (it waits for `first`'s quota, and its queue's `quota_reserved`
    signal comes once `first` is deleted), or `in-its-first-task` (it fits, and its queue tells the
    reservation in its enqueue's answer: a reset to that task enqueues again, after the signals that
    came since)."""
    port = free_port()
    client = await Client.connect(
        engine.address, namespace=engine.namespace, data_converter=DATA_CONVERTER, runtime=metrics_runtime(port)
    )
    af = AdmitflowClient(client, TASK_QUEUE)
    async with build_worker(client, TASK_QUEUE, interceptors=[Wedge()]):
        await af.apply(loaded(flavor_manifest(), cluster_queue_manifest(), local_queue_manifest()))
        if request.param == "by-signal":
            await af.apply(loaded(workload_manifest("first", cpu="4")))
            await eventually(lambda: admitted(af, "first"), timeout=30)
        await af.apply(loaded(workload_manifest("stuck", cpu="3")))
        if request.param == "by-signal":

            async def stuck_waits_for_quota():
                return [p.name for p in await af.pending_workloads("cq")] == ["stuck"]

            await eventually(stuck_waits_for_quota, timeout=30)
            await af.delete("Workload", "default/first")  # gone from lists: the tests read every workload
        await eventually(lambda: admitted(af, "stuck"), timeout=30)
        WEDGED.add((engine.namespace, STUCK, ""))
        # The message it fails on: its pods are ready, as a runner would report.
        ready = pods_ready.parse({"ready": True, "reason": None})
        await client.get_workflow_handle(STUCK).signal(contract.SET_PODS_READY, ready)
        await eventually(lambda: wedged_for_reads(client, STUCK), timeout=60)
        await af.apply(loaded(workload_manifest("next", cpu="3")))

        async def next_waits():
            return [p.name for p in await af.pending_workloads("cq")] == ["next"]

        await eventually(next_waits, timeout=30)
        try:
            yield Wedged(engine, client, af, port)
        finally:
            WEDGED.difference_update({w for w in WEDGED if w[0] == engine.namespace})


def table_rows(stdout: str) -> dict[str, dict[str, str]]:
    """A kubectl table read at its header's columns: name -> header -> cell."""
    header, *lines = stdout.splitlines()
    found = list(re.finditer(r"\S+(?: \S+)*", header))  # "RESERVED IN" is one header
    names, starts = [m[0] for m in found], [m.start() for m in found]
    out = {}
    for line in lines:
        cells = [line[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
        row = dict(zip(names, cells, strict=True))
        out[row["NAME"]] = row
    return out


def temporal_samples(port: int, name: str) -> list[tuple[dict[str, str], float]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    out = []
    for line in text.splitlines():
        m = re.match(rf"^{name}\{{([^}}]*)\}} (\S+)$", line)
        if m:
            out.append((dict(re.findall(r'(\w+)="([^"]*)"', m[1])), float(m[2])))
    return out


async def signals_received(client: Client, workflow_id: str) -> list[str]:
    names = []
    async for event in client.get_workflow_handle(workflow_id).fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            names.append(event.workflow_execution_signaled_event_attributes.signal_name)
    return names


# --- reads --------------------------------------------------------------------------------------


@WEDGES
async def test_reads_show_a_wedged_workload_without_waiting_for_it(wedged):
    began = time.monotonic()
    r = await wedged.run("get", "workloads")
    assert r.returncode == 0, r.stderr
    assert time.monotonic() - began < 30, "the list waited for the workflow that does not answer"
    rows = table_rows(r.stdout)
    assert {k: (v["RESERVED IN"], v["ADMITTED"], v["STATUS"]) for k, v in rows.items()} == {
        "stuck": ("cq", "True", "TaskFailing"),
        "next": ("", "False", "Pending"),
    }
    [warning] = r.stderr.splitlines()
    assert re.fullmatch(
        rf"Warning: workload default/stuck does not answer: its workflow task fails \(attempt \d+\): RuntimeError: {FAULT}; "
        r"see admitflow describe workload default/stuck",
        warning,
    ), warning

    r = await wedged.run("get", "workload", "stuck", "-o", "json")
    assert r.returncode == 0, r.stderr
    obj = json.loads(r.stdout)
    assert (obj["kind"], obj["metadata"]["name"], obj["spec"]["queueName"]) == ("Workload", "stuck", "lq")
    trouble = obj["workflow"]
    assert (trouble["status"], trouble["phase"], trouble["clusterQueue"]) == ("TaskFailing", "Admitted", "cq")
    assert trouble["lastFailure"] == f"RuntimeError: {FAULT}"
    assert trouble["cause"] == "WorkflowWorkerUnhandledFailure"
    assert trouble["taskAttempt"] >= 2 and trouble["lastGoodTask"] > 0

    r = await wedged.run("describe", "workload", "stuck")
    assert r.returncode == 0, r.stderr
    assert "Status:       TaskFailing: its workflow task fails (attempt " in r.stdout
    assert f"  Last Failure:         RuntimeError: {FAULT}" in r.stdout
    assert "  As Last Written:      phase Admitted, ClusterQueue cq, LocalQueue lq" in r.stdout
    assert "  once a worker without the fault runs:  admitflow reset workload default/stuck" in r.stdout
    assert "  to give its quota to others now:       admitflow release workload default/stuck" in r.stdout
    assert r.stdout.rstrip().endswith("Events:\n  <unknown: only its workflow can tell them; its history in the Temporal UI has them all>")

    # The SDK counts every failed attempt of a workflow task, by workflow type.
    failed = temporal_samples(wedged.metrics_port, "temporal_workflow_task_execution_failed")
    assert sum(v for labels, v in failed if labels.get("workflow_type") == "WorkloadWorkflow") >= 1, failed


# --- writes -------------------------------------------------------------------------------------


@WEDGES
async def test_writes_to_a_wedged_workload_fail_with_one_line_and_send_nothing(wedged):
    for args in (
        ["finish", "stuck"],
        ["delete", "workload", "stuck"],
        ["deactivate", "stuck"],
        ["activate", "stuck"],
        ["pods-ready", "stuck"],
        ["verdict", "stuck", "approval", "Ready"],
    ):
        r = await wedged.run(*args)
        assert (r.returncode, r.stdout) == (1, ""), (args, r.stdout, r.stderr)
        [line] = r.stderr.splitlines()
        assert line.startswith('error: workloads "default/stuck" does not answer: its workflow task fails (attempt '), line
        assert f"RuntimeError: {FAULT}; nothing was sent" in line, line
        assert "`admitflow reset workload default/stuck`" in line and "`admitflow release workload default/stuck`" in line, line
    assert (await signals_received(wedged.client, STUCK)).count(contract.SET_PODS_READY) == 1, "only the one it failed on"
    assert not {contract.FINISH, contract.DELETE, contract.DEACTIVATE, contract.ACTIVATE} & set(await signals_received(wedged.client, STUCK))


# --- the ways out -------------------------------------------------------------------------------


@WEDGES
@pytest.mark.parametrize("wedged", ["by-signal", "in-its-first-task"], indirect=True)
async def test_release_gives_its_quota_to_the_next_workload_once_and_records_it(wedged):
    r = await wedged.run("release", "workload", "next")
    assert r.returncode == 2 and r.stdout == "", r.stdout
    assert r.stderr.splitlines() == [
        'error: workloads "default/next" answers: it gives its quota back itself (admitflow finish, deactivate or delete); '
        "add --force to release it anyway (it is evicted and queues again)"
    ]

    r = await wedged.run("release", "workload", "stuck")
    assert (r.returncode, r.stdout.strip()) == (0, "workload.kueue.x-k8s.io/default/stuck quota released in ClusterQueue cq (cpu=3)"), r.stderr
    await eventually(lambda: admitted(wedged.admitflow, "next"), timeout=30)
    r = await wedged.run("release", "workload", "stuck")
    assert (r.returncode, r.stdout.strip()) == (0, "workload.kueue.x-k8s.io/default/stuck holds nothing in ClusterQueue cq (unchanged)")

    r = await wedged.run("describe", "clusterqueue", "cq")
    assert r.returncode == 0, r.stderr
    events = r.stdout.split("Events:", 1)[1]
    assert events.count("QuotaForceReleased") == 1, events
    assert (
        "Quota of workload default/stuck (cpu=3) released by an operator: its workflow task fails (attempt" in events
        and f"RuntimeError: {FAULT}" in events
    ), events
    report = await wedged.admitflow.cluster_queue_report("cq")
    reserved = report.status.to_wire()["flavorsReservation"][0]["resources"][0]["total"]
    assert reserved == "3", "next's 3 cpu, and stuck's no more"

    # Once the fault is gone and it is reset, `stuck` hears it was evicted and queues again: its
    # ClusterQueue never counts it twice.
    await wedged.fix()
    r = await wedged.run("reset", "workload", "stuck")
    assert r.returncode == 0, r.stdout + r.stderr

    async def stuck_waits():
        report = await wedged.admitflow.workload("default/stuck")
        evicted = report.status.condition("Evicted")
        pending = [p.name for p in await wedged.admitflow.pending_workloads("cq")]
        return evicted is not None and evicted.reason == cq.FORCE_RELEASED and pending == ["stuck"]

    await eventually(stuck_waits, timeout=30)
    r = await wedged.run("finish", "next")
    assert r.returncode == 0, r.stderr
    await eventually(lambda: admitted(wedged.admitflow, "stuck"), timeout=30)


@WEDGES
async def test_release_with_force_evicts_a_workload_that_answers(wedged):
    r = await wedged.run("release", "workload", "stuck")
    assert r.returncode == 0, r.stderr
    await eventually(lambda: admitted(wedged.admitflow, "next"), timeout=30)
    r = await wedged.run("release", "workload", "next", "--force")
    assert (r.returncode, r.stdout.strip()) == (0, "workload.kueue.x-k8s.io/default/next quota released in ClusterQueue cq (cpu=3)"), r.stderr

    async def evicted_and_admitted_again():
        report = await wedged.admitflow.workload("default/next")
        stats = report.status.scheduling_stats
        evictions = {e.reason: e.count for e in (stats.evictions if stats else None) or ()}
        return evictions == {cq.FORCE_RELEASED: 1} and report.status.condition("Admitted").status == "True"

    await eventually(evicted_and_admitted_again, timeout=30)


@WEDGES
@pytest.mark.parametrize("wedged", ["by-signal", "in-its-first-task"], indirect=True)
async def test_reset_after_the_fix_brings_it_back_with_the_message_it_failed_on(wedged, request):
    """Reset once while the fault is there (refused: the new run fails too), then after the fix.
    Admitted `in-its-first-task`, the first reset goes back to that task, the only one completed,
    and its new run fails in its first task: the second reset goes back to that first task, which
    would otherwise run again only after Temporal's retry backoff (up to ten minutes)."""
    first_task = request.node.callspec.params["wedged"] == "in-its-first-task"
    r = await wedged.run("reset", "workload", "next")
    assert (r.returncode, r.stderr.strip()) == (
        2,
        'error: workloads "default/next" answers: its workflow tasks complete, so there is nothing to reset',
    )

    r = await wedged.run("reset", "workload", "stuck")
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stdout.startswith("workload.kueue.x-k8s.io/default/stuck reset to its last completed workflow task (event ")
    [line] = r.stderr.splitlines()
    assert line.startswith('error: workloads "default/stuck" was reset, but its workflow task fails') and "still has the fault" in line, line

    await wedged.fix()
    r = await wedged.run("reset", "workload", "stuck")
    assert r.returncode == 0, r.stdout + r.stderr
    # Admitted in its first task, the run the first reset made may have completed that task before
    # the signal it fails on came again, or not (the server's order): both are a way back.
    to = r"its (last completed|first) workflow task \(event \d+(; none of its run completed)?\)" if first_task else r"its last completed workflow task \(event \d+\)"
    assert re.fullmatch(rf"workload\.kueue\.x-k8s\.io/default/stuck reset to {to}: new run \S+\n", r.stdout), r.stdout

    r = await wedged.run("get", "workload", "stuck", "-o", "json")
    assert r.returncode == 0, r.stderr
    obj = json.loads(r.stdout)
    assert "workflow" not in obj
    ready = next(c for c in obj["status"]["conditions"] if c["type"] == "PodsReady")
    assert ready["status"] == "True", "the signal it failed on was given to it again"

    r = await wedged.run("finish", "stuck")
    assert (r.returncode, r.stdout.strip()) == (0, "workload.kueue.x-k8s.io/default/stuck finished"), r.stderr
    # Its quota comes back through the new run (its uid survives the reset), so `next` gets it.
    await eventually(lambda: admitted(wedged.admitflow, "next"), timeout=30)
    r = await until(wedged.engine, lambda r: "STATUS" not in r.stdout and r.returncode == 0, "get", "workloads")
    assert r.stderr == ""


async def test_a_force_release_that_is_not_one_is_refused_and_wedges_nothing(engine):
    af = engine.admitflow
    await af.apply(loaded(flavor_manifest(), cluster_queue_manifest(), local_queue_manifest(), workload_manifest("job")))
    await eventually(lambda: admitted(af, "job"), timeout=30)
    queue = engine.client.get_workflow_handle(ids.cluster_queue_id("cq"))
    for payload in (None, {"key": "no-namespace"}, 5):
        with pytest.raises(WorkflowUpdateFailedError):
            await queue.execute_update(contract.FORCE_RELEASE, payload, rpc_timeout=timedelta(seconds=20))
    report = await af.cluster_queue_report("cq")  # a wedged queue would not answer
    assert (report.status.reserving_workloads, report.events) == (1, [])


# --- the rule -----------------------------------------------------------------------------------


def test_force_release_gives_back_a_reservation_or_a_place_once():
    st = state_with(view(), entry("held", cpu=3000), entry("waiting", cpu=3000))
    run_pass(st)
    assert set(st.reservations) == {"default/held"} and [e.key for e in st.pending] == ["default/waiting"]

    outcome, notices = cq.force_release(st, "default/held", "its workflow task fails", NOW)
    assert (outcome.released, outcome.usage) == ("quota", {"cpu": "3"})
    assert [(n.key, n.kind, n.reason) for n in notices] == [("default/held", "evicted", cq.FORCE_RELEASED)]
    assert not st.reservations and st.was_released("default/held", "uid-held", 1)
    assert [(e.type, e.reason) for e in st.events] == [("Warning", cq.FORCE_RELEASED)]
    assert st.events[0].message == "Quota of workload default/held (cpu=3) released by an operator: its workflow task fails"

    again, notices = cq.force_release(st, "default/held", "its workflow task fails", NOW)
    assert (again.released, notices, len(st.events)) == ("", [], 1), "repeating it changes nothing"

    outcome, notices = cq.force_release(st, "default/waiting", "its workflow does not run", NOW)
    assert outcome.released == "place" and [(n.kind, n.reason) for n in notices] == [("dequeued", cq.FORCE_RELEASED)]
    assert not st.pending and len(st.events) == 2

    cq.enqueue(st, entry("held", cpu=3000))
    assert not st.pending, "what it sent before the release is not taken for new"
    cq.enqueue(st, entry("held", cpu=3000, ticket=2))
    assert [e.key for e in st.pending] == ["default/held"], "its next ticket queues as usual"
