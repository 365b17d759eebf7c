"""The chaos run (tests/chaos.py) in CI's size: 30 workloads, the engine worker killed with SIGKILL
3 times and the Temporal server once, random controller answers and verdicts by hand (duplicate,
stale, malformed, late). `make soak` runs the issue's size: 300 workloads, 12 worker kills."""

from __future__ import annotations

import pytest

from tests.chaos import Plan, chaos

pytestmark = pytest.mark.integration


async def test_chaos_leaves_no_workload_stuck_no_quota_leaked_and_every_history_replaying(tmp_path):
    report = await chaos(Plan(workloads=30, worker_kills=3, server_kills=1, deadline=600), tmp_path)
    print("\n".join(report.lines()))
    assert report.faults == {"worker": 3, "server": 1}
    assert report.invariant_checks > 10
    assert report.signals["ready"] > 0 and report.answers["ready"] > 0
    assert report.ok, report.problems()
