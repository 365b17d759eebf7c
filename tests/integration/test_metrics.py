"""Metrics scraped after a run and checked against what happened.

- A worker's Prometheus endpoint: the counters and histograms of a workload admitted after one Retry
  of its check, its pods ready, then finished (and their LocalQueue variants); and no admitflow gauge.
- The exporter (admitflow/gauges.py): with two engine workers, a ClusterQueue's gauges are its
  current figures, served once, whichever worker ran the queue last (the first worker, stopped,
  still serves its own endpoint, as a worker that lost the queue does); a deleted ClusterQueue's
  series end.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

import yaml
from temporalio.client import Client

from admitflow import gauges
from admitflow.admission import metrics
from admitflow.admission import workload as wl
from admitflow.admission.workload import WorkloadState
from admitflow.client import AdmitflowClient
from admitflow.codec import DATA_CONVERTER
from admitflow.controller import Controller, ready, retry
from tests.cli_process import ADMITFLOW
from tests.builders import cluster_queue_manifest, flavor_manifest, local_queue_manifest, workload_manifest
from tests.conftest import free_port
from tests.integration.test_admission import eventually, loaded
from admitflow.worker.main import build_worker, metrics_runtime

TASK_QUEUE = "metrics"  # its own: the engine fixture's worker serves the default one in this namespace
SAMPLE = re.compile(r'^(?P<name>[a-z_]+)(?:\{(?P<labels>[^}]*)\})? (?P<value>\S+)$')
GAUGES = {metrics.PREFIX + n for n, (kind, _) in metrics.METRICS.items() if kind == "gauge"} | {gauges.UP}


def scrape(port: int) -> list[tuple[str, dict[str, str], float]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=15) as resp:
            text = resp.read().decode()
    except urllib.error.HTTPError as err:
        err.msg = f"{err.msg}: {err.read().decode().strip()}"  # the exporter's one line
        raise
    samples = []
    for line in text.splitlines():
        m = SAMPLE.match(line)
        if m and m["name"].startswith("admitflow_"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m["labels"] or ""))
            samples.append((m["name"], labels, float(m["value"])))
    return samples


def value(samples, metric: str, /, **labels: str) -> float:
    """The sum of a metric's samples whose labels include these."""
    return sum(v for n, ls, v in samples if n == metric and all(ls.get(k) == x for k, x in labels.items()))


# A worker's meter adds these (and `namespace`, which the LocalQueue gauges use for theirs, as Kueue's do).
METER_LABELS = {"task_queue", "workflow_type", "service_name"}
# The per-ClusterQueue gauges `figures` shows; the others are checked by their full labels.
CQ_GAUGES = {metrics.PREFIX + n for n in ("pending_workloads", "reserving_active_workloads", "admitted_active_workloads",
                                          "cluster_queue_status")} | {gauges.UP}


def gauge_series(*endpoints) -> list[tuple[str, tuple, float]]:
    """Every admitflow gauge sample of these scrapes, as (name, labels, value); the workflow
    meter's own labels (task_queue, ...) left out, as an aggregation would."""
    return [
        (n, tuple(sorted((k, x) for k, x in ls.items() if k not in METER_LABELS)), v)
        for samples in endpoints for n, ls, v in samples if n in GAUGES
    ]


def figures(series, cluster_queue: str) -> dict[tuple[str, str], float]:
    """The per-ClusterQueue gauges of one queue, by (name, status)."""
    return {
        (n.removeprefix(metrics.PREFIX), dict(ls).get("status", "")): v
        for n, ls, v in series if n in CQ_GAUGES and dict(ls).get("cluster_queue") == cluster_queue
    }


async def test_the_counters_match_what_happened(engine):
    port = free_port()
    client = await Client.connect(
        engine.address, namespace=engine.namespace, data_converter=DATA_CONVERTER, runtime=metrics_runtime(port)
    )
    af = AdmitflowClient(client, TASK_QUEUE)

    async def first_retry_then_ready(request):
        return retry("not yet", after=1) if request.attempt == 1 else ready("fine")

    controller = Controller("tests.metrics", check=first_retry_then_ready)
    check = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck", "metadata": {"name": "budget"},
             "spec": {"controllerName": "tests.metrics"}}
    async with build_worker(client, TASK_QUEUE), controller.worker(client):
        await af.apply(loaded(check))
        await af.set_admission_check_active("budget")
        await af.apply(loaded(flavor_manifest(), cluster_queue_manifest(checks=[{"name": "budget"}]), local_queue_manifest(),
                              workload_manifest("job")))

        async def admitted():
            report = await af.workload("default/job")
            return report.status.condition("Admitted").status == "True"

        await eventually(admitted, timeout=30)
        await af.pods_ready("default/job")
        await af.finish("default/job")

        async def released():
            report = await af.cluster_queue_report("cq")
            return report.status.reserving_workloads == 0

        await eventually(released, timeout=20)

        async def settled():
            s = scrape(port)
            return s if value(s, "admitflow_finished_workloads_total") else None

        samples = await eventually(settled, timeout=20)

    cq = {"cluster_queue": "cq"}
    assert value(samples, "admitflow_quota_reserved_workloads_total", **cq) == 2, "reserved twice: before and after the Retry"
    assert value(samples, "admitflow_admitted_workloads_total", **cq) == 1
    assert value(samples, "admitflow_evicted_workloads_total", reason="AdmissionCheck", underlying_cause="", **cq) == 1
    assert value(samples, "admitflow_evicted_workloads_total") == 1
    assert value(samples, "admitflow_admission_check_retries_total", admission_check="budget", **cq) == 1
    assert value(samples, "admitflow_requeue_delay_seconds_count", reason="AdmissionCheck", **cq) == 1
    assert 1 <= value(samples, "admitflow_requeue_delay_seconds_sum", reason="AdmissionCheck") <= 2, "the 1 s the controller asked"
    assert value(samples, "admitflow_finished_workloads_total", **cq) == 1
    assert value(samples, "admitflow_admission_checks_wait_time_seconds_count", **cq) == 1
    assert value(samples, "admitflow_quota_reserved_wait_time_seconds_count", **cq) == 2
    assert value(samples, "admitflow_admission_attempts_total", result="success") == 2, "one pass per reservation"
    assert value(samples, "admitflow_admission_attempt_duration_seconds_count", result="success") == 2
    assert 0 < value(samples, "admitflow_admission_attempt_duration_seconds_sum", result="success") < 2, "two passes' computing time"
    # Prometheus' default buckets, in seconds, as Kueue's: each pass falls in one of the first ones.
    buckets = {ls["le"]: v for n, ls, v in samples if n == "admitflow_admission_attempt_duration_seconds_bucket"}
    assert list(buckets) == [f"{b:g}" for b in metrics.DEFAULT_BUCKETS] + ["+Inf"]
    assert buckets["0.5"] == 2, buckets
    assert value(samples, "admitflow_evicted_workloads_once_total", reason="AdmissionCheck", underlying_cause="", **cq) == 1
    assert value(samples, "admitflow_ready_wait_time_seconds_count", **cq) == 1, "its pods were reported ready"
    assert value(samples, "admitflow_admitted_until_ready_wait_time_seconds_count", **cq) == 1
    budget = {"admission_check": "budget", **cq}
    assert value(samples, "admitflow_admission_check_verdicts_total", state="Retry", outcome="applied", **budget) == 1
    assert value(samples, "admitflow_admission_check_verdicts_total", state="Ready", outcome="applied", **budget) == 1
    assert value(samples, "admitflow_admission_check_verdicts_total") == 2
    assert value(samples, "admitflow_admission_check_wait_time_seconds_count", **budget) == 2, "each attempt, asked to answered"
    lq = {"name": "lq", "namespace": "default"}
    for name in metrics.LOCAL_QUEUE_TWINS:
        family = name if name.endswith("_total") else name + "_count"
        assert value(samples, "admitflow_local_queue_" + family, **lq) == value(samples, "admitflow_" + family, **cq) > 0, name
    assert gauge_series(samples) == [], "a worker serves no gauge: the exporter does"


GAUGE_TASK_QUEUE = "gauges"


async def test_two_workers_the_gauges_are_the_queues_current_figures_served_once(engine):
    """Worker A runs the queue first, then stops; worker B runs it from then on. A's endpoint stays
    up, as a live worker's does after its cache lets the queue go to another worker."""
    ports = {"a": free_port(), "b": free_port(), "exporter": free_port()}
    clients = {
        w: await Client.connect(
            engine.address, namespace=engine.namespace, data_converter=DATA_CONVERTER, runtime=metrics_runtime(ports[w])
        )
        for w in ("a", "b")
    }
    af = AdmitflowClient(clients["a"], GAUGE_TASK_QUEUE)

    async def read(w: str):
        # From a thread: the exporter collects on this test's event loop.
        return await asyncio.to_thread(scrape, ports[w])

    async def scrape_all():
        return [await read(w) for w in ("a", "b", "exporter")]

    async def admitted(name: str) -> bool:
        report = await af.workload(f"default/{name}", missing_ok=True)
        return report is not None and wl.phase(WorkloadState(workload=report)) == "Admitted"

    async with gauges.serving(engine.client, ports["exporter"]):
        async with build_worker(clients["a"], GAUGE_TASK_QUEUE):
            await af.apply(loaded(
                flavor_manifest(), cluster_queue_manifest(quotas={"default": {"cpu": "2"}}), local_queue_manifest(),
                cluster_queue_manifest("idle"), workload_manifest("first"),
            ))
            await eventually(lambda: admitted("first"), timeout=30)
            a_ran = figures(gauge_series(*await scrape_all()), "cq")

        # No worker runs the engine now: the exporter still reads the memos (no query waits for a
        # worker), and serves what the queues last wrote, once, until no worker has polled their task
        # queue for client.SERVED_WITHIN (then the queues are down: tests/unit/test_gauges.py).
        stopped = await read("exporter")
        assert figures(gauge_series(stopped), "cq")[("exporter_cluster_queue_up", "")] == 1

        async with build_worker(clients["b"], GAUGE_TASK_QUEUE):
            await af.apply(loaded(workload_manifest("second")))
            await eventually(lambda: admitted("second"), timeout=45)
            await af.apply(loaded(workload_manifest("third")))

            expected = {
                ("pending_workloads", "active"): 0,
                ("pending_workloads", "inadmissible"): 1,  # third: no room left
                ("reserving_active_workloads", ""): 2,
                ("admitted_active_workloads", ""): 2,
                ("cluster_queue_status", "pending"): 0,
                ("cluster_queue_status", "active"): 1,
                ("cluster_queue_status", "terminating"): 0,
                ("exporter_cluster_queue_up", ""): 1,
            }

            async def current():
                s = await read("exporter")
                return s if figures(gauge_series(s), "cq") == expected else None

            await eventually(current, timeout=30)
            a, b, exporter = await scrape_all()
            series = gauge_series(a, b, exporter)
            once = Counter((n, ls) for n, ls, _ in series)
            assert [k for k, n in once.items() if n > 1] == [], f"served more than once (A ran it with {a_ran})"
            assert figures(series, "cq") == expected
            more = {(n.removeprefix(metrics.PREFIX), ls): v for n, ls, v in series if n not in CQ_GAUGES}
            res = (("cluster_queue", "cq"), ("cohort", ""), ("flavor", "default"), ("resource", "cpu"))
            assert more[("cluster_queue_resource_reservation", res)] == 2.0, "two 1-cpu workloads, in cores"
            assert more[("cluster_queue_resource_usage", res)] == 2.0
            (cause,) = [ls for n, ls in more if n == "unadmitted_workloads" and dict(ls)["cluster_queue"] == "cq"]
            assert dict(cause)["reason"] == "NoReservation" and more[("unadmitted_workloads", cause)] == 1, "third"
            lq = (("name", "lq"), ("namespace", "default"))
            assert more[("local_queue_reserving_active_workloads", lq)] == 2
            assert more[("local_queue_admitted_active_workloads", lq)] == 2
            assert more[("local_queue_pending_workloads", lq + (("status", "inadmissible"),))] == 1
            assert more[("local_queue_status", (("active", "True"),) + lq)] == 1
            assert more[("local_queue_resource_reservation", (("flavor", "default"),) + lq + (("resource", "cpu"),))] == 2.0
            assert figures(series, "idle")[("reserving_active_workloads", "")] == 0
            # Counters are counted where each event happened: their sum over workers is right.
            cq = {"cluster_queue": "cq"}
            assert value(a, "admitflow_admitted_workloads_total", **cq) == 1, "first, on A"
            assert value(a, "admitflow_admitted_workloads_total", **cq) + value(b, "admitflow_admitted_workloads_total", **cq) == 2

            await af.delete("ClusterQueue", "cq")

            async def gone():
                s = await read("exporter")
                return s if not figures(gauge_series(s), "cq") and figures(gauge_series(s), "idle") else None

            await eventually(gone, timeout=20)
            series = gauge_series(*await scrape_all())
            assert figures(series, "cq") == {}, "a deleted ClusterQueue's series end, on every endpoint"
            assert figures(series, "idle")[("cluster_queue_status", "active")] == 1


def listening(pid: int) -> set[tuple[str, int]]:
    """The (address, port) of every TCP socket process `pid` listens on, read from /proc."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A" or fields[9] not in inodes:  # 0A: LISTEN
                continue
            address, port = fields[1].split(":")
            raw = bytes.fromhex(address)
            # /proc writes the address in 32-bit words of the host's byte order.
            words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
            found.add((str(ipaddress.ip_address(words)), int(port, 16)))
    return found


def test_dev_serves_every_metric_on_its_port_and_the_sdks_own_port_on_loopback_only(tmp_path):
    """`admitflow dev --metrics-port` reads the SDK's metrics from a port of their own, which only
    it needs: that one listens on 127.0.0.1, and --metrics-port (scraped from elsewhere) on every
    interface."""
    port, ui_port, metrics_port = free_port(), free_port(), free_port()
    proc = subprocess.Popen(
        [ADMITFLOW, "dev", "--port", str(port), "--ui-port", str(ui_port), "--db", str(tmp_path / "t.db"),
         "--metrics-port", str(metrics_port)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line.rstrip())
            if "Ctrl-C stops" in line:
                break
        assert any("Ctrl-C stops" in ln for ln in lines), lines
        queues = yaml.safe_dump_all([flavor_manifest(), cluster_queue_manifest()])
        applied = subprocess.run([ADMITFLOW, "apply", "-f", "-", "--address", f"127.0.0.1:{port}"], input=queues,
                                 capture_output=True, text=True, timeout=60)
        assert applied.returncode == 0, applied.stderr
        deadline = time.monotonic() + 30
        while True:
            with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=15) as resp:
                text = resp.read().decode()
            if f'{gauges.UP}{{cluster_queue="cq"}} 1' in text or time.monotonic() > deadline:  # once its memo is written
                break
            time.sleep(0.5)
        assert "temporal_worker_task_slots_available{" in text and f'{gauges.UP}{{cluster_queue="cq"}} 1' in text, (
            "the SDK's metrics and the gauges, on one port"
        )
        sockets = listening(proc.pid)
        assert ("0.0.0.0", metrics_port) in sockets
        others = {s for s in sockets if s[1] != metrics_port}
        assert others and all(ipaddress.ip_address(a).is_loopback for a, _ in others), sockets
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0
