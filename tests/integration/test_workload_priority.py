"""WorkloadPriorityClass through the `admitflow` command on the dev server: classes in both API
versions, workloads that name one get its value as their priority and are scheduled by it, a
submitted workload's priority changes as Kueue allows (its place in the queue, and preemption, follow
it), a class that is not there is refused before anything is applied, and `get`, `describe` and
`delete` show and remove classes."""

from __future__ import annotations

import json
import textwrap

import pytest

from tests.integration.test_cli import SETUP, run, until, workload_yaml

pytestmark = pytest.mark.integration

CLASSES = textwrap.dedent(
    """\
    apiVersion: kueue.x-k8s.io/v1beta2
    kind: WorkloadPriorityClass
    metadata: {name: high}
    value: 1000
    description: "Production jobs"
    ---
    apiVersion: kueue.x-k8s.io/v1beta1
    kind: WorkloadPriorityClass
    metadata: {name: low}
    value: 10
    """
)


def class_workload(name: str, cls: str, v1beta1: bool = False, priority: int | None = None) -> str:
    """A 4-cpu workload (the whole queue) naming a WorkloadPriorityClass, as v1beta2 or v1beta1 write it."""
    doc = workload_yaml(name, "4", 0).replace("  priority: 0\n", "" if priority is None else f"  priority: {priority}\n")
    if v1beta1:
        ref = f"  priorityClassSource: kueue.x-k8s.io/workloadpriorityclass\n  priorityClassName: {cls}\n"
        doc = doc.replace("kueue.x-k8s.io/v1beta2", "kueue.x-k8s.io/v1beta1")
    else:
        ref = f"  priorityClassRef: {{group: kueue.x-k8s.io, kind: WorkloadPriorityClass, name: {cls}}}\n"
    return doc.replace("  queueName: lq\n", "  queueName: lq\n" + ref)


def spec_of(r) -> dict:
    return json.loads(r.stdout)["spec"]


def admitted(r) -> bool:
    conditions = json.loads(r.stdout).get("status", {}).get("conditions", [])
    return any(c["type"] == "Admitted" and c["status"] == "True" for c in conditions)


async def test_workloads_get_their_class_value_and_are_scheduled_by_it(engine):
    r = await run(engine, "apply", "-f", "-", stdin=SETUP + "---\n" + CLASSES)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-2:] == [
        "workloadpriorityclass.kueue.x-k8s.io/high created",
        "workloadpriorityclass.kueue.x-k8s.io/low created",
    ]

    r = await run(engine, "get", "workloadpriorityclasses")
    assert [line.split() for line in r.stdout.splitlines()] == [["NAME", "VALUE"], ["high", "1000"], ["low", "10"]]
    r = await run(engine, "get", "workloadpriorityclass.kueue.x-k8s.io/low", "-o", "json")
    assert json.loads(r.stdout)["apiVersion"] == "kueue.x-k8s.io/v1beta2", "a v1beta1 class is held as v1beta2"
    r = await run(engine, "describe", "workloadpriorityclass", "high")
    assert r.returncode == 0, r.stderr
    assert "Kind:         WorkloadPriorityClass\nValue:        1000\nDescription:  Production jobs" in r.stdout

    # A filler holds the whole queue, so the three below wait together and their priorities alone
    # order them: high (1000, its class's), plain (500, its own), low (10, a v1beta1 class reference).
    r = await run(engine, "apply", "-f", "-", stdin=workload_yaml("filler", "4", 5000))
    assert r.returncode == 0, r.stderr
    await until(engine, admitted, "get", "workload", "filler", "-o", "json")
    for doc in (class_workload("low-job", "low", v1beta1=True), workload_yaml("plain", "4", 500), class_workload("high-job", "high")):
        r = await run(engine, "apply", "-f", "-", stdin=doc)
        assert r.returncode == 0, r.stderr
    r = await until(engine, lambda r: len(r.stdout.splitlines()) == 4, "get", "pending-workloads", "cq")
    assert [row.split()[2:5] for row in r.stdout.splitlines()[1:]] == [
        ["high-job", "lq", "1000"], ["plain", "lq", "500"], ["low-job", "lq", "10"],
    ]
    r = await run(engine, "get", "workload", "low-job", "-o", "json")
    assert spec_of(r)["priority"] == 10
    assert spec_of(r)["priorityClassRef"] == {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "low"}

    # The class's value changes; the workload submitted with it keeps its priority, and applying its
    # manifest again changes nothing.
    r = await run(engine, "apply", "-f", "-", stdin=CLASSES.replace("value: 1000", "value: 1"))
    assert r.stdout.splitlines() == [
        "workloadpriorityclass.kueue.x-k8s.io/high configured",
        "workloadpriorityclass.kueue.x-k8s.io/low unchanged",
    ], r.stderr
    r = await run(engine, "apply", "-f", "-", stdin=class_workload("high-job", "high"))
    assert (r.returncode, r.stdout.strip()) == (0, "workload.kueue.x-k8s.io/default/high-job unchanged"), r.stderr
    r = await run(engine, "get", "workload", "high-job", "-o", "json")
    assert spec_of(r)["priority"] == 1000

    # Kueue lets a pending workload's priority change: high-job drops behind the others, and says so.
    r = await run(engine, "apply", "-f", "-", stdin=class_workload("high-job", "high", priority=1))
    assert (r.returncode, r.stdout.strip()) == (0, "workload.kueue.x-k8s.io/default/high-job configured"), r.stderr
    r = await until(engine, lambda r: [row.split()[2] for row in r.stdout.splitlines()[1:]] == ["plain", "low-job", "high-job"],
                    "get", "pending-workloads", "cq")
    r = await run(engine, "get", "workload", "high-job", "-o", "json")
    assert spec_of(r)["priority"] == 1
    r = await run(engine, "describe", "workload", "high-job")
    assert "PriorityChanged" in r.stdout and "Priority changed from 1000 to 1" in r.stdout, r.stdout
    r = await run(engine, "apply", "-f", "-", stdin=class_workload("high-job", "high", priority=1))
    assert (r.returncode, r.stdout.strip()) == (0, "workload.kueue.x-k8s.io/default/high-job unchanged"), r.stderr

    r = await run(engine, "finish", "default/filler")
    assert r.returncode == 0, r.stderr
    await until(engine, admitted, "get", "workload", "plain", "-o", "json")
    r = await run(engine, "get", "pending-workloads", "cq")
    assert [row.split()[2] for row in r.stdout.splitlines()[1:]] == ["low-job", "high-job"]

    # A class goes at once (Kueue has no finalizer on it); the workloads keep their priority.
    r = await run(engine, "delete", "workloadpriorityclass", "low")
    assert (r.returncode, r.stdout.strip()) == (0, "workloadpriorityclass.kueue.x-k8s.io/low deleted"), r.stderr
    r = await run(engine, "get", "workloadpriorityclasses", "low")
    assert (r.returncode, r.stderr.strip()) == (2, 'error: workloadpriorityclasses "low" not found')
    r = await run(engine, "get", "workload", "low-job", "-o", "json")
    assert spec_of(r)["priority"] == 10


async def test_a_class_that_is_not_there_is_refused_and_nothing_is_applied(engine):
    r = await run(engine, "apply", "-f", "-", stdin=SETUP)
    assert r.returncode == 0, r.stderr
    extra = CLASSES.split("---\n")[0].replace("name: high", "name: extra")
    for dry_run in ([], ["--dry-run=client"], ["--dry-run=server"]):
        r = await run(engine, "apply", *dry_run, "-f", "-", stdin=extra + "---\n" + class_workload("ghost", "nope"))
        assert (r.returncode, r.stdout) == (2, ""), (dry_run, r.stderr)
        assert r.stderr.splitlines() == [
            'error: <stdin>: document 2 (Workload ghost): workloadpriorityclasses.kueue.x-k8s.io "nope" not found'
        ], dry_run
    r = await run(engine, "get", "workloadpriorityclasses")
    assert (r.returncode, r.stdout, r.stderr.strip()) == (0, "", "No resources found.")
    r = await run(engine, "get", "workload", "ghost")
    assert r.returncode == 2 and "not found" in r.stderr

    # A class applied in the same request as the workload naming it counts, dry run or not.
    both = extra + "---\n" + class_workload("ghost", "extra")
    r = await run(engine, "apply", "--dry-run=client", "-f", "-", stdin=both)
    assert r.stdout.splitlines() == [
        "workloadpriorityclass.kueue.x-k8s.io/extra created (dry run)",
        "workload.kueue.x-k8s.io/default/ghost created (dry run)",
    ], r.stderr
    r = await run(engine, "apply", "-f", "-", stdin=both)
    assert r.returncode == 0, r.stderr
    r = await until(engine, admitted, "get", "workload", "ghost", "-o", "json")
    assert spec_of(r)["priority"] == 1000


PREEMPTING = SETUP.replace("  namespaceSelector: {}\n", "  namespaceSelector: {}\n  preemption: {withinClusterQueue: LowerPriority}\n")


async def test_a_changed_priority_decides_preemption_both_ways(engine):
    """With `withinClusterQueue: LowerPriority`, a pending workload of equal priority cannot take
    the quota; raised above the running one it preempts it; lowered again below the one it evicted,
    it is preempted in turn: the reservation's priority follows the change."""
    assert "preemption:" in PREEMPTING
    r = await run(engine, "apply", "-f", "-", stdin=PREEMPTING)
    assert r.returncode == 0, r.stderr
    r = await run(engine, "apply", "-f", "-", stdin=workload_yaml("first", "4", 10))
    assert r.returncode == 0, r.stderr
    await until(engine, admitted, "get", "workload", "first", "-o", "json")
    r = await run(engine, "apply", "-f", "-", stdin=workload_yaml("second", "4", 10))
    assert r.returncode == 0, r.stderr
    await until(engine, lambda r: len(r.stdout.splitlines()) == 2, "get", "pending-workloads", "cq")

    r = await run(engine, "apply", "-f", "-", stdin=workload_yaml("second", "4", 100))
    assert (r.returncode, r.stdout.strip()) == (0, "workload.kueue.x-k8s.io/default/second configured"), r.stderr
    await until(engine, admitted, "get", "workload", "second", "-o", "json")
    r = await until(engine, lambda r: "Preempted" in r.stdout, "describe", "workload", "first")

    r = await run(engine, "apply", "-f", "-", stdin=workload_yaml("second", "4", 1))
    assert (r.returncode, r.stdout.strip()) == (0, "workload.kueue.x-k8s.io/default/second configured"), r.stderr
    await until(engine, admitted, "get", "workload", "first", "-o", "json")
    r = await run(engine, "get", "workload", "second", "-o", "json")
    assert not admitted(r) and spec_of(r)["priority"] == 1
