"""Following workloads from the terminal: a line per phase change, what a workload that waits for a
person needs, and a summary whenever nothing moves any more without one. Each round reads the
workloads' memos with the rows of visibility lists (admitflow/memos.py): no workflow is queried."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from admitflow.admission import workload as wl
from admitflow.admission.workload import WorkloadReport, WorkloadState
from admitflow.client import AdmitflowClient
from admitflow.client.reads import SUPERSEDED_CHUNK
from admitflow.printing import controller_lines

# A workload's phase must hold this long (seconds) before we ask whether it waits for a person: a
# controller that has just started gets the time to mark its checks Active and answer.
STILL = 3.0
# Each round reads the followed workloads with one visibility list per reads.SUPERSEDED_CHUNK of
# them, and rounds are at least this far apart per list: a production namespace allows about 10
# visibility requests a second, and a follow of thousands stays at about two.
PER_LIST = 0.5


def done(line: str) -> bool:
    return line.startswith(("Admitted", "Finished"))


def summary(lines: dict[str, str], waiting: set[str], total: int) -> str | None:
    """The summary once every workload is admitted, finished or waits for a person; else None."""
    admitted = sum(done(line) for line in lines.values())
    people = len(waiting - {k for k, line in lines.items() if done(line)})
    if len(lines) < total or admitted + people < total:
        return None
    if not people:
        return f"All {total} workloads admitted."
    return f"{admitted} of {total} workloads admitted; {people} {'waits' if people == 1 else 'wait'} for you (see above)."


async def follow(
    client: AdmitflowClient, keys: Sequence[str], settled: Callable[[], None] = lambda: None, interval: float = 1.0
) -> None:
    """Print each workload's phase as it changes. A workload whose phase holds and that waits for a
    check nobody serves gets the commands that answer in the controller's place. Each time the
    summary changes it is printed, and `settled` is called the first time. Runs until cancelled."""
    loop = asyncio.get_running_loop()
    lines: dict[str, str] = {}
    since: dict[str, float] = {}
    looked: dict[str, float] = {}
    needs: dict[str, set[tuple[str, bool]]] = {}
    said: str | None = None
    if not keys:
        settled()
    lists = -(-len(keys) // SUPERSEDED_CHUNK)
    interval = max(interval, PER_LIST * lists)
    while keys:
        found = await client.workload_reports(keys)
        now = loop.time()
        for key, report in ((k, found.get(k)) for k in keys):
            if report is None or not report.status.conditions:
                continue  # gone, or its first workflow task has not written its memo yet
            state = WorkloadState(workload=report)
            line = f"{wl.phase(state)}: {wl.condition_summary(state)}"
            if lines.get(key) != line:
                lines[key], since[key] = line, now
                needs.pop(key, None)
                print(f"  {key:<32} {line}", flush=True)
            elif not done(line) and now - since[key] >= STILL and now - looked.get(key, 0.0) >= STILL:
                looked[key] = now
                await _tell_needs(client, report, needs)
        text = summary(lines, {k for k, n in needs.items() if n}, len(keys))
        if text is not None and text != said:
            print(text, flush=True)
            if said is None:
                settled()
            said = text
        await asyncio.sleep(interval)


async def _tell_needs(client: AdmitflowClient, report: WorkloadReport, needs: dict[str, set[tuple[str, bool]]]) -> None:
    """Print what a person can do for a workload that waits for a controller nobody runs, when that
    changed since it was last told."""
    calls = await client.controller_calls(report) or await client.inactive_checks(report)
    unanswered = [c for c in calls if c.unanswered]
    what = {(c.check, c.inactive) for c in unanswered}
    if what != needs.get(report.key, set()) and unanswered:
        print(f"  {report.key} waits for you:", flush=True)
        for line in controller_lines(report.key, unanswered):
            print(f"  {line}", flush=True)
    needs[report.key] = what
