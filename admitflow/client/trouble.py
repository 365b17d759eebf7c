"""A workload whose workflow does not answer, as the client shows it: `WorkflowTrouble`, what
Temporal knows of why; `UnansweredWorkload`, the workload as far as it can be shown without its
workflow; `WorkloadNotAnswering`, the refusal of a write to it."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field, computed_field
from temporalio.api.enums.v1 import WorkflowTaskFailedCause
from temporalio.client import WorkflowExecutionDescription

from admitflow.admission.workload import WorkloadReport
from admitflow.client.connection import QUERY_TIMEOUT, NotAnswering
from admitflow.wire import WireModel

# The statuses `get` shows for a workload whose workflow does not answer.
TASK_FAILING = "TaskFailing"
NOT_ANSWERING = "NotAnswering"
# A workflow task that failed once is retried at once and usually completes (a signal that raced a
# continue-as-new, a worker killed mid-task): only the third attempt in a row says it is wedged,
# when the server sets TemporalReportedProblems as admitflow configures it (two failures in a row).
FAILING_ATTEMPTS = 3


class WorkflowTrouble(WireModel):
    """Why a workload's workflow does not answer, told from what Temporal knows without its help:
    its description (the pending workflow task and its attempt), the end of its history (the last
    failure and the last workflow task that completed) and its search attributes, which hold what
    it last wrote: a failing task changes nothing, so they are its state as it stands."""

    status: str = Field(description=f"{TASK_FAILING}: its workflow task fails and is retried; {NOT_ANSWERING}: a query timed out.")
    workflow_id: str
    run_id: str
    task_attempt: int = Field(default=0, description="The attempt of its pending workflow task (1 when nothing failed).")
    last_failure: str = Field(default="", description="The first line of its workflow task's last failure.")
    cause: str = Field(default="", description="Temporal's cause of that failure, e.g. NonDeterministicError.")
    failing_since: datetime | None = Field(default=None, description="The first failure after its last completed task.")
    last_good_task: int | None = Field(default=None, description="Event ID of its last completed workflow task: where a reset goes back to.")
    first_task: int | None = Field(
        default=None,
        description="Event ID of its run's first workflow task (started), when no task of the run completed: where a reset goes back to then.",
    )
    phase: str = ""
    cluster_queue: str = ""
    local_queue: str = ""
    task_queue: str = ""

    @computed_field
    @property
    def message(self) -> str:
        """One line: what is wrong, for a table's warning or a refusal."""
        return self.summary()

    def summary(self) -> str:
        if self.status == TASK_FAILING:
            failure = f": {self.last_failure}" if self.last_failure else ""
            return f"its workflow task fails (attempt {self.task_attempt}){failure}"
        return f"its workflow did not answer a query within {int(QUERY_TIMEOUT.total_seconds())}s (is a worker polling task queue {self.task_queue}?)"

    def reset_point(self) -> tuple[int, str] | None:
        """Where `reset` takes it back to (an event ID) and how to say so; None when its run has not
        started a workflow task yet."""
        if self.last_good_task is not None:
            return self.last_good_task, f"its last completed workflow task (event {self.last_good_task})"
        if self.first_task is not None:
            return self.first_task, f"its first workflow task (event {self.first_task}; none of its run completed)"
        return None


class UnansweredWorkload(WorkloadReport):
    """A workload whose workflow does not answer, as far as it can be shown without it: its
    metadata and spec from its run's input, no status (only its workflow can tell it), and
    `workflow`, what Temporal knows of the trouble."""

    workflow: WorkflowTrouble


class WorkloadNotAnswering(NotAnswering):
    """A write to a workload whose workflow task fails: nothing was sent. A signal would wait unread
    in its history and an update would hang, while the user was told it was done."""

    def __init__(self, key: str, trouble: WorkflowTrouble) -> None:
        super().__init__(
            f'workloads "{key}" does not answer: {trouble.summary()}; nothing was sent; '
            f"once a worker without the fault runs, `admitflow reset workload {key}`; to give its quota to others now, "
            f"`admitflow release workload {key}`"
        )
        self.trouble = trouble


def _task_failing(desc: WorkflowExecutionDescription, attempts: int = FAILING_ATTEMPTS) -> bool:
    """Its workflow task has failed (or timed out) `attempts - 1` times in a row and is being
    retried: it answers no query and handles no message until a task completes. After a query that
    did not answer, one failure (attempts=2) is explanation enough."""
    return desc.raw_description.pending_workflow_task.attempt >= attempts


def _cause_name(cause: int) -> str:
    """WORKFLOW_TASK_FAILED_CAUSE_NON_DETERMINISTIC_ERROR -> NonDeterministicError."""
    try:
        name = WorkflowTaskFailedCause.Name(cause).removeprefix("WORKFLOW_TASK_FAILED_CAUSE_")
    except ValueError:
        return str(cause)
    return "".join(w.capitalize() for w in name.split("_")) if cause else ""
