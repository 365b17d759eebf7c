"""Take the screenshots of the Temporal UI in docs/ui.md: `.venv/bin/python scripts/ui_screenshots.py [--out docs/img]`.

Runs the main job's scenario (what `make run` does: examples/ and the approval sample applied, the
budget controller and the local runner in this process) on a fresh in-memory dev server on free
ports, and photographs its UI with Debian's headless Chromium (`apt-get install chromium`):

- ui-workflows.png       the workload workflows with their phase, ClusterQueue and pending checks;
- ui-filter-backoff.png  the list filtered by `AdmitflowPhase="Backoff" AND AdmitflowClusterQueue="gpu"`
                         while team-a/pretrain waits in a backoff;
- ui-pretrain.png        team-a/pretrain's history once admitted: ProvisioningRequest child
                         workflows, backoff timers, signals;
- ui-budget-check.png    team-a/train-small's history: its budget check activity, then it runs.

Chromium is driven over the DevTools protocol (aiohttp's websocket client, installed with the
kubernetes dependency): the UI keeps its table columns and history view in localStorage, so the
script sets them first, then waits for each page's content before the shot.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import itertools
import json
import sys
import tempfile
from pathlib import Path
from urllib.parse import quote, urlencode

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # for tests.support when run as a script

from temporalio.client import Client  # noqa: E402

from admitflow import controller as sdk  # noqa: E402
from admitflow import search_attributes as sa  # noqa: E402
from admitflow.admission import workload as wl  # noqa: E402
from admitflow.api.loader import load_manifests  # noqa: E402
from admitflow.client import AdmitflowClient  # noqa: E402
from admitflow.codec import DATA_CONVERTER  # noqa: E402
from admitflow.devserver import DevServer  # noqa: E402
from tests.conftest import free_port  # noqa: E402
from tests.support.runners import local_runner  # noqa: E402
from tests.support.waits import until_phase  # noqa: E402
from admitflow.worker.main import build_worker  # noqa: E402

CHROMIUM = Path("/usr/bin/chromium")
PRETRAIN = "team-a/pretrain"
BACKOFF_QUERY = 'AdmitflowPhase="Backoff" AND AdmitflowClusterQueue="gpu"'
FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--hide-scrollbars", "--window-size=1400,900", "--remote-debugging-port=0",
]  # fmt: skip
COLUMNS = ["Status", "Workflow ID", "AdmitflowPhase", "AdmitflowClusterQueue", "AdmitflowPendingChecks",
           "AdmitflowPriority", "Start"]
SETTINGS = {  # the UI's persisted stores: list columns, compact event history, navigation folded
    "namespace-workflow-table-columns": {"default": [{"label": c, "pinned": i < 2} for i, c in enumerate(COLUMNS)]},
    "eventView": "compact",
    "navOpen": False,
}

SCROLL_TO_HEADING = """(text => {
    const h = [...document.querySelectorAll('h1, h2, h3')].find(h => h.innerText.trim() === text);
    h.style.scrollMarginTop = '56px';  /* below the UI's sticky top bar */
    h.scrollIntoView();
})"""


class Chromium:
    """One headless Chromium page, driven over the DevTools protocol."""

    def __init__(self, ui: str) -> None:
        self.ui, self.ids = ui, itertools.count(1)

    async def __aenter__(self) -> Chromium:
        self.profile = tempfile.TemporaryDirectory()
        self.proc = await asyncio.create_subprocess_exec(
            str(CHROMIUM), *FLAGS, f"--user-data-dir={self.profile.name}", "about:blank",
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        port_file = Path(self.profile.name) / "DevToolsActivePort"
        for _ in range(300):
            if port_file.exists() and port_file.read_text().strip():
                break
            await asyncio.sleep(0.1)
        port = port_file.read_text().split()[0]
        self.http = aiohttp.ClientSession()
        async with self.http.get(f"http://127.0.0.1:{port}/json/list") as resp:
            page = next(t for t in await resp.json() if t["type"] == "page")
        self.ws = await self.http.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0)
        await self.call("Emulation.setDeviceMetricsOverride", width=1400, height=900, deviceScaleFactor=1, mobile=False)
        await self.open(self.ui, "Workflows")
        for key, value in SETTINGS.items():
            await self.eval(f"localStorage.setItem({json.dumps(key)}, {json.dumps(json.dumps(value))})")
        return self

    async def __aexit__(self, *exc) -> None:
        await self.http.close()
        self.proc.terminate()
        await self.proc.wait()
        self.profile.cleanup()

    async def call(self, method: str, **params):
        call_id = next(self.ids)
        await self.ws.send_json({"id": call_id, "method": method, "params": params})
        async for msg in self.ws:
            reply = json.loads(msg.data)
            if reply.get("id") == call_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]
        raise RuntimeError("chromium closed the DevTools connection")

    async def eval(self, expression: str):
        return (await self.call("Runtime.evaluate", expression=expression, returnByValue=True))["result"].get("value")

    async def open(self, url: str, text: str, tries: int = 6) -> None:
        """Load `url` until the page shows `text` (reloading: visibility may lag a moment behind)."""
        ready = f"document.body && document.body.innerText.includes({json.dumps(text)})"
        for _ in range(tries):
            await self.call("Page.navigate", url=url)
            for _ in range(20):
                await asyncio.sleep(0.25)
                if await self.eval(ready):
                    await asyncio.sleep(1.5)  # the rest of the page's requests and its transitions
                    return
        raise TimeoutError(f"{url} never showed {text!r}")

    async def shot(self, url: str, text: str, png: Path, scroll_to: str | None = None) -> None:
        await self.open(url, text)
        if scroll_to is not None:  # the first heading with this text at the top of the window
            await self.eval(f"{SCROLL_TO_HEADING}({json.dumps(scroll_to)})")
            await asyncio.sleep(0.5)
        png.write_bytes(base64.b64decode((await self.call("Page.captureScreenshot", format="png"))["data"]))
        print(f"{png} ({png.stat().st_size // 1024} KiB) <- {url}")


async def second_backoff(af: AdmitflowClient) -> None:
    """Until team-a/pretrain waits in its second backoff (20 s): time enough for both list shots."""
    for _ in range(600):
        state = wl.WorkloadState(workload=await af.workload(PRETRAIN))
        if wl.phase(state) == "Backoff" and wl.search_attributes(state).get(sa.RETRY_COUNT, 0) >= 2:
            return
        await asyncio.sleep(0.1)
    raise TimeoutError(f"{PRETRAIN} never reached its second backoff")


def list_url(ui: str, query: str) -> str:
    return f"{ui}/namespaces/default/workflows?{urlencode({'query': query})}"


async def history_url(client: Client, ui: str, workflow_id: str) -> str:
    run_id = (await client.get_workflow_handle(workflow_id).describe()).run_id
    return f"{ui}/namespaces/default/workflows/{quote(workflow_id, safe='')}/{run_id}/history?sort=ascending"


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
                async with Chromium(ui) as browser:
                    await second_backoff(af)
                    workloads = list_url(ui, 'WorkflowType="WorkloadWorkflow"')
                    await browser.shot(workloads, "workload/team-a/train-small", out / "ui-workflows.png")
                    filtered = list_url(ui, BACKOFF_QUERY)
                    await browser.shot(filtered, "workload/team-a/pretrain", out / "ui-filter-backoff.png")
                    await until_phase(af, [PRETRAIN], "Admitted")
                    pretrain = await history_url(client, ui, "workload/team-a/pretrain")
                    await browser.shot(pretrain, "pretrain-capacity-3", out / "ui-pretrain.png", "Event History")
                    train_small = await history_url(client, ui, "workload/team-a/train-small")
                    await browser.shot(train_small, "check budget", out / "ui-budget-check.png", "Event History")
            finally:
                running.cancel()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img", help="where the PNGs go (docs/img)")
    args = parser.parse_args()
    if not CHROMIUM.exists():
        sys.exit(f"{CHROMIUM} is missing: install Debian's chromium: apt-get install chromium")
    asyncio.run(main(args.out))
