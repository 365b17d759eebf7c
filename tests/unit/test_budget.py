"""The budget sample controller's rules (examples/controllers/budget.py), as pure functions."""

from __future__ import annotations

import importlib.util
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from admitflow.api import Workload

PATH = Path(__file__).resolve().parents[2] / "examples" / "controllers" / "budget.py"


def _module():
    spec = importlib.util.spec_from_file_location("budget_example", PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


budget = _module()
NOW = datetime(2026, 11, 18, 12, 0, tzinfo=UTC)  # a Wednesday
PARAMS = budget.BudgetParameters.model_validate({"weekly": {"team-a": 100}, "consumption": "unused.json"})


def workload(cpu: str = "2", count: int = 3, seconds: int | None = None) -> Workload:
    spec = {
        "queueName": "q",
        "podSets": [{"name": "main", "count": count, "template": {"spec": {"containers": [
            {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]}}}],
    }
    if seconds:
        spec["maximumExecutionTimeSeconds"] = seconds
    return Workload.model_validate({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
                                    "metadata": {"name": "w", "namespace": "team-a"}, "spec": spec})


def test_cost_is_requests_times_runtime():
    assert budget.cost(workload("500m", 4), PARAMS) == 2.0  # 2 cores for the default hour
    assert budget.cost(workload("2", 3, seconds=5400), PARAMS) == 9.0  # 6 cores for 1.5 h


@pytest.mark.parametrize(
    ("namespace", "used", "needed", "state", "message"),
    [
        pytest.param("team-a", 40, 60, "Ready", "100 of 100 cpu-hours this week", id="within-budget-is-ready"),
        pytest.param("team-a", 41, 60, "Retry",
                     "over budget: 41 used + 60 needed > 100 cpu-hours; waits for the reset at 2026-11-23T00:00:00+00:00",
                     id="over-budget-retries-until-the-reset"),
        pytest.param("team-a", 0, 101, "Rejected", "needs 101 cpu-hours, more than the weekly budget of 100 for team-a",
                     id="more-than-the-whole-budget-is-rejected"),
        pytest.param("team-z", 0, 1, "Rejected", "namespace team-z has no cpu budget", id="no-budget-is-rejected"),
    ],
)
def test_the_three_outcomes(namespace, used, needed, state, message):
    v = budget.decide(PARAMS, namespace, used, needed, NOW)
    assert (v.state, v.message) == (state, message)
    if state == "Retry":
        assert v.requeue_after_seconds == int(timedelta(days=4, hours=12).total_seconds())


@pytest.mark.parametrize(
    ("week_starts", "now", "reset"),
    [
        ("Monday", NOW, datetime(2026, 11, 23, tzinfo=UTC)),
        ("Wednesday", NOW, datetime(2026, 11, 25, tzinfo=UTC)),  # today's reset has passed: next week's
        ("Thursday", NOW, datetime(2026, 11, 19, tzinfo=UTC)),
    ],
)
def test_the_budget_resets_at_midnight_utc_on_its_day(week_starts, now, reset):
    p = PARAMS.model_copy(update={"week_starts": week_starts})
    assert budget.next_reset(p, now) == reset


def test_consumption_comes_from_a_json_or_csv_file(tmp_path):
    (tmp_path / "use.json").write_text('{"team-a": 12.5}')
    (tmp_path / "use.csv").write_text("namespace,hours\nteam-a,3\nteam-b,4.5\n")
    assert budget.FileConsumption(str(tmp_path / "use.json")).used() == {"team-a": 12.5}
    assert budget.FileConsumption(str(tmp_path / "use.csv")).used() == {"team-a": 3.0, "team-b": 4.5}
    assert budget.FileConsumption(str(tmp_path / "missing.json")).used() == {}


def test_parameters_are_validated_by_the_controllers_model():
    controller = budget.make_controller()
    with pytest.raises(ValueError, match=r"^invalid parameters: spec.weekly: Field required$"):
        controller.parse_parameters({"consumption": "x.json"})
    with pytest.raises(ValueError, match=r"^missing parameters reference$"):
        controller.parse_parameters(None)
