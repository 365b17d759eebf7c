"""AdmissionGatedBy on the dev server, through the `admitflow` command as users run it: a gated
workload takes no quota and no place in its queue while a workload behind it is admitted; removing
one of two gates keeps it gated; removing the last (here by re-applying its manifest without the
annotation, as kubectl users do) queues it; a signal from any Temporal client removes gates too;
bad inputs get one line and change nothing."""

from __future__ import annotations

import json

import pytest
from temporalio.api.sdk.v1 import WorkflowMetadata

from admitflow import ids
from tests.integration.test_cli import SETUP, run, until, workload_yaml

pytestmark = pytest.mark.integration

GATES = "kueue.x-k8s.io/admission-gated-by"


def manifest(name: str, cpu: str, priority: int, gates: str | None = None) -> str:
    """The Workload as YAML, with its gates annotation when given."""
    return workload_yaml(name, cpu, priority, annotations={GATES: gates} if gates is not None else None)


def quota_reserved(r) -> tuple[str, str, str] | None:
    if r.returncode != 0:
        return None
    c = next((c for c in json.loads(r.stdout)["status"]["conditions"] if c["type"] == "QuotaReserved"), None)
    return (c["status"], c["reason"], c["message"]) if c else None


def gated_by(value: str):
    return lambda r: quota_reserved(r) == ("False", "AdmissionGated", f"Admission is gated by: {value}")


def admitted(r) -> bool:
    return r.returncode == 0 and any(
        c["type"] == "Admitted" and c["status"] == "True" for c in json.loads(r.stdout)["status"]["conditions"]
    )


def annotation(r) -> str | None:
    return (json.loads(r.stdout)["metadata"].get("annotations") or {}).get(GATES)


async def current_details(engine, name: str) -> str:
    handle = engine.client.get_workflow_handle(ids.workload_id(f"default/{name}"))
    metadata = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    return metadata.current_details


async def test_a_gated_workload_waits_for_every_gate_while_the_one_behind_it_is_admitted(engine):
    r = await run(engine, "apply", "-f", "-", stdin=SETUP)
    assert r.returncode == 0, r.stderr
    # The gated workload is first and has the higher priority: were it in the queue, it would be
    # admitted before `plain`, which needs the same 3 of the 4 cpus.
    r = await run(engine, "apply", "-f", "-", stdin=manifest("gated", "3", 10, "example.com/a, example.com/b"))
    assert r.stdout.strip() == "workload.kueue.x-k8s.io/default/gated created", r.stderr
    await until(engine, gated_by("example.com/a,example.com/b"), "get", "workload", "gated", "-o", "json")
    r = await run(engine, "apply", "-f", "-", stdin=manifest("plain", "3", 0))
    assert r.returncode == 0, r.stderr
    await until(engine, admitted, "get", "workload", "plain", "-o", "json")

    r = await run(engine, "get", "workload", "gated", "-o", "json")
    assert gated_by("example.com/a,example.com/b")(r), r.stdout
    assert "admission" not in json.loads(r.stdout)["status"]
    r = await run(engine, "get", "pending-workloads", "cq")
    assert "gated" not in r.stdout  # not in the queue at all, as in Kueue
    r = await run(engine, "describe", "workload", "default/gated")
    assert "Admission Gates: example.com/a, example.com/b (admitflow ungate workload default/gated GATE removes one)" in r.stdout
    assert "Workload admission is gated by: example.com/a,example.com/b" in r.stdout  # the AdmissionGated event
    details = await current_details(engine, "gated")
    assert "admission gated by `example.com/a`, `example.com/b`" in details, details

    # Bad inputs: one line each, exit 2, nothing changes.
    bad = [
        (["ungate", "workload", "default/gated", "example.com/c"],
         "error: workload default/gated is not gated by example.com/c (its gates: example.com/a, example.com/b)"),
        (["ungate", "workload", "default/plain", "example.com/a"],
         "error: workload default/plain is not gated: it has no kueue.x-k8s.io/admission-gated-by annotation"),
        (["ungate", "workload", "default/gated"],
         "error: name the gates to remove, or --all: admitflow ungate workload default/gated GATE [GATE ...]"),
        (["ungate", "workload", "default/gated", "example.com/a", "--all"], "error: give the gates to remove or --all, not both"),
        (["ungate", "clusterqueue", "cq", "example.com/a"], "error: ungate takes workloads only: admitflow ungate workload NAMESPACE/NAME"),
        (["ungate", "workload", "default/nobody", "example.com/a"], 'error: workloads "default/nobody" not found or already finished'),
    ]
    for args, line in bad:
        r = await run(engine, *args)
        assert (r.returncode, r.stdout, r.stderr.strip()) == (2, "", line), args
    r = await run(engine, "apply", "-f", "-", stdin=manifest("gated", "3", 10, "example.com/a,example.com/b,example.com/c"))
    assert (r.returncode, r.stderr.strip()) == (
        2, "error: <stdin>: document 1 (Workload gated): metadata.annotations[kueue.x-k8s.io/admission-gated-by]: "
           "Forbidden: can only remove gates, not add new ones",
    )
    r = await run(engine, "apply", "-f", "-", stdin=manifest("plain", "3", 0, "example.com/late"))
    assert (r.returncode, r.stderr.strip()) == (
        2, "error: <stdin>: document 1 (Workload plain): metadata.annotations[kueue.x-k8s.io/admission-gated-by]: "
           "Forbidden: cannot add admission gate after creation",
    )
    r = await run(engine, "apply", "-f", "-", stdin=manifest("malformed", "1", 0, "not a gate"))
    assert (r.returncode, r.stderr.strip()) == (
        2, 'error: <stdin>: document 1 (Workload malformed): metadata.annotations[kueue.x-k8s.io/admission-gated-by]: '
           'Invalid value: "not a gate": must be a domain-prefixed path (such as "acme.io/foo")',
    )
    r = await run(engine, "get", "workload", "malformed")
    assert r.returncode == 2
    r = await run(engine, "get", "workload", "gated", "-o", "json")
    assert gated_by("example.com/a,example.com/b")(r) and annotation(r) == "example.com/a, example.com/b", r.stdout

    # One of two gates removed: still gated, by the other.
    r = await run(engine, "ungate", "workload", "default/gated", "example.com/a")
    assert (r.returncode, r.stdout.strip()) == (
        0, "workload.kueue.x-k8s.io/default/gated ungated (example.com/a removed); still gated by example.com/b"
    ), r.stderr
    r = await until(engine, gated_by("example.com/b"), "get", "workload", "gated", "-o", "json")
    assert annotation(r) == "example.com/b"
    # The last one, removed as kubectl users would: the manifest applied again without it (a dry
    # run first, which says so and changes nothing).
    r = await run(engine, "apply", "--dry-run=client", "-f", "-", stdin=manifest("gated", "3", 10))
    assert (r.returncode, r.stdout.strip()) == (0, "workload.kueue.x-k8s.io/default/gated configured (dry run)"), r.stderr
    r = await run(engine, "get", "workload", "gated", "-o", "json")
    assert annotation(r) == "example.com/b"
    r = await run(engine, "apply", "-f", "-", stdin=manifest("gated", "3", 10))
    assert (r.returncode, r.stdout.strip()) == (0, "workload.kueue.x-k8s.io/default/gated configured"), r.stderr
    r = await until(engine, lambda r: (quota_reserved(r) or ("", "AdmissionGated"))[1] != "AdmissionGated",
                    "get", "workload", "gated", "-o", "json")
    assert annotation(r) is None
    r = await run(engine, "describe", "workload", "default/gated")
    assert "Admission gate cleared, workload is now admissible" in r.stdout and "Admission Gates:" not in r.stdout
    # In its queue now, behind no one: it waits for the quota `plain` holds, and gets it when it finishes.
    r = await until(engine, lambda r: "gated" in r.stdout, "get", "pending-workloads", "cq")

    # Any Temporal client may signal; a removal it cannot apply is recorded, one that it can frees it.
    r = await run(engine, "apply", "-f", "-", stdin=manifest("signalled", "1", 0, "example.com/x"))
    assert r.returncode == 0, r.stderr
    await until(engine, gated_by("example.com/x"), "get", "workload", "signalled", "-o", "json")
    handle = engine.client.get_workflow_handle(ids.workload_id("default/signalled"))
    await handle.signal("remove_admission_gates", {"gates": "example.com/x"})
    r = await until(engine, lambda r: "InvalidAdmissionGateRemoval" in r.stdout, "describe", "workload", "default/signalled")
    assert "invalid admission gate removal: gates: Input should be a valid array" in r.stdout
    r = await run(engine, "get", "workload", "signalled", "-o", "json")
    assert gated_by("example.com/x")(r)
    await handle.signal("remove_admission_gates", {"gates": ["example.com/x"]})
    await until(engine, admitted, "get", "workload", "signalled", "-o", "json")

    r = await run(engine, "get", "workload", "gated", "-o", "json")
    assert not admitted(r)
    r = await run(engine, "finish", "default/plain")
    assert r.returncode == 0, r.stderr
    await until(engine, admitted, "get", "workload", "gated", "-o", "json")
