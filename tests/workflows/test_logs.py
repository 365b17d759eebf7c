"""The workload workflow's log: a line per event and verdict with the workload, its ClusterQueue and
the check and attempt bound, through structlog; nothing while a history is replayed."""

from __future__ import annotations

import io
import json
import logging

from admitflow import ids
from admitflow.admission.checks import Verdict
from tests.workflows.test_backoff import setup
from tests.workflows.test_lifecycle import replay_all, until_phase
from admitflow.worker.logging import configure


async def test_events_and_verdicts_are_logged_once_and_not_on_replay(skipping_env, skipping_engine):
    engine = skipping_engine
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    stream = io.StringIO()
    configure("INFO", json=True)
    logging.getLogger().handlers[0].setStream(stream)
    try:
        await setup(engine, answered=False)
        await engine.admitflow.verdict("default/job", Verdict(name="budget", state="Ready", attempt=1))
        await until_phase(engine, "job", "Admitted")
        lines = [json.loads(line) for line in stream.getvalue().splitlines()]
        mine = [r for r in lines if r.get("workload") == "default/job"]
        assert [(r["reason"], r["cluster_queue"], r["level"]) for r in mine if r.get("reason")] == [
            ("QuotaReserved", "cq", "info"), ("AdmissionCheckUpdated", "cq", "info"), ("Admitted", "cq", "info")
        ], "each event once"
        assert all(r["event"].startswith(r["reason"]) for r in mine if r.get("reason"))
        [verdict] = [r for r in mine if r.get("check")]
        assert verdict["event"].startswith("verdict")
        assert (verdict["check"], verdict["attempt"], verdict["state"], verdict["outcome"], verdict["level"]) == (
            "budget", 1, "Ready", "applied", "info"
        )

        stream.seek(0)
        stream.truncate()
        await replay_all(engine, [ids.workload_id("default/job")])
        assert [line for line in stream.getvalue().splitlines() if "default/job" in line] == [], "silent on replay"
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)
