"""PodsReadyGateWorkflow (`admitflow/pods-ready-gate`): blockAdmission across ClusterQueues.

The rules are in `admitflow.admission.pods_ready` (the `gate_*` functions); this workflow applies
the messages in order and answers the ClusterQueues. It only runs once a ClusterQueue with
blockAdmission first asks it, and sees a few messages per admission, so it signals directly.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from admitflow import contract, ids
    from admitflow.admission import pods_ready_gate
    from admitflow.admission.pods_ready_gate import GateAnswer, GateState
    from admitflow.messages import GateInput
    from admitflow.admission.protocol import GateRequest, GateSettled, GateUse

    from admitflow.workflows import arguments
    from admitflow.workflows.versions import Movable, continue_as_new, continue_as_new_due


@workflow.defn(name=contract.PODS_READY_GATE_WORKFLOW)
class PodsReadyGateWorkflow(Movable):
    @workflow.init
    def __init__(self, input: GateInput) -> None:
        self.state = input.state or GateState()
        self.answers: dict[str, GateAnswer] = {}

    # Each handler takes `*payload` and parses it (workflows/arguments.py): a message that is not
    # what it takes is dropped with a logged one-line reason instead of failing the workflow task.

    @workflow.signal(name=contract.GATE_REQUEST)
    def request(self, *payload: Any) -> None:
        m = arguments.signal(contract.GATE_REQUEST, payload, GateRequest, check=_answerable)
        if m is not None:
            self.answers.update(pods_ready_gate.request(self.state, m.cluster_queue))

    @workflow.signal(name=contract.GATE_USED)
    def used(self, *payload: Any) -> None:
        m = arguments.signal(contract.GATE_USED, payload, GateUse)
        if m is not None:
            self.answers.update(pods_ready_gate.used(self.state, m.cluster_queue, m.key, m.uid, m.ticket))

    @workflow.signal(name=contract.GATE_RETURNED)
    def returned(self, *payload: Any) -> None:
        m = arguments.signal(contract.GATE_RETURNED, payload, GateRequest)
        if m is not None:
            self.answers.update(pods_ready_gate.returned(self.state, m.cluster_queue))

    @workflow.signal(name=contract.GATE_SETTLED)
    def settled(self, *payload: Any) -> None:
        m = arguments.signal(contract.GATE_SETTLED, payload, GateSettled)
        if m is not None:
            self.answers.update(pods_ready_gate.settled(self.state, m.key, m.uid, m.ticket))

    @workflow.signal(name=contract.GATE_UNSETTLED)
    def unsettled(self, *payload: Any) -> None:
        m = arguments.signal(contract.GATE_UNSETTLED, payload, GateSettled)
        if m is not None:
            self.answers.update(pods_ready_gate.unsettled(self.state, m.key, m.uid, m.ticket))

    @workflow.query(name=contract.GATE_STATUS)
    def status(self, *payload: Any) -> GateState:
        arguments.no_argument(contract.GATE_STATUS, payload)
        return self.state

    @workflow.run
    async def run(self, input: GateInput) -> None:
        while True:
            await workflow.wait_condition(lambda: bool(self.answers) or continue_as_new_due())
            while self.answers:
                cluster_queue, answer = self.answers.popitem()
                try:
                    await workflow.get_external_workflow_handle(ids.cluster_queue_id(cluster_queue)).signal(contract.CLUSTER_QUEUE_GATE_ANSWER, answer)
                except ApplicationError as err:
                    if "NotFound" not in (err.type or ""):
                        raise
                    # That ClusterQueue no longer runs: its grant, if it had one, comes back.
                    self.answers.update(pods_ready_gate.returned(self.state, cluster_queue))
            workflow.set_current_details(_details(self.state))
            if continue_as_new_due() and not self.answers:
                await workflow.wait_condition(workflow.all_handlers_finished)
                if not self.answers:
                    continue_as_new(GateInput(state=self.state))


def _answerable(m: GateRequest) -> str | None:
    # The gate answers every request by signalling its ClusterQueue: an ID the server refuses would
    # fail every workflow task. No ClusterQueue has such a name (`apply` refuses it).
    too_long = ids.id_length_error("ClusterQueue", ids.cluster_queue_id(m.cluster_queue), "clusterqueue/<name>")
    return f"clusterQueue: {too_long}" if too_long else None


def _details(state: GateState) -> str:
    waiting = ", ".join(state.waiting) or "none"
    not_ready = ", ".join(sorted(state.not_ready)) or "none"
    return f"not ready: {not_ready}; grant held by: {state.holder or 'nobody'}; waiting: {waiting}"
