"""Check controllers on the real dev server: the workload asks them through activity
`admission_check` on their task queue, retries their transient errors at no history cost, turns a
non-retryable error into Retry, cancels what a signal or the finish made moot; a controller in its own
process can die and come back; the budget sample controller's outcomes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.exceptions import ApplicationError

from admitflow import ids
from admitflow.controller import Controller, pending, ready
from tests.builders import cluster_queue_manifest, flavor_manifest, local_queue_manifest
from tests.integration.test_admission import eventually, loaded
from tests.integration.test_admission_checks import checks_of, cond, report, submit, until
from tests.unit.test_budget import _module as budget_module
from tests.workflows.test_lifecycle import replay_all

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def check(name: str, controller: str, parameters: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"controllerName": controller}
    if parameters:
        spec["parameters"] = {"apiGroup": "admitflow.io", "kind": "AdmissionCheckParameters", "name": parameters}
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck", "metadata": {"name": name}, "spec": spec}


def params(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "admitflow.io/v1", "kind": "AdmissionCheckParameters", "metadata": {"name": name}, "spec": spec}


async def queue_with(af, *docs: dict[str, Any], checks: list[str], cpu: str = "8") -> None:
    await af.apply(loaded(*docs))
    await af.apply(
        loaded(flavor_manifest(), cluster_queue_manifest(quotas={"default": {"cpu": cpu}}, checks=[{"name": n} for n in checks]),
               local_queue_manifest())
    )


async def history_events(engine, name: str) -> list:
    history = await engine.client.get_workflow_handle(ids.workload_id(f"default/{name}")).fetch_history()
    return list(history.events)


def kinds(events) -> Counter:
    return Counter(EventType.Name(e.event_type) for e in events)


async def test_a_controller_is_asked_with_the_contracts_input_and_its_verdict_admits(engine):
    asked: list[dict] = []
    controller = Controller("tests/contract")

    @controller.check
    async def _(request):
        asked.append({"check": request.admission_check, "parameters": request.parameters, "attempt": request.attempt,
                      "workflowId": request.workflow_id, "key": request.key})
        return ready("looks fine", pod_set_updates=[{"name": "main", "labels": {"approved-by": "tests"}}])

    async with controller.worker(engine.client):
        await queue_with(engine.admitflow, check("gate", "tests/contract"), checks=["gate"])
        assert await controller.activate_checks() == {"gate": (True, "Active", "The admission check is active")}
        await submit(engine.admitflow, "job")
        r = await until(engine.admitflow, "Admitted")
    assert asked == [{"check": "gate", "parameters": None, "attempt": 1, "workflowId": "workload/default/job", "key": "default/job"}]
    assert [(c.name, c.state, c.message) for c in r.status.admission_checks] == [("gate", "Ready", "looks fine")]
    assert r.pod_sets_info[0].labels["approved-by"] == "tests"
    events = await history_events(engine, "job")
    [scheduled] = [e for e in events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]
    attrs = scheduled.activity_task_scheduled_event_attributes
    assert (attrs.activity_type.name, attrs.task_queue.name) == ("admission_check", "tests/contract")
    payload = json.loads(attrs.input.payloads[0].data)
    assert sorted(payload) == ["admissionCheck", "attempt", "parameters", "workflowId", "workload"]
    assert payload["parameters"] is None
    assert payload["workload"]["status"]["admissionChecks"][0]["state"] == "Pending"
    await replay_all(engine, [ids.workload_id("default/job")])


async def test_transient_errors_are_retried_until_ready_without_growing_the_history(engine):
    failures = {"once": 1, "thrice": 3}
    calls: Counter = Counter()
    controller = Controller("tests/flaky")

    @controller.check
    async def _(request):
        calls[request.workload.metadata.name] += 1
        if calls[request.workload.metadata.name] <= failures[request.workload.metadata.name]:
            raise RuntimeError("budget service unavailable")
        return ready()

    async with controller.worker(engine.client):
        await queue_with(engine.admitflow, check("flaky", "tests/flaky"), checks=["flaky"])
        await controller.activate_checks()
        for name in failures:
            await submit(engine.admitflow, name)
        for name in failures:
            await until(engine.admitflow, "Admitted", name, timeout=40)
    assert calls == {"once": 2, "thrice": 4}
    for name, n in failures.items():
        events = await history_events(engine, name)
        activity = {k: v for k, v in kinds(events).items() if k.startswith("EVENT_TYPE_ACTIVITY_TASK")}
        assert activity == {"EVENT_TYPE_ACTIVITY_TASK_SCHEDULED": 1, "EVENT_TYPE_ACTIVITY_TASK_STARTED": 1,
                            "EVENT_TYPE_ACTIVITY_TASK_COMPLETED": 1}
        [started] = [e for e in events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED]
        assert started.activity_task_started_event_attributes.attempt == n + 1


async def test_a_non_retryable_error_is_recorded_and_the_same_attempt_asked_again_after_a_backoff(engine):
    calls: list[int] = []
    controller = Controller("tests/strict")

    @controller.check
    async def _(request):
        calls.append(request.attempt)
        if len(calls) == 1:
            raise ApplicationError("quota office closed", non_retryable=True)
        return ready("open again")

    async with controller.worker(engine.client):
        await queue_with(engine.admitflow, check("office", "tests/strict"), checks=["office"])
        await controller.activate_checks()
        await submit(engine.admitflow, "job")
        r = await until(engine.admitflow, "Admitted", timeout=30)
    assert calls == [1, 1], "the same attempt: the reservation did not change"
    assert checks_of(r) == [("office", "Ready", None)]
    assert cond(r, "Evicted") is None, "a failing controller never evicts"
    (failed,) = [e for e in r.events if e.reason == "AdmissionCheckControllerFailed"]
    assert failed.type == "Warning"
    assert failed.message == 'Controller of check "office" failed on attempt 1: quota office closed; asked again in 5s (1 in a row)'


async def test_a_signalled_verdict_cancels_the_activity_nobody_picked_up(engine):
    af = engine.admitflow
    await queue_with(af, check("human", "tests/nobody-serves-this"), checks=["human"])
    await af.set_admission_check_active("human")
    await submit(af, "job")
    await until(af, "QuotaReserved")
    await asyncio.sleep(1)
    assert checks_of(await report(af)) == [("human", "Pending", None)]
    await af.verdict("default/job", ready("approved by hand").model_copy(update={"name": "human"}))
    await until(af, "Admitted")

    async def cancelled() -> bool:
        k = kinds(await history_events(engine, "job"))
        return k["EVENT_TYPE_ACTIVITY_TASK_CANCELED"] == 1

    await eventually(cancelled, 10)
    k = kinds(await history_events(engine, "job"))
    assert k["EVENT_TYPE_ACTIVITY_TASK_STARTED"] == 0
    await replay_all(engine, [ids.workload_id("default/job")])


@pytest.mark.parametrize("ending", ["finish", "deactivate"])
async def test_finishing_or_evicting_a_workload_cancels_the_check_it_still_waits_for(engine, ending):
    af = engine.admitflow
    await queue_with(af, check("human", "tests/nobody-serves-this"), checks=["human"])
    await af.set_admission_check_active("human")
    await submit(af, "job")
    await until(af, "QuotaReserved")
    if ending == "finish":
        await af.finish("default/job", succeeded=False, message="given up")
        await engine.client.get_workflow_handle(ids.workload_id("default/job")).result()
    else:
        await af.deactivate("default/job")
        await until(af, "Inactive")

    async def cancel_requested() -> bool:
        return kinds(await history_events(engine, "job"))["EVENT_TYPE_ACTIVITY_TASK_CANCEL_REQUESTED"] == 1

    await eventually(cancel_requested, 10)


CONTROLLER_FILE = """
from admitflow.controller import Controller, ready

controller = Controller("tests/separate-process")


@controller.check
async def check(request):
    return ready(f"seen by pid {__import__('os').getpid()}")


if __name__ == "__main__":
    controller.main()
"""


def start_controller(path: Path, engine) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(path), "--address", engine.address, "--namespace", engine.namespace],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )


async def test_a_controller_in_its_own_process_can_die_and_come_back(engine, tmp_path):
    af = engine.admitflow
    path = tmp_path / "controller.py"
    path.write_text(textwrap.dedent(CONTROLLER_FILE))
    await queue_with(af, check("separate", "tests/separate-process"), checks=["separate"])
    proc = start_controller(path, engine)
    try:
        await submit(af, "first")
        r = await until(af, "Admitted", "first", timeout=40)  # the controller also marked the check Active
        assert r.status.admission_checks[0].message == f"seen by pid {proc.pid}"
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

        await submit(af, "second")
        await until(af, "QuotaReserved", "second")
        await asyncio.sleep(3)
        assert checks_of(await report(af, "second")) == [("separate", "Pending", None)]

        proc = start_controller(path, engine)
        r = await until(af, "Admitted", "second", timeout=40)
        assert r.status.admission_checks[0].message == f"seen by pid {proc.pid}"
    finally:
        proc.kill()
        proc.wait(10)


async def test_a_controller_starts_in_a_project_with_its_own_worker_workflows_and_activities(engine, tmp_path):
    """Temporal's usual layout: the user's project has a worker.py, workflows/ and activities/ of
    its own, first on sys.path. admitflow installs nothing under those names, so they do not
    shadow it (they did: `from worker import connection` found the user's worker.py)."""
    af = engine.admitflow
    (tmp_path / "worker.py").write_text("raise SystemExit('the project\\'s own worker.py was imported')\n")
    for package in ("workflows", "activities"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text(f"raise SystemExit('the project\\'s own {package} was imported')\n")
    path = tmp_path / "controller.py"
    path.write_text(textwrap.dedent(CONTROLLER_FILE))
    await queue_with(af, check("separate", "tests/separate-process"), checks=["separate"])
    proc = subprocess.Popen(
        [sys.executable, str(path), "--address", engine.address, "--namespace", engine.namespace],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        await submit(af, "first")
        r = await until(af, "Admitted", "first", timeout=40)
        assert r.status.admission_checks[0].message == f"seen by pid {proc.pid}"
    finally:
        proc.kill()
        output = proc.communicate(timeout=10)[0]
    assert "was imported" not in output, output


async def test_the_sdk_marks_its_checks_active_or_says_why_their_parameters_are_bad(engine):
    from pydantic import BaseModel

    class Limits(BaseModel):
        max_cpu: int

    af = engine.admitflow
    controller = Controller("tests/limits", parameters=Limits)
    await af.apply(loaded(
        params("good", {"max_cpu": 4}), params("bad", {"max_cpu": "lots"}),
        check("ok", "tests/limits", "good"), check("typo", "tests/limits", "bad"),
        check("missing", "tests/limits", "nowhere"), check("bare", "tests/limits"), check("other", "someone-else"),
    ))
    async with controller.worker(engine.client):
        wanted = await controller.activate_checks()
        assert wanted == {
            "bare": (False, "BadParametersRef", "missing parameters reference"),
            "missing": (False, "BadParametersRef", 'admissioncheckparameters.admitflow.io "nowhere" not found'),
            "ok": (True, "Active", "The admission check is active"),
            "typo": (False, "BadParametersRef", "invalid parameters: spec.max_cpu: Input should be a valid integer, unable to parse string as an integer"),
        }
        assert await controller.activate_checks() == wanted  # nothing changes the second time
    objects = {o.key: o for o in await af.catalog_objects("AdmissionCheck")}
    assert {k: (c.status, c.reason) for k, o in objects.items() for c in o.status.conditions} == {
        "bare": ("False", "BadParametersRef"), "missing": ("False", "BadParametersRef"),
        "ok": ("True", "Active"), "typo": ("False", "BadParametersRef"),
    }
    await af.apply(loaded(flavor_manifest(), cluster_queue_manifest(checks=[{"name": "ok"}, {"name": "typo"}])))

    async def inactive_reason() -> str:
        cq = (await af.get("ClusterQueue", "cq"))[0]
        return next((c["reason"] for c in (cq.get("status") or {}).get("conditions") or () if c["type"] == "Active"), "")

    async def says_inactive() -> bool:
        return await inactive_reason() == "AdmissionCheckInactive"

    await eventually(says_inactive, 10)


# --- the budget sample controller ------------------------------------------------------------------


async def test_the_budget_controller_admits_retries_rejects_and_flips_on_late_consumption(engine, tmp_path):
    budget = budget_module()
    consumption = tmp_path / "use.json"
    consumption.write_text(json.dumps({"default": 2}))
    controller = budget.make_controller("tests/budget", watch_interval=timedelta(seconds=0.5))
    af = engine.admitflow
    await queue_with(
        af, params("weekly", {"weekly": {"default": 10}, "consumption": str(consumption)}),
        check("budget", "tests/budget", "weekly"), checks=["budget"], cpu="100",
    )
    task = asyncio.ensure_future(controller.run(engine.client))
    try:
        await submit(af, "fits", cpu="4")  # 2 used + 4 of 10
        r = await until(af, "Admitted", "fits", timeout=30)
        assert r.status.admission_checks[0].message == "6 of 10 cpu-hours this week"

        await submit(af, "too-big", cpu="11")
        r = await until(af, "Inactive", "too-big")
        assert cond(r, "Evicted")[2] == (
            'The workload is deactivated due to AdmissionCheck in Rejected state: "budget" '
            "(needs 11 cpu-hours, more than the weekly budget of 10 for default)"
        )

        await submit(af, "over", cpu="9")  # 2 used + 9 > 10: wait for the reset
        r = await until(af, "Backoff", "over")
        [c] = r.status.admission_checks
        assert (c.state, c.retry_count) == ("Pending", 1)
        reset = budget.next_reset(budget.BudgetParameters(weekly={}, consumption=""), datetime.now(UTC))
        assert abs((r.status.requeue_state.requeue_at - reset).total_seconds()) <= 2  # waits for Monday 00:00 UTC

        consumption.write_text(json.dumps({"default": 11}))  # a late update: now over budget
        r = await until(af, "Backoff", "fits", timeout=30)
        assert cond(r, "Evicted")[1] == "AdmissionCheck"
        assert "over budget after a consumption update: 11 > 10 cpu-hours" in cond(r, "Evicted")[2]
    finally:
        task.cancel()


async def test_a_restarted_controller_finds_the_pending_answers_it_still_owes(engine):
    af = engine.admitflow
    first = Controller("tests/forgetful")

    @first.check
    async def _(request):
        return pending("a person will look at it")

    await queue_with(af, check("review", "tests/forgetful"), checks=["review"])
    async with first.worker(engine.client):
        await first.activate_checks()
        for name in ("one", "two"):
            await submit(af, name)
        for name in ("one", "two"):
            await eventually(lambda name=name: _answered_pending(af, name), 20)
    await submit(af, "waits-for-quota", cpu="100")  # holds no quota: nobody was asked about it

    restarted = Controller("tests/forgetful")  # a new process would start like this: nothing in memory
    async with restarted.worker(engine.client):
        owed = await restarted.outstanding()
        assert sorted((r.key, r.admission_check, r.attempt, r.workflow_id) for r in owed) == [
            ("default/one", "review", 1, "workload/default/one"),
            ("default/two", "review", 1, "workload/default/two"),
        ]
        assert owed[0].workload.status.admission_checks[0].message == "a person will look at it"
        for request in owed:
            await restarted.send(request, ready("approved after the restart"))
        for name in ("one", "two"):
            r = await until(af, "Admitted", name)
            assert r.status.admission_checks[0].message == "approved after the restart"
        assert await restarted.outstanding() == []


async def _answered_pending(af, name: str) -> bool:
    r = await report(af, name)
    return any(v.state == "Pending" and v.outcome == "applied" for v in r.verdicts)


async def test_a_background_function_that_fails_is_started_again(engine, monkeypatch):
    import admitflow.controller as sdk

    monkeypatch.setattr(sdk, "RESTART_AFTER", timedelta(seconds=0.1))
    controller = Controller("tests/background")
    runs: list[int] = []
    again = asyncio.Event()

    @controller.background
    async def watch() -> None:
        runs.append(len(runs) + 1)
        if len(runs) == 1:
            raise RuntimeError("the budget service is down")
        again.set()
        await asyncio.Event().wait()

    task = asyncio.ensure_future(controller.run(engine.client))
    try:
        await asyncio.wait_for(again.wait(), 10)
    finally:
        task.cancel()
    assert runs == [1, 2]
