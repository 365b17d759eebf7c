"""Metrics on a worker's Prometheus endpoint, scraped after a run and checked against what
happened: a workload admitted after one Retry of its check, then finished."""

from __future__ import annotations

import re
import urllib.request

from temporalio.client import Client

from admitflow.client import AdmitflowClient
from admitflow.codec import DATA_CONVERTER
from admitflow.controller import Controller, ready, retry
from tests.builders import cluster_queue_manifest, flavor_manifest, local_queue_manifest, workload_manifest
from tests.conftest import free_port
from tests.integration.test_admission import eventually, loaded
from admitflow.worker.main import build_worker, metrics_runtime

TASK_QUEUE = "metrics"  # its own: the engine fixture's worker serves the default one in this namespace
SAMPLE = re.compile(r'^(?P<name>[a-z_]+)(?:\{(?P<labels>[^}]*)\})? (?P<value>\S+)$')


def scrape(port: int) -> list[tuple[str, dict[str, str], float]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    samples = []
    for line in text.splitlines():
        m = SAMPLE.match(line)
        if m and m["name"].startswith("admitflow_"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m["labels"] or ""))
            samples.append((m["name"], labels, float(m["value"])))
    return samples


def value(samples, name: str, **labels: str) -> float:
    """The sum of a metric's samples whose labels include these."""
    return sum(v for n, ls, v in samples if n == name and all(ls.get(k) == x for k, x in labels.items()))


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
        await af.finish("default/job")

        async def settled():
            s = scrape(port)
            return s if value(s, "admitflow_finished_workloads_total") and value(
                s, "admitflow_reserving_active_workloads", cluster_queue="cq") == 0 else None

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
    assert value(samples, "admitflow_admitted_active_workloads", **cq) == 0
    assert value(samples, "admitflow_pending_workloads", status="active", **cq) == 0
    assert value(samples, "admitflow_cluster_queue_status", status="active", **cq) == 1
