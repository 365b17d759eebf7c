"""The `kubernetes` ProvisioningRequest backend with N requests in flight: the threaded backend it
replaced (the synchronous client in 8 call threads and 64 watch threads, one watch per request)
against the asyncio one (one shared watch per worker), in the same run, against the same fake API
server.

The fake (tests/k8s_fake.py) runs in a process of its own, fresh for each measurement, so that its
threads and CPU are not counted here; a stand-in autoscaler in it sets `Provisioned=True` on each
ProvisioningRequest `--provision-after` seconds after it was created, plus up to
`--provision-spread` seconds at random (capacity comes at different times), and writes when into
the condition's message. All N attempts start at once, and each does what the check's activities
do: `create` (PodTemplate, request, handover), then `watch` (50 s, as WATCH_SECONDS) from the
version it holds until the request is `Provisioned`. Measured: wall time until all N are; how long
after `Provisioned` was set each attempt saw it (its notification latency); the most threads this
process ran beyond those it had before; its CPU time; the most watch connections open at once at
the fake.

The threaded backend is the module as it was at commit `--old-ref` (default: the last commit that
had it), read with `git show` and loaded as a module of its own: the benchmark needs the
repository's history.

    .venv/bin/python bench/kubernetes_backend.py [--n 500] [--provision-after 1] [--provision-spread 20]
        [--rounds 2] [--out PATH]

Prints one line per measurement and the ratios (threaded / asyncio); the JSON goes to
bench/results/kubernetes_backend-<date>.json, or to --out.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import statistics
import subprocess
import sys
import threading
import time
import types
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from admitflow.activities.provisioning.kubernetes import KubernetesBackend  # noqa: E402
from admitflow.activities.provisioning import WATCH_SECONDS  # noqa: E402
from admitflow.api.provisioning_request import MANAGED_LABEL, PROVISIONED, PodTemplate, ProvisioningRequest  # noqa: E402
from bench.harness import machine, result_paths, revision, write_json  # noqa: E402
from tests.k8s_fake import STATS_PATH  # noqa: E402

# The last commit with the threaded backend (activities/provisioning/kubernetes.py).
OLD_REF = "efb21edcd7ce496f4700f9756dbece69c2c5df51"
NAMESPACE = "bench"


def threaded_backend_module(ref: str) -> types.ModuleType:
    source = subprocess.run(
        ["git", "show", f"{ref}:activities/provisioning/kubernetes.py"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    module = types.ModuleType("threaded_kubernetes_backend")
    module.__file__ = f"{ref[:12]}:activities/provisioning/kubernetes.py"
    sys.modules[module.__name__] = module
    exec(compile(source, module.__file__, "exec"), module.__dict__)  # noqa: S102 - our own history
    return module


@contextmanager
def fake_api_server(provision_after: float, spread: float):
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.k8s_fake", "--provision-after", str(provision_after), "--provision-spread", str(spread)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        url = process.stdout.readline().strip()
        if not url.startswith("http://"):
            raise RuntimeError(f"the fake API server did not start: {url!r}")
        yield url
    finally:
        process.stdin.close()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


def fake_stats(url: str) -> dict[str, int]:
    with urllib.request.urlopen(url + STATS_PATH, timeout=10) as response:
        return json.loads(response.read())


def request(name: str) -> tuple[ProvisioningRequest, list[PodTemplate]]:
    pr = ProvisioningRequest.model_validate(
        {
            "metadata": {"name": name, "namespace": NAMESPACE, "labels": {MANAGED_LABEL: "true"}},
            "spec": {
                "provisioningClassName": "check-capacity.autoscaling.x-k8s.io",
                "podSets": [{"podTemplateRef": {"name": f"ppt-{name}-main"}, "count": 4}],
            },
        }
    )
    template = PodTemplate.model_validate(
        {
            "metadata": {"name": f"ppt-{name}-main", "namespace": NAMESPACE, "labels": {MANAGED_LABEL: "true"}},
            "template": {"spec": {"containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}]}},
        }
    )
    return pr, [template]


async def attempt(backend: Any, i: int) -> float:
    """Create, watch until Provisioned; the seconds between the autoscaler setting it and this seeing it."""
    pr, templates = request(f"job-{i}-prov-1")
    seen = await backend.create(pr, templates, "bench")
    while not seen.is_true(PROVISIONED):
        found = await backend.watch(NAMESPACE, pr.metadata.name, seen.metadata.resource_version, WATCH_SECONDS)
        if found is None:
            raise RuntimeError(f"{pr.metadata.name} is gone")
        seen = found
    return time.time() - float(seen.condition(PROVISIONED).message.removeprefix("provisioned at "))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def measure(kind: str, make: Any, n: int, provision_after: float, spread: float) -> dict[str, Any]:
    with fake_api_server(provision_after, spread) as url:
        before = threading.active_count()
        peak = before
        done = asyncio.Event()

        async def count_threads() -> None:
            nonlocal peak
            while not done.is_set():
                peak = max(peak, threading.active_count())
                await asyncio.sleep(0.01)

        counter = asyncio.create_task(count_threads())
        backend = make(url)
        cpu, started = time.process_time(), time.monotonic()
        try:
            latencies = await asyncio.gather(*(attempt(backend, i) for i in range(n)))
            seconds = time.monotonic() - started
            cpu = time.process_time() - cpu
        finally:
            done.set()
            await counter
            closed = backend.close()
            if inspect.isawaitable(closed):
                await closed
        stats = fake_stats(url)
    row = {
        "backend": kind,
        "n": n,
        "seconds": round(seconds, 2),
        "cpu_seconds": round(cpu, 2),
        "latency_p50_seconds": round(percentile(latencies, 0.5), 3),
        "latency_p99_seconds": round(percentile(latencies, 0.99), 3),
        "latency_max_seconds": round(max(latencies), 3),
        "threads": peak - before,
        "peak_watch_connections": stats["peakWatches"],
        "watch_requests": stats["watchRequests"],
        "api_requests": stats["requests"],
    }
    print(
        f"{kind:9} n={n}: {row['seconds']:6.2f} s wall, {row['cpu_seconds']:5.2f} s CPU, latency p50 "
        f"{row['latency_p50_seconds']:.3f} p99 {row['latency_p99_seconds']:.3f} max {row['latency_max_seconds']:.3f} s, "
        f"{row['threads']:3} threads, "
        f"{row['peak_watch_connections']:3} watch connections at most ({row['watch_requests']} watch requests, "
        f"{row['api_requests']} requests in all)",
        flush=True,
    )
    return row


async def main(n: int, provision_after: float, spread: float, rounds: int, old_ref: str, out: Path | None) -> None:
    from kubernetes import client as sync_client
    from kubernetes.aio import client as aio_client

    from admitflow.worker.logging import configure

    configure("WARNING")
    threaded = threaded_backend_module(old_ref)
    makers = {
        "threaded": lambda url: threaded.KubernetesBackend(sync_client.Configuration(host=url)),
        "asyncio": lambda url: KubernetesBackend(aio_client.Configuration(host=url)),
    }
    rows = []
    for r in range(rounds):
        # Alternate which goes first: the machine is shared and noisy.
        order = ["threaded", "asyncio"] if r % 2 == 0 else ["asyncio", "threaded"]
        for kind in order:
            rows.append(await measure(kind, makers[kind], n, provision_after, spread))

    def median(kind: str, key: str) -> float:
        return statistics.median(row[key] for row in rows if row["backend"] == kind)

    ratios = {key: round(median("threaded", key) / max(median("asyncio", key), 1e-9), 2) for key in ("seconds", "cpu_seconds")}
    medians = {
        kind: {key: median(kind, key) for key in ("threads", "latency_p50_seconds", "latency_p99_seconds", "peak_watch_connections")}
        for kind in ("threaded", "asyncio")
    }
    old, new = medians["threaded"], medians["asyncio"]
    print(
        f"medians of {rounds}, threaded / asyncio: wall time {ratios['seconds']}x, CPU {ratios['cpu_seconds']}x; "
        f"threads {old['threads']:.0f} / {new['threads']:.0f}; watch connections {old['peak_watch_connections']:.0f} / "
        f"{new['peak_watch_connections']:.0f}; latency p50 {old['latency_p50_seconds']:.3f} / {new['latency_p50_seconds']:.3f} s, "
        f"p99 {old['latency_p99_seconds']:.3f} / {new['latency_p99_seconds']:.3f} s",
        flush=True,
    )
    path, _ = result_paths("kubernetes_backend", out)
    write_json(
        path,
        {
            "n": n,
            "provision_after_seconds": provision_after,
            "provision_spread_seconds": spread,
            "rounds": rounds,
            "threaded_backend": f"{old_ref}:activities/provisioning/kubernetes.py",
            "machine": machine(),
            "revision": revision(),
            "rows": rows,
            "ratios_threaded_over_asyncio": ratios,
            "medians": medians,
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=500, help="ProvisioningRequests in flight at once (default 500)")
    parser.add_argument("--provision-after", type=float, default=1.0, help="seconds from create to Provisioned=True (default 1)")
    parser.add_argument("--provision-spread", type=float, default=20.0, help="plus up to this many seconds at random (default 20)")
    parser.add_argument("--rounds", type=int, default=2, help="measurements of each backend, alternating (default 2)")
    parser.add_argument("--old-ref", default=OLD_REF, help="the commit to take the threaded backend from")
    parser.add_argument("--out", type=Path, default=None, help="where to write the JSON")
    args = parser.parse_args()
    asyncio.run(main(args.n, args.provision_after, args.provision_spread, args.rounds, args.old_ref, args.out))
