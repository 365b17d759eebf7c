"""Following workloads from the terminal: one line per phase change until all are admitted."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from admitflow.admission import workload as wl
from admitflow.admission.workload import WorkloadState
from admitflow.client import AdmitflowClient


async def follow_until_admitted(client: AdmitflowClient, keys: Sequence[str], interval: float = 0.5) -> None:
    """Print each workload's phase as it changes; return once every one is Admitted or Finished."""
    seen: dict[str, str] = {}
    while True:
        reports = await asyncio.gather(*(client.workload(k, missing_ok=True) for k in keys))
        for key, report in zip(keys, reports, strict=True):
            if report is None:
                continue
            state = WorkloadState(workload=report)
            phase = wl.phase(state)
            line = f"{phase}: {wl.condition_summary(state)}"
            if seen.get(key) != line:
                seen[key] = line
                print(f"  {key:<32} {line}", flush=True)
        if keys and all(v.startswith(("Admitted", "Finished")) for v in seen.values()) and len(seen) == len(keys):
            print(f"All {len(keys)} workloads admitted.", flush=True)
            return
        await asyncio.sleep(interval)
