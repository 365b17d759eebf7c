"""`admitflow worker`'s SDK settings (docs/operations.md, "Worker settings"): each flag is a Worker
option of the same name (the pollers: the simple poller behaviour), a value below 1 is refused in
one line, and what is not given is left to the SDK. And the process's
garbage collector, tuned once the worker's process has started."""

from __future__ import annotations

import gc
import inspect

import pytest
from temporalio.worker import PollerBehaviorSimpleMaximum, Worker

from admitflow.cli.parser import WORKER_SETTINGS, build_parser
from admitflow.worker.main import GC_YOUNGEST, sdk_options, tune_collector


def parse(*argv: str):
    return build_parser().parse_args(["worker", *argv])


def test_each_flag_is_a_worker_option_with_the_default_it_says():
    """The option of its name with the SDK's default; for the pollers, the simple poller behaviour,
    whose default is the SDK's too."""
    options = inspect.signature(Worker.__init__).parameters
    for flag, default, _ in WORKER_SETTINGS:
        (name, value), = sdk_options(**{flag.replace("-", "_"): default}).items()
        assert name in options, flag
        if isinstance(value, PollerBehaviorSimpleMaximum):
            assert options[name].default == value, flag
        elif name not in ("max_concurrent_workflow_tasks", "max_concurrent_activities"):
            assert options[name].default == default, flag
    assert options["max_concurrent_workflow_tasks"].default is None, "the SDK's own default applies (100)"
    assert options["max_concurrent_activities"].default is None, "the SDK's own default applies (100)"


def test_pollers_become_the_simple_poller_behaviour():
    assert sdk_options(workflow_task_pollers=2, activity_task_pollers=9, max_cached_workflows=10) == {
        "workflow_task_poller_behavior": PollerBehaviorSimpleMaximum(maximum=2),
        "activity_task_poller_behavior": PollerBehaviorSimpleMaximum(maximum=9),
        "max_cached_workflows": 10,
    }


def test_given_settings_are_read_and_the_others_left_unset():
    args = parse("--max-cached-workflows", "2000", "--max-concurrent-activities", "7", "--workflow-task-pollers", "3")
    assert (args.max_cached_workflows, args.max_concurrent_activities, args.max_concurrent_workflow_tasks) == (2000, 7, None)
    assert (args.workflow_task_pollers, args.activity_task_pollers) == (3, None)


@pytest.mark.parametrize("value", ["0", "-3", "many"])
def test_a_value_below_one_is_refused_in_one_line(value, capsys):
    with pytest.raises(SystemExit) as exit:
        parse("--max-concurrent-workflow-tasks", value)
    assert exit.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f'admitflow worker: error: argument --max-concurrent-workflow-tasks: "{value}": must be a whole number of at least 1']


def test_one_workflow_task_poller_is_refused_in_one_line(capsys):
    """The SDK needs two while it caches workflows (one for the sticky queue); it would refuse one
    with a traceback when the worker starts."""
    with pytest.raises(SystemExit):
        parse("--workflow-task-pollers", "1")
    assert capsys.readouterr().err.strip().splitlines() == [
        'admitflow worker: error: argument --workflow-task-pollers: "1": must be a whole number of at least 2'
    ]
    assert parse("--workflow-task-pollers", "2", "--activity-task-pollers", "1").workflow_task_pollers == 2


def test_the_collector_leaves_what_the_process_started_with_alone_and_runs_less_often():
    threshold = gc.get_threshold()
    try:
        started_with = [object()]  # one container alive when the worker starts
        tune_collector()
        assert gc.get_threshold() == (GC_YOUNGEST, *threshold[1:])
        assert gc.get_freeze_count() > 0
        assert not any(started_with is o for o in gc.get_objects()), "frozen: no collection looks at it"
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)


@pytest.mark.parametrize("command", ["worker", "dev", "exporter"])
@pytest.mark.parametrize("flag, env", [
    pytest.param(["--metrics-port", "70000"], None, id="given-as-the-flag"),
    pytest.param([], "70000", id="beyond-65535-in-the-environment"),
    pytest.param([], "abc", id="not-a-number-in-the-environment"),
])
def test_a_metrics_port_that_is_no_port_is_refused_in_one_line(command, flag, env, monkeypatch, capsys):
    """Given as the flag or in ADMITFLOW_METRICS_PORT (which is named then): one line, status 2,
    for every command, before anything starts."""
    if env is None:
        monkeypatch.delenv("ADMITFLOW_METRICS_PORT", raising=False)
    else:
        monkeypatch.setenv("ADMITFLOW_METRICS_PORT", env)
    with pytest.raises(SystemExit) as exit:
        build_parser().parse_args([command, *flag])
    assert exit.value.code == 2
    source = "" if env is None else " (from ADMITFLOW_METRICS_PORT)"
    assert capsys.readouterr().err.strip().splitlines() == [
        f'admitflow {command}: error: argument --metrics-port: "{env or flag[1]}"{source}: must be a port number from 1 to 65535'
    ]


def test_a_metrics_port_from_the_environment_is_read(monkeypatch):
    monkeypatch.setenv("ADMITFLOW_METRICS_PORT", "9100")
    assert [build_parser().parse_args([c]).metrics_port for c in ("worker", "dev", "exporter")] == [9100, 9100, 9100]
    monkeypatch.delenv("ADMITFLOW_METRICS_PORT")
    assert [build_parser().parse_args([c]).metrics_port for c in ("worker", "dev", "exporter")] == [None, None, 9464]
