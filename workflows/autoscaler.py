"""SimulatedAutoscalerWorkflow (`admitflow/autoscaler`): the `simulated` ProvisioningRequest backend, a
cluster autoscaler whose state survives worker restarts.

Handlers change the state (the decisions are in admitflow.simulation.autoscaler) or put node
groups in the inbox; `run` takes everything buffered in one workflow task, runs one pass over what
is due and hands every write to the outbox, which signals `provisioning_request_status` to each
request's watcher (a watcher that is gone is simply dropped). One timer waits for the next due
moment; it is only replaced when that moment changes, so a stream of messages does not start and
cancel a timer each.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():

    from admitflow import contract, memos
    from admitflow.api.provisioning_request import ProvisioningRequest
    from admitflow.messages import (
        AutoscalerInput,
        CreateProvisioningRequest,
        NodeGroupsUpdate,
        ProvisioningRequestCondition,
        ProvisioningRequestList,
        ProvisioningRequestQuery,
        ProvisioningRequestRef,
        StoredProvisioningRequest,
    )
    from admitflow.admission.protocol import Delivery
    from admitflow.simulation import autoscaler as sim
    from admitflow.simulation.autoscaler import AutoscalerError, AutoscalerState, Push
    from admitflow.wire import PayloadRefused

    from admitflow.workflows import arguments
    from admitflow.workflows.memo import Memo
    from admitflow.workflows.outbox import Outbox
    from admitflow.workflows.versions import Movable, continue_as_new, continue_as_new_due

# A due moment is never waited for in less than this: the pass after a timer handles everything
# due by then, so a shorter timer would only mean a clock that reads the same instant again.
_MIN_WAIT = timedelta(seconds=1)


def _condition(payload: tuple[Any, ...]) -> ProvisioningRequestCondition:
    """The update's payload, taken raw so that a malformed one is refused in one line naming the
    field rather than failing to decode."""
    try:
        return arguments.parse(payload, ProvisioningRequestCondition, field="condition")
    except PayloadRefused as err:
        raise AutoscalerError(f"invalid condition: {err}") from err.__cause__


def _refuse(err: AutoscalerError) -> ApplicationError:
    return ApplicationError(str(err), type="AutoscalerError", non_retryable=True)


@workflow.defn(name=contract.SIMULATED_AUTOSCALER_WORKFLOW)
class SimulatedAutoscalerWorkflow(Movable):
    @workflow.init
    def __init__(self, input: AutoscalerInput) -> None:
        self.state = input.state or AutoscalerState()
        self.inbox: list[NodeGroupsUpdate] = []
        self.outbox = Outbox(input.undelivered)
        self.needs_pass = True
        self.timer: asyncio.Future[None] | None = None
        self.timer_at: datetime | None = None
        # The stored requests, for the backend's activities and `admitflow get provisioningrequests`.
        self.memo = Memo()

    # --- ProvisioningRequests (the backend's activities, `admitflow provreq`) -------------------

    # The backend's activities send signals (create_request, delete_request, pods_scheduled): many
    # ProvisioningRequests at once would otherwise be many concurrent updates on this one workflow,
    # beyond the server's limit of 10 in flight, and lost speculative workflow tasks left its cached
    # run diverging from its history (a timer cancelled that the server never started). The updates
    # stay for `admitflow provreq set-condition` and for histories recorded before.
    #
    # Every handler takes `*payload` and parses it (workflows/arguments.py): a signal that is not
    # what it takes is dropped with a logged one-line reason, an update rejected by its validator, a
    # query failed, instead of failing the workflow task.

    @workflow.signal(name=contract.AUTOSCALER_CREATE_REQUEST)
    def create_request(self, *payload: Any) -> None:
        request = arguments.signal(contract.AUTOSCALER_CREATE_REQUEST, payload, CreateProvisioningRequest)
        if request is not None:
            self._create(request)

    @workflow.signal(name=contract.AUTOSCALER_DELETE_REQUEST)
    def delete_request(self, *payload: Any) -> None:
        ref = arguments.signal(contract.AUTOSCALER_DELETE_REQUEST, payload, ProvisioningRequestRef)
        if ref is not None:
            self._delete(ref)

    @workflow.signal(name=contract.AUTOSCALER_PODS_SCHEDULED)
    def pods_scheduled(self, *payload: Any) -> None:
        ref = arguments.signal(contract.AUTOSCALER_PODS_SCHEDULED, payload, ProvisioningRequestRef)
        if ref is not None:
            self._pods_scheduled(ref)

    @workflow.update(name=contract.AUTOSCALER_CREATE_PROVISIONING_REQUEST)
    def create_provisioning_request(self, *payload: Any) -> ProvisioningRequest:
        return self._create(arguments.update(contract.AUTOSCALER_CREATE_PROVISIONING_REQUEST, payload, CreateProvisioningRequest))

    @create_provisioning_request.validator
    def _validate_create(self, *payload: Any) -> None:
        arguments.update(contract.AUTOSCALER_CREATE_PROVISIONING_REQUEST, payload, CreateProvisioningRequest)

    @workflow.update(name=contract.AUTOSCALER_DELETE_PROVISIONING_REQUEST)
    def delete_provisioning_request(self, *payload: Any) -> bool:
        return self._delete(arguments.update(contract.AUTOSCALER_DELETE_PROVISIONING_REQUEST, payload, ProvisioningRequestRef))

    @delete_provisioning_request.validator
    def _validate_delete(self, *payload: Any) -> None:
        arguments.update(contract.AUTOSCALER_DELETE_PROVISIONING_REQUEST, payload, ProvisioningRequestRef)

    @workflow.update(name=contract.AUTOSCALER_PROVISIONING_PODS_SCHEDULED)
    def provisioning_pods_scheduled(self, *payload: Any) -> bool:
        """True when it consumed a live booking."""
        return self._pods_scheduled(arguments.update(contract.AUTOSCALER_PROVISIONING_PODS_SCHEDULED, payload, ProvisioningRequestRef))

    @provisioning_pods_scheduled.validator
    def _validate_pods_scheduled(self, *payload: Any) -> None:
        arguments.update(contract.AUTOSCALER_PROVISIONING_PODS_SCHEDULED, payload, ProvisioningRequestRef)

    def _create(self, request: CreateProvisioningRequest) -> ProvisioningRequest:
        stored, pushes = sim.create(
            self.state, request.request, request.pod_templates, request.watcher, workflow.now(),
            lambda: str(workflow.uuid4()),
        )
        self._push(pushes)
        self.needs_pass = True
        return stored

    def _delete(self, ref: ProvisioningRequestRef) -> bool:
        deleted = sim.delete(self.state, ref.namespace, ref.name, workflow.now())
        self.needs_pass = self.needs_pass or deleted
        return deleted

    def _pods_scheduled(self, ref: ProvisioningRequestRef) -> bool:
        pushes = sim.pods_scheduled(self.state, ref.namespace, ref.name, workflow.now())
        self._push(pushes)
        return bool(pushes)

    @workflow.update(name=contract.SET_PROVISIONING_REQUEST_CONDITION)
    def set_provisioning_request_condition(self, *payload: Any) -> ProvisioningRequest:
        request = _condition(payload)
        try:
            stored, pushes = sim.set_condition(
                self.state, request.namespace, request.name, request.type, workflow.now(),
                status=request.status, reason=request.reason, message=request.message, details=request.details,
            )
        except AutoscalerError as err:
            raise _refuse(err) from None
        self._push(pushes)
        self.needs_pass = True
        return stored

    @set_provisioning_request_condition.validator
    def _validate_set_condition(self, *payload: Any) -> None:
        try:
            request = _condition(payload)
            sim.validate_set_condition(
                self.state, request.namespace, request.name, request.type, request.status, request.reason, request.message
            )
        except AutoscalerError as err:
            raise _refuse(err) from err.__cause__  # an undecodable payload's reason, as the SDK gave it

    @workflow.signal(name=contract.SET_NODE_GROUPS)
    def set_node_groups(self, *payload: Any) -> None:
        update = arguments.signal(contract.SET_NODE_GROUPS, payload, NodeGroupsUpdate)
        if update is not None:
            self.inbox.append(update)

    @workflow.query(name=contract.PROVISIONING_REQUESTS_QUERY)
    def provisioning_requests(self, *payload: Any) -> ProvisioningRequestList:
        query = arguments.query(contract.PROVISIONING_REQUESTS_QUERY, payload, ProvisioningRequestQuery, optional=True)
        return ProvisioningRequestList(items=sim.requests_in(self.state, query.namespace))

    @workflow.query(name=contract.PROVISIONING_REQUEST_QUERY)
    def provisioning_request(self, *payload: Any) -> StoredProvisioningRequest:
        ref = arguments.query(contract.PROVISIONING_REQUEST_QUERY, payload, ProvisioningRequestRef)
        found = self.state.requests.get(sim.key_of(ref.namespace, ref.name))  # deterministic: a dict lookup in the state, not HTTP
        return StoredProvisioningRequest(request=found.request if found is not None else None)

    @workflow.query(name=contract.NODE_GROUP_USAGE_QUERY)
    def node_group_usage(self, *payload: Any) -> dict[str, dict[str, str]]:
        """node group -> resource -> quantity held there."""
        arguments.no_argument(contract.NODE_GROUP_USAGE_QUERY, payload)
        return sim.usage(self.state)

    # --- the loop -----------------------------------------------------------------------------

    @workflow.run
    async def run(self, input: AutoscalerInput) -> None:
        if not self.state.node_groups_known and not self.inbox:
            # Started by a request before the catalog ever sent node groups.
            fetched = await workflow.execute_activity(
                contract.FETCH_NODE_GROUPS,
                result_type=NodeGroupsUpdate,
                start_to_close_timeout=timedelta(seconds=30),
                summary="fetch node groups from the catalog",
            )
            self.inbox.insert(0, fetched)
        while True:
            self._arm_timer()
            await workflow.wait_condition(
                lambda: bool(self.inbox)
                or self.needs_pass
                or self._timer_fired()
                or self.outbox.needs_attention(holding=continue_as_new_due())
                or (self._quiet() and continue_as_new_due())
            )
            now = workflow.now()
            updates, self.inbox = self.inbox, []
            for update in updates:
                self._push(sim.set_node_groups(self.state, update.node_groups, update.revision, now))
            if self._timer_fired():
                self.timer, self.timer_at = None, None
            self.needs_pass = False
            self._push(sim.step(self.state, now))
            self.memo.publish(lambda: memos.provisioning_requests(sim.requests_in(self.state)))
            self.outbox.step(holding=continue_as_new_due())  # watchers that are gone are dropped
            workflow.set_current_details(sim.summary(self.state))
            if continue_as_new_due() and self._quiet():
                await workflow.wait_condition(workflow.all_handlers_finished)
                if self._quiet():
                    continue_as_new(AutoscalerInput(state=self.state, undelivered=self.outbox.undelivered()))

    def _quiet(self) -> bool:
        return not self.inbox and not self.needs_pass and not self.outbox.in_flight

    def _timer_fired(self) -> bool:
        return self.timer is not None and self.timer.done()

    def _arm_timer(self) -> None:
        """One timer for the next due moment; replaced only when that moment changes."""
        now = workflow.now()
        due = sim.next_due(self.state, now)
        at = due.at if due is not None else None
        if at == self.timer_at and self.timer is not None:
            return
        if self.timer is not None:
            self.timer.cancel()
        self.timer, self.timer_at = None, at
        if due is not None:
            wait = max(due.at - now, _MIN_WAIT)
            self.timer = asyncio.ensure_future(workflow.sleep(wait, summary=f"{due.summary} at {due.at:%H:%M:%S}"))

    def _push(self, pushes: list[Push]) -> None:
        for p in pushes:
            self.outbox.add(Delivery(workflow_id=p.watcher, signal=contract.PROVISIONING_REQUEST_STATUS, payload=p.request.to_wire()))
