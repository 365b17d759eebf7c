"""WaitForPodsReady (KEP-1282, docs/pods-ready.md) on the time-skipping server: timeouts as durable
timers, the requeue backoff and its limit, the queue order after a timeout, recovery timeouts, and
blockAdmission across ClusterQueues. The histories they wrote are replayed against the current code."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from admitflow import ids
from tests.builders import (
    cluster_queue_manifest,
    configuration_manifest,
    flavor_manifest,
    local_queue_manifest,
    workload_manifest,
)
from tests.workflows.test_lifecycle import loaded, phase_of, replay_all, until_phase, until_reason

TIMEOUT = timedelta(minutes=10)


async def setup(engine, *workloads: str, cpu: str = "4", **wait_for_pods_ready) -> None:
    """One ClusterQueue with room for one 4-cpu workload, and these workloads submitted in order."""
    af = engine.admitflow
    await af.apply(
        loaded(
            configuration_manifest(timeout="10m", **wait_for_pods_ready),
            flavor_manifest(), cluster_queue_manifest(), local_queue_manifest(),
        )
    )
    for name in workloads:
        await af.apply(loaded(workload_manifest(name, cpu=cpu)))


async def sleep_until(env, at, after: timedelta = timedelta(seconds=1)) -> None:
    """Skip time to `after` past `at` (the test server's clock is the one workflows see)."""
    await env.sleep(at + after - await env.get_current_time())


async def until_timed_out(env, engine, name: str, phase: str = "Backoff") -> None:
    """Skip time just past the PodsReady timeout of the current admission."""
    admitted = (await engine.admitflow.workload(f"default/{name}")).status.condition("Admitted")
    await sleep_until(env, admitted.last_transition_time + TIMEOUT)
    await until_phase(engine, name, phase)


async def requeue_state(engine, name: str):
    report = await engine.admitflow.workload(f"default/{name}")
    return report.status.requeue_state, report.status.condition("Evicted")


async def test_timeouts_requeue_after_60_120_240s_then_the_limit_deactivates_and_activation_restarts_the_count(
    skipping_env, skipping_engine
):
    engine = skipping_engine
    af = engine.admitflow
    await setup(engine, "job", requeuingStrategy={"backoffLimitCount": 3})
    await until_phase(engine, "job", "Admitted")
    for n, delay in ((1, 60), (2, 120), (3, 240)):
        await until_timed_out(skipping_env, engine, "job")
        rs, evicted = await requeue_state(engine, "job")
        assert (evicted.reason, evicted.message) == ("PodsReadyTimeout", "Exceeded the PodsReady timeout default/job")
        assert (rs.count, rs.requeue_at - evicted.last_transition_time) == (n, timedelta(seconds=delay))
        await sleep_until(skipping_env, rs.requeue_at, -timedelta(seconds=2))
        assert await phase_of(engine, "job") == "Backoff", "still backing off 2 s before requeueAt"
        await sleep_until(skipping_env, rs.requeue_at)
        await until_phase(engine, "job", "Admitted")

    # Admitted backoffLimitCount + 1 = 4 times: the 4th timeout deactivates instead of requeueing.
    await until_timed_out(skipping_env, engine, "job", "Inactive")
    report = await af.workload("default/job")
    evicted = report.status.condition("Evicted")
    assert (evicted.reason, evicted.message) == (
        "DeactivatedDueToRequeuingLimitExceeded",
        "The workload is deactivated due to exceeding the maximum number of re-queuing retries",
    )
    assert report.status.requeue_state is None
    evictions = {(e.reason, e.underlying_cause): e.count for e in report.status.scheduling_stats.evictions}
    assert evictions == {("PodsReadyTimeout", "WaitForStart"): 3, ("Deactivated", "RequeuingLimitExceeded"): 1}

    await af.activate("default/job")
    await until_phase(engine, "job", "Admitted")
    await until_timed_out(skipping_env, engine, "job")
    rs, evicted = await requeue_state(engine, "job")
    assert (rs.count, rs.requeue_at - evicted.last_transition_time) == (1, timedelta(seconds=60)), "the count restarted"
    await replay_all(engine, [ids.workload_id("default/job"), ids.cluster_queue_id("cq")])


async def test_backoff_limit_timeout_deactivates_at_the_first_timeout_an_hour_after_the_first(skipping_env, skipping_engine):
    """Kueue's requeuingStrategy.backoffLimitTimeout over hours: each admission times out after 10
    minutes and backs off 60 s, 120 s, 240 s...; the timeout at least an hour after the first
    deactivates the workload, long before backoffLimitCount would."""
    engine = skipping_engine
    af = engine.admitflow
    await setup(engine, "job", requeuingStrategy={"backoffLimitCount": 100, "backoffLimitTimeout": "1h"})
    await until_phase(engine, "job", "Admitted")
    first = None
    for _ in range(10):
        await until_timed_out(skipping_env, engine, "job", phase="Backoff")
        rs, evicted = await requeue_state(engine, "job")
        first = first or evicted.last_transition_time
        assert rs.first_evicted_at == first, "the clock starts at the first eviction"
        await sleep_until(skipping_env, rs.requeue_at)
        await until_phase(engine, "job", "Admitted")
        admitted = (await af.workload("default/job")).status.condition("Admitted").last_transition_time
        if admitted + TIMEOUT - first >= timedelta(hours=1):
            break
    await until_timed_out(skipping_env, engine, "job", "Inactive")
    evicted = (await af.workload("default/job")).status.condition("Evicted")
    assert (evicted.reason, evicted.message) == (
        "DeactivatedDueToRequeuingLimitExceeded", "exceeding the maximum time 1h0m0s for re-queuing retries"
    )
    assert evicted.last_transition_time - first >= timedelta(hours=1)
    await replay_all(engine, [ids.workload_id("default/job"), ids.cluster_queue_id("cq")])


async def test_a_ready_workload_is_not_timed_out(skipping_env, skipping_engine):
    engine = skipping_engine
    await setup(engine, "job")
    await until_phase(engine, "job", "Admitted")
    # A report that is not valid is recorded and changes nothing.
    handle = engine.client.get_workflow_handle(ids.workload_id("default/job"))
    await handle.signal("set_pods_ready", {"ready": True, "reason": "WaitForStart"})
    for _ in range(100):
        report = await engine.admitflow.workload("default/job")
        if any(e.reason == "InvalidPodsReadyReport" for e in report.events):
            break
        await asyncio.sleep(0.05)
    assert [(e.type, e.reason, e.message) for e in report.events if e.reason == "InvalidPodsReadyReport"] == [
        ("Warning", "InvalidPodsReadyReport",
         "invalid pods-ready report: reason 'WaitForStart' with ready=true: use Started or Recovered")
    ]
    assert report.status.condition("PodsReady").reason == "WaitForStart"
    await engine.admitflow.pods_ready("default/job")
    await skipping_env.sleep(TIMEOUT * 3)
    await until_phase(engine, "job", "Admitted")
    pods = (await engine.admitflow.workload("default/job")).status.condition("PodsReady")
    assert (pods.status, pods.reason, pods.message) == ("True", "Started", "All pods reached readiness and the workload is running")


@pytest.mark.parametrize(("timestamp", "order"), [("Eviction", ["w1", "w2", "w3", "w1"]), ("Creation", ["w1", "w2", "w1", "w3"])])
async def test_after_a_timeout_eviction_sends_the_workload_behind_later_ones_and_creation_keeps_it_first(
    skipping_env, skipping_engine, timestamp, order
):
    engine = skipping_engine
    af = engine.admitflow
    await setup(engine, requeuingStrategy={"timestamp": timestamp})
    for name in ("w1", "w2", "w3"):
        await af.apply(loaded(workload_manifest(name, cpu="4")))
        await skipping_env.sleep(timedelta(seconds=1))  # creation times one second apart
    admitted = ["w1"]
    await until_phase(engine, "w1", "Admitted")
    # w1 never gets ready: it times out, backs off 60 s, and w2 takes the quota meanwhile.
    await until_timed_out(skipping_env, engine, "w1")
    await until_phase(engine, "w2", "Admitted")
    admitted.append("w2")
    await af.pods_ready("default/w2")
    rs, _ = await requeue_state(engine, "w1")
    await sleep_until(skipping_env, rs.requeue_at)
    await until_phase(engine, "w1", "Pending")  # back in the queue, beside w3
    for _ in range(2):
        await af.finish(f"default/{admitted[-1]}")
        first = await _next_admitted(engine, {"w1", "w3"} - set(admitted[2:]))
        admitted.append(first)
        await af.pods_ready(f"default/{first}")
    assert admitted == order
    await replay_all(engine, [ids.workload_id(f"default/{n}") for n in ("w1", "w2", "w3")] + [ids.cluster_queue_id("cq")])


async def _next_admitted(engine, candidates: set[str]) -> str:
    for _ in range(100):
        phases = {n: await phase_of(engine, n) for n in candidates}
        admitted = [n for n, p in phases.items() if p == "Admitted"]
        if admitted:
            assert len(admitted) == 1, phases
            return admitted[0]
        await asyncio.sleep(0.05)
    raise AssertionError(f"none of {sorted(candidates)} was admitted")


async def test_a_recovery_timeout_evicts_a_workload_whose_pods_stay_down(skipping_env, skipping_engine):
    engine = skipping_engine
    af = engine.admitflow
    await setup(engine, "job", recoveryTimeout="3m")
    await until_phase(engine, "job", "Admitted")
    await af.pods_ready("default/job")
    # Down, then up again within the recovery timeout: Recovered, not evicted.
    await af.pods_ready("default/job", ready=False)
    await skipping_env.sleep(timedelta(minutes=2))
    await af.pods_ready("default/job")
    await skipping_env.sleep(TIMEOUT)
    pods = (await af.workload("default/job")).status.condition("PodsReady")
    assert (pods.status, pods.reason) == ("True", "Recovered")
    # Down for longer than the recovery timeout (far less than the 10m start timeout): evicted.
    await af.pods_ready("default/job", ready=False)
    report = await af.workload("default/job")
    pods = report.status.condition("PodsReady")
    assert (pods.status, pods.reason, pods.message) == ("False", "WaitForRecovery", "At least one pod has failed, waiting for recovery")
    await skipping_env.sleep(timedelta(minutes=3, seconds=1))
    await until_phase(engine, "job", "Backoff")
    report = await af.workload("default/job")
    assert report.status.condition("Evicted").reason == "PodsReadyTimeout"
    evictions = {(e.reason, e.underlying_cause): e.count for e in report.status.scheduling_stats.evictions}
    assert evictions == {("PodsReadyTimeout", "WaitForRecovery"): 1}
    pods = report.status.condition("PodsReady")
    assert (pods.status, pods.reason) == ("False", "WaitForStart"), "evicted: its pods are gone"
    await replay_all(engine, [ids.workload_id("default/job")])


async def test_block_admission_holds_a_second_cluster_queue_until_the_first_workload_is_ready(skipping_env, skipping_engine):
    """Both ClusterQueues have room; their workloads arrive together. The gate lets exactly one be
    admitted, the other waits with Kueue's reason until that one is ready."""
    engine = skipping_engine
    af = engine.admitflow
    await af.apply(
        loaded(
            configuration_manifest(blockAdmission=True), flavor_manifest(),
            cluster_queue_manifest("cq-a"), cluster_queue_manifest("cq-b"),
            local_queue_manifest("lq-a", "cq-a"), local_queue_manifest("lq-b", "cq-b"),
        )
    )
    await af.apply(loaded(workload_manifest("a", queue="lq-a"), workload_manifest("b", queue="lq-b")))
    first = await _next_admitted(engine, {"a", "b"})
    second = ({"a", "b"} - {first}).pop()
    await until_reason(engine, second, "WaitingForPodsReady")
    report = await af.workload(f"default/{second}")
    assert report.status.condition("QuotaReserved").message == "waiting for all admitted workloads to be in PodsReady condition"
    await skipping_env.sleep(timedelta(minutes=5))
    assert await _phases(engine) == {first: "Admitted", second: "Pending"}, "still held while the first is not ready"

    await af.pods_ready(f"default/{first}")
    await until_phase(engine, second, "Admitted")
    # The second is not ready either: a third workload waits for it in turn.
    await af.apply(loaded(workload_manifest("c", queue="lq-a")))
    await until_reason(engine, "c", "WaitingForPodsReady")
    await af.finish(f"default/{second}")
    await until_phase(engine, "c", "Admitted")
    await replay_all(
        engine,
        [ids.PODS_READY_GATE_ID, ids.cluster_queue_id("cq-a"), ids.cluster_queue_id("cq-b")]
        + [ids.workload_id(f"default/{n}") for n in ("a", "b", "c")],
    )


async def _phases(engine) -> dict[str, str]:
    return {n: await phase_of(engine, n) for n in ("a", "b")}


async def test_a_changed_timeout_reaches_workloads_already_admitted(skipping_env, skipping_engine):
    engine = skipping_engine
    await setup(engine, "job")
    await until_phase(engine, "job", "Admitted")
    await engine.admitflow.apply(loaded(configuration_manifest(timeout="2m")))
    admitted = (await engine.admitflow.workload("default/job")).status.condition("Admitted")
    await sleep_until(skipping_env, admitted.last_transition_time + timedelta(minutes=2))
    await until_phase(engine, "job", "Backoff")
    await replay_all(engine, [ids.workload_id("default/job"), ids.cluster_queue_id("cq"), ids.CATALOG_ID])
