"""A query that falls back to a legacy query task makes a Python workflow diverge from its history.

No admitflow code: temporalio and the `temporal` CLI's dev server only. One workflow, `Ticker`,
waits for a signal (`poke`) for 2 s at most: a poke runs an activity, a wait that runs out counts a
tick and waits again; a query reads the ticks. Each trial sends a query at a moment when the
history will, by the time a worker takes the query, end in events no workflow task has processed
(the wait's timer fired), and a poke after it, then lets the workflow finish and replays its
history:

- `killed-worker`: the worker is killed with SIGKILL during a sleep, a new one starts, and the
  query goes to the dead worker's sticky queue; 10 s later (the sticky schedule-to-start timeout)
  the server gives it, as a legacy query task, to the new worker; the poke follows its answer.
- `no-sticky-query`: the dev server runs with `system.enableStickyQuery=false`, so every query is a
  legacy query task on the normal task queue, with the whole history; queries are sent every
  100 ms, and a poke every 7th, while the workflow runs on one live worker.

A trial shows the bug when the workflow's history does not replay, or a workflow task of it failed
(the worker's live run diverged: "Activity machine does not handle this event", "No command
scheduled for event"). It is a race: the script runs N trials of each and prints how many showed it.

    python repro/legacy_query.py [--trials 10] [--case killed-worker|no-sticky-query|both] [--keep DIR]

Needs `pip install temporalio` (checked with 1.35.0) and the `temporal` CLI on PATH or next to the
interpreter (checked with 1.9.1, Server 1.32.0). docs/sdk-legacy-query-bug.md is the write-up.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import signal
import socket
import subprocess
import sys
import uuid
from datetime import timedelta
from pathlib import Path

from temporalio import activity, workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Replayer, Worker

TASK_QUEUE = "legacy-query-repro"
TICKS = 4
BUSY = 3  # workflows that keep the worker's two workflow task slots taken (the no-sticky-query case)


@activity.defn
async def note(n: int) -> int:
    return n


@workflow.defn
class Ticker:
    """Waits for a poke, 2 s at most: a poke runs an activity, a wait that runs out is a tick."""

    def __init__(self) -> None:
        self.pokes = 0
        self.ticks = 0
        self.handled = 0

    @workflow.run
    async def run(self) -> int:
        while self.ticks < TICKS:
            try:
                await workflow.wait_condition(lambda: self.pokes > self.handled, timeout=timedelta(seconds=2))
            except asyncio.TimeoutError:
                self.ticks += 1
                continue
            self.handled += 1
            await workflow.execute_activity(note, self.handled, start_to_close_timeout=timedelta(seconds=10))
        return self.handled

    @workflow.signal
    def poke(self) -> None:
        self.pokes += 1

    @workflow.query
    def count(self) -> int:
        return self.ticks


@activity.defn
async def nap(seconds: float) -> None:
    await asyncio.sleep(seconds)


@workflow.defn
class Busy:
    """Keeps a worker's workflow task slots busy: a local activity holds its workflow task open."""

    @workflow.run
    async def run(self) -> None:
        while True:
            await workflow.execute_local_activity(nap, 0.3, start_to_close_timeout=timedelta(seconds=5))
            await workflow.sleep(timedelta(milliseconds=100))


# --- the harness ------------------------------------------------------------------------------


def temporal_cli() -> str:
    beside = Path(sys.executable).parent / "temporal"
    found = str(beside) if beside.exists() else shutil.which("temporal")
    if not found:
        sys.exit("the temporal CLI is needed: put it on PATH (https://docs.temporal.io/cli)")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def dev_server(*config: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    cmd = [temporal_cli(), "server", "start-dev", "--headless", "--ip", "127.0.0.1", "--port", str(port), "--log-level", "error"]
    for c in config:
        cmd += ["--dynamic-config-value", c]
    server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    address = f"127.0.0.1:{port}"
    for _ in range(150):
        try:
            await (await Client.connect(address)).service_client.check_health()
            return server, address
        except Exception:  # noqa: BLE001 - not up yet
            await asyncio.sleep(0.2)
    server.kill()
    sys.exit("the dev server did not start")


def worker_process(address: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, __file__, "worker", address], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def serve(address: str) -> None:
    client = await Client.connect(address)
    # Two workflow task slots, which Busy workflows keep taken: a task waits for one, as on a loaded worker.
    async with Worker(client, task_queue=TASK_QUEUE, workflows=[Ticker, Busy], activities=[note, nap], max_concurrent_workflow_tasks=2):
        await asyncio.Event().wait()


async def sleeping_and_quiet(client: Client, workflow_id: str) -> bool:
    """A timer runs and no workflow task is pending: a query now goes straight to a query task."""
    events = (await client.get_workflow_handle(workflow_id).fetch_history()).events
    completed = [i for i, e in enumerate(events) if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED]
    if not completed:
        return False
    tail = events[completed[-1]:]
    return any(e.event_type == EventType.EVENT_TYPE_TIMER_STARTED for e in tail) and not any(
        e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED for e in tail
    )


KEEP: Path | None = None  # --keep: where the histories that show the bug are written


async def diverged(client: Client, workflow_id: str) -> str:
    """Why the workflow's history shows the bug, or "" when it does not."""
    history: WorkflowHistory = await client.get_workflow_handle(workflow_id).fetch_history()
    why = await _why(history)
    if why and KEEP is not None:
        KEEP.mkdir(parents=True, exist_ok=True)
        (KEEP / f"{workflow_id}.json").write_text(history.to_json())
    return why


async def _why(history: WorkflowHistory) -> str:
    for e in history.events:
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
            return "workflow task failed: " + e.workflow_task_failed_event_attributes.failure.message.splitlines()[0]
    result = await Replayer(workflows=[Ticker]).replay_workflow(history, raise_on_replay_failure=False)
    return f"does not replay: {str(result.replay_failure).splitlines()[0]}" if result.replay_failure else ""


async def killed_worker_trial(address: str) -> str:
    client = await Client.connect(address)
    workflow_id = f"ticker-{uuid.uuid4().hex[:8]}"
    worker = worker_process(address)
    try:
        handle = await client.start_workflow(Ticker.run, id=workflow_id, task_queue=TASK_QUEUE)
        while not await sleeping_and_quiet(client, workflow_id):
            await asyncio.sleep(0.05)
        worker.send_signal(signal.SIGKILL)
        worker.wait()
        worker = worker_process(address)
        await asyncio.sleep(0.3)
        try:  # waits on the dead worker's sticky queue while the timer fires
            await handle.query(Ticker.count, rpc_timeout=timedelta(seconds=60))
        except Exception:  # noqa: BLE001 - answered or not, the history tells
            pass
        # Before the workflow task the timer scheduled: it now comes with the poke.
        await handle.signal(Ticker.poke)
        try:
            await asyncio.wait_for(handle.result(), 60)
        except Exception:  # noqa: BLE001 - a diverged run may never complete
            pass
        return await diverged(client, workflow_id)
    finally:
        worker.kill()
        worker.wait()


async def no_sticky_query_trial(address: str) -> str:
    client = await Client.connect(address)
    workflow_id = f"ticker-{uuid.uuid4().hex[:8]}"
    worker = worker_process(address)
    busy = [await client.start_workflow(Busy.run, id=f"busy-{uuid.uuid4().hex[:8]}", task_queue=TASK_QUEUE) for _ in range(BUSY)]
    try:
        handle = await client.start_workflow(Ticker.run, id=workflow_id, task_queue=TASK_QUEUE)
        done = asyncio.ensure_future(handle.result())
        give_up = asyncio.get_running_loop().time() + 60
        rounds = 0
        while not done.done():
            try:
                await handle.query(Ticker.count, rpc_timeout=timedelta(seconds=10))
                if rounds % 7 == 6:
                    await handle.signal(Ticker.poke)
            except Exception:  # noqa: BLE001 - the history tells
                pass
            rounds += 1
            await asyncio.wait({done}, timeout=0.1)
            if asyncio.get_running_loop().time() > give_up:  # a diverged run may never complete
                break
        done.cancel()
        return await diverged(client, workflow_id)
    finally:
        for b in busy:
            await b.terminate()
        worker.kill()
        worker.wait()


CASES = {
    "killed-worker": ((), killed_worker_trial),
    "no-sticky-query": (("system.enableStickyQuery=false",), no_sticky_query_trial),
}


async def main(trials: int, cases: list[str]) -> None:
    import temporalio

    print(f"temporalio {temporalio.__version__}; {subprocess.run([temporal_cli(), '--version'], capture_output=True, text=True).stdout.strip()}")
    for name in cases:
        config, trial = CASES[name]
        server, address = await dev_server(*config)
        shown = 0
        try:
            for i in range(1, trials + 1):
                why = await trial(address)
                shown += bool(why)
                print(f"  {name} trial {i}: {why or 'replays'}", flush=True)
        finally:
            server.send_signal(signal.SIGINT)
            server.wait(30)
        print(f"{name}: {shown} of {trials} trials showed the bug", flush=True)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "worker":
        asyncio.run(serve(sys.argv[2]))
    else:
        p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
        p.add_argument("--trials", type=int, default=10)
        p.add_argument("--case", choices=[*CASES, "both"], default="both")
        p.add_argument("--keep", type=Path, help="write the history of each trial that shows the bug here, as JSON")
        args = p.parse_args()
        KEEP = args.keep
        asyncio.run(main(args.trials, list(CASES) if args.case == "both" else [args.case]))
