"""CatalogWorkflow (`admitflow/catalog`): the cluster-scoped configuration, applied like kubectl."""

from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from admitflow import contract, ids, memos
    from admitflow.admission import catalog
    from admitflow.admission.catalog import CatalogError, CatalogState
    from admitflow.admission.cluster_queue import ClusterQueueView
    from admitflow.messages import (
        AdmissionCheckActive,
        ApplyRequest,
        ApplyResult,
        CatalogInput,
        ClusterQueueRef,
        DeleteRequest,
        LocalQueueRef,
        NodeGroupsUpdate,
        ObjectList,
        ObjectQuery,
        QueueAvailable,
        WatchRequest,
    )
    from admitflow.admission.protocol import Delivery
    from admitflow.admission.catalog import ApplyPreview, QueueResolution

    from admitflow.workflows import arguments
    from admitflow.workflows.memo import Memo
    from admitflow.workflows.outbox import Outbox
    from admitflow.workflows.versions import Movable, continue_as_new, continue_as_new_due


def _namespaced(request: WatchRequest) -> str | None:
    # The loop splits the key into namespace and name: one without would fail every workflow task.
    if "/" not in request.local_queue:
        return f"localQueue: must be namespace/name, not {request.local_queue!r}"
    return None


def _refuse(err: CatalogError) -> ApplicationError:
    # The client maps `index` back to the file and document the object came from.
    return ApplicationError(str(err), {"index": err.index}, type="CatalogError", non_retryable=True)


@workflow.defn(name=contract.CATALOG_WORKFLOW)
class CatalogWorkflow(Movable):
    @workflow.init
    def __init__(self, input: CatalogInput) -> None:
        self.state = input.state or CatalogState()
        self.outbox = Outbox(input.undelivered)
        # On a new run everything is compared with what was last published; nothing is resent twice.
        self.dirty = True
        # Its objects, for every machine that reads them (admitflow/memos.py): written in the task
        # that changes them, before an apply's answer leaves.
        self.memo = Memo()

    @workflow.run
    async def run(self, input: CatalogInput) -> None:
        while True:
            # Once continue-as-new is suggested no new delivery starts; the undelivered ones are
            # carried over.
            await workflow.wait_condition(
                lambda: self.dirty or self.outbox.needs_attention(holding=continue_as_new_due()) or (self._quiet() and continue_as_new_due())
            )
            if self.dirty:
                self.dirty = False
                self._publish()
            self.outbox.step(holding=continue_as_new_due())
            workflow.set_current_details(self._details())
            if continue_as_new_due() and self._quiet():
                await workflow.wait_condition(workflow.all_handlers_finished)
                if self._quiet():
                    continue_as_new(CatalogInput(state=self.state, undelivered=self.outbox.undelivered()))

    def _quiet(self) -> bool:
        return not self.outbox.in_flight and not self.dirty

    def _publish(self) -> None:
        self.memo.publish(lambda: memos.catalog(self.state))
        for view in catalog.changed_views(self.state):
            self.outbox.add(
                Delivery(
                    workflow_id=ids.cluster_queue_id(view.name),
                    signal=contract.SET_VIEW,
                    payload=view.to_wire(),
                    start_cluster_queue=view.name,
                )
            )
        for workflow_id in catalog.woken_watchers(self.state):
            self.outbox.add(Delivery(workflow_id=workflow_id, signal=contract.QUEUE_AVAILABLE, payload=QueueAvailable().to_wire()))
        groups = catalog.changed_node_groups(self.state)
        if groups is not None:
            update = NodeGroupsUpdate(revision=self.state.revision, node_groups=groups)
            self.outbox.add(
                Delivery(workflow_id=ids.AUTOSCALER_ID, signal=contract.SET_NODE_GROUPS, payload=update.to_wire(), start_autoscaler=True)
            )

    def _details(self) -> str:
        counts = ", ".join(f"{len(v)} {k}" for k, v in sorted(self.state.objects.items()) if v)
        return f"revision {self.state.revision}: {counts or 'empty'}"

    # --- apply / delete -------------------------------------------------------------------------
    # Every handler takes `*payload` and parses it (workflows/arguments.py): an update that is not
    # what it takes is rejected by its validator, a signal dropped, a query failed, with one line.

    @workflow.update(name=contract.CATALOG_APPLY)
    def apply(self, *payload: Any) -> ApplyResult:
        request = arguments.update(contract.CATALOG_APPLY, payload, ApplyRequest)
        try:
            outcomes = catalog.apply(self.state, request.objects, lambda: str(workflow.uuid4()), workflow.now())
        except CatalogError as err:
            raise _refuse(err) from None
        self.dirty = True
        return ApplyResult(outcomes=outcomes)

    @apply.validator
    def _validate_apply(self, *payload: Any) -> None:
        request = arguments.update(contract.CATALOG_APPLY, payload, ApplyRequest)
        try:
            catalog.validate_apply(self.state, request.objects)
        except CatalogError as err:
            raise _refuse(err) from None

    @workflow.update(name=contract.CATALOG_DELETE)
    def delete(self, *payload: Any) -> ApplyResult:
        request = arguments.update(contract.CATALOG_DELETE, payload, DeleteRequest)
        try:
            outcomes = catalog.delete(self.state, request.objects, workflow.now())
        except CatalogError as err:
            raise _refuse(err) from None
        self.dirty = True
        return ApplyResult(outcomes=outcomes)

    @delete.validator
    def _validate_delete(self, *payload: Any) -> None:
        request = arguments.update(contract.CATALOG_DELETE, payload, DeleteRequest)
        try:
            catalog.validate_delete(self.state, request.objects)
        except CatalogError as err:
            raise _refuse(err) from None

    @workflow.update(name=contract.SET_ADMISSION_CHECK_ACTIVE)
    def set_admission_check_active(self, *payload: Any) -> bool:
        request = arguments.update(contract.SET_ADMISSION_CHECK_ACTIVE, payload, AdmissionCheckActive)
        try:
            changed = catalog.set_admission_check_active(
                self.state, request.name, request.active, request.reason, request.message, workflow.now()
            )
        except CatalogError as err:
            raise _refuse(err) from None
        self.dirty = self.dirty or changed
        return changed

    @set_admission_check_active.validator
    def _validate_set_admission_check_active(self, *payload: Any) -> None:
        request = arguments.update(contract.SET_ADMISSION_CHECK_ACTIVE, payload, AdmissionCheckActive)
        try:
            catalog.validate_set_admission_check_active(self.state, request.name)
        except CatalogError as err:
            raise _refuse(err) from None

    # --- messages from workloads --------------------------------------------------------------

    @workflow.signal(name=contract.WATCH_QUEUE)
    def watch_queue(self, *payload: Any) -> None:
        request = arguments.signal(contract.WATCH_QUEUE, payload, WatchRequest, check=_namespaced)
        if request is None:
            return
        catalog.add_watcher(self.state, request.local_queue, request.workflow_id, request.seen)
        # If the queue appeared between the workload's lookup and this signal, wake it right away.
        self.dirty = True

    # --- reads --------------------------------------------------------------------------------

    @workflow.query(name=contract.CATALOG_GET)
    def get(self, *payload: Any) -> ObjectList:
        query = arguments.query(contract.CATALOG_GET, payload, ObjectQuery)
        if query.key is None:
            items = sorted(self.state.all(query.kind), key=lambda o: o.key)
        else:
            found = self.state.get(query.kind, query.key)
            items = [found] if found is not None else []
        return ObjectList(items=items)

    @workflow.query(name=contract.CATALOG_DRY_RUN)
    def dry_run_apply(self, *payload: Any) -> ApplyPreview:
        """`admitflow apply --dry-run=server`: the apply update's own pure code, run on a copy of the
        state, so that a query answers what the update would, and nothing reaches the history."""
        request = arguments.query(contract.CATALOG_DRY_RUN, payload, ApplyRequest)
        try:
            # A fixed uid: a query must not draw from the workflow's random (what it returns is not stored).
            outcomes = catalog.apply(self.state.model_copy(deep=True), request.objects, lambda: "", workflow.now())
        except CatalogError as err:
            return ApplyPreview(refused=str(err), index=err.index)
        return ApplyPreview(outcomes=outcomes)

    @workflow.query(name=contract.RESOLVE_LOCAL_QUEUE)
    def resolve_local_queue(self, *payload: Any) -> QueueResolution:
        ref = arguments.query(contract.RESOLVE_LOCAL_QUEUE, payload, LocalQueueRef)
        return catalog.resolve_local_queue(self.state, ref.namespace, ref.name)

    @workflow.query(name=contract.CATALOG_VIEW)
    def view(self, *payload: Any) -> ClusterQueueView:
        ref = arguments.query(contract.CATALOG_VIEW, payload, ClusterQueueRef)
        return catalog.view_of(self.state, ref.name)

    @workflow.query(name=contract.CATALOG_NODE_GROUPS)
    def node_groups(self, *payload: Any) -> NodeGroupsUpdate:
        """For the simulated autoscaler when it starts."""
        arguments.no_argument(contract.CATALOG_NODE_GROUPS, payload)
        return NodeGroupsUpdate(revision=self.state.revision, node_groups=catalog.node_groups(self.state))
