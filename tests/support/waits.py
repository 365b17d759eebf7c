"""Waits for durable facts: a test never polls for a state that lasts a moment."""

from __future__ import annotations

import asyncio

from admitflow.admission import workload as wl
from admitflow.client import AdmitflowClient


async def until_phase(af: AdmitflowClient, keys: list[str], *phases: str, timeout: float = 60.0) -> None:
    """Every workload of `keys` is in one of `phases` (phases that last: Admitted, Finished, ...)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        reports = [await af.workload(k) for k in keys]
        if all(wl.phase(wl.WorkloadState(workload=r)) in phases for r in reports):
            return
        if loop.time() > deadline:
            raise TimeoutError(f"{keys} never reached {' or '.join(phases)}")
        await asyncio.sleep(0.1)
