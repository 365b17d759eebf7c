"""docs/controllers.md, executed: its files are written, its commands run against the dev server as a
reader would run them (the `admitflow` and `temporal` commands, the controller in its own process),
and what it says they print is what they print. The marker convention is in the HTML comment at
the top of the page."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType

from admitflow import ids
from admitflow.admission import workload as wl
from admitflow.admission.checks import STATES, CheckRequest, Verdict
from admitflow.admission.workload import WorkloadState
from admitflow.api import Workload
from admitflow.messages import AdmissionCheckActive
from admitflow.wire import WireModel

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "controllers.md"
BIN = Path(sys.executable).parent
REPEAT_FOR = 30.0  # seconds a `sh repeat` block may take to print what the page says

FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```[ \t]*$", re.M | re.S)
CHECKED_JSON: dict[str, type[WireModel]] = {"input": CheckRequest, "verdict": Verdict, "active": AdmissionCheckActive}
NOT_RUN = {"go", "ts", "java"}


@dataclass
class Block:
    lang: str
    words: list[str]
    text: str
    line: int
    attrs: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"docs/controllers.md:{self.line} ({' '.join([self.lang, *self.words])})"


def page_blocks() -> list[Block]:
    text = DOC.read_text()
    out = []
    for m in FENCE.finditer(text):
        lang, *words = m.group(1).split() or [""]
        block = Block(lang, words, m.group(2), text.count("\n", 0, m.start()) + 1)
        block.attrs = dict(w.split("=", 1) for w in words if "=" in w)
        out.append(block)
    return out


def kind(block: Block) -> str:
    """What the test does with a block (the convention at the top of the page), or why it cannot."""
    flags = [w for w in block.words if "=" not in w]
    if block.lang in NOT_RUN and not block.words:
        return "not run"
    if block.lang in ("python", "yaml") and list(block.attrs) == ["file"] and not flags:
        return "file"
    if block.lang == "sh" and not block.attrs and flags in ([], ["repeat"], ["background"], ["skip"]):
        return "sh " + (flags[0] if flags else "run")
    if block.lang == "text" and block.words == ["output"]:
        return "output"
    if block.lang == "json" and len(block.words) == 1 and block.words[0] in CHECKED_JSON:
        return "json"
    return f"unmarked: {block} has no marker this test knows"


# --- comparing what a command printed with what the page says it prints ---------------------------

TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)?")
AGE = re.compile(r"\b\d+[smhd]\b")


def normal(line: str) -> str:
    return " ".join(AGE.sub("<age>", TIMESTAMP.sub("<time>", line)).split())


def shows(expected: str, actual: str) -> bool:
    """Whether `actual` is what `expected` shows: the same lines in the same order, where a line
    `...` stands for any number of lines; spaces, ages and timestamps as the page's convention says."""
    want = [normal(x) for x in expected.splitlines() if x.strip()]
    have = [normal(x) for x in actual.splitlines() if x.strip()]
    segments: list[list[str]] = [[]]
    for line in want:
        if line == "...":
            segments.append([])
        else:
            segments[-1].append(line)
    if len(segments) == 1:
        return have == want
    first, *middle, last = segments
    start, end = len(first), len(have) - len(last)
    if end < start or have[:start] != first or have[end:] != last:
        return False
    for seg in middle:
        at = next((i for i in range(start, end - len(seg) + 1) if have[i : i + len(seg)] == seg), None)
        if at is None:
            return False
        start = at + len(seg)
    return True


@pytest.mark.parametrize(
    ("expected", "actual", "ok"),
    [
        pytest.param("a  b\nc", "a b\nc\n", True, id="runs-of-spaces-count-as-one"),
        pytest.param("a\nc", "a\nb\nc", False, id="without-dots-every-line-counts"),
        pytest.param("a\n...\nc", "a\nb\nb\nc", True, id="dots-stand-for-lines-left-out"),
        pytest.param("...\nb\n...", "a\nb\nc", True, id="dots-at-both-ends-make-an-excerpt"),
        pytest.param("...\nc\n...\nb\n...", "a\nb\nc", False, id="an-excerpt-keeps-the-order"),
        pytest.param("x   3s   2026-01-05T09:00:00Z", "x 2m 2026-11-23T11:36:34+00:00", True, id="ages-and-times-match-any"),
        pytest.param("NAME   ACTIVE\nquota   True", "NAME ACTIVE\nquota False", False, id="a-different-value-does-not"),
    ],
)
def test_output_blocks_compare_as_the_page_says(expected, actual, ok):
    assert shows(expected, actual) is ok


def test_every_block_of_the_page_is_marked_and_its_json_fits_the_contract():
    blocks = page_blocks()
    kinds = [kind(b) for b in blocks]
    assert [k for k in kinds if k.startswith("unmarked")] == []
    for i, b in enumerate(blocks):
        if kinds[i] == "output":
            assert i > 0 and kinds[i - 1] in ("sh run", "sh repeat"), f"{b} does not follow a command it could show"
        if kinds[i] == "sh repeat":
            assert i + 1 < len(blocks) and kinds[i + 1] == "output", f"{b} has no output to wait for"
        if kinds[i] == "json":
            model = CHECKED_JSON[b.words[0]]
            obj = json.loads(b.text)
            aliases = {f.alias or name for name, f in model.model_fields.items()}
            assert set(obj) <= aliases, f"{b}: fields the contract does not have: {set(obj) - aliases}"
            # An activity's result may leave `name` out: the engine fills in the check it asked about.
            model.model_validate({"name": "quota", **obj} if model is Verdict else obj)
    inputs = [json.loads(b.text) for b, k in zip(blocks, kinds, strict=True) if k == "json" and b.words == ["input"]]
    assert [sorted(i) for i in inputs] == [["admissionCheck", "attempt", "parameters", "workflowId", "workload"]]
    Workload.model_validate(inputs[0]["workload"])
    verdicts = [json.loads(b.text) for b, k in zip(blocks, kinds, strict=True) if k == "json" and b.words == ["verdict"]]
    assert verdicts and all(v["state"] in STATES for v in verdicts)
    assert {"file", "sh run", "sh repeat", "sh background", "output", "json"} <= set(kinds)


# --- running the page -------------------------------------------------------------------------------


def reader_env(engine) -> dict[str, str]:
    """A reader's shell: the project's virtualenv first on PATH, the test's server and namespace in
    Temporal's standard variables, nothing else from the caller's Temporal or admitflow settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "ADMITFLOW_"))}
    env.update(
        TEMPORAL_ADDRESS=engine.address,
        TEMPORAL_NAMESPACE=engine.namespace,
        PYTHONPATH=str(ROOT),
        PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        PYTHONUNBUFFERED="1",
    )
    return env


async def bash(script: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    # In a thread: the engine's worker runs in this test's event loop and must keep running.
    return await asyncio.to_thread(
        subprocess.run, ["bash", "-e", "-o", "pipefail", "-c", script],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=60,
    )


async def sweep_request(engine) -> dict[str, Any]:
    """What the engine sent the quota office about team-a/sweep, from the workload's history."""
    handle = engine.client.get_workflow_handle(ids.workload_id("team-a/sweep"))
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            if attrs.activity_type.name == "admission_check":
                assert (attrs.task_queue.name, dict(attrs.input.payloads[0].metadata)) == (
                    "example.com/quota-office", {"encoding": b"json/plain"},
                )
                return json.loads(attrs.input.payloads[0].data)
    raise AssertionError("team-a/sweep never asked the quota office")


async def test_the_tutorial_runs_as_written(engine, tmp_path):
    env = reader_env(engine)
    blocks = page_blocks()
    kinds = [kind(b) for b in blocks]
    background: list[tuple[Block, subprocess.Popen, Path]] = []

    def still_running() -> None:
        for block, proc, log in background:
            assert proc.poll() is None, f"{block} stopped (exit {proc.returncode}):\n{log.read_text()}"

    try:
        for i, block in enumerate(blocks):
            what = kinds[i]
            assert not what.startswith("unmarked"), what
            if what == "file":
                (tmp_path / block.attrs["file"]).write_text(block.text)
            elif what == "sh background":
                log = tmp_path / f"background-{block.line}.log"
                with log.open("w") as out:
                    proc = subprocess.Popen(
                        ["bash", "-c", block.text], cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT,
                        start_new_session=True,  # its own process group, so that the end stops it and its children
                    )
                background.append((block, proc, log))
            elif what in ("sh run", "sh repeat"):
                expected = blocks[i + 1].text if i + 1 < len(blocks) and kinds[i + 1] == "output" else None
                deadline = time.monotonic() + (REPEAT_FOR if what == "sh repeat" else 0)
                while True:
                    r = await bash(block.text, tmp_path, env)
                    ok = r.returncode == 0 and (expected is None or shows(expected, r.stdout))
                    if ok or time.monotonic() > deadline:
                        break
                    still_running()
                    await asyncio.sleep(0.5)
                assert r.returncode == 0, f"{block} exited {r.returncode}:\n{r.stdout}{r.stderr}"
                assert ok, f"{block} printed, in the end:\n{r.stdout}{r.stderr}\nnot what the page shows:\n{expected}"
            still_running()

        # What the page promises, read from the engine rather than from the CLI's printing.
        phases = {}
        for key in ("team-a/small", "team-a/sweep", "team-a/tuning", "team-b/nightly", "team-a/giant"):
            report = await engine.admitflow.workload(key)
            checks = [(c.name, c.state, c.retry_count) for c in report.status.admission_checks]
            phases[key] = (wl.phase(WorkloadState(workload=report)), checks)
        assert phases == {
            "team-a/small": ("Admitted", [("quota", "Ready", None)]),
            "team-a/sweep": ("Admitted", [("quota", "Ready", None)]),
            "team-a/tuning": ("Inactive", [("quota", "Pending", None)]),
            "team-b/nightly": ("Backoff", [("quota", "Pending", 1)]),
            "team-a/giant": ("Inactive", [("quota", "Pending", None)]),
        }
        sweep = await engine.admitflow.workload("team-a/sweep")
        assert sweep.status.admission_checks[0].message == "approved by a reviewer"  # sent by the controller
        small = await engine.admitflow.workload("team-a/small")
        assert small.pod_sets_info[0].labels["example.com/quota-office"] == "approved"

        # The page's example of the activity's input has the shape the engine really sends.
        sent = await sweep_request(engine)
        [example] = [json.loads(b.text) for b, k in zip(blocks, kinds, strict=True) if k == "json" and b.words == ["input"]]
        assert sorted(sent) == sorted(example)
        assert sorted(sent["workload"]) == sorted(example["workload"])
        assert sorted(sent["workload"]["status"]) == sorted(example["workload"]["status"])
        assert {k: sent[k] for k in ("admissionCheck", "parameters", "attempt", "workflowId")} == {
            k: example[k] for k in ("admissionCheck", "parameters", "attempt", "workflowId")
        }
    finally:
        for _, proc, _ in background:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for _, proc, _ in background:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
