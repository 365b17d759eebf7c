"""The deployment's programs against a real Temporal server, without containers.

- The services of docker/compose.yaml, each started with its own command line and environment
  as read from that file (the setup job, two workers, the exporter, the budget controller, the local
  runner, the examples job), on whichever server tests/temporal_server.py gives: the embedded dev
  server here, a testcontainers server where a Docker engine answers, `TEMPORAL_ADDRESS` where it is
  set. The image's health check passes for both workers, the examples' workloads are admitted through
  the budget controller and started by the runner, and the gauges of the examples' ClusterQueues are
  served by the exporter (its health check passes) and by no worker.
- Each of the fixture's three ways to a server: the choice itself, the container (skipped with the
  reason where no Docker engine answers), and `TEMPORAL_ADDRESS` (pointed here at a dev server this
  test starts, without admitflow's search attributes).
- `admitflow setup` on a server whose namespace exists but lacks the search attributes, as a fresh
  production server's `default` namespace does: it registers them once, then nothing.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import urllib.request
import uuid
from datetime import UTC, datetime
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.client import Client
from temporalio.common import SearchAttributePair, TypedSearchAttributes

from admitflow import search_attributes as sa
from admitflow.admission import conditions as cond
from admitflow.admission import workload as wl
from admitflow.api import parse_manifest
from admitflow.api.loader import LoadedManifest
from admitflow.client import AdmitflowClient
from tests.builders import cluster_queue_manifest, flavor_manifest, local_queue_manifest, workload_manifest
from tests.integration.test_cli import REGISTERED
from tests.temporal_server import (
    ADDRESS,
    CONTAINER,
    DEV_SERVER,
    TemporalServer,
    choose,
    container_server,
    dev_server,
    docker_unreachable,
    free_port,
    provide,
    setup,
)
from admitflow.worker.main import build_worker

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
COMPOSE = ROOT / "docker" / "compose.yaml"
# Where the image puts what the compose file names, and where it is in this checkout.
IMAGE_PATHS = {"/opt/admitflow/healthcheck.py": str(ROOT / "docker" / "healthcheck.py")}
ADMITFLOW = str(BIN / "admitflow")


async def eventually(check: Callable[[], Awaitable[Any]], timeout: float = 25.0, what: str = "") -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last = None
    while loop.time() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(0.3)
    raise AssertionError(f"{what or 'condition'} not met within {timeout:.0f}s; last value: {last!r}")


# --- the compose file's services, as processes ----------------------------------------------------


def interpolate(value: str) -> str:
    """Compose's interpolation, as much of it as the file uses: `$$` and `${VAR:-default}`."""
    value = re.sub(r"\$\{(\w+):-([^}]*)\}", lambda m: os.environ.get(m[1]) or m[2], value)
    return value.replace("$$", "$")


class Service:
    """One compose service run as a local process: its entrypoint and command (the image's
    `admitflow worker` when it names none), its environment with the server's address, the image's
    PATH (the virtualenv's programs first), from the repository root (the image's /app)."""

    def __init__(self, compose: dict, name: str, server: TemporalServer, logs: Path, **environment: str) -> None:
        spec = compose["services"][name]
        self.name = name
        argv = [interpolate(a) for a in spec.get("entrypoint", ["admitflow", "worker"]) + spec.get("command", [])]
        self.argv = [str(logs / "runs") if a == "/home/admitflow/runs" else a for a in argv]
        env = {k: interpolate(str(v)) for k, v in spec.get("environment", {}).items()}
        env |= {"TEMPORAL_ADDRESS": server.address, "TEMPORAL_NAMESPACE": server.namespace, **environment}
        self.env = {**os.environ, **env, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "PYTHONUNBUFFERED": "1"}
        self.log = logs / f"{name}-{uuid.uuid4().hex[:6]}.log"
        self.process: subprocess.Popen | None = None

    def start(self) -> Service:
        with self.log.open("w") as out:
            self.process = subprocess.Popen(self.argv, cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        return self

    async def wait(self, timeout: float = 60.0) -> int:
        return await asyncio.to_thread(self.process.wait, timeout)

    def output(self) -> str:
        return self.log.read_text()

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def metrics_text(port: str) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=15) as response:
        return response.read().decode()


def health_check(dockerfile: str) -> list[str]:
    command = re.search(r"^HEALTHCHECK .*? CMD (\[.*\])$", dockerfile.replace("\\\n", " "), re.MULTILINE)[1]
    return [IMAGE_PATHS.get(a, a) for a in yaml.safe_load(command)]


async def test_the_compose_services_run_a_workload_end_to_end(temporal_server: TemporalServer, tmp_path):
    compose = yaml.safe_load(COMPOSE.read_text())
    started: list[Service] = []
    try:
        job = Service(compose, "admitflow-setup", temporal_server, tmp_path).start()
        assert await job.wait() == 0, job.output()
        assert job.output().splitlines()[-1] == f"{temporal_server.address} (namespace {temporal_server.namespace}) is ready for admitflow"

        # Two replicas: each its own metrics port here (each container has its own network there).
        workers = [
            Service(compose, "admitflow-worker", temporal_server, tmp_path, ADMITFLOW_METRICS_PORT=str(free_port())).start()
            for _ in range(compose["services"]["admitflow-worker"]["deploy"]["replicas"])
        ]
        exporter = Service(compose, "admitflow-exporter", temporal_server, tmp_path, ADMITFLOW_METRICS_PORT=str(free_port())).start()
        helpers = [Service(compose, n, temporal_server, tmp_path).start() for n in ("budget-controller", "local-runner")]
        started += [*workers, exporter, *helpers]

        check = health_check((ROOT / "docker" / "Dockerfile").read_text())

        async def healthy(worker: Service) -> bool:
            assert worker.process.poll() is None, worker.output()
            r = await asyncio.to_thread(subprocess.run, check, env=worker.env, capture_output=True, text=True, timeout=10)
            return r.returncode == 0 and "pollers on task queue admitflow" in r.stdout

        for worker in workers:
            await eventually(lambda: healthy(worker), what=f"{worker.name}'s health check")

        examples = Service(compose, "admitflow-examples", temporal_server, tmp_path).start()
        assert await examples.wait() == 0, examples.output()
        assert "workload.kueue.x-k8s.io/team-b/sweep created" in examples.output()

        client = await temporal_server.connect()
        af = AdmitflowClient(client, compose["x-admitflow"]["environment"]["ADMITFLOW_TASK_QUEUE"])

        async def sweep_admitted_by_the_budget_check() -> bool:
            report = await af.workload("team-b/sweep", missing_ok=True)
            return report is not None and wl.phase(wl.WorkloadState(workload=report)) == "Admitted"

        async def train_small_started_by_the_runner() -> bool:
            report = await af.workload("team-a/train-small", missing_ok=True)
            return report is not None and cond.is_true(report.status.conditions, "PodsReady")

        await eventually(sweep_admitted_by_the_budget_check, what="team-b/sweep admitted")
        await eventually(train_small_started_by_the_runner, what="team-a/train-small's pods ready (local runner)")
        sweep = await af.workload("team-b/sweep")
        budget = next(c for c in sweep.status.admission_checks if c.name == "budget")
        assert (budget.state, budget.message.endswith("cpu-hours this week")) == ("Ready", True)

        # The gauges: from the exporter, for every ClusterQueue the examples applied; from no worker.
        exporter_check = compose["services"]["admitflow-exporter"]["healthcheck"]["test"][1:]
        r = await asyncio.to_thread(subprocess.run, exporter_check, env=exporter.env, capture_output=True, text=True, timeout=20)
        assert r.returncode == 0, r.stderr + exporter.output()
        # What a queue's memo says is at most queue_owner.MEMO_EVERY old: its status comes within that.
        async def queues_up_and_active() -> bool:
            lines = (await asyncio.to_thread(metrics_text, exporter.env["ADMITFLOW_METRICS_PORT"])).splitlines()
            return all(
                f'admitflow_exporter_cluster_queue_up{{cluster_queue="{cq}"}} 1' in lines
                and f'admitflow_cluster_queue_status{{cluster_queue="{cq}",status="active"}} 1' in lines
                for cq in ("research", "gpu")
            )

        await eventually(queues_up_and_active, timeout=30, what="research and gpu up and active in the exporter's gauges")
        for worker in workers:
            text = await asyncio.to_thread(metrics_text, worker.env["ADMITFLOW_METRICS_PORT"])
            assert "admitflow_admitted_workloads_total" in text
            assert "admitflow_pending_workloads" not in text and "admitflow_cluster_queue_status" not in text
        for service in started:
            assert service.process.poll() is None, f"{service.name} exited: {service.output()}"
    finally:
        for service in started:
            service.stop()


# --- the fixture's three ways to a server ---------------------------------------------------------


def test_the_fixture_prefers_temporal_address_then_docker_then_the_dev_server():
    assert choose({"TEMPORAL_ADDRESS": "temporal.example:7233"}, lambda: None) == (ADDRESS, "TEMPORAL_ADDRESS=temporal.example:7233")
    assert choose({}, lambda: None)[0] == CONTAINER
    assert choose({}, lambda: "connection refused") == (DEV_SERVER, "no Docker engine reachable: connection refused")


def test_the_fixture_gives_the_server_this_machine_can_run(temporal_server: TemporalServer):
    expected, why = choose(os.environ)
    assert (temporal_server.source, temporal_server.why.split(":")[0]) == (expected, why.split(":")[0])


async def test_a_temporal_server_in_a_container():
    reason = docker_unreachable()
    if reason is not None:
        pytest.skip(f"no Docker engine reachable: {reason}")
    async with container_server() as server:
        await setup(server.address, server.namespace)
        await admit_one_workload(server)


async def test_temporal_address_names_the_server_and_namespace(monkeypatch):
    async with dev_server(plain=True) as plain:
        monkeypatch.setenv("TEMPORAL_ADDRESS", plain.address)
        monkeypatch.setenv("TEMPORAL_NAMESPACE", "from-the-environment")
        async with provide() as server:
            assert (server.source, server.address, server.namespace) == (ADDRESS, plain.address, "from-the-environment")
            await admit_one_workload(server)


async def admit_one_workload(server: TemporalServer) -> None:
    """A workload admitted and finished through an engine worker in this process."""
    client = await server.connect()
    task_queue = f"deploy-{uuid.uuid4().hex[:6]}"
    af = AdmitflowClient(client, task_queue)
    docs = [flavor_manifest(), cluster_queue_manifest(), local_queue_manifest(), workload_manifest("w")]
    loaded = [LoadedManifest(source="test", index=i, obj=parse_manifest(d)[0], warnings=[]) for i, d in enumerate(docs, 1)]

    async def phase() -> str:
        report = await af.workload("default/w", missing_ok=True)
        return report and wl.phase(wl.WorkloadState(workload=report))

    async with build_worker(client, task_queue):
        await af.apply(loaded)
        await eventually(lambda: _is(phase, "Admitted"), what="the workload admitted")
        await af.finish("default/w")
        await eventually(lambda: _is(phase, "Finished"), what="the workload finished")


async def _is(phase: Callable[[], Awaitable[str]], expected: str) -> bool:
    return await phase() == expected


# --- admitflow setup on a server that has never seen admitflow ------------------------------------


def every_search_attribute() -> TypedSearchAttributes:
    values = {
        IndexedValueType.INDEXED_VALUE_TYPE_INT: 1,
        IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD_LIST: ["x"],
        IndexedValueType.INDEXED_VALUE_TYPE_DATETIME: datetime(2026, 1, 1, tzinfo=UTC),
    }
    return TypedSearchAttributes([SearchAttributePair(k, values.get(k.indexed_value_type, "x")) for k in sa.ALL])


async def test_setup_registers_the_search_attributes_of_an_existing_namespace_once():
    async with dev_server(plain=True) as plain:
        cmd = [ADMITFLOW, "setup", "--address", plain.address]  # namespace `default`: it exists
        first = await asyncio.to_thread(subprocess.run, cmd, capture_output=True, text=True, timeout=60)
        assert first.returncode == 0, first.stderr
        ready = f"{plain.address} (namespace default) is ready for admitflow"
        assert first.stdout.splitlines() == [*REGISTERED, ready]
        # "Ready" means usable at once: a workflow that sets every attribute starts (the frontend's
        # cached copy of the namespace takes a moment to learn them; setup waits for it).
        client = await Client.connect(plain.address)
        handle = await client.start_workflow(
            "NobodyRunsThis", id=f"probe-{uuid.uuid4().hex[:6]}", task_queue="nobody", search_attributes=every_search_attribute()
        )
        await handle.terminate()
        again = await asyncio.to_thread(subprocess.run, cmd, capture_output=True, text=True, timeout=60)
        assert (again.returncode, again.stdout.splitlines(), again.stderr) == (0, [ready], "")
