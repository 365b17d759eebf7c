"""A check's `spec.pendingTimeout` on the dev server, through the `admitflow` command: a check whose
controller keeps saying Pending is treated as Retry when its time is up, backs off, is asked again,
and past its retry strategy's limit is Rejected (the workload deactivated), each step on record;
a timeout that is not valid is refused in one line. Hours-long timeouts: tests/workflows/test_backoff.py."""

from __future__ import annotations

import json
import textwrap

import pytest

from admitflow.controller import Controller, pending
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


async def test_a_check_pending_past_its_timeout_is_retried_then_rejected(engine):
    async def still_looking(request):
        return pending("still looking")

    setup = SETUP.replace("spec:\n  namespaceSelector: {}", "spec:\n  admissionChecksStrategy: {admissionChecks: [{name: slow}]}\n  namespaceSelector: {}")
    assert "admissionChecksStrategy" in setup
    async with Controller("tests.check-timeouts", check=still_looking).worker(engine.client):
        r = await run(engine, "apply", "-f", "-", stdin=CHECK + "---\n" + setup)
        assert r.returncode == 0, r.stderr
        await engine.admitflow.set_admission_check_active("slow")
        r = await run(engine, "apply", "-f", "-", stdin=workload_yaml("job", "1", 0))
        assert r.returncode == 0, r.stderr
        # 3 s Pending -> Retry (retryCount 1), 1 s backoff, reserved again, 3 s Pending -> past the
        # limit of one retry: Rejected, deactivated. Seconds of slack for a loaded machine.
        r = await until(engine, inactive, "get", "workload", "job", "-o", "json", timeout=40)
    status = json.loads(r.stdout)["status"]
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
