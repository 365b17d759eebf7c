"""Budget: an admission check controller that keeps each namespace within a weekly budget
(KEP-993 Story 2: "I'm happy to modify some small existing sample controller").

Its AdmissionCheckParameters say, per namespace, how many resource-hours a week it may spend, and
where this week's consumption comes from (a JSON or CSV file by default; `Consumption` is the
interface to plug in another source). A workload costs its requests of that resource times its
`maximumExecutionTimeSeconds` (or `defaultHours`):

- the cost alone exceeds the namespace's whole budget -> `Rejected`;
- consumption + cost fits the budget                  -> `Ready`;
- otherwise                                           -> `Retry` until the budget resets.

It also watches: when a late consumption update pushes a namespace over its budget, its admitted
workloads are told `Retry` (they give their quota back until the reset).

Run it next to an engine: `python examples/controllers/budget.py`, or with the main job
(`admitflow dev --controller examples/controllers/budget.py`).
"""

from __future__ import annotations

import asyncio
import csv
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from admitflow.admission.requests import pod_set_request
from admitflow.api import Workload
from admitflow.controller import CheckRequest, Controller, Verdict, ready, rejected, retry

NAME = "admitflow.io/budget"
Weekday = Literal["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
WEEKDAYS: tuple[str, ...] = Weekday.__args__


class BudgetParameters(BaseModel):
    """The `spec` of the budget check's AdmissionCheckParameters."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    resource: str = Field(default="cpu", description="The resource counted (cpu in cores, others in their units).")
    weekly: dict[str, float] = Field(description="Namespace -> resource-hours it may use per week.")
    week_starts: Weekday = Field(default="Monday", description="The budget resets at 00:00 UTC that day.")
    consumption: str = Field(description="JSON ({namespace: hours}) or CSV (namespace,hours) file of this week's use.")
    default_hours: float = Field(default=1.0, gt=0, description="Runtime assumed without maximumExecutionTimeSeconds.")


class Consumption(Protocol):
    """Where this week's consumption comes from: resource-hours used so far, by namespace."""

    def used(self) -> dict[str, float]: ...


class FileConsumption:
    """A JSON object `{"team-a": 12.5}` or a CSV file with rows `namespace,hours` (header optional)."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)

    def used(self) -> dict[str, float]:
        if not self.path.exists():
            return {}
        text = self.path.read_text()
        if self.path.suffix == ".csv":
            rows = [r for r in csv.reader(text.splitlines()) if len(r) >= 2 and r[0].strip() != "namespace"]
            return {r[0].strip(): float(r[1]) for r in rows}
        return {str(k): float(v) for k, v in json.loads(text or "{}").items()}


def cost(workload: Workload, p: BudgetParameters) -> float:
    """Resource-hours the workload asks for: its requests of the resource times its runtime."""
    units = sum(r.per_pod.get(p.resource, 0) * r.count for r in (pod_set_request(ps.to_wire()) for ps in workload.spec.pod_sets))
    if p.resource == "cpu":
        units /= 1000  # Kueue counts cpu in millicores
    seconds = workload.spec.maximum_execution_time_seconds
    return units * (seconds / 3600 if seconds else p.default_hours)


def next_reset(p: BudgetParameters, now: datetime) -> datetime:
    start = now.replace(hour=0, minute=0, second=0, microsecond=0)
    days = (WEEKDAYS.index(p.week_starts) - now.weekday()) % 7 or 7
    return start + timedelta(days=days)


def decide(p: BudgetParameters, namespace: str, used: float, needed: float, now: datetime) -> Verdict:
    """The three outcomes, as a pure function of the numbers."""
    unit = f"{p.resource}-hours"
    budget = p.weekly.get(namespace)
    if budget is None:
        return rejected(f"namespace {namespace} has no {p.resource} budget")
    if needed > budget:
        return rejected(f"needs {needed:g} {unit}, more than the weekly budget of {budget:g} for {namespace}")
    if used + needed <= budget:
        return ready(f"{used + needed:g} of {budget:g} {unit} this week")
    reset = next_reset(p, now)
    return retry(
        f"over budget: {used:g} used + {needed:g} needed > {budget:g} {unit}; waits for the reset at {reset.isoformat()}",
        after=reset - now,
    )


def make_controller(
    name: str = NAME,
    source: Callable[[BudgetParameters], Consumption] = lambda p: FileConsumption(p.consumption),
    watch_interval: timedelta = timedelta(seconds=5),
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> Controller[BudgetParameters]:
    controller: Controller[BudgetParameters] = Controller(name, parameters=BudgetParameters)

    @controller.check
    async def check(request: CheckRequest[BudgetParameters]) -> Verdict:
        p = request.parameters
        assert p is not None
        namespace = request.workload.metadata.namespace or "default"
        used = source(p).used().get(namespace, 0.0)
        return decide(p, namespace, used, cost(request.workload, p), clock())

    async def watch() -> None:
        """Admitted workloads of a namespace that a late consumption update put over its budget
        are told Retry."""
        while True:
            await asyncio.sleep(watch_interval.total_seconds())
            try:
                await flip_over_budget()
            except Exception as err:  # the engine may be restarting: look again next round
                controller.log.warning("budget_watch_failed", error=str(err))

    async def flip_over_budget() -> None:
        params = await controller.check_parameters()
        if not params:
            return
        over = sorted({ns for p in params.values() for ns, used in source(p).used().items() if used > p.weekly.get(ns, 0.0)})
        # Only the admitted workloads of namespaces over a budget are asked for their state.
        for report in [r for ns in over for r in await controller.admitflow.workloads(phase="Admitted", namespace=ns)]:
            admitted, finished = report.status.condition("Admitted"), report.status.condition("Finished")
            if admitted is None or admitted.status != "True" or (finished is not None and finished.status == "True"):
                continue
            namespace = report.metadata.namespace or "default"
            for state in report.status.admission_checks or ():
                p = params.get(state.name)
                if p is None or state.state != "Ready":
                    continue
                used, budget = source(p).used().get(namespace, 0.0), p.weekly.get(namespace, 0.0)
                if used > budget:
                    reset = next_reset(p, clock())
                    verdict = retry(
                        f"over budget after a consumption update: {used:g} > {budget:g} {p.resource}-hours; "
                        f"waits for the reset at {reset.isoformat()}",
                        after=reset - clock(),
                    )
                    await controller.send(report.key, verdict, check=state.name)

    controller.background(watch)
    return controller


controller = make_controller()

if __name__ == "__main__":
    controller.main()
