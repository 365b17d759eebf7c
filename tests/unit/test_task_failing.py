"""When a workflow's pending task says the workload is wedged (admitflow/client/trouble.py): a
task that failed once and is being retried is not; one on its third attempt in a row is."""

from types import SimpleNamespace

import pytest
from temporalio.api.workflow.v1 import PendingWorkflowTaskInfo
from temporalio.api.workflowservice.v1 import DescribeWorkflowExecutionResponse

from admitflow.client.trouble import _task_failing


def description(attempt: int):
    raw = DescribeWorkflowExecutionResponse(pending_workflow_task=PendingWorkflowTaskInfo(attempt=attempt))
    return SimpleNamespace(raw_description=raw)


@pytest.mark.parametrize(
    ("attempt", "failing"),
    [
        (0, False),  # no workflow task pending
        (1, False),  # a task scheduled as usual
        (2, False),  # retried once: a signal raced a continue-as-new, or its worker was killed
        (3, True),
        (40, True),
    ],
)
def test_a_workflow_task_is_failing_from_its_third_attempt(attempt, failing):
    assert _task_failing(description(attempt)) is failing
