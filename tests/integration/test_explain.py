"""`admitflow explain` on the dev server, through the command as users run it: one cause per waiting
workload (gated, waiting for a check, in backoff, too big for the quota, waiting for quota, queued
behind another at its position, inactive), an estimate from the workloads ahead and the running
ones' maximum execution times, the same line in the workload's current details in the Temporal UI,
and a ClusterQueue's waiting workloads counted by cause, summing to what `get workloads` says waits
there; then the main job's scenario (examples/, as `make run` applies them), explained at its
waiting points."""

from __future__ import annotations

import asyncio
import json
import textwrap
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from temporalio.api.sdk.v1 import WorkflowMetadata

from admitflow import controller as sdk
from admitflow import ids
from admitflow.api import load_manifests
from tests.integration.test_admission import eventually
from tests.integration.test_cli import SETUP as CLI_SETUP
from tests.integration.test_cli import _main_job_args, run, workload_yaml

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
GATES = "kueue.x-k8s.io/admission-gated-by"

def cluster_queue(name: str, local_queue: str, spec: str = "") -> str:
    """Another ClusterQueue with 4 cpus of flavor default (`spec`: more of its spec, as YAML lines),
    and a LocalQueue in default leading to it."""
    return textwrap.dedent(
        f"""\
        ---
        apiVersion: kueue.x-k8s.io/v1beta2
        kind: ClusterQueue
        metadata: {{name: {name}}}
        spec:
          namespaceSelector: {{}}
          resourceGroups:
          - coveredResources: [cpu]
            flavors:
            - name: default
              resources: [{{name: cpu, nominalQuota: 4}}]
        """
    ) + spec + f"---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\nmetadata: {{name: {local_queue}, namespace: default}}\nspec: {{clusterQueue: {name}}}\n"


# cq (lq) as in test_cli; strict (slq), StrictFIFO; checked (clq), with the AdmissionCheck approval.
SETUP = (
    CLI_SETUP
    + cluster_queue("strict", "slq", "  queueingStrategy: StrictFIFO\n")
    + "---\napiVersion: kueue.x-k8s.io/v1beta2\nkind: AdmissionCheck\nmetadata: {name: approval}\nspec: {controllerName: tests/approval}\n"
    + cluster_queue("checked", "clq", "  admissionChecksStrategy:\n    admissionChecks: [{name: approval}]\n")
)


def workload(name: str, cpu: str, queue: str = "lq", priority: int = 0, gates: str | None = None, limit: int | None = None) -> str:
    return workload_yaml(name, cpu, priority, queue=queue, annotations={GATES: gates} if gates is not None else None, limit=limit)


async def apply(engine, *docs: str) -> None:
    r = await run(engine, "apply", "-f", "-", stdin="---\n".join(docs))
    assert r.returncode == 0, r.stderr


async def causes(engine, *names: str) -> dict[str, str]:
    """Each workload's cause, as the client (in this process) explains it: for waiting on durable facts."""
    return {n: (await engine.admitflow.explanation(f"default/{n}")).cause.cause for n in names}


async def settled(engine, **expected: str) -> None:
    await eventually(lambda: _same(engine, expected), timeout=30)


async def _same(engine, expected: dict[str, str]) -> bool:
    return await causes(engine, *expected) == expected


async def explained(engine, *args: str) -> dict:
    r = await run(engine, "explain", *args, "-o", "json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def lines(r) -> list[str]:
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


def admitted_at(report) -> datetime:
    return next(c.last_transition_time for c in report.status.conditions if c.type == "Admitted")


async def waiting_in(engine, local_queues: dict[str, str], cluster_queue: str, waiting: bool = True) -> set[str]:
    """What `get workloads -o json` says waits in a ClusterQueue: neither admitted nor finished
    (with `waiting`; else every one), with a LocalQueue that leads there (`local_queues`: NS/LQ ->
    CQ)."""
    r = await run(engine, "get", "workloads", "-o", "json")
    assert r.returncode == 0, r.stderr
    out = set()
    for w in json.loads(r.stdout)["items"]:
        held = {c["type"] for c in w["status"].get("conditions", []) if c["status"] == "True"}
        lq = f"{w['metadata']['namespace']}/{w['spec']['queueName']}"
        if not (waiting and held & {"Admitted", "Finished"}) and local_queues.get(lq) == cluster_queue:
            out.add(f"{w['metadata']['namespace']}/{w['metadata']['name']}")
    return out


def counted_once(q: dict) -> set[str]:
    """The workloads a queue's explanation lists, checked to be each under exactly one cause, with
    the counts summing to the total."""
    listed = [w["workload"] for w in q["workloads"]]
    by_cause = [k for c in q["causes"] for k in c["workloads"]]
    assert len(listed) == len(set(listed)) == len(by_cause) == len(set(by_cause)) == q["total"], q
    assert sum(c["count"] for c in q["causes"]) == q["total"], q
    assert set(listed) == set(by_cause)
    assert {w["cause"] for w in q["workloads"]} <= {c["cause"] for c in q["causes"]}
    return set(listed)


# --- one queue, one cause each ------------------------------------------------------------------------


async def test_a_queue_explains_each_waiting_workload_once_and_the_counts_add_up(engine):
    await apply(engine, SETUP)
    await apply(engine, workload("big", "3", priority=10, limit=600))
    await settled(engine, big="Admitted")
    await apply(
        engine,
        workload("huge", "10", priority=1),
        workload("next", "2", priority=5),
        workload("paused", "2"),  # last in the queue: the positions ahead of it stay as they are when it leaves
        workload("gated", "1", priority=20, gates="example.com/sizer"),
    )
    r = await run(engine, "deactivate", "default/paused")
    assert r.returncode == 0, r.stderr
    await settled(engine, big="Admitted", huge="Inadmissible", next="NoQuota", paused="Inactive", gated="AdmissionGated")

    # Too big for the quota: which flavor lacks how much of what, and no time it could be admitted.
    out = lines(await run(engine, "explain", "workload", "default/huge"))
    assert out[:3] == ["Workload:   default/huge", "Cause:      Inadmissible",
                       "Why:        ExceedsMaxQuota: flavor default lacks cpu: 10 asked, 4 at most (position 1 in its ClusterQueue)"]
    assert "Lacks:      flavor default, pod set main: 10 cpu asked, 4 at most" in out
    assert out[-1] == "Estimate:   unknown: ExceedsMaxQuota: the ClusterQueue or the workload must change first"

    # Waiting for quota: how much more, its position, and when `big` (600 s at most) gives it back.
    e = await explained(engine, "wl", "default/next")
    c = e["cause"]
    assert (c["cause"], c["reason"], c["position"], c["clusterQueue"], c["localQueue"]) == ("NoQuota", "WaitingForQuota", 0, "cq", "lq")
    assert c["shortfalls"] == [{"podSet": "main", "flavor": "default", "resource": "cpu", "kind": "unused", "requested": "",
                                "capacity": "", "moreNeeded": "1"}]
    big = await engine.admitflow.workload("default/big")
    assert e["estimate"] == {
        "at": (admitted_at(big) + timedelta(seconds=600)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "unknown": "",
        "basis": "once default/big has given its quota back (its maximum execution time is up)",
    }
    out = lines(await run(engine, "explain", "workload", "next"))
    assert "Position:   0 in ClusterQueue cq, 0 in LocalQueue lq" in out
    assert out[-2].startswith("Estimate:   ") and out[-1].startswith("Assumes:    an estimate, not a promise")

    # Gated: which gates; inactive: Kueue's reason.
    e = await explained(engine, "workload", "default/gated")
    assert (e["cause"]["cause"], e["cause"]["gates"], e["cause"]["reason"]) == ("AdmissionGated", ["example.com/sizer"], "AdmissionGated")
    out = lines(await run(engine, "explain", "workload/default/gated"))
    assert "Gates:      example.com/sizer" in out
    e = await explained(engine, "workload", "default/paused")
    assert (e["cause"]["cause"], e["cause"]["reason"]) == ("Inactive", "Deactivated")

    # The queue: each waiting workload once, under its one cause; the counts add up to what waits.
    q = await explained(engine, "clusterqueue", "cq")
    assert [(c["cause"], c["count"]) for c in q["causes"]] == [
        ("Inactive", 1), ("AdmissionGated", 1), ("Inadmissible", 1), ("NoQuota", 1),
    ]
    assert counted_once(q) == await waiting_in(engine, {"default/lq": "cq"}, "cq") == {
        "default/huge", "default/next", "default/paused", "default/gated",
    }
    assert lines(await run(engine, "explain", "cq", "cq")) == [
        "CAUSE            COUNT   WORKLOADS",
        "Inactive         1       default/paused",
        "AdmissionGated   1       default/gated",
        "Inadmissible     1       default/huge",
        "NoQuota          1       default/next",
        "TOTAL            4",
    ]
    # The UI says the same, in the workload's current details.
    details = await current_details(engine, "next")
    assert "why not admitted (NoQuota): WaitingForQuota: flavor default lacks 1 more cpu" in details, details

    # What is not there: the one line `describe` gives, exit 2.
    for kind, name in (("workload", "default/nobody"), ("clusterqueue", "nope")):
        described = await run(engine, "describe", kind, name)
        r = await run(engine, "explain", kind, name)
        assert (r.returncode, r.stdout, r.stderr) == (2, "", described.stderr), (kind, r.stderr)
        assert len(r.stderr.splitlines()) == 1
    r = await run(engine, "explain", "localqueue", "default/lq")
    assert (r.returncode, r.stderr.strip()) == (
        2, "error: explain takes a workload or a clusterqueue: admitflow explain workload NAMESPACE/NAME, "
           "admitflow explain clusterqueue NAME",
    )


async def current_details(engine, name: str) -> str:
    handle = engine.client.get_workflow_handle(ids.workload_id(f"default/{name}"))
    metadata = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    return metadata.current_details


# --- queued behind another --------------------------------------------------------------------------


async def test_a_workload_queued_behind_another_knows_its_position_and_when_it_could_go(engine):
    await apply(engine, SETUP)
    await apply(engine, workload("holder", "4", queue="slq", limit=300))
    await settled(engine, holder="Admitted")
    # StrictFIFO: the head that does not fit holds the queue, so the one behind it is never
    # evaluated (once `first` is the head: alone, `second` would be told why it waits).
    await apply(engine, workload("first", "2", queue="slq", priority=5, limit=120))
    await settled(engine, first="NoQuota")
    await apply(engine, workload("second", "2", queue="slq", priority=1))
    await settled(engine, first="NoQuota", second="Queued")

    out = lines(await run(engine, "explain", "workload", "default/second"))
    assert out[:3] == ["Workload:   default/second", "Cause:      Queued",
                       "Why:        waits its turn in its ClusterQueue: position 1, 1 workload(s) ahead"]
    assert "Kueue:      QuotaReserved=False PendingEvaluation: Workload is pending evaluation in the scheduling queue" in out
    assert "Position:   1 in ClusterQueue strict, 1 in LocalQueue slq" in out
    # `holder` gives its 4 cpus back within 300 s; `first` and `second` then fit together.
    e = await explained(engine, "workload", "default/second")
    holder = await engine.admitflow.workload("default/holder")
    assert e["estimate"]["at"] == (admitted_at(holder) + timedelta(seconds=300)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert e["estimate"]["basis"] == "once default/holder has given its quota back (its maximum execution time is up)"
    assert "assumptions" in e

    q = await explained(engine, "clusterqueue", "strict")
    assert [(c["cause"], c["workloads"]) for c in q["causes"]] == [("NoQuota", ["default/first"]), ("Queued", ["default/second"])]
    assert counted_once(q) == await waiting_in(engine, {"default/slq": "strict"}, "strict")

    # Finished, the holder's quota goes to the two, and nothing waits any more.
    r = await run(engine, "finish", "default/holder")
    assert r.returncode == 0, r.stderr
    await settled(engine, first="Admitted", second="Admitted")
    q = await explained(engine, "clusterqueue", "strict")
    assert (q["total"], q["causes"], q["workloads"]) == (0, [], [])
    e = await explained(engine, "workload", "default/holder")
    assert (e["cause"]["cause"], e["estimate"]["unknown"]) == ("Finished", "not waiting: finished")


# --- a check, then its backoff ------------------------------------------------------------------------


async def test_a_workload_waiting_for_a_check_and_then_in_backoff(engine):
    await apply(engine, SETUP)
    r = await run(engine, "admissioncheck", "activate", "approval")
    assert r.returncode == 0, r.stderr
    await apply(engine, workload("reviewed", "1", queue="clq"))
    await settled(engine, reviewed="WaitingForChecks")

    e = await explained(engine, "workload", "default/reviewed")
    c = e["cause"]
    [check] = c["checks"]
    assert (check["name"], check["state"]) == ("approval", "Pending")
    reserved = next(x for x in (await engine.admitflow.workload("default/reviewed")).status.conditions if x.type == "QuotaReserved")
    assert check["since"] == reserved.last_transition_time.strftime("%Y-%m-%dT%H:%M:%SZ"), "asked since the reservation"
    assert c["summary"] == f"quota reserved in ClusterQueue checked; waits for AdmissionCheck approval (Pending) since {check['since']}"
    assert e["estimate"] == {"unknown": "it waits for a verdict from approval", "basis": ""}
    out = lines(await run(engine, "explain", "workload", "default/reviewed"))
    assert f"Check:      approval Pending since {check['since']}" in out
    assert "Kueue:      Admitted=False UnsatisfiedAdmissionChecks: The workload has not all checks ready" in out

    r = await run(engine, "verdict", "default/reviewed", "approval", "Retry", "--requeue-after", "10m", "--message", "later")
    assert r.returncode == 0, r.stderr
    await settled(engine, reviewed="Backoff")
    e = await explained(engine, "workload", "default/reviewed")
    c = e["cause"]
    assert (c["reason"], c["condition"]) == ("AdmissionCheck", "Requeued=False")
    assert 0 < c["remainingSeconds"] <= 600
    assert e["estimate"]["at"] == c["requeueAt"]
    assert e["estimate"]["basis"] == "not before its backoff ends and it is back in its queue"
    out = lines(await run(engine, "explain", "workload", "default/reviewed"))
    assert out[2].startswith(f"Why:        in backoff after AdmissionCheck: back in its queue at {c['requeueAt']} (in ")
    details = await current_details(engine, "reviewed")
    assert f"why not admitted (Backoff): in backoff after AdmissionCheck: back in its queue at {c['requeueAt']}" in details

    # Out of its ClusterQueue's queue while it backs off, and still counted there, once.
    q = await explained(engine, "clusterqueue", "checked")
    assert [(x["cause"], x["workloads"]) for x in q["causes"]] == [("Backoff", ["default/reviewed"])]
    assert counted_once(q) == await waiting_in(engine, {"default/clq": "checked"}, "checked")


# --- the main job's scenario ------------------------------------------------------------------------


def _main_job() -> tuple[list[str], list[str]]:
    """The manifests and controllers `make run` gives `admitflow dev` (read from the Makefile)."""
    args = _main_job_args()
    files = [args[i + 1] for i, a in enumerate(args) if a in ("-f", "--filename")]
    controllers = [args[i + 1] for i, a in enumerate(args) if a == "--controller"]
    return [str(ROOT / f) for f in files], [str(ROOT / c) for c in controllers]


async def test_the_main_jobs_scenario_attributes_every_waiting_workload_to_one_cause(engine):
    """Its manifests and its check controller, in this engine. No runner: nothing finishes, and the
    test reports the admitted workloads' pods ready, as the runner would, so that the PodsReady
    timeout (2 minutes) evicts none of them while it runs."""
    files, controllers = _main_job()
    manifests = load_manifests(files)
    for m in manifests:
        if m.obj.kind == "AdmissionCheckParameters":
            m.obj.spec["consumption"] = str(ROOT / "examples" / "controllers" / "consumption.json")
    routes = {m.obj.key: m.obj.spec.cluster_queue for m in manifests if m.obj.kind == "LocalQueue"}
    queues = sorted({m.obj.key for m in manifests if m.obj.kind == "ClusterQueue"})
    workloads = sorted(m.obj.key for m in manifests if m.obj.kind == "Workload")
    assert queues == ["cluster-queue", "gpu", "research", "reviewed"] and len(workloads) == 6
    running = [asyncio.ensure_future(c.run(engine.client)) for path in controllers for c in sdk.load(path)]
    try:
        await engine.admitflow.apply(manifests)

        async def every_queue() -> dict[str, dict]:
            out = {}
            for cq in queues:
                q = await explained(engine, "clusterqueue", cq)
                counted_once(q)
                out[cq] = q
            return out

        # While it moves (pretrain's ProvisioningRequests fail and back off): each queue's
        # explanation is still each waiting workload of its own once (a Job's among them).
        early = await every_queue()
        for cq, q in early.items():
            assert {w["workload"] for w in q["workloads"]} <= await waiting_in(engine, routes, cq, waiting=False), cq

        # Its waiting point: every workload admitted but team-a/release, whose check nobody serves
        # (the approval AdmissionCheck is not Active, so its ClusterQueue admits nothing new).
        async def five_admitted() -> bool:
            return sum(c == "Admitted" for c in (await _causes(engine, workloads)).values()) == 5

        await eventually(five_admitted, timeout=90)
        for key, c in (await _causes(engine, workloads)).items():
            if c == "Admitted":
                await engine.admitflow.pods_ready(key)
        found = await every_queue()
        for cq in queues:
            assert counted_once(found[cq]) == await waiting_in(engine, routes, cq), cq
        assert sum(q["total"] for q in found.values()) == 1
        assert [(c["cause"], c["workloads"]) for c in found["reviewed"]["causes"]] == [("Inadmissible", ["team-a/release"])]
        assert found["reviewed"]["workloads"][0]["summary"] == "Suspended: ClusterQueue reviewed is inactive (position 0 in its ClusterQueue)"

        # A person marks the check Active: release gets quota and waits for the verdict.
        r = await run(engine, "admissioncheck", "activate", "approval")
        assert r.returncode == 0, r.stderr
        await eventually(lambda: _is(engine, "team-a/release", "WaitingForChecks"), timeout=30)
        found = await every_queue()
        for cq in queues:
            assert counted_once(found[cq]) == await waiting_in(engine, routes, cq), cq
        assert [(c["cause"], c["workloads"]) for c in found["reviewed"]["causes"]] == [("WaitingForChecks", ["team-a/release"])]
        e = await explained(engine, "workload", "team-a/release")
        assert e["cause"]["summary"].startswith("quota reserved in ClusterQueue reviewed; waits for AdmissionCheck approval (Pending)")
    finally:
        for task in running:
            task.cancel()


async def _causes(engine, keys: list[str]) -> dict[str, str]:
    return {k: (await engine.admitflow.explanation(k)).cause.cause for k in keys}


async def _is(engine, key: str, cause: str) -> bool:
    return (await engine.admitflow.explanation(key)).cause.cause == cause
