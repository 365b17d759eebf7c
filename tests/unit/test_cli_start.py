"""The `admitflow` command starts fast (issue 20, part 8): its parser is built from light modules,
so `--help`, `--version` and a bad argument load neither the Temporal SDK nor pydantic nor yaml.
What the parser repeats of heavy modules (the connection flags, a few defaults, the kinds' names)
is held equal to them here."""

from __future__ import annotations

import subprocess
import sys

import pytest

from admitflow import kinds
from admitflow.cli import main, parser

HEAVY = ("temporalio", "pydantic", "yaml")


def _imported(code: str) -> set[str]:
    """The top-level packages `code` imports, read from `python -X importtime`."""
    r = subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True, timeout=60)
    names = set()
    for line in r.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    assert "admitflow" in names, r.stderr[-2000:]
    return names


@pytest.mark.parametrize(
    "code",
    [
        pytest.param("import admitflow.cli", id="import"),
        pytest.param("from admitflow.cli import main; main(['--version'])", id="--version"),
        pytest.param("from admitflow.cli import main; main(['--help'])", id="--help"),
        pytest.param("from admitflow.cli import main; main(['get', '--help'])", id="get --help"),
        pytest.param("from admitflow.cli import main; main(['completion', 'bash'])", id="completion"),
        pytest.param("from admitflow.cli import main; main(['get', 'cq', 'a', '-n', 'x', '-o', 'xml'])", id="a-bad-argument"),
        pytest.param("from admitflow.cli import main; main(['get', 'widgets', '--address', '127.0.0.1:1'])", id="an-unknown-kind"),
    ],
)
def test_the_command_starts_without_the_temporal_sdk_pydantic_or_yaml(code):
    wrapped = f"try:\n    {code}\nexcept SystemExit:\n    pass"
    assert not _imported(wrapped) & set(HEAVY)


def test_the_defaults_in_the_help_are_those_of_the_modules_that_own_them():
    from admitflow.activities.jobs import kube_runner
    from admitflow.admission import catalog
    from admitflow.api.bounds import INT32_MAX
    from admitflow.api.provisioning_request import CONDITION_TYPES
    from admitflow.devserver import DEFAULT_DB
    from admitflow.simulation.autoscaler import SET_BY_HAND

    assert parser.DEFAULT_DB == DEFAULT_DB
    assert parser.SET_BY_HAND == SET_BY_HAND
    assert parser.INT32_MAX == INT32_MAX
    assert (parser.KUBE_RUNNER_QUEUE, parser.KUBE_RUNNER_RESYNC) == (kube_runner.DEFAULT_TASK_QUEUE, kube_runner.RESYNC_SECONDS)
    assert kinds.PROVISIONING_REQUEST_CONDITIONS == CONDITION_TYPES
    assert set(kinds.KIND_NAMES) == {*catalog.CATALOG_KINDS, "Workload", "Job"}


def test_version_prints_the_installed_version(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"admitflow {version('admitflow')}\n"
