"""scheduling.k8s.io/v1 PriorityClasses through the `admitflow` command on the dev server: applied
into the catalog as kubectl applies them, listed with kubectl's columns, described, refused in the
apiserver's words, and deleted."""

from __future__ import annotations

import json
import textwrap

import pytest

from tests.integration.test_cli import run

pytestmark = pytest.mark.integration

CLASSES = textwrap.dedent(
    """\
    apiVersion: scheduling.k8s.io/v1
    kind: PriorityClass
    metadata: {name: batch-default}
    value: 100
    globalDefault: true
    description: "Jobs that name no class"
    ---
    apiVersion: scheduling.k8s.io/v1
    kind: PriorityClass
    metadata: {name: urgent}
    value: 5000
    preemptionPolicy: Never
    """
)


async def test_priority_classes_are_applied_listed_described_and_deleted(engine):
    r = await run(engine, "apply", "-f", "-", stdin=CLASSES)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "priorityclass.scheduling.k8s.io/batch-default created",
        "priorityclass.scheduling.k8s.io/urgent created",
    ]
    r = await run(engine, "apply", "-f", "-", stdin=CLASSES)
    assert r.stdout.splitlines() == [
        "priorityclass.scheduling.k8s.io/batch-default unchanged",
        "priorityclass.scheduling.k8s.io/urgent unchanged",
    ], r.stderr

    r = await run(engine, "get", "pc")
    rows = [line.split() for line in r.stdout.splitlines()]
    assert rows[0] == ["NAME", "VALUE", "GLOBAL-DEFAULT", "AGE", "PREEMPTIONPOLICY"]
    assert [(row[0], row[1], row[2], row[-1]) for row in rows[1:]] == [
        ("batch-default", "100", "true", "PreemptLowerPriority"),
        ("urgent", "5000", "false", "Never"),
    ]
    r = await run(engine, "get", "priorityclass.scheduling.k8s.io/urgent", "-o", "json")
    assert json.loads(r.stdout)["preemptionPolicy"] == "Never", r.stderr
    r = await run(engine, "describe", "priorityclass", "batch-default")
    assert r.returncode == 0, r.stderr
    assert "Kind:         PriorityClass\nValue:        100\nGlobal Default: True\n" in r.stdout
    assert "Preemption Policy: PreemptLowerPriority" in r.stdout

    r = await run(engine, "apply", "-f", "-", stdin=CLASSES.replace("value: 5000", "value: 2000000000"))
    assert r.returncode != 0
    assert r.stderr.strip().endswith(
        "document 2 (PriorityClass urgent): value: Forbidden: maximum allowed value of a user defined priority is 1000000000"
    ), r.stderr

    r = await run(engine, "delete", "pc", "urgent")
    assert (r.returncode, r.stdout.strip()) == (0, "priorityclass.scheduling.k8s.io/urgent deleted"), r.stderr
    r = await run(engine, "get", "priorityclasses", "urgent")
    assert (r.returncode, r.stderr.strip()) == (2, 'error: priorityclasses "urgent" not found')
