"""Runners for tests: the main job's local runner in this process, and `start_workload`
implementations that finish, lose or drain their runs (the runner contract, docs/runners.md)."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from datetime import timedelta
from pathlib import Path
from types import ModuleType

from temporalio import activity
from temporalio.client import Client
from temporalio.worker import Worker

from admitflow.admission.protocol import FinishRequest, StartWorkload, StopWorkload

ROOT = Path(__file__).resolve().parents[2]


def local_runner_module() -> ModuleType:
    """examples/runners/local.py, imported (it is a program, not a package module)."""
    spec = importlib.util.spec_from_file_location("admitflow_local_runner", ROOT / "examples" / "runners" / "local.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # for its dataclasses
    spec.loader.exec_module(module)
    return module


def local_runner(client: Client, logs: Path) -> Worker:
    """The local runner of the main job (examples/runners/local.py), in this process."""
    return local_runner_module().LocalRunner(client, logs).worker()


@activity.defn(name="start_workload")
async def start_returning(request: StartWorkload) -> object:
    """A runner's `start_workload` that returns the finish (docs/runners.md): workload `fails` fails,
    `junk` returns a value that is no finish, any other succeeds; the message names it."""
    name = request.workload["metadata"]["name"]
    return 42 if name == "junk" else FinishRequest(succeeded=name != "fails", message=f"{name} ran")


class LosingRunner:
    """A runner that takes each workload's first `start_workload` and goes silent past the heartbeat
    timeout (as a runner that died, or a task lost with its poll), then returns the finish from the
    next."""

    def __init__(self, silent_for: float = 12) -> None:
        self.calls: dict[str, int] = {}
        self.silent_for = silent_for

    @activity.defn(name="start_workload")
    async def start_workload(self, request: StartWorkload) -> object:
        self.calls[request.workflow_id] = self.calls.get(request.workflow_id, 0) + 1
        if self.calls[request.workflow_id] == 1:
            await asyncio.sleep(self.silent_for)  # no heartbeat: the engine's heartbeat timeout fires first
            return None
        return FinishRequest(succeeded=True, message=f"admission {request.admission} ran on the second start")

    @activity.defn(name="stop_workload")
    async def stop_workload(self, request: StopWorkload) -> None:
        pass  # nothing of it runs here


class DrainedRunner:
    """A runner whose worker shuts down while it runs each workload's first `start_workload` (the SDK
    fails that run with `WorkerShutdown`, as when a runner is stopped or rolled to a new version),
    then returns the finish from the next, on a worker started after it."""

    def __init__(self, task_queue: str = "drains") -> None:
        self.calls: dict[str, int] = {}
        self.running = asyncio.Event()
        self.task_queue = task_queue

    def worker(self, client: Client) -> Worker:
        return Worker(client, task_queue=self.task_queue, activities=[self.start_workload, self.stop_workload],
                      graceful_shutdown_timeout=timedelta(0))

    @activity.defn(name="start_workload")
    async def start_workload(self, request: StartWorkload) -> object:
        self.calls[request.workflow_id] = self.calls.get(request.workflow_id, 0) + 1
        if self.calls[request.workflow_id] == 1:
            self.running.set()
            while True:  # until the worker's shutdown cancels it
                activity.heartbeat()
                await asyncio.sleep(1)
        return FinishRequest(succeeded=True, message=f"admission {request.admission} ran after its runner's shutdown")

    @activity.defn(name="stop_workload")
    async def stop_workload(self, request: StopWorkload) -> None:
        pass  # nothing of it runs here
