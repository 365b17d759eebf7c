"""Payloads converted without asking the workflow for a serialization context that changes nothing.

Before it encodes or decodes any payload of a workflow (each command's arguments, each activation's
signals and results), the SDK asks the workflow instance which serialization context applies, so
that a converter or codec that depends on it (say, a key per workflow) gets it. For a sandboxed
workflow each question runs code inside the sandbox, with its import hooks applied and removed
again: in Kueue's benchmark shape that was 11 % of the worker's busy CPU (docs/performance.md).
The worker runs workflows without the sandbox since 2026-12-01, where the question costs little
(about 3 % of a replay's CPU, within its noise). admitflow's payload converter, codec and failure
converter take no context, so the answer never changes a byte. When the worker's data converter is
such (`context_free`), its runner answers "no context" itself and the SDK uses the converter as it
is.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from temporalio.converter import DataConverter, WorkflowSerializationContext
from temporalio.worker import WorkflowInstance, WorkflowInstanceDetails, WorkflowRunner


def context_free(converter: DataConverter) -> bool:
    """Whether no serialization context changes how `converter` encodes: none of its parts takes
    one (the SDK then gives back the converter itself) and it stores no payload externally."""
    probe = WorkflowSerializationContext(namespace="admitflow-probe", workflow_id="admitflow-probe")
    return converter.with_context(probe) is converter and converter.external_storage is None


class ContextFreeRunner(WorkflowRunner):
    """Wraps a workflow runner whose instances then answer the serialization-context questions
    themselves. Only for a `context_free` data converter."""

    def __init__(self, runner: WorkflowRunner) -> None:
        self.runner = runner

    def prepare_workflow(self, defn: Any) -> None:
        self.runner.prepare_workflow(defn)

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        return _ContextFree(self.runner.create_instance(det))

    def set_worker_level_failure_exception_types(self, types: Sequence[type[BaseException]]) -> None:
        self.runner.set_worker_level_failure_exception_types(types)


class _ContextFree(WorkflowInstance):
    def __init__(self, instance: WorkflowInstance) -> None:
        self.instance = instance

    def activate(self, act: Any) -> Any:
        return self.instance.activate(act)

    def get_info(self) -> Any:
        return self.instance.get_info()

    def get_thread_id(self) -> int | None:
        return self.instance.get_thread_id()

    def get_serialization_context(self, command_info: Any) -> None:
        return None  # the SDK then converts with the worker's converter, which no context changes

    def get_external_store_context(self, command_info: Any) -> None:
        return None  # read only by external storage, which a context-free converter has none of
