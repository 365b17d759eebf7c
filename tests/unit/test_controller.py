"""The SDK's verdict helpers."""

from __future__ import annotations

from datetime import timedelta

import pytest

from admitflow.controller import pending, ready, rejected, retry


@pytest.mark.parametrize(
    ("after", "seconds"),
    [
        pytest.param(None, None, id="no-delay-leaves-it-to-the-checks-retry-strategy"),
        pytest.param(600, 600, id="whole-seconds-as-given"),
        pytest.param(0.2, 1, id="a-fraction-rounds-up-never-early"),
        pytest.param(timedelta(minutes=10, microseconds=1), 601, id="a-timedelta-rounds-up-too"),
    ],
)
def test_retry_delay_is_never_shorter_than_asked(after, seconds):
    assert retry("busy", after=after).requeue_after_seconds == seconds


def test_the_helpers_build_verdicts_for_the_engine_to_address():
    v = ready("ok", pod_set_updates=[{"name": "main", "nodeSelector": {"pool": "gpu"}}])
    assert v.to_wire() == {
        "name": "",
        "state": "Ready",
        "message": "ok",
        "podSetUpdates": [{"name": "main", "nodeSelector": {"pool": "gpu"}}],
    }
    assert [h("m").state for h in (pending, rejected)] == ["Pending", "Rejected"]
