"""How many queries `make run`'s scenario sends, by the Temporal dev server's own count.

Runs what `make run` runs (`admitflow dev` with the examples, the approval sample, the budget
controller and the local runner) on free ports and a fresh database, with the dev server's own
metrics on (`--server-metrics-port`), gauges on `--metrics-port` scraped every 15 s as Prometheus
would, and `admitflow get workloads -w` open beside it. Every `--every` seconds it reads the
frontend's `service_requests{operation="QueryWorkflow"}` (and, for scale, the other operations)
and prints the count; at the end, how many queries came after the first minute. Exits 1 when that
count is not 0 and `--expect-none` was given.

    .venv/bin/python bench/query_count.py [--minutes 10] [--every 60] [--expect-none] [--out PATH]

Not part of `make test`: it takes as long as it is asked to.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.conftest import free_port  # noqa: E402

ADMITFLOW = str(Path(sys.executable).parent / "admitflow")
SCENARIO = [
    "-f", "examples/", "-f", "examples/controllers/approval.yaml",
    "--controller", "examples/controllers/budget.py", "--runner", "examples/runners/local.py",
]
SCRAPE_EVERY = 15.0
_SERIES = re.compile(r'^service_requests\{(?P<labels>[^}]*)\} (?P<value>[0-9.e+]+)$')


def requests_by_operation(url: str) -> dict[str, float]:
    """The frontend's service_requests by operation, summed over namespaces."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = _SERIES.match(line)
        if m is None or 'service_name="frontend"' not in m["labels"]:
            continue
        operation = re.search(r'operation="([^"]*)"', m["labels"])
        if operation is not None:
            out[operation[1]] = out.get(operation[1], 0.0) + float(m["value"])
    return out


def scrape_forever(url: str, stop: threading.Event, counts: dict[str, int]) -> None:
    """What Prometheus does to `admitflow dev --metrics-port`: GET /metrics every 15 s."""
    while not stop.wait(SCRAPE_EVERY):
        try:
            with urllib.request.urlopen(url, timeout=12) as response:
                response.read()
            counts["ok"] = counts.get("ok", 0) + 1
        except Exception:  # noqa: BLE001 - counted, not raised: the scenario goes on
            counts["failed"] = counts.get("failed", 0) + 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--every", type=float, default=60.0, help="seconds between two readings of the server's count")
    p.add_argument("--expect-none", action="store_true", help="exit 1 when queries came after the first minute")
    p.add_argument("--out", type=Path, help="write the readings as JSON here")
    args = p.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="admitflow-query-count-"))
    port, ui, gauges, server_metrics = free_port(), free_port(), free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TEMPORAL_")}
    dev = subprocess.Popen(
        [ADMITFLOW, "dev", *SCENARIO, "--port", str(port), "--ui-port", str(ui), "--db", str(work / "temporal.db"),
         "--metrics-port", str(gauges), "--server-metrics-port", str(server_metrics)],
        cwd=ROOT, env=env, stdout=open(work / "dev.log", "wb"), stderr=subprocess.STDOUT, start_new_session=True,
    )
    watcher: subprocess.Popen | None = None
    stop = threading.Event()
    scrapes: dict[str, int] = {}
    readings: list[dict] = []
    try:
        url = f"http://127.0.0.1:{server_metrics}/metrics"
        deadline = time.monotonic() + 120
        # Up once its worker runs (the dev server's metrics come a moment before).
        while "worker on task queue" not in (work / "dev.log").read_text(errors="replace"):
            if dev.poll() is not None or time.monotonic() > deadline:
                print((work / "dev.log").read_text(errors="replace")[-2000:], file=sys.stderr)
                return 2
            time.sleep(0.5)
        watcher = subprocess.Popen(
            [ADMITFLOW, "get", "workloads", "-A", "-w", "--address", f"127.0.0.1:{port}"],
            cwd=ROOT, env=env, stdout=open(work / "watch.log", "wb"), stderr=subprocess.STDOUT,
        )
        threading.Thread(target=scrape_forever, args=(f"http://127.0.0.1:{gauges}/metrics", stop, scrapes), daemon=True).start()
        started = time.monotonic()
        print(f"{'minute':>7} {'QueryWorkflow':>14} {'all requests':>13}   (logs in {work})", flush=True)
        while True:
            if dev.poll() is not None:
                print(f"admitflow dev exited with {dev.returncode}: see {work / 'dev.log'}", file=sys.stderr)
                return 2
            elapsed = time.monotonic() - started
            counts = requests_by_operation(url)
            readings.append({"seconds": round(elapsed, 1), "query_workflow": counts.get("QueryWorkflow", 0.0),
                             "all": sum(counts.values()), "by_operation": counts})
            print(f"{elapsed / 60:7.1f} {counts.get('QueryWorkflow', 0):14.0f} {sum(counts.values()):13.0f}", flush=True)
            if elapsed >= args.minutes * 60:
                break
            time.sleep(min(args.every, max(0.0, args.minutes * 60 - elapsed)))
    finally:
        stop.set()
        if watcher is not None:
            watcher.terminate()
            watcher.wait(10)
        os.killpg(dev.pid, signal.SIGINT)
        try:
            dev.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(dev.pid, signal.SIGKILL)
    after_first_minute = [r for r in readings if r["seconds"] >= 60]
    grew = after_first_minute[-1]["query_workflow"] - after_first_minute[0]["query_workflow"] if len(after_first_minute) > 1 else 0.0
    span = (after_first_minute[-1]["seconds"] - after_first_minute[0]["seconds"]) / 60 if len(after_first_minute) > 1 else 0.0
    print(f"QueryWorkflow after the first minute: {grew:.0f} in {span:.1f} min; gauge scrapes {scrapes}", flush=True)
    if args.out is not None:
        args.out.write_text(json.dumps({"readings": readings, "after_first_minute": grew, "minutes": span, "scrapes": scrapes}, indent=2))
    return 1 if args.expect_none and grew else 0


if __name__ == "__main__":
    sys.exit(main())
