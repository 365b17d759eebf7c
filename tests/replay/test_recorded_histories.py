"""Histories written by earlier releases replay against the current workflow code.

`histories/` holds what the main job wrote before admission checks existed (the examples admitted,
one finished). A change that breaks them needs `workflow.patched`; this test says so first.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory

from worker.main import replayer

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*.json"))


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
async def test_a_recorded_history_replays(path: Path):
    workflow_id = path.stem.replace("__", "/")
    result = await replayer().replay_workflow(WorkflowHistory.from_json(workflow_id, path.read_text()))
    assert result.replay_failure is None, result.replay_failure
