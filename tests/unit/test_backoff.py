"""Kueue's backoff (pkg/util/wait Backoff.WaitTime over apimachinery's wait.Backoff, factor 2, jitter
0.0001, whole seconds), shared by ProvisioningRequest retries and PodsReady requeues."""

from __future__ import annotations

import itertools

import pytest

from admitflow.admission.backoff import backoff_seconds

NS = 1_000_000_000


@pytest.mark.parametrize(
    ("base", "maximum", "n", "random", "seconds"),
    [
        pytest.param(60, 1800, 1, 0.0, 60, id="the-first-retry-waits-the-base"),
        pytest.param(60, 1800, 3, 0.0, 240, id="each-retry-doubles-the-wait"),
        pytest.param(60, 1800, 6, 0.0, 1800, id="the-max-caps-the-wait"),
        pytest.param(1, 5, 4, 0.0, 5, id="a-doubling-past-the-max-is-cut-to-the-max"),
        pytest.param(100, 50, 1, 0.0, 100, id="the-first-retry-waits-the-base-even-above-the-max"),
        pytest.param(100, 50, 2, 0.0, 50, id="the-max-applies-from-the-second-retry-on"),
        pytest.param(60, 0, 10, 0.0, 30720, id="a-max-of-zero-is-no-cap"),
        pytest.param(60, 0, 2**31, 0.0, 2**31 - 1, id="without-a-cap-the-wait-is-held-at-the-int32-max-it-is-stored-in"),
        pytest.param(60, 1800, 2**31, 0.0, 1800, id="a-huge-retry-count-is-the-max-at-once"),
        pytest.param(0, 1800, 5, 0.99, 0, id="a-zero-base-never-waits"),
        pytest.param(60, 1800, 0, 0.5, 0, id="before-the-first-retry-nothing-is-waited"),
        pytest.param(60, 1800, 1, 0.99, 60, id="the-jitter-is-a-ten-thousandth-truncated-to-the-second"),
        pytest.param(10000, 30000, 3, 0.999, 30002, id="the-jitter-applies-after-the-cap"),
        pytest.param(50000, 0, 1, 0.2, 50001, id="the-jitter-is-added-in-nanoseconds-as-go-adds-it"),
        pytest.param(-60, 1800, 3, 0.0, -240, id="a-negative-base-doubles-away-from-any-cap"),
        pytest.param(-60, 1800, 1, 0.5, -60, id="a-negative-wait-is-truncated-toward-zero"),
    ],
)
def test_backoff_seconds(base, maximum, n, random, seconds):
    assert backoff_seconds(base, maximum, n, random) == seconds


def _go_step(steps: int, duration: int, cap: int, random: float) -> tuple[int, int, int]:
    """apimachinery's wait.Backoff delay(), factor 2, jitter 0.0001, `random` for rand.Float64()."""
    if steps < 1:
        return duration + int(random * 0.0001 * float(duration)), duration, 0
    steps -= 1
    nxt = int(float(duration) * 2.0)
    if cap > 0 and nxt > cap:
        nxt, steps = cap, 0
    return duration + int(random * 0.0001 * float(duration)), nxt, steps


def _kueue_wait_time(base: int, maximum: int, n: int, random: float) -> int:
    """Kueue's NewBackoff(base, max, 2, 0.0001).WaitTime(n), step by step, in whole seconds (held
    within int32, as the delay is stored)."""
    cap = maximum * NS or int(float(2**63 - 1) / 2.0)
    steps, duration, out = 2**63 - 1, base * NS, 0
    for _ in range(n):
        out, duration, steps = _go_step(steps, duration, cap, random)
        if out == cap:
            break
    return min(out // NS, 2**31 - 1)


@pytest.mark.parametrize(
    ("base", "maximum"),
    [
        pytest.param(60, 1800, id="kueues-provisioning-defaults"),
        pytest.param(60, 3600, id="kueues-pods-ready-defaults"),
        pytest.param(7, 1000, id="a-max-that-is-no-power-of-two-of-the-base"),
        pytest.param(300, 60, id="a-base-above-the-max"),
        pytest.param(45, 0, id="no-cap"),
        pytest.param(2147483647, 2147483647, id="the-int32-extremes"),
    ],
)
def test_every_retry_matches_kueues_loop_step_by_step(base, maximum):
    for n, random in itertools.product(range(0, 70), (0.0, 0.2, 0.5, 0.999999)):
        assert backoff_seconds(base, maximum, n, random) == _kueue_wait_time(base, maximum, n, random), (n, random)
