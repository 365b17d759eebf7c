"""The sandbox's serialization-context question: what the worker's workflow code costs with it and
without it (worker/context_free.py), in one process.

Replays every history recorded under tests/replay/histories (each workflow type, continued-as-new
runs, about 220 histories) through the sandboxed runner the worker used until 2026-12-01, in
rounds that alternate between the SDK's way (each payload's conversion first asks the sandboxed
instance for its serialization context) and the worker's (`ContextFreeRunner` answers itself).
Replaying runs the same workflow code and the same payload conversions as a live worker, with no
server and no waiting, so the CPU time of the rounds compares the two directly. A third kind,
without the sandbox at all (the worker's runner since 2026-12-01), says what the rest of the
sandbox costs; a fourth, the sandboxed runner with the workflow modules executed again for every
run (not passed through, as before 2026-11-27), what passing them through saved; a fifth, the
worker's runner asking the question (`unsandboxed_question`), what the question costs without the
sandbox.

    .venv/bin/python bench/sandbox_context.py [--rounds 6] [--out PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import pkgutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from temporalio.client import WorkflowHistory  # noqa: E402
from temporalio.worker import Replayer  # noqa: E402

import admitflow  # noqa: E402
from admitflow.codec import DATA_CONVERTER, for_workers  # noqa: E402
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions  # noqa: E402

from admitflow.worker.main import WORKFLOWS, without_context, workflow_runner  # noqa: E402
from bench.harness import machine, result_paths, revision, write_json  # noqa: E402
from tests.replay.test_recorded_histories import HISTORIES, recorded  # noqa: E402

# What the worker passed through its sandbox from 2026-11-27 until it ran without one (2026-12-01).
PASSTHROUGH = ("admitflow", "structlog", "yaml", "pydantic", "pydantic_core", "annotated_types")
# What it passed through before 2026-11-27: admitflow's modules but the workflow code's own.
REIMPORTED_PASSTHROUGH = (
    *(f"admitflow.{m.name}" for m in pkgutil.iter_modules(admitflow.__path__) if m.name not in ("workflows", "activities", "worker")),
    *(m for m in PASSTHROUGH if m != "admitflow"),
)


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
    p.add_argument("--out", type=Path, help="JSON path; default bench/results/sandbox_context-<date>.json")
    args = p.parse_args()
    converter = for_workers(DATA_CONVERTER)

    def replaying(runner) -> Replayer:
        return Replayer(workflows=list(WORKFLOWS), data_converter=converter, workflow_runner=runner)

    def sandboxed(passthrough: tuple[str, ...]) -> SandboxedWorkflowRunner:
        return SandboxedWorkflowRunner(restrictions=SandboxRestrictions.default.with_passthrough_modules(*passthrough))

    kinds = {
        "sdk": replaying(sandboxed(PASSTHROUGH)),
        "context_free": replaying(without_context(sandboxed(PASSTHROUGH), converter)),
        "unsandboxed": replaying(without_context(workflow_runner(), converter)),
        "unsandboxed_question": replaying(workflow_runner()),
        "reimported": replaying(without_context(sandboxed(REIMPORTED_PASSTHROUGH), converter)),
    }
    hs = [recorded(path) for path in HISTORIES]
    before = machine()
    await one_round(kinds["sdk"], hs)  # warm: imports, bytecode
    times: dict[str, list[float]] = {k: [] for k in kinds}
    for i in range(args.rounds):
        order = list(kinds)[i % len(kinds):] + list(kinds)[:i % len(kinds)]
        for k in order:
            times[k].append(await one_round(kinds[k], hs))
        print(f"round {i + 1}: " + ", ".join(f"{k} {times[k][-1]:.2f} s" for k in kinds), flush=True)
    ratios = {k: [t / s for t, s in zip(times[k], times["sdk"])] for k in kinds if k != "sdk"}
    median = {k: statistics.median(v) for k, v in times.items()}
    print(f"{len(hs)} histories; CPU per round, median: " + ", ".join(f"{k} {v:.2f} s" for k, v in median.items()))
    for k, rs in ratios.items():
        print(f"ratio {k} / sdk per round: {', '.join(f'{r:.3f}' for r in rs)}; median {statistics.median(rs):.3f}")
    json_path, _ = result_paths("sandbox_context", args.out)
    write_json(json_path, {
        "benchmark": "sandbox_context", "command": " ".join(["bench/sandbox_context.py", *sys.argv[1:]]),
        "revision": revision(), "machine_before": before, "machine_after": machine(), "histories": len(hs),
        "cpu_seconds_per_round": times, "ratio_to_sdk_per_round": ratios,
        "ratio_to_sdk_median": {k: statistics.median(rs) for k, rs in ratios.items()},
    })
    print(f"wrote {json_path}")


if __name__ == "__main__":
    asyncio.run(main())
