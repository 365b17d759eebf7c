"""When the main job's follow sums up: every workload admitted, finished or waiting for a person."""

from __future__ import annotations

import pytest

from admitflow.progress import summary

ADMITTED = "Admitted: The workload is admitted"
FINISHED = "Finished: Job finished successfully"
PENDING = "Pending: ClusterQueue reviewed is inactive"


@pytest.mark.parametrize(
    ("lines", "waiting", "total", "want"),
    [
        pytest.param({"a": ADMITTED, "b": FINISHED}, set(), 2, "All 2 workloads admitted.", id="admitted-and-finished-count-as-admitted"),
        pytest.param({"a": ADMITTED, "b": PENDING}, {"b"}, 2, "1 of 2 workloads admitted; 1 waits for you (see above).", id="one-waits-for-a-person"),
        pytest.param({"a": PENDING, "b": PENDING}, {"a", "b"}, 2, "0 of 2 workloads admitted; 2 wait for you (see above).", id="two-wait"),
        pytest.param({"a": ADMITTED, "b": PENDING}, set(), 2, None, id="a-workload-still-on-its-way-is-not-settled"),
        pytest.param({"a": ADMITTED}, set(), 2, None, id="a-workload-not-seen-yet-is-not-settled"),
        pytest.param({"a": ADMITTED, "b": ADMITTED}, {"b"}, 2, "All 2 workloads admitted.", id="a-need-told-earlier-ends-with-admission"),
    ],
)
def test_summary(lines, waiting, total, want):
    assert summary(lines, waiting, total) == want
