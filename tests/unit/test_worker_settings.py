"""`admitflow worker`'s SDK settings (docs/operations.md, "Worker settings"): each flag is a Worker
option of the same name, a value below 1 is refused in one line, and what is not given is left to
the SDK."""

from __future__ import annotations

import inspect

import pytest
from temporalio.worker import Worker

from admitflow import cli


def parse(*argv: str):
    return cli._parser().parse_args(["worker", *argv])


def test_each_flag_is_the_worker_option_of_its_name():
    options = inspect.signature(Worker.__init__).parameters
    for flag, default, _ in cli.WORKER_SETTINGS:
        assert flag.replace("-", "_") in options, flag
    assert options["max_cached_workflows"].default == dict((f, d) for f, d, _ in cli.WORKER_SETTINGS)["max-cached-workflows"]


def test_given_settings_are_read_and_the_others_left_unset():
    args = parse("--max-cached-workflows", "2000", "--max-concurrent-activities", "7")
    assert (args.max_cached_workflows, args.max_concurrent_activities, args.max_concurrent_workflow_tasks) == (2000, 7, None)


@pytest.mark.parametrize("value", ["0", "-3", "many"])
def test_a_value_below_one_is_refused_in_one_line(value, capsys):
    with pytest.raises(SystemExit) as exit:
        parse("--max-concurrent-workflow-tasks", value)
    assert exit.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f'admitflow worker: error: argument --max-concurrent-workflow-tasks: "{value}": must be a whole number of at least 1']
