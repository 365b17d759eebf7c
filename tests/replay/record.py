"""Record the histories that tests/replay replays: `python -m tests.replay.record NAME`.

Runs the main job's scenario on a fresh in-memory dev server with the current code: the examples
applied and admitted through the budget controller, then a late consumption update that puts team-b
over budget (its admitted workloads get `Retry` and wait in their backoff), and one workload
finished. `team-a/pretrain` goes through the ProvisioningRequest check (examples/provisioning.yaml):
two failed attempts with their backoffs before the third is provisioned. The local runner runs what
is admitted (examples/runners/local.py): train-small's command ends and finishes it, the Retry stops
notebook's, and train-large is finished by hand while its command runs. Every workflow's history
is written to `tests/replay/histories/NAME/`. Record a new set
when a release changes what the workflows write; keep the old sets, they are what running
workflows replay.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
import tempfile
from pathlib import Path

from temporalio.client import Client

from admitflow import controller as sdk
from admitflow.api.loader import load_manifests
from admitflow.client import AdmitflowClient
from admitflow.codec import DATA_CONVERTER
from admitflow.devserver import DevServer
from tests.conftest import free_port
from worker.main import build_worker

ROOT = Path(__file__).resolve().parents[2]


async def until(af: AdmitflowClient, keys: list[str], *phases: str) -> None:
    from admitflow.admission import workload as wl

    for _ in range(600):
        reports = [await af.workload(k) for k in keys]
        if all(wl.phase(wl.WorkloadState(workload=r)) in phases for r in reports):
            return
        await asyncio.sleep(0.1)
    raise TimeoutError(f"{keys} never reached {' or '.join(phases)}")


def local_runner(client: Client, logs: Path):
    """The local runner of the main job (examples/runners/local.py), in this process."""
    spec = importlib.util.spec_from_file_location("admitflow_local_runner", ROOT / "examples" / "runners" / "local.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # for its dataclasses
    spec.loader.exec_module(module)
    return module.LocalRunner(client, logs).worker()


async def record(out: Path) -> list[str]:
    consumption = Path(tempfile.mkdtemp()) / "consumption.json"
    consumption.write_text(json.dumps({"team-a": 120, "team-b": 12.5}))
    manifests = load_manifests([str(ROOT / "examples")])
    for m in manifests:
        if m.obj.kind == "AdmissionCheckParameters":
            m.obj.spec["consumption"] = str(consumption)
    async with DevServer(port=free_port(), db=None, headless=True) as server:
        client = await Client.connect(server.address, data_converter=DATA_CONVERTER)
        af = AdmitflowClient(client)
        [budget] = sdk.load(str(ROOT / "examples" / "controllers" / "budget.py"))
        async with build_worker(client, af.task_queue), local_runner(client, Path(tempfile.mkdtemp())):
            running = asyncio.ensure_future(budget.run(client))
            await af.apply(manifests)
            keys = [m.obj.key for m in manifests if m.obj.kind == "Workload"]
            await until(af, keys, "Admitted", "Finished")
            consumption.write_text(json.dumps({"team-a": 120, "team-b": 60}))
            await until(af, ["team-b/notebook"], "Backoff")
            await af.finish("team-a/train-large")
            await until(af, ["team-a/train-small", "team-a/train-large"], "Finished")
            running.cancel()
            ids = [wf.id async for wf in client.list_workflows()]
            out.mkdir(parents=True, exist_ok=True)
            for wid in ids:
                history = await client.get_workflow_handle(wid).fetch_history()
                (out / (wid.replace("/", "__") + ".json")).write_text(history.to_json())
    return ids


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m tests.replay.record NAME")
    print("\n".join(asyncio.run(record(Path(__file__).parent / "histories" / sys.argv[1]))))
