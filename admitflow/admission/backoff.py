"""Kueue's exponential backoff, shared by the ProvisioningRequest retries and the PodsReady requeues:
`wait.NewBackoff(base, max, 2, 0.0001).WaitTime(n)` (Kueue's pkg/util/wait/backoff.go, over
apimachinery's wait.Backoff), truncated to whole seconds as Kueue's UpdateAdmissionCheckRequeueState
does."""

from __future__ import annotations

from admitflow.api.bounds import INT32_MAX, INT32_MIN

FACTOR = 2.0
JITTER = 0.0001

_NS = 1_000_000_000
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
# Kueue's NewBackoff: a cap of 0 means `time.Duration(math.MaxInt64 / math.Ceil(factor))`, which
# for factor 2 is 2^62 ns (about 146 years): in effect no cap.
_NO_CAP = int(float(_INT64_MAX) / 2.0)


def _duration(x: float) -> int:
    """Go's time.Duration(x): truncated toward zero. Past the int64 range Go leaves the result to the
    platform: below it amd64 and arm64 both give math.MinInt64 (a negative base, doubled long
    enough); above it, which only a positive base with a negative max reaches (Kueue caps only
    with a positive cap), arm64 saturates at math.MaxInt64 and amd64 gives math.MinInt64; this
    saturates like arm64."""
    if x < _INT64_MIN:
        return _INT64_MIN
    if x > _INT64_MAX:
        return _INT64_MAX
    return int(x)


def _int64(x: int) -> int:
    """Go's int64 addition wraps around."""
    return (x - _INT64_MIN) % 2**64 + _INT64_MIN


def wait_nanoseconds(base_seconds: int, max_seconds: int, n: int) -> int:
    """The n-th step of Kueue's backoff before jitter, in nanoseconds. apimachinery's Backoff.Step
    returns the current duration and then doubles it for the next step, capping the *next* one:
    so the first step is the base even when the base is above the max, and the max applies from
    the second step on. A max of 0 is no cap (2^62 ns). Steps before the first are 0.

    The growth stops as soon as the value stops changing (capped, 0, or pinned at math.MinInt64
    for a negative base), which takes at most about 64 doublings: any n, even 2^31, is cheap."""
    if n < 1:
        return 0
    cap = max_seconds * _NS if max_seconds != 0 else _NO_CAP
    d = base_seconds * _NS
    for _ in range(n - 1):
        nxt = _duration(float(d) * FACTOR)
        if cap > 0 and nxt > cap:
            return cap  # the Backoff's steps drop to 0: every later step is the cap
        if nxt == d:
            break
        d = nxt
    return d


def backoff_seconds(base: int, maximum: int, n: int, random: float) -> int:
    """The delay before the n-th retry (n = retryCount + 1, or requeueState.count + 1), in whole
    seconds: the n-th step of Kueue's wait.Backoff{Duration: base, Factor: 2, Jitter: 0.0001,
    Cap: max} (Kueue's pkg/util/wait Backoff.WaitTime), jittered as apimachinery's wait.Jitter does
    (d + time.Duration(U * 0.0001 * d), `random` being U) and truncated to the second
    (Duration.Truncate(time.Second)).

    That is base for n = 1 and min(base * 2^(n-1), max) after; max 0 means no cap. The jitter
    applies after the cap, so a delay may pass the max by 0.01 % before it is truncated.

    Kueue turns the seconds into an int32; where they do not fit (only with no cap or a negative
    base, after decades of doubling) Go leaves the value to the platform, and this holds them at
    the int32 bounds instead (a delay is stored in an int32 field)."""
    d = wait_nanoseconds(base, maximum, n)
    if n >= 1:
        d = _int64(d + _duration(random * JITTER * float(d)))
    seconds = d // _NS if d >= 0 else -(-d // _NS)
    return max(INT32_MIN, min(seconds, INT32_MAX))
