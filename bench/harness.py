"""What every benchmark here needs: the engine in this process on a fresh dev server, bounded
concurrency, the bare-Temporal baseline, percentiles, and where results go."""

from __future__ import annotations

import asyncio
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from temporalio.client import Client  # noqa: E402
from temporalio.worker import Worker  # noqa: E402

from admitflow.api import LoadedManifest, parse_manifest  # noqa: E402
from admitflow.client import AdmitflowClient  # noqa: E402
from admitflow.codec import DATA_CONVERTER  # noqa: E402
from admitflow.devserver import DevServer  # noqa: E402
from bench.bare_workflow import BareWorkflow, noop  # noqa: E402
from tests.conftest import free_port  # noqa: E402
from admitflow.worker.main import build_worker, tune_collector  # noqa: E402

CONCURRENCY = 50
RESULTS = ROOT / "bench" / "results"


async def bounded(coros: Iterable, limit: int = CONCURRENCY) -> list:
    gate = asyncio.Semaphore(limit)

    async def one(c):
        async with gate:
            return await c

    return await asyncio.gather(*(one(c) for c in coros))


def loaded(docs: Sequence[dict[str, Any]]) -> list[LoadedManifest]:
    """Manifests as `admitflow apply` hands them to the client."""
    return [LoadedManifest(source="bench", index=i, obj=parse_manifest(d)[0], warnings=[]) for i, d in enumerate(docs, 1)]


@dataclass
class Engine:
    server: DevServer
    client: Client
    admitflow: AdmitflowClient


@asynccontextmanager
async def engine(task_queue: str = "admitflow", **worker_options: Any) -> AsyncIterator[Engine]:
    """A dev server on a fresh file database (as `admitflow dev` runs it) and the engine worker in
    this process (with the SDK's defaults unless `worker_options` say otherwise)."""
    with tempfile.TemporaryDirectory() as tmp:
        server = DevServer(port=free_port(), db=Path(tmp) / "bench.db", headless=True)
        await server.start()
        try:
            client = await Client.connect(server.address, data_converter=DATA_CONVERTER)
            tune_collector()  # as `admitflow worker` does; the bare runs inside share it
            async with build_worker(client, task_queue, **worker_options):
                yield Engine(server, client, AdmitflowClient(client, task_queue))
        finally:
            server.stop()


async def bare_rate(client: Client, n: int, tag: str, meter: CpuMeter | None = None) -> float:
    """N bare workflows of one activity each (the SDK's defaults), started 50 at a time; workflows
    per second from the first start to the last completion (and the CPU it took, with a meter)."""
    async with Worker(client, task_queue="bare", workflows=[BareWorkflow], activities=[noop]):
        if meter is not None:
            meter.start()
        start = time.monotonic()
        await bounded(
            client.execute_workflow(BareWorkflow.run, i, id=f"bare-{tag}-{i}", task_queue="bare") for i in range(n)
        )
        rate = n / (time.monotonic() - start)
        if meter is not None:
            meter.stop()
    await asyncio.sleep(1.0)
    return rate


def peak_rss_mib() -> float:
    """This process's peak resident set (worker, clients), MiB."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def cpu_seconds(server: DevServer) -> tuple[float, float]:
    """CPU time (user + system) used so far by this process (worker, clients) and by the dev server."""

    def of(pid: int | str) -> float:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    process = server._process  # the server's own process: nothing else says how much CPU it used
    return of("self"), of(process.pid) if process is not None else float("nan")


@dataclass
class CpuMeter:
    """CPU seconds of this process and of the dev server between `start` and `stop`."""

    server: DevServer
    python_s: float = 0.0
    server_s: float = 0.0

    def start(self) -> CpuMeter:
        self._at = cpu_seconds(self.server)
        return self

    def stop(self) -> CpuMeter:
        py, srv = cpu_seconds(self.server)
        self.python_s, self.server_s = py - self._at[0], srv - self._at[1]
        return self

    def per(self, n: int) -> dict[str, float]:
        """Milliseconds of CPU per item."""
        return {"python_ms": round(self.python_s * 1000 / n, 1), "server_ms": round(self.server_s * 1000 / n, 1)}


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100), linear between the closest ranks (numpy's default)."""
    xs = sorted(values)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def summary_ms(seconds: Sequence[float]) -> dict[str, float]:
    ms = [s * 1000 for s in seconds]
    return {
        "n": len(ms),
        "p50_ms": round(percentile(ms, 50), 1),
        "p99_ms": round(percentile(ms, 99), 1),
        "mean_ms": round(statistics.fmean(ms), 1) if ms else float("nan"),
        "min_ms": round(min(ms), 1) if ms else float("nan"),
        "max_ms": round(max(ms), 1) if ms else float("nan"),
    }


def machine() -> dict[str, Any]:
    """What else the machine was doing: the 1-minute load average at the time of the call."""
    return {"cpus": os.cpu_count(), "load_1m": round(os.getloadavg()[0], 2)}


def engine_code_here() -> None:
    """Refuse to measure another checkout's engine: admitflow's `workflows`, `activities` and
    `worker` are installed as subpackages mapped to the directories of the checkout that was
    installed, so a second checkout that shares its virtualenv runs its own `admitflow` package with
    the installed checkout's workflows unless it has a virtualenv of its own."""
    import admitflow.activities
    import admitflow.worker
    import admitflow.workflows

    for package in (admitflow.workflows, admitflow.activities, admitflow.worker):
        found = Path(package.__file__).resolve().parent.parent
        if found != ROOT.resolve():
            sys.exit(f"bench: {package.__name__} comes from {found}, not from this checkout ({ROOT}): "
                     f"install this checkout in a virtualenv of its own (pip install -e .) to measure it")


def revision() -> dict[str, Any]:
    """The commit measured, and whether the engine's code differed from it (other people edit it
    while benchmarks run). Exits when the engine's code is another checkout's (`engine_code_here`)."""
    import subprocess

    engine_code_here()

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    changed = git("status", "--porcelain", "--", "admitflow", "workflows", "activities", "worker")
    return {"commit": git("rev-parse", "--short", "HEAD"), "engine_uncommitted_changes": bool(changed)}


def result_paths(name: str, out: Path | None) -> tuple[Path, Path]:
    """`bench/results/<name>-<date>.json` and `.png`, or next to `out` when given."""
    base = out.with_suffix("") if out else RESULTS / f"{name}-{date.today().isoformat()}"
    base.parent.mkdir(parents=True, exist_ok=True)
    return base.with_suffix(".json"), base.with_suffix(".png")


def save_figure(fig: Any, path: Path) -> None:
    """Lay out, write (110 dpi) and close a matplotlib figure."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Strict JSON: a figure that could not be measured (NaN) is written as null."""

    def clean(x: Any) -> Any:
        if isinstance(x, float) and x != x:
            return None
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [clean(v) for v in x]
        return x

    path.write_text(json.dumps(clean(data), indent=2, allow_nan=False) + "\n")
