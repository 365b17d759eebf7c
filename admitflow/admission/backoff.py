"""Kueue's exponential backoff (pkg/util/wait/backoff.go: apimachinery's wait.Backoff with factor 2
and jitter 0.0001), shared by the ProvisioningRequest retries and the PodsReady requeues."""

from __future__ import annotations


def backoff_seconds(base: int, maximum: int, n: int, random: float) -> int:
    """The delay before the n-th retry: min(base * 2^(n-1), max) * (1 + U * 0.0001), in whole
    seconds. The jitter applies after the cap, so a delay may pass the max by 0.01 % before it is
    truncated (the docs' base^n is wrong, reference §2.4)."""
    delay = min(base * 2 ** (n - 1), maximum)
    return int(delay * (1 + random * 0.0001))
