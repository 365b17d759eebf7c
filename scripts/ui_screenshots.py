"""Take the screenshots of the Temporal UI in docs/ui.md: `.venv/bin/python scripts/ui_screenshots.py [--out docs/img]`.

Runs the main job's scenario (what `make run` does: examples/ and the approval sample applied, the
budget controller and the local runner in this process) on a fresh in-memory dev server on free
ports, and photographs its UI with Debian's headless Chromium (`apt-get install chromium`):

- ui-workflows.png       the workflow list, each workload workflow with its summary;
- ui-filter-backoff.png  the list filtered by `AdmitflowPhase="Backoff" AND AdmitflowClusterQueue="gpu"`,
                         taken while team-a/pretrain waits in its first backoff;
- ui-pretrain.png        team-a/pretrain's history once admitted: ProvisioningRequest child
                         workflows, backoff timers, signals;
- ui-budget-check.png    team-a/train-small's history: its budget check activity, then it runs.

Chromium renders each page with a virtual time budget (`--virtual-time-budget`), which lets the
UI's single-page app load its data before the shot.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
from pathlib import Path
from urllib.parse import quote, urlencode

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # for tests.replay.record and worker.main when run as a script

from temporalio.client import Client  # noqa: E402

from admitflow import controller as sdk  # noqa: E402
from admitflow.api.loader import load_manifests  # noqa: E402
from admitflow.client import AdmitflowClient  # noqa: E402
from admitflow.codec import DATA_CONVERTER  # noqa: E402
from admitflow.devserver import DevServer  # noqa: E402
from tests.conftest import free_port  # noqa: E402
from tests.replay.record import local_runner, until  # noqa: E402
from worker.main import build_worker  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
BACKOFF_QUERY = 'AdmitflowPhase="Backoff" AND AdmitflowClusterQueue="gpu"'
FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--hide-scrollbars", "--window-size=1400,900",
]  # fmt: skip


async def screenshot(url: str, png: Path, budget_ms: int = 15000) -> None:
    """Render `url` in a fresh headless Chromium and save what it shows as `png`."""
    with tempfile.TemporaryDirectory() as profile:
        proc = await asyncio.create_subprocess_exec(
            CHROMIUM, *FLAGS, f"--user-data-dir={profile}", f"--virtual-time-budget={budget_ms}",
            f"--screenshot={png}", url,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        _, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    if proc.returncode != 0 or not png.exists():
        raise RuntimeError(f"chromium failed on {url}: {err.decode(errors='replace')[-500:]}")
    print(f"{png} ({png.stat().st_size // 1024} KiB) <- {url}")


def list_url(ui: str, query: str | None = None) -> str:
    url = f"{ui}/namespaces/default/workflows"
    return f"{url}?{urlencode({'query': query})}" if query else url


async def history_url(client: Client, ui: str, workflow_id: str) -> str:
    run_id = (await client.get_workflow_handle(workflow_id).describe()).run_id
    return f"{ui}/namespaces/default/workflows/{quote(workflow_id, safe='')}/{run_id}/history"


async def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    consumption = Path(tempfile.mkdtemp()) / "consumption.json"
    consumption.write_text(json.dumps({"team-a": 120, "team-b": 12.5}))
    manifests = load_manifests([str(ROOT / "examples"), str(ROOT / "examples" / "controllers" / "approval.yaml")])
    for m in manifests:
        if m.obj.kind == "AdmissionCheckParameters":
            m.obj.spec["consumption"] = str(consumption)
    async with DevServer(port=free_port(), ui_port=free_port(), db=None, headless=False) as server:
        ui = server.ui_url
        client = await Client.connect(server.address, data_converter=DATA_CONVERTER)
        af = AdmitflowClient(client)
        [budget] = sdk.load(str(ROOT / "examples" / "controllers" / "budget.py"))
        async with build_worker(client, af.task_queue), local_runner(client, Path(tempfile.mkdtemp())):
            running = asyncio.ensure_future(budget.run(client))
            try:
                await af.apply(manifests)
                await until(af, ["team-a/pretrain"], "Backoff")
                await screenshot(list_url(ui, BACKOFF_QUERY), out / "ui-filter-backoff.png")
                await until(af, ["team-a/pretrain"], "Admitted")
                await until(af, ["team-a/train-small"], "Admitted", "Finished")
                await screenshot(list_url(ui), out / "ui-workflows.png")
                await screenshot(await history_url(client, ui, "workload/team-a/pretrain"), out / "ui-pretrain.png")
                train_small = await history_url(client, ui, "workload/team-a/train-small")
                await screenshot(train_small, out / "ui-budget-check.png")
            finally:
                running.cancel()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img", help="where the PNGs go (docs/img)")
    args = parser.parse_args()
    if not Path(CHROMIUM).exists() and shutil.which("chromium") is None:
        sys.exit(f"{CHROMIUM} is missing: install Debian's chromium: apt-get install chromium")
    asyncio.run(main(args.out))
