"""Cohorts on the real dev server, through `admitflow apply` and the CLI: one entity schedules a
whole cohort tree, queues borrow and reclaim, and a ClusterQueue moved into, out of and between
cohorts keeps what it holds and its queue."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from temporalio.api.enums.v1 import EventType
from temporalio.service import RPCError

from admitflow import contract, ids
from admitflow.admission.protocol import ClusterQueueReport, StatusQuery
from tests.builders import cluster_queue_manifest, flavor_manifest, local_queue_manifest, workload_manifest
from tests.integration.test_admission import _is, _reason, eventually, loaded
from tests.integration.test_cli import run, until

pytestmark = pytest.mark.integration

DATA = Path(__file__).resolve().parents[1] / "data" / "kueue-examples"


def queue(name: str, cpu: str = "4", cohort: str | None = None, **spec) -> dict:
    manifest = cluster_queue_manifest(name, quotas={"default": {"cpu": cpu}}, **spec)
    if cohort is not None:
        manifest["spec"]["cohortName"] = cohort
    return manifest


def cohort(name: str, parent: str | None = None, **spec) -> dict:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Cohort", "metadata": {"name": name},
        "spec": {**({"parentName": parent} if parent else {}), **spec},
    }


async def held(af, cq: str) -> tuple[list[str], list[str]]:
    """(reserving, pending) workload names of a ClusterQueue, wherever its state is."""
    report = await af.cluster_queue_report(cq, StatusQuery())
    return sorted(r.name for r in report.reserving), [p.name for p in report.pending]


async def scheduled_by(engine, cq: str) -> str:
    """The workflow holding the queue's state: its home, or the cohort tree the home points to."""
    home = await engine.client.get_workflow_handle(ids.cluster_queue_id(cq)).query(
        contract.CLUSTER_QUEUE_STATUS, StatusQuery(limit=0), result_type=ClusterQueueReport
    )
    return home.moved_to or ids.cluster_queue_id(cq)


async def test_a_queue_moved_into_out_of_and_between_cohorts_keeps_its_reservations_and_its_queue(engine):
    af = engine.admitflow
    await af.apply(loaded(flavor_manifest(), queue("cq-a"), local_queue_manifest("lq-a", "cq-a")))
    # One after the other: workloads created in the same second are ordered by their random UIDs.
    await af.apply(loaded(workload_manifest("a1", cpu="3", queue="lq-a")))
    await eventually(lambda: _is(engine, "a1", "Admitted"))
    await af.apply(loaded(workload_manifest("a2", cpu="3", queue="lq-a")))
    await eventually(lambda: _equals(held(af, "cq-a"), (["a1"], ["a2"])))
    assert await held(af, "cq-a") == (["a1"], ["a2"])

    # Into a cohort whose other queue lends nothing: the state moves to the tree, and nothing else.
    await af.apply(loaded(queue("cq-a", cohort="team"), queue("cq-b", cpu="0", cohort="team")))
    await eventually(lambda: _equals(scheduled_by(engine, "cq-a"), ids.cohort_id("team")))
    assert await held(af, "cq-a") == (["a1"], ["a2"])

    # Under another root: recalled home, handed to the new tree, still the same.
    await af.apply(loaded(cohort("team", parent="org")))
    await eventually(lambda: _equals(scheduled_by(engine, "cq-a"), ids.cohort_id("org")))
    assert await held(af, "cq-a") == (["a1"], ["a2"])

    # Quota freed in the tree admits the queue's next workload there.
    await af.finish("default/a1")
    await eventually(lambda: _is(engine, "a2", "Admitted"))

    # Out of every cohort: home again, holding a2.
    await af.apply(loaded(queue("cq-a")))
    await eventually(lambda: _equals(scheduled_by(engine, "cq-a"), ids.cluster_queue_id("cq-a")))
    assert await held(af, "cq-a") == (["a2"], [])
    await af.apply(loaded(workload_manifest("a3", cpu="1", queue="lq-a")))
    await eventually(lambda: _is(engine, "a3", "Admitted"))


async def _equals(got, want) -> bool:
    return (await got) == want


COHORT_YAML = """\
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: default}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: team-a}
spec:
  cohort: research
  namespaceSelector: {}
  preemption: {reclaimWithinCohort: Any}
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{name: default, resources: [{name: cpu, nominalQuota: 4}]}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: team-b}
spec:
  cohort: research
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{name: default, resources: [{name: cpu, nominalQuota: 4, borrowingLimit: 3}]}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: lq-a, namespace: default}
spec: {clusterQueue: team-a}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: lq-b, namespace: default}
spec: {clusterQueue: team-b}
"""


async def _told(af, key: str, words: str):
    """The workload's QuotaReserved condition once its message says `words`."""
    report = await af.workload(key)
    reserved = next((c for c in report.status.conditions if c.type == "QuotaReserved"), None)
    return reserved if reserved is not None and words in reserved.message else None


def dump(path, *manifests: dict) -> str:
    path.write_text(yaml.safe_dump_all(manifests))
    return str(path)


async def test_a_queue_borrows_its_cohorts_idle_quota_and_the_lender_reclaims_it(engine, tmp_path):
    """Kueue's scheduler integration tests "Should admit workloads using borrowed quota" and
    "Should preempt a borrowing workload to reclaim quota", through the CLI: team-b borrows team-a's
    idle cpu up to its borrowingLimit, shows it as borrowed, and gives it back when team-a needs it."""
    af = engine.admitflow
    (tmp_path / "setup.yaml").write_text(COHORT_YAML)
    assert (await run(engine, "apply", "-f", str(tmp_path / "setup.yaml"))).returncode == 0

    # 8 cpu is more than team-b's 4 + borrowingLimit 3: it can never fit; 6 borrows 2.
    b = dump(tmp_path / "b.yaml", workload_manifest("too-big", cpu="8", queue="lq-b"), workload_manifest("b1", cpu="6", queue="lq-b"))
    assert (await run(engine, "apply", "-f", b)).returncode == 0
    await eventually(lambda: _is(engine, "b1", "Admitted"))
    # Evaluated before team-b joined its cohort, too-big was told 4; the cohort's pass tells it again.
    reserved = await eventually(lambda: _told(af, "default/too-big", "maximum capacity (7)"))
    assert reserved.reason == "ExceedsMaxQuota"
    described = await until(engine, lambda r: "Borrowed" in r.stdout or "borrowed" in r.stdout, "get", "clusterqueue", "team-b", "-o", "yaml")
    status = yaml.safe_load(described.stdout)["status"]
    [cpu] = status["flavorsReservation"][0]["resources"]
    assert (cpu["total"], cpu["borrowed"]) == ("6", "2")

    # team-a wants its own 4 cpu back: b1 is preempted for reclamation, a1 admitted.
    a = dump(tmp_path / "a.yaml", workload_manifest("a1", cpu="4", queue="lq-a"))
    assert (await run(engine, "apply", "-f", a)).returncode == 0
    await eventually(lambda: _is(engine, "a1", "Admitted"))
    a1, b1 = await af.workload("default/a1"), await af.workload("default/b1")
    preempted = next(c for c in b1.status.conditions if c.type == "Preempted")
    assert (preempted.status, preempted.reason) == ("True", "InCohortReclamation")
    assert preempted.message == (
        f"Preempted to accommodate a workload (UID: {a1.metadata.uid}, JobUID: UNKNOWN) due to reclamation "
        "within the cohort; preemptor path: /research/team-a; preemptee path: /research/team-b"
    )
    # b1 waits until team-a gives the quota back.
    await af.finish("default/a1")
    await eventually(lambda: _is(engine, "b1", "Admitted"))


async def test_with_fair_sharing_queues_and_cohorts_report_their_weighted_shares(engine, tmp_path):
    """Kueue's fair-sharing status on ClusterQueues and Cohorts: research (team-a and team-b, 8 cpu)
    sits under org beside bank, a Cohort holding 2 cpu of its own."""
    af = engine.admitflow
    config = {"apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
              "fairSharing": {"preemptionStrategies": ["LessThanOrEqualToFinalShare", "LessThanInitialShare"]}}
    tree = [cohort("research", "org"), cohort("bank", "org", resourceGroups=[
        {"coveredResources": ["cpu"], "flavors": [{"name": "default", "resources": [{"name": "cpu", "nominalQuota": "2"}]}]},
    ])]
    setup = dump(tmp_path / "setup.yaml", config, *yaml.safe_load_all(COHORT_YAML), *tree)
    assert (await run(engine, "apply", "-f", setup)).returncode == 0
    await af.apply(loaded(workload_manifest("b1", cpu="6", queue="lq-b")))
    await eventually(lambda: _is(engine, "b1", "Admitted"))
    await af.apply(loaded(workload_manifest("a1", cpu="4", queue="lq-a")))
    await eventually(lambda: _is(engine, "a1", "Admitted"))

    async def share(kind: str, name: str) -> int:
        got = yaml.safe_load((await run(engine, "get", kind, name, "-o", "yaml")).stdout)
        return got["status"]["fairSharing"]["weightedShare"]

    # team-b borrows 2 of the 10 cpu research can be lent (its own 8 and bank's 2): 200 per mille,
    # weight 1; team-a uses its own 4. research uses 10 of its 8: it borrows 2 of org's 10.
    assert {cq: await share("clusterqueue", cq) for cq in ("team-a", "team-b")} == {"team-a": 0, "team-b": 200}
    assert {c: await share("cohort", c) for c in ("research", "bank")} == {"research": 200, "bank": 0}
    described = await run(engine, "describe", "cohort", "research")
    assert described.returncode == 0 and re.search(r"Weighted Share:\s+200$", described.stdout, re.M), described.stdout


@pytest.mark.parametrize("version", ["v1beta1", "v1beta2"])
async def test_kueues_cohort_quota_sample_lends_the_cohorts_own_quota(engine, version):
    """Kueue's "Configuring Quotas" sample, unmodified: a Cohort holding 12 cpu of its own, and a
    ClusterQueue with none. A queue of ours in that cohort (the sample's queue selects no namespace,
    as Kueue reads a missing namespaceSelector) borrows the Cohort's quota, and no more."""
    from admitflow.api.loader import load_manifests

    af = engine.admitflow
    sample = load_manifests([str(DATA / version / "cohort-quotas.yaml")])
    ours = queue("ours", cpu="0", cohort="hello-cohort", namespaceSelector={})
    ours["spec"]["resourceGroups"][0]["flavors"][0]["name"] = "default-flavor"
    await af.apply([*sample, *loaded(flavor_manifest("default-flavor"), ours, local_queue_manifest("lq", "ours"))])
    await af.apply(loaded(workload_manifest("ten", cpu="10")))
    await eventually(lambda: _is(engine, "ten", "Admitted"))
    await af.apply(loaded(workload_manifest("three", cpu="3")))
    await eventually(lambda: _reason(engine, "three", "WaitingForQuota"))
    report = await af.cluster_queue_report("ours")
    [cpu] = report.status.flavors_reservation[0].resources
    assert (str(cpu.total), str(cpu.borrowed)) == ("10", "10")
    three = await af.workload("default/three")
    reserved = next(c for c in three.status.conditions if c.type == "QuotaReserved")
    assert (reserved.status, reserved.reason) == ("False", "WaitingForQuota")
    assert "insufficient unused quota for cpu in flavor default-flavor, 1 more needed" in reserved.message


async def taken_by_update(engine, workflow_id: str) -> list[str]:
    """The workload keys of the messages a workflow took by `take_messages`, in order (a forwarded
    message by the key it carries)."""
    keys = []
    async for e in engine.client.get_workflow_handle(workflow_id).fetch_history_events():
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            (batch,) = await engine.client.data_converter.decode(
                e.workflow_execution_update_accepted_event_attributes.accepted_request.input.args.payloads
            )
            for m in batch["messages"]:
                signal, payload = (m["payload"]["signal"], m["payload"]["payload"]) if m["signal"] == contract.FORWARD else (m["signal"], m["payload"])
                keys.append(f"{signal} {payload['key']}")
    return keys


async def test_once_its_home_names_the_tree_a_workers_messages_to_the_queue_go_straight_there(engine):
    """A home whose tree holds its state says so in its update's receipt; the worker's next messages
    to that queue go to the tree, as the `forward` messages the home would have sent, and the home
    takes no part (activities/mail.py). The tree answers an enqueue with the pending reason itself."""
    af = engine.admitflow
    await af.apply(loaded(flavor_manifest(), queue("cq-a", cpu="1", cohort="team"), local_queue_manifest("lq-a", "cq-a")))

    async def in_its_tree() -> bool:
        try:
            return await scheduled_by(engine, "cq-a") == ids.cohort_id("team")
        except RPCError:  # the catalog's view has not started the home yet
            return False

    await eventually(in_its_tree)
    await af.apply(loaded(workload_manifest("first", cpu="1", queue="lq-a")))
    await eventually(lambda: _is(engine, "first", "Admitted"))
    await af.apply(loaded(workload_manifest("second", cpu="1", queue="lq-a")))
    await eventually(lambda: _reason(engine, "second", "WaitingForQuota"))
    await af.finish("default/first")
    await eventually(lambda: _is(engine, "second", "Admitted"))

    home = await taken_by_update(engine, ids.cluster_queue_id("cq-a"))
    assert home == ["enqueue default/first"], "only the first message went by the home, which named the tree"
    tree = await taken_by_update(engine, ids.cohort_id("team"))
    assert tree == ["enqueue default/first", "enqueue default/second", "release default/first"]
    events = (await engine.client.get_workflow_handle(ids.workload_id("default/second")).fetch_history()).events
    signals = [e.workflow_execution_signaled_event_attributes.signal_name for e in events
               if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED]
    assert signals == [contract.QUOTA_RESERVED], "the tree answered the enqueue with its pending reason"


async def test_a_tree_tells_the_few_workloads_a_pass_admits_in_the_task_that_decides(engine):
    """A pass that reserves quota for a few workloads signals them by local activity in its own
    workflow task: no delivery activity, and so no second workflow task for its completion."""
    af = engine.admitflow
    await af.apply(loaded(
        flavor_manifest(), queue("cq-a", cohort="team"), queue("cq-b", cohort="team"),
        local_queue_manifest("lq-a", "cq-a"), local_queue_manifest("lq-b", "cq-b"),
    ))
    names = [f"w{i}" for i in range(4)]
    await af.apply(loaded(*(workload_manifest(n, cpu="1", queue="lq-a" if i % 2 else "lq-b") for i, n in enumerate(names))))
    for n in names:
        await eventually(lambda n=n: _is(engine, n, "Admitted"))
    events = (await engine.client.get_workflow_handle(ids.cohort_id("team")).fetch_history()).events
    activities = [e.activity_task_scheduled_event_attributes.activity_type.name for e in events
                  if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]
    assert contract.DELIVER_SIGNALS not in activities
    local = [e for e in events if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
             and e.marker_recorded_event_attributes.marker_name == "core_local_activity"]
    assert local, "the notices went by local activity"
