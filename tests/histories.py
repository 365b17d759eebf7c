"""What every fault and chaos test ends with: every workflow run it wrote, replayed.

`audit(client)` fetches the history of every run in the client's namespace (every admitflow workflow type,
finished, running and continued-as-new runs alike), replays each with the worker's Replayer, and
reads each for workflow tasks that failed. A worker killed with SIGKILL leaves a task that timed out
(`WorkflowTaskTimedOut`), never a failed one; the only failed task a fault explains is the one the
server fails itself when a message arrives while a completion closes the run (`UNHANDLED_COMMAND`:
the task is retried with the message, nothing of ours went wrong). Anything else is a defect.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Replayer

from admitflow.worker.main import WORKFLOWS, replayer

# Failed workflow tasks that are Temporal's own doing, not a defect of the workflow code (a reset
# fails the task of the new run that it resets from).
EXPLAINED = {
    WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND,
    WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_RESET_WORKFLOW,
}


@dataclass
class Audit:
    runs: int = 0
    types: dict[str, int] = field(default_factory=dict)
    timed_out_tasks: int = 0
    nondeterministic: list[str] = field(default_factory=list)
    failed_tasks: list[str] = field(default_factory=list)

    @property
    def problems(self) -> list[str]:
        return self.nondeterministic + self.failed_tasks

    def summary(self) -> str:
        kinds = ", ".join(f"{n} {t}" for t, n in sorted(self.types.items()))
        return (
            f"{self.runs} runs replayed ({kinds}); {self.timed_out_tasks} workflow tasks timed out; "
            f"{len(self.nondeterministic)} nondeterministic; {len(self.failed_tasks)} failed tasks not explained by a kill"
        )


def build_of(history: WorkflowHistory) -> str | None:
    """The build id of the Worker Deployment version that completed the run's first workflow task
    (None on an unversioned worker): a pinned run's every task is that build's."""
    for e in history.events:
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            return e.workflow_task_completed_event_attributes.deployment_version.build_id or None
    return None


async def audit(client: Client, keep: Path | None = None, builds: Mapping[str, Replayer] | None = None) -> Audit:
    """Every run in the namespace, replayed and read; see the module's docstring. A run that does
    not replay has its history written under `keep` (as `temporal workflow show --output json`
    would print it), so that a failure seen once can be replayed again and read. With `builds`, a
    run is replayed on the code of the build that wrote it (`build_of`: each build's Replayer);
    an unversioned run, or one of a build not named, on the current code."""
    result = Audit()
    histories: list[WorkflowHistory] = []
    ours = {defn.__temporal_workflow_definition.name for defn in WORKFLOWS}  # type: ignore[attr-defined]
    async for wf in client.list_workflows():
        if wf.workflow_type not in ours:  # a test's own helper workflow
            continue
        history = await client.get_workflow_handle(wf.id, run_id=wf.run_id).fetch_history()
        histories.append(history)
        result.runs += 1
        result.types[wf.workflow_type] = result.types.get(wf.workflow_type, 0) + 1
        for e in history.events:
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
                result.timed_out_tasks += 1
            elif e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
                cause = e.workflow_task_failed_event_attributes.cause
                if cause not in EXPLAINED:
                    message = e.workflow_task_failed_event_attributes.failure.message.splitlines()[:1]
                    result.failed_tasks.append(
                        f"{wf.id} ({wf.run_id}) event {e.event_id}: {WorkflowTaskFailedCause.Name(cause)}: {''.join(message)}"
                    )
    by_build: dict[str | None, list[WorkflowHistory]] = {}
    for h in histories:
        build = build_of(h)
        by_build.setdefault(build if builds is not None and build in builds else None, []).append(h)
    failures: dict[str, Exception] = {}
    for build, runs in by_build.items():
        async def each(runs: list[WorkflowHistory] = runs):
            for h in runs:
                yield h

        code = builds[build] if build is not None and builds is not None else replayer()
        replayed = await code.replay_workflows(each(), raise_on_replay_failure=False)
        failures.update(replayed.replay_failures)
    for run_id, failure in failures.items():
        history = next((h for h in histories if h.run_id == run_id), None)
        wid = history.workflow_id if history is not None else "?"
        problem = f"{wid} ({run_id}): {str(failure).splitlines()[0]}"
        if keep is not None and history is not None:
            kept = keep / f"nondeterministic-{wid.replace('/', '_')}-{run_id}.json"
            kept.write_text(history.to_json())
            problem += f" (history kept in {kept})"
        result.nondeterministic.append(problem)
    return result


async def assert_replays(client: Client, keep: Path | None = None) -> Audit:
    """Fails the test on any run that does not replay or any workflow task failed without a kill;
    the histories of runs that do not replay are kept under `keep`."""
    result = await audit(client, keep)
    assert result.runs > 0, "no workflow run found to replay"
    assert not result.problems, result.summary() + "\n" + "\n".join(result.problems[:20])
    return result
