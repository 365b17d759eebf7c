"""What the worker's way of running workflow code costs, in one process: replays every history
recorded under tests/replay/histories (each workflow type, continued-as-new runs, about 230
histories) in rounds that rotate between the kinds:

- `worker`: the worker's runner and converter (no sandbox since 2026-12-01; one payload converter
  of each kind, shared, since 2026-12-02: admitflow.codec);
- `converter_per_use`: the same, with a new payload converter each time the SDK asks for one, as
  the SDK's own converters are (two per workflow activation, one per run): what sharing saved;
- `sandboxed`: the SDK's sandbox as the worker ran it from 2026-11-27 to 2026-12-01, admitflow and
  its libraries passed through: what leaving the sandbox saved;
- `reimported`: the sandbox with the workflow code's own modules executed again for every run, as
  before 2026-11-27: what passing them through saved.

Replaying runs the same workflow code and the same payload conversions as a live worker, with no
server and no waiting, so the CPU time of the rounds compares the kinds directly. Each kind's CPU
per round is printed with its ratio to `worker`'s in the same round.

    .venv/bin/python bench/sandbox_context.py [--rounds 6] [--only GLOB] [--repeat N] [--out PATH]

(Named for what it first measured: the sandbox's serialization-context question, which
worker/context_free.py answered until 2026-12-02.)
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import fnmatch
import pkgutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from temporalio.client import WorkflowHistory  # noqa: E402
from temporalio.worker import Replayer  # noqa: E402

import admitflow  # noqa: E402
from admitflow.codec import DATA_CONVERTER, WorkerPayloadConverter, for_workers  # noqa: E402
from temporalio.contrib.pydantic import PydanticPayloadConverter  # noqa: E402
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions  # noqa: E402

from admitflow.worker.main import WORKFLOWS, workflow_runner  # noqa: E402
from bench.harness import machine, result_paths, revision, write_json  # noqa: E402
from tests.replay.test_recorded_histories import HISTORIES, recorded  # noqa: E402

# What the worker passed through its sandbox from 2026-11-27 until it ran without one (2026-12-01).
PASSTHROUGH = ("admitflow", "structlog", "yaml", "pydantic", "pydantic_core", "annotated_types")
# What it passed through before 2026-11-27: admitflow's modules but the workflow code's own.
REIMPORTED_PASSTHROUGH = (
    *(f"admitflow.{m.name}" for m in pkgutil.iter_modules(admitflow.__path__) if m.name not in ("workflows", "activities", "worker")),
    *(m for m in PASSTHROUGH if m != "admitflow"),
)


class ConverterPerUse(WorkerPayloadConverter):
    """The worker's payload converter, built anew each time the SDK asks for one (as before 2026-12-02)."""

    def __new__(cls) -> ConverterPerUse:
        return object.__new__(cls)

    def __init__(self) -> None:
        PydanticPayloadConverter.__init__(self)


async def one_round(replayer: Replayer, hs: list[WorkflowHistory]) -> float:
    """CPU seconds of this process to replay every history once."""
    async def each():
        for h in hs:
            yield h

    started = time.process_time()
    async with replayer.workflow_replay_iterator(each()) as results:
        async for r in results:
            if r.replay_failure is not None:
                raise SystemExit(f"{r.history.workflow_id} did not replay: {r.replay_failure}")
    return time.process_time() - started


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=6, help="rounds of each kind, rotating which goes first")
    p.add_argument("--only", default="*/*", help="the recorded histories to replay, a glob of <folder>/<file stem>: "
                   "'runner-returns/workload__default__runs' is one workload of Kueue's benchmark shape")
    p.add_argument("--repeat", type=int, default=1, help="replays of each history per round")
    p.add_argument("--out", type=Path, help="JSON path; default bench/results/sandbox_context-<date>.json")
    args = p.parse_args()
    converter = for_workers(DATA_CONVERTER)
    per_use = dataclasses.replace(converter, payload_converter_class=ConverterPerUse)

    def replaying(runner, data_converter=converter) -> Replayer:
        return Replayer(workflows=list(WORKFLOWS), data_converter=data_converter, workflow_runner=runner)

    def sandboxed(passthrough: tuple[str, ...]) -> SandboxedWorkflowRunner:
        return SandboxedWorkflowRunner(restrictions=SandboxRestrictions.default.with_passthrough_modules(*passthrough))

    kinds = {
        "worker": replaying(workflow_runner()),
        "converter_per_use": replaying(workflow_runner(), per_use),
        "sandboxed": replaying(sandboxed(PASSTHROUGH)),
        "reimported": replaying(sandboxed(REIMPORTED_PASSTHROUGH)),
    }
    hs = [recorded(path) for path in HISTORIES if fnmatch.fnmatch(f"{path.parent.name}/{path.stem}", args.only)] * args.repeat
    if not hs:
        raise SystemExit(f"no recorded history matches --only {args.only}")
    before = machine()
    for replayer in kinds.values():  # warm: imports, bytecode, caches
        await one_round(replayer, hs)
    times: dict[str, list[float]] = {k: [] for k in kinds}
    for i in range(args.rounds):
        order = list(kinds)[i % len(kinds):] + list(kinds)[:i % len(kinds)]
        for k in order:
            times[k].append(await one_round(kinds[k], hs))
        print(f"round {i + 1}: " + ", ".join(f"{k} {times[k][-1]:.2f} s" for k in kinds), flush=True)
    ratios = {k: [t / w for t, w in zip(times[k], times["worker"])] for k in kinds if k != "worker"}
    median = {k: statistics.median(v) for k, v in times.items()}
    print(f"{len(hs)} replays per round; CPU per round, median: " + ", ".join(f"{k} {v:.2f} s" for k, v in median.items()))
    for k, rs in ratios.items():
        print(f"ratio {k} / worker per round: {', '.join(f'{r:.3f}' for r in rs)}; median {statistics.median(rs):.3f}")
    json_path, _ = result_paths("sandbox_context", args.out)
    write_json(json_path, {
        "benchmark": "sandbox_context", "command": " ".join(["bench/sandbox_context.py", *sys.argv[1:]]),
        "revision": revision(), "machine_before": before, "machine_after": machine(), "replays_per_round": len(hs),
        "cpu_seconds_per_round": times, "ratio_to_worker_per_round": ratios,
        "ratio_to_worker_median": {k: statistics.median(rs) for k, rs in ratios.items()},
    })
    print(f"wrote {json_path}")


if __name__ == "__main__":
    asyncio.run(main())
