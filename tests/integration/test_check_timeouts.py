"""Timeouts and time limits on the dev server, through the `admitflow` command:
- a check's `spec.pendingTimeout`: a check whose controller keeps saying Pending is treated as Retry
  when its time is up, backs off, is asked again, and past its retry strategy's limit is Rejected
  (the workload deactivated), each step on record;
- a check's `retryStrategy.backoffLimitTimeout`: a controller that keeps answering Retry is Rejected
  once that long has passed since its first Retry;
- WaitForPodsReady's `requeuingStrategy.backoffLimitTimeout`: a workload whose pods never start is
  deactivated at the first timeout that long after its first;
- `objectRetentionPolicies.workloads.afterDeactivatedByKueue`: a workload deactivated by the engine
  is deleted (its workflow ends) after it;
- values that are not valid are refused in one line.
Hours-long ones: tests/workflows/test_backoff.py."""

from __future__ import annotations

import json
import textwrap

import pytest

from admitflow.controller import Controller, pending, rejected, retry
from tests.builders import configuration_manifest, flavor_manifest, local_queue_manifest, cluster_queue_manifest
from tests.integration.test_admission import loaded
from tests.integration.test_cli import SETUP, run, until, workload_yaml

pytestmark = pytest.mark.integration

CHECK = textwrap.dedent(
    """\
    apiVersion: kueue.x-k8s.io/v1beta2
    kind: AdmissionCheck
    metadata: {name: slow}
    spec:
      controllerName: tests.check-timeouts
      pendingTimeout: {duration: 3s}
      retryStrategy: {strategy: Static, baseDelaySeconds: 1, backoffLimitCount: 1}
    """
)
def inactive(r) -> bool:
    return r.returncode == 0 and json.loads(r.stdout)["spec"].get("active") is False


async def until_inactive_behind(engine, check_yaml: str, answer) -> dict:
    """Check `slow` (answered by `answer`) on ClusterQueue cq, one workload submitted through the
    CLI; waits (seconds of slack for a loaded machine) until it is deactivated; its status."""
    setup = SETUP.replace("spec:\n  namespaceSelector: {}", "spec:\n  admissionChecksStrategy: {admissionChecks: [{name: slow}]}\n  namespaceSelector: {}")
    assert "admissionChecksStrategy" in setup
    async with Controller("tests.check-timeouts", check=answer).worker(engine.client):
        r = await run(engine, "apply", "-f", "-", stdin=check_yaml + "---\n" + setup)
        assert r.returncode == 0, r.stderr
        await engine.admitflow.set_admission_check_active("slow")
        r = await run(engine, "apply", "-f", "-", stdin=workload_yaml("job", "1", 0))
        assert r.returncode == 0, r.stderr
        r = await until(engine, inactive, "get", "workload", "job", "-o", "json", timeout=40)
    return json.loads(r.stdout)["status"]


async def test_a_check_pending_past_its_timeout_is_retried_then_rejected(engine):
    async def still_looking(request):
        return pending("still looking")

    # 3 s Pending -> Retry (retryCount 1), 1 s backoff, reserved again, 3 s Pending -> past the
    # limit of one retry: Rejected, deactivated.
    status = await until_inactive_behind(engine, CHECK, still_looking)
    (check,) = status["admissionChecks"]
    assert check["retryCount"] == 1
    evicted = next(c for c in status["conditions"] if c["type"] == "Evicted")
    assert (evicted["status"], evicted["reason"]) == ("True", "DeactivatedDueToAdmissionCheck")
    r = await run(engine, "describe", "workload", "default/job")
    timeouts = [line for line in r.stdout.splitlines() if "AdmissionCheckPendingTimeout" in line]
    assert len(timeouts) == 2, r.stdout
    assert "Admission check slow: Pending for longer than its pendingTimeout (3s): treated as Retry; last message: still looking" in timeouts[0]
    assert "retry limit of 1 reached: Pending for longer than its pendingTimeout (3s)" in r.stdout, r.stdout


async def test_a_pending_timeout_that_is_not_valid_is_refused_in_one_line(engine):
    r = await run(engine, "apply", "-f", "-", stdin=CHECK.replace("duration: 3s", "duration: 0s"))
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr.splitlines() == [
        'error: <stdin>: document 1 (AdmissionCheck slow): spec.pendingTimeout.duration: Invalid value: "0s": '
        "must be greater than 0s and at most 596523h14m7s"
    ]
    r = await run(engine, "get", "admissioncheck", "slow")
    assert r.returncode != 0, "nothing applied"


async def test_a_check_retried_past_its_time_limit_is_rejected(engine):
    async def never(request):
        return retry("not today", after=1)

    check = CHECK.replace("  pendingTimeout: {duration: 3s}\n", "").replace(
        "retryStrategy: {strategy: Static, baseDelaySeconds: 1, backoffLimitCount: 1}", "retryStrategy: {backoffLimitTimeout: 5s}"
    )
    assert "backoffLimitTimeout: 5s" in check and "pendingTimeout" not in check
    # Retry every ~1 s: one at least 5 s after the first is Rejected.
    status = await until_inactive_behind(engine, check, never)
    (check_state,) = status["admissionChecks"]
    assert check_state["retryCount"] >= 2
    evicted = next(c for c in status["conditions"] if c["type"] == "Evicted")
    assert evicted["reason"] == "DeactivatedDueToAdmissionCheck"
    assert evicted["message"].endswith('"slow" (retry time limit of 5s reached: not today)'), evicted["message"]


async def test_pods_never_ready_past_the_requeuing_time_limit_deactivate(engine):
    config = configuration_manifest(timeout="2s", requeuingStrategy={
        "backoffLimitCount": 100, "backoffLimitTimeout": "5s", "backoffBaseSeconds": 1, "backoffMaxSeconds": 1,
    })
    await engine.admitflow.apply(loaded(config, flavor_manifest(), cluster_queue_manifest(), local_queue_manifest()))
    r = await run(engine, "apply", "-f", "-", stdin=workload_yaml("job", "1", 0))
    assert r.returncode == 0, r.stderr
    # No runner: its pods never start. A timeout every ~3 s; one at least 5 s after the first deactivates.
    r = await until(engine, inactive, "get", "workload", "job", "-o", "json", timeout=40)
    status = json.loads(r.stdout)["status"]
    evicted = next(c for c in status["conditions"] if c["type"] == "Evicted")
    assert (evicted["reason"], evicted["message"]) == (
        "DeactivatedDueToRequeuingLimitExceeded", "exceeding the maximum time 5s for re-queuing retries"
    )
    timeouts = next(e for e in status["schedulingStats"]["evictions"] if e["reason"] == "PodsReadyTimeout")
    assert timeouts["count"] >= 2
    r = await run(engine, "apply", "-f", "-", stdin=(
        "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\n"
        "waitForPodsReady: {timeout: 2s, requeuingStrategy: {backoffLimitTimeout: 0s}}\n"
    ))
    assert (r.returncode, r.stdout) == (2, "")
    assert "backoffLimitTimeout" in r.stderr and "must be greater than 0s" in r.stderr and len(r.stderr.splitlines()) == 1, r.stderr


async def test_a_workload_deactivated_by_the_engine_is_deleted_after_its_retention(engine):
    config = textwrap.dedent(
        """\
        apiVersion: config.kueue.x-k8s.io/v1beta2
        kind: Configuration
        objectRetentionPolicies:
          workloads: {afterDeactivatedByKueue: 3s}
        """
    )
    r = await run(engine, "apply", "-f", "-", stdin=config)
    assert r.returncode == 0, r.stderr

    async def no(request):
        return rejected("not allowed")

    check = CHECK.replace("  pendingTimeout: {duration: 3s}\n", "")
    status = await until_inactive_behind(engine, check, no)
    evicted = next(c for c in status["conditions"] if c["type"] == "Evicted")
    assert evicted["reason"] == "DeactivatedDueToAdmissionCheck"
    r = await until(engine, lambda r: r.returncode != 0, "get", "workload", "job", timeout=30)
    assert r.stderr.strip() == 'error: workloads "default/job" not found', r.stderr
