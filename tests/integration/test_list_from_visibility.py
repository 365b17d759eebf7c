"""Lists read from visibility alone (admitflow/visibility.py) on a real dev server: each filter,
kubectl's label selectors as Temporal evaluates them, finished workloads kept and deleted ones
left out, a workload applied again after it finished shown once, `updated_since` for `get -w`,
and no workflow asked: the rows are read after the engine's worker has stopped, when a query
could only time out."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest
from temporalio.client import Client

from admitflow import visibility
from admitflow.client import AdmitflowClient
from admitflow.codec import DATA_CONVERTER
from admitflow.worker.main import build_worker
from tests.builders import cluster_queue_manifest, flavor_manifest, local_queue_manifest, workload_manifest
from tests.integration.test_admission import eventually, loaded

pytestmark = pytest.mark.integration

TASK_QUEUE = "visibility"

# name -> (namespace, labels, cpu); cq has 4 cpu, so "big" (5 cpu) waits and the rest are admitted.
WORKLOADS = {
    "a1": ("team-a", {"team": "a", "tier": "gold"}, "1"),
    "a2": ("team-a", {"team": "a"}, "1"),
    "b1": ("team-b", {"team": "b", "tier": "silver"}, "1"),
    "big": ("team-b", {"gpu": ""}, "5"),
}


def manifest(name: str) -> dict:
    namespace, labels, cpu = WORKLOADS[name]
    doc = workload_manifest(name, cpu=cpu, namespace=namespace)
    doc["metadata"]["labels"] = labels
    return doc


def names(rows: list[dict]) -> list[str]:
    return [r["metadata"]["name"] for r in rows]


async def phase_is(af: AdmitflowClient, key: str, phase: str) -> bool:
    rows = await af.workload_rows(namespace=key.split("/")[0], name=key.split("/")[1])
    return [r["phase"] for r in rows] == [phase]


async def test_lists_come_from_visibility_with_every_filter(engine):
    client = await Client.connect(engine.address, namespace=engine.namespace, data_converter=DATA_CONVERTER)
    af = AdmitflowClient(client, TASK_QUEUE)
    async with build_worker(client, TASK_QUEUE):
        queues = [local_queue_manifest(namespace=ns) for ns in ("team-a", "team-b")]
        await af.apply(loaded(flavor_manifest(), cluster_queue_manifest(), *queues, *(manifest(n) for n in WORKLOADS)))
        for name, phase in (("a1", "Admitted"), ("a2", "Admitted"), ("b1", "Admitted"), ("big", "Pending")):
            await eventually(lambda: phase_is(af, f"{WORKLOADS[name][0]}/{name}", phase), timeout=30)
        # a2 finishes, b1 is deleted; a1 finishes and is applied again: its new run is the one shown.
        await af.finish("team-a/a2")
        await af.delete("Workload", "team-b/b1")
        await af.finish("team-a/a1")
        await eventually(lambda: phase_is(af, "team-a/a2", "Finished"), timeout=30)
        await eventually(lambda: phase_is(af, "team-a/a1", "Finished"), timeout=30)
        await eventually(lambda: _gone(af, "team-b/b1"), timeout=30)
        await asyncio.sleep(1.5)  # apart from every earlier change, on the server's clock too
        before_reapply = datetime.now(UTC)
        await af.apply(loaded(manifest("a1")))
        await eventually(lambda: phase_is(af, "team-a/a1", "Admitted"), timeout=30)

    # The worker has stopped: a query would now time out, so every read below is visibility's.
    async def listed(**filters) -> list[str]:
        return names(await asyncio.wait_for(af.workload_rows(**filters), timeout=5))

    assert await listed() == ["a1", "a2", "big"]
    assert await listed(namespace="team-a") == ["a1", "a2"]
    assert await listed(namespace="team-b") == ["big"]
    assert await listed(namespace="team") == []  # a prefix of a namespace is not that namespace
    assert await listed(local_queue="lq") == ["a1", "a2", "big"]
    assert await listed(phase="Finished") == ["a2"]
    assert await listed(phase="Admitted", cluster_queue="cq") == ["a1"]
    assert await listed(label_selector="team=a") == ["a1", "a2"]
    assert await listed(label_selector="team!=a") == ["big"]
    assert await listed(label_selector="tier in (gold,silver)") == ["a1"]
    assert await listed(label_selector="tier notin (gold)") == ["a2", "big"]
    assert await listed(label_selector="gpu") == ["big"]
    assert await listed(label_selector="!gpu,team") == ["a1", "a2"]
    assert await listed(updated_since=before_reapply) == ["a1"]

    rows = {r["metadata"]["name"]: r for r in await af.workload_rows()}
    assert rows["a1"]["status"]["admission"] == {"clusterQueue": "cq"}
    assert rows["a1"]["metadata"]["labels"] == {"team": "a", "tier": "gold"}
    assert rows["a1"]["metadata"]["creationTimestamp"] >= before_reapply.replace(microsecond=0).isoformat().replace("+00:00", "Z")
    assert rows["big"]["spec"]["queueName"] == "lq" and "admission" not in rows["big"]["status"]
    # Every selector Temporal evaluated selects what labels_match selects (catalog kinds use it).
    for selector in ("team=a", "team!=a", "tier in (gold,silver)", "tier notin (gold)", "gpu", "!gpu,team"):
        expected = [n for n in sorted(rows) if visibility.labels_match(visibility.parse_selector(selector), rows[n]["metadata"].get("labels", {}))]
        assert await listed(label_selector=selector) == expected, selector


async def _gone(af: AdmitflowClient, key: str) -> bool:
    return not await af.workload_rows(namespace=key.split("/")[0], name=key.split("/")[1])
