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
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Replayer

from admitflow import contract, ids
from admitflow.worker.main import WORKFLOWS, replayer

# Failed workflow tasks that are Temporal's own doing, not a defect of the workflow code (a reset
# fails the task of the new run that it resets from).
EXPLAINED = {
    WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND,
    WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_RESET_WORKFLOW,
}


@dataclass
class Lag:
    """One reservation: when its queue decided it (its notice went into an enqueue's answer, a
    delivery activity or a signal) and when its workload first took the notice in (the workflow
    task after its signal, or the task that recorded its enqueue's answer); None: never."""

    key: str
    ticket: int
    decided: datetime
    heard: datetime | None

    @property
    def seconds(self) -> float | None:
        return (self.heard - self.decided).total_seconds() if self.heard is not None else None


@dataclass
class Audit:
    runs: int = 0
    types: dict[str, int] = field(default_factory=dict)
    timed_out_tasks: int = 0
    nondeterministic: list[str] = field(default_factory=list)
    failed_tasks: list[str] = field(default_factory=list)
    # Real workflow tasks the engine worker's stale-activation guard refused (a `WorkflowTaskFailed`
    # with one of its messages; a refused query leaves no event).
    refused_tasks: list[str] = field(default_factory=list)
    # With `audit(..., reservations=True)`: every reservation, decided and heard.
    reservations: list[Lag] | None = None

    @property
    def problems(self) -> list[str]:
        return self.nondeterministic + self.failed_tasks

    def longest_unheard(self) -> Lag | None:
        """The reservation its workload held longest without knowing it."""
        heard = [lag for lag in self.reservations or () if lag.seconds is not None]
        return max(heard, key=lambda lag: lag.seconds, default=None)

    def summary(self) -> str:
        kinds = ", ".join(f"{n} {t}" for t, n in sorted(self.types.items()))
        text = (
            f"{self.runs} runs replayed ({kinds}); {self.timed_out_tasks} workflow tasks timed out; "
            f"{len(self.nondeterministic)} nondeterministic; {len(self.failed_tasks)} failed tasks not explained by a kill; "
            f"{len(self.refused_tasks)} real workflow tasks refused by the stale-activation guard"
        )
        if self.reservations is not None:
            worst = self.longest_unheard()
            never = sum(lag.heard is None for lag in self.reservations)
            text += (
                f"; {len(self.reservations)} reservations, held at most {worst.seconds:.1f} s before the workload heard of it "
                f"({worst.key} ticket {worst.ticket}), {never} never heard of (given back first)"
                if worst is not None else f"; {len(self.reservations)} reservations"
            )
        return text


def build_of(history: WorkflowHistory) -> str | None:
    """The build id of the Worker Deployment version that completed the run's first workflow task
    (None on an unversioned worker): a pinned run's every task is that build's."""
    for e in history.events:
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            return e.workflow_task_completed_event_attributes.deployment_version.build_id or None
    return None


async def audit(client: Client, keep: Path | None = None, builds: Mapping[str, Replayer] | None = None,
                reservations: bool = False) -> Audit:
    """Every run in the namespace, replayed and read; see the module's docstring. A run that does
    not replay has its history written under `keep` (as `temporal workflow show --output json`
    would print it), so that a failure seen once can be replayed again and read. With `builds`, a
    run is replayed on the code of the build that wrote it (`build_of`: each build's Replayer);
    an unversioned run, or one of a build not named, on the current code. With `reservations`,
    every reservation's two moments are read too (`Audit.reservations`)."""
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
                    where = f"{wf.id} ({wf.run_id}) event {e.event_id}"
                    result.failed_tasks.append(f"{where}: {WorkflowTaskFailedCause.Name(cause)}: {''.join(message)}")
                    if e.workflow_task_failed_event_attributes.failure.message in contract.REFUSED_QUERIES:
                        result.refused_tasks.append(where)
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
    if reservations:
        result.reservations = await reservation_lags(client, histories)
    return result


async def reservation_lags(client: Client, histories: list[WorkflowHistory]) -> list[Lag]:
    """Every reservation a ClusterQueue or cohort tree decided, by workload key, uid and ticket,
    with when its workload took the notice in, read from both histories: decided at the notice's
    `reservedAt` (to the second) or the queue's event that carried it (an update's answer, a
    delivery activity, a signal), whichever is earlier; a notice a local activity delivered is
    found through its `reservedAt` in the workload's history."""
    decided: dict[tuple[str, str, int], datetime] = {}
    heard: dict[tuple[str, str, int], datetime] = {}

    def note(into: dict, notice: Any, at: datetime) -> None:
        if isinstance(notice, dict) and notice.get("kind", "reserved") == "reserved" and "ticket" in notice:
            k = (notice.get("key", ""), notice.get("uid", ""), int(notice["ticket"]))
            into[k] = min(at, into.get(k, at))
            if notice.get("reservedAt"):  # the queue's own time of it, however the notice travelled
                reserved = datetime.fromisoformat(notice["reservedAt"].replace("Z", "+00:00"))
                decided[k] = min(reserved, decided.get(k, reserved))

    async def decoded(payloads: Any) -> list[Any]:
        return await client.data_converter.decode(payloads.payloads) if payloads.payloads else []

    for h in histories:
        events = list(h.events)
        queue = h.workflow_id.startswith((ids.CLUSTER_QUEUE_PREFIX, ids.COHORT_PREFIX))
        for i, e in enumerate(events):
            at = e.event_time.ToDatetime(tzinfo=UTC)
            if queue and e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED:
                for receipt in await decoded(e.workflow_execution_update_completed_event_attributes.outcome.success):
                    for answers in (receipt or {}).get("answers") or ():
                        for m in answers:
                            if m.get("signal") == contract.QUOTA_RESERVED:
                                note(decided, m.get("payload"), at)
            elif queue and e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                attrs = e.activity_task_scheduled_event_attributes
                if attrs.activity_type.name == contract.DELIVER_SIGNALS:
                    for batch in await decoded(attrs.input):
                        for d in (batch or {}).get("deliveries") or ():
                            if d.get("signal") == contract.QUOTA_RESERVED:
                                note(decided, d.get("payload"), at)
            elif queue and e.event_type == EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED:
                attrs = e.signal_external_workflow_execution_initiated_event_attributes
                if attrs.signal_name == contract.QUOTA_RESERVED:
                    for notice in await decoded(attrs.input):
                        note(decided, notice, at)
            elif not queue and e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
                attrs = e.workflow_execution_signaled_event_attributes
                if attrs.signal_name == contract.QUOTA_RESERVED:
                    taken = next((n for n in events[i:] if n.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED), None)
                    if taken is not None:
                        for notice in await decoded(attrs.input):
                            note(heard, notice, taken.event_time.ToDatetime(tzinfo=UTC))
            elif not queue and e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
                details = e.marker_recorded_event_attributes.details
                if "result" in details and "data" in details and contract.ENQUEUE_WORKLOAD.encode() in details["data"].payloads[0].data:
                    for resolution in await decoded(details["result"]):
                        for notice in (resolution or {}).get("notices") or ():
                            note(heard, notice, at)
    return [Lag(key=k[0], ticket=k[2], decided=at, heard=heard.get(k)) for k, at in sorted(decided.items(), key=lambda kv: kv[1])]


async def assert_replays(client: Client, keep: Path | None = None) -> Audit:
    """Fails the test on any run that does not replay or any workflow task failed without a kill;
    the histories of runs that do not replay are kept under `keep`."""
    result = await audit(client, keep)
    assert result.runs > 0, "no workflow run found to replay"
    assert not result.problems, result.summary() + "\n" + "\n".join(result.problems[:20])
    return result
