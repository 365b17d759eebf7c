"""Payloads the engine cannot decode (issue 19): every one is refused, recorded and harmless.

Each row of `BAD` is a payload built by hand: one that claims `binary/zlib` but does not
decompress, one that decompresses to something that is not a payload, one sealed as
`binary/encrypted` while the engine holds no key, one with an encoding nobody writes, and one
whose JSON does not parse. It goes to a workload that holds quota with its check `Pending`, as
every message a workload takes that anyone may send (and two the engine sends itself), through
the raw workflow service so that no SDK stands in the way, and as the verdict update, through a
client whose codec swaps the bad payload in. Then:

1. the workload answers its query throughout, and its history holds no `WorkflowTaskFailed`;
2. every message is recorded with the one-line reason: the verdict signal in `verdicts` as
   `rejected` (`invalid verdict: <reason>`), every other signal as a Warning event
   `EventNotApplied`; the update is refused with the same line as the verdict;
3. nothing else changed: still `QuotaReserved`, active, not finished, not deleted;
4. a valid `Ready` verdict afterwards admits it.

The same payloads as a check controller's answer (the result of its `admission_check` activity)
count as a failed answer with the reason: a Warning event `AdmissionCheckControllerFailed`, the
controller asked again after its backoff, the workload not evicted.

On the code before the fix every test here failed: the rows the codec could not open
(`binary/zlib`, `binary/encrypted`) failed every workflow task of the workload from the first
message on (its queries timed out, the update was never answered), as they did for the other
workflows; the other rows' signals were dropped by the SDK, so no refusal was ever recorded, and the
update was refused with a bare `Failed decoding arguments`; any of them as a controller's answer
failed the workload's task.

The other workflows check each message against their handler's model (workflows/arguments.py).
There the same payloads, sent to every signal of the catalog, a ClusterQueue, the simulated
autoscaler, the blockAdmission gate and a ProvisioningRequest attempt, are dropped with a Warning
`message_refused` giving the reason, and fail no workflow task; their queries still answer, and
their updates refuse such a payload with the reason as the cause.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
import zlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import timedelta

import pytest
import pytest_asyncio
from temporalio import activity
from temporalio.api.common.v1 import Payload, Payloads, WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import SignalWorkflowExecutionRequest
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.converter import PayloadCodec
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from admitflow import ids
from admitflow.admission.workload import WorkloadReport
from admitflow.client import AdmitflowClient
from admitflow.codec import DATA_CONVERTER
from admitflow.devserver import DevServer
from admitflow.messages import GateInput, ProvisioningCheckInput
from tests.builders import cluster_queue_manifest, flavor_manifest, local_queue_manifest, workload_manifest
from tests.conftest import Engine
from tests.integration.test_admission import eventually, loaded
from tests.integration.test_admission_checks import check_manifest
from tests.integration.test_simulated_autoscaler import node_group, provreq
from admitflow.worker.main import build_worker

pytestmark = pytest.mark.integration

CHECK = "budget"
READS = "json/plain, binary/null, binary/plain, json/protobuf, binary/protobuf, binary/zlib, binary/encrypted"


@dataclass(frozen=True)
class Bad:
    id: str
    payload: Payload
    reason: str


BAD = [
    Bad(
        "binary/zlib that does not decompress",
        Payload(metadata={"encoding": b"binary/zlib"}, data=b"not zlib at all"),
        "payload encoding binary/zlib does not decompress: Error -3 while decompressing data: incorrect header check",
    ),
    Bad(
        "binary/zlib of something that is not a payload",
        Payload(metadata={"encoding": b"binary/zlib"}, data=zlib.compress(b"\xff\xff\xff\xff not a payload")),
        "payload encoding binary/zlib does not hold a payload: Error parsing message with type "
        "'temporal.api.common.v1.Payload': Wire format was corrupt",
    ),
    Bad(
        "binary/encrypted while the engine has no key",
        Payload(metadata={"encoding": b"binary/encrypted", "encryption-key-id": b"k9"}, data=bytes(range(64))),
        "payload encrypted with key id k9; set ADMITFLOW_ENCRYPTION_KEY (and ADMITFLOW_ENCRYPTION_KEY_ID) to that key",
    ),
    Bad(
        "an encoding nobody writes",
        Payload(metadata={"encoding": b"binary/msgpack"}, data=b"\x82\xa4name\xa6budget\xa5state\xa5Ready"),
        f"payload encoding binary/msgpack is not one admitflow reads ({READS})",
    ),
    Bad(
        "json/plain that does not parse",
        Payload(metadata={"encoding": b"json/plain"}, data=b'{"name": "budget", "state": Ready}'),
        "payload encoding json/plain does not parse: Invalid JSON: expected value at line 1 column 29",
    ),
]

# Every signal with a payload that a workload takes, and the event its refusal names.
SIGNALS = {
    "set_pods_ready": "PodsReadyReported",
    "finish": "FinishRequested",
    "delete": "DeleteRequested",
    "deactivate": "Deactivated",
    "activate": "Activated",
    "quota_reserved": "QueueNoticed",
    "provisioning_request_updated": "ProvisioningReported",
}


class SwapIn(PayloadCodec):
    """A client codec that sends `bad` in place of every payload it is given."""

    def __init__(self, bad: Payload) -> None:
        self.bad = bad

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.bad for _ in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)


@pytest_asyncio.fixture(scope="module")
async def engine(dev_server: DevServer) -> AsyncIterator[Engine]:
    """conftest's `engine`, once for the module (every row uses its own workload)."""
    namespace = next(dev_server.pool)  # type: ignore[attr-defined]
    client = await Client.connect(dev_server.address, namespace=namespace, data_converter=DATA_CONVERTER)
    async with build_worker(client, "admitflow"):
        engine = Engine(client, AdmitflowClient(client, "admitflow"), namespace, dev_server.address)
        af = engine.admitflow
        await af.apply(loaded(check_manifest(CHECK)))
        await af.set_admission_check_active(CHECK)
        await af.apply(
            loaded(
                flavor_manifest(),
                cluster_queue_manifest(quotas={"default": {"cpu": "64"}}, checks=[{"name": CHECK}]),
                local_queue_manifest(),
            )
        )
        yield engine


def sender(engine: Engine, bad: Payload) -> Client:
    return Client(**{**engine.client.config(), "data_converter": dataclasses.replace(DATA_CONVERTER, payload_codec=SwapIn(bad))})


async def task_failures(handle: WorkflowHandle) -> list[str]:
    history = await handle.fetch_history()
    return [
        e.workflow_task_failed_event_attributes.failure.message
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
    ]


async def query(engine: Engine, key: str) -> WorkloadReport:
    handle = engine.client.get_workflow_handle(ids.workload_id(key))
    return await asyncio.wait_for(handle.query("workload", result_type=WorkloadReport, rpc_timeout=timedelta(seconds=3)), 4)


async def signal_raw(engine: Engine, key: str, name: str, payload: Payload) -> None:
    await engine.client.workflow_service.signal_workflow_execution(
        SignalWorkflowExecutionRequest(
            namespace=engine.namespace,
            workflow_execution=WorkflowExecution(workflow_id=ids.workload_id(key)),
            signal_name=name,
            input=Payloads(payloads=[payload]),
            identity="tests/payload-encodings",
            request_id=str(uuid.uuid4()),
        )
    )


def unchanged(r: WorkloadReport) -> tuple:
    """What a refused message must leave as it was."""
    return (
        r.status.has_condition("QuotaReserved"), r.status.has_condition("Admitted"), r.status.has_condition("Finished"),
        r.spec.active, r.deleted, [(c.name, c.state) for c in r.status.admission_checks or ()],
    )


@pytest.mark.parametrize("bad", BAD, ids=[b.id for b in BAD])
async def test_an_undecodable_payload_is_refused_recorded_and_harmless(engine: Engine, bad: Bad):
    name = "w-" + uuid.uuid4().hex[:8]
    key = f"default/{name}"
    await engine.admitflow.apply(loaded(workload_manifest(name, cpu="1")))

    async def reserved():
        r = await query(engine, key)
        return r.status.has_condition("QuotaReserved") and r

    before = await eventually(reserved)
    assert unchanged(before) == (True, False, False, True, None, [(CHECK, "Pending")])

    # The update first: it is refused with the reason, and leaves nothing behind.
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await asyncio.wait_for(
            sender(engine, bad.payload).get_workflow_handle(ids.workload_id(key)).execute_update(
                "apply_admission_check_state", {"name": CHECK, "state": "Ready"}
            ),
            15,
        )
    cause = refused.value.cause
    assert isinstance(cause, ApplicationError) and cause.message == f"invalid verdict: {bad.reason}"

    await signal_raw(engine, key, "set_admission_check_state", bad.payload)
    for signal in SIGNALS:
        await signal_raw(engine, key, signal, bad.payload)

    def refusals(r: WorkloadReport) -> tuple[list, list]:
        verdicts = [(v.outcome, v.detail) for v in r.verdicts]
        events = sorted(e.message for e in r.events if (e.type, e.reason) == ("Warning", "EventNotApplied"))
        return verdicts, events

    async def all_recorded():
        r = await query(engine, key)
        verdicts, events = refusals(r)
        return len(verdicts) >= 1 and len(events) >= len(SIGNALS) and r

    after = await eventually(all_recorded)
    assert refusals(after) == (
        [("rejected", f"invalid verdict: {bad.reason}")],
        sorted(f"{event} not applied: {bad.reason}" for event in SIGNALS.values()),
    )
    assert unchanged(after) == unchanged(before)

    # It keeps going: a valid verdict admits it.
    await engine.client.get_workflow_handle(ids.workload_id(key)).signal(
        "set_admission_check_state", {"name": CHECK, "state": "Ready"}
    )

    async def admitted():
        r = await query(engine, key)
        return r.status.has_condition("Admitted") and r

    await eventually(admitted)
    assert await task_failures(engine.client.get_workflow_handle(ids.workload_id(key))) == []


@activity.defn(name="admission_check")
async def approve(request: dict) -> dict:
    return {"name": request["admissionCheck"], "state": "Ready", "attempt": request["attempt"]}


@pytest.mark.parametrize("bad", BAD, ids=[b.id for b in BAD])
async def test_a_controller_answer_that_cannot_be_decoded_counts_as_a_failed_answer(engine: Engine, bad: Bad):
    af = engine.admitflow
    name = "c-" + uuid.uuid4().hex[:8]
    controller = f"tests/{name}"
    await af.apply(loaded(check_manifest(name, controllerName=controller)))
    await af.set_admission_check_active(name)
    await af.apply(loaded(
        cluster_queue_manifest(name, quotas={"default": {"cpu": "4"}}, checks=[{"name": name}]),
        local_queue_manifest(name, name),
        workload_manifest(name, cpu="1", queue=name),
    ))
    key = f"default/{name}"
    # The controller answers Ready, but its answer reaches the engine as the bad payload.
    async with Worker(sender(engine, bad.payload), task_queue=controller, activities=[approve]):

        async def failed():
            r = await query(engine, key)
            return [e.message for e in r.events if e.reason == "AdmissionCheckControllerFailed"]

        [message, *_] = await eventually(failed)
    assert message.startswith(
        f'Controller of check "{name}" failed on attempt 1: its answer cannot be decoded: {bad.reason}; asked again in 5s'
    ), message
    r = await query(engine, key)
    assert r.status.has_condition("QuotaReserved") and not r.status.has_condition("Evicted")
    await engine.client.get_workflow_handle(ids.workload_id(key)).signal("set_admission_check_state", {"name": name, "state": "Ready"})

    async def admitted():
        return (await query(engine, key)).status.has_condition("Admitted")

    await eventually(admitted)
    assert await task_failures(engine.client.get_workflow_handle(ids.workload_id(key))) == []


def causes(err: BaseException | None) -> list[str]:
    out = []
    while err is not None:
        out.append(err.message if isinstance(err, ApplicationError) else str(err))
        err = err.__cause__
    return out


async def test_the_other_workflows_refuse_an_undecodable_signal_or_update_and_fail_no_task(engine: Engine):
    af = engine.admitflow
    await af.apply(loaded(node_group(), workload_manifest("parent", cpu="1")))
    client = engine.client
    request, templates = provreq("parent-prov-1", gpus=1)
    provisioning = await client.start_workflow(
        "ProvisioningCheckWorkflow",
        ProvisioningCheckInput(parent=ids.workload_id("default/parent"), check="prov", attempt=1, request=request, pod_templates=templates),
        id="provisioning/default/parent/prov/1", task_queue="admitflow",
    )
    gate = await client.start_workflow("PodsReadyGateWorkflow", GateInput(), id=ids.PODS_READY_GATE_ID, task_queue="admitflow")
    # Each workflow with its typed signals, and a query that must still answer.
    targets = {
        ids.CATALOG_ID: (["watch_queue"], "get", {"kind": "ClusterQueue"}),
        ids.cluster_queue_id("cq"): (["set_view", "enqueue", "release", "admitted", "pods_ready_gate"], "status", None),
        ids.AUTOSCALER_ID: (["create_request", "delete_request", "pods_scheduled", "set_node_groups"], "provisioning_requests", None),
        gate.id: (["request", "used", "returned", "settled", "unsettled"], "status", None),
        provisioning.id: (["provisioning_request_status", "delete_provisioning_request", "pods_scheduled", "probe"], None, None),
    }

    async def running():
        return all([(await client.get_workflow_handle(wid).describe()).status.name == "RUNNING" for wid in targets])

    await eventually(running)
    for wid, (signals, _, _) in targets.items():
        for bad in BAD:
            for signal in signals:
                await engine.client.workflow_service.signal_workflow_execution(
                    SignalWorkflowExecutionRequest(
                        namespace=engine.namespace, workflow_execution=WorkflowExecution(workflow_id=wid), signal_name=signal,
                        input=Payloads(payloads=[bad.payload]), identity="tests/payload-encodings", request_id=str(uuid.uuid4()),
                    )
                )

    # Their typed updates refuse it, with the reason as the cause.
    for bad in BAD:
        for wid, update in ((ids.CATALOG_ID, "apply"), (ids.AUTOSCALER_ID, "set_provisioning_request_condition")):
            with pytest.raises(WorkflowUpdateFailedError) as refused:
                await asyncio.wait_for(sender(engine, bad.payload).get_workflow_handle(wid).execute_update(update, {}), 15)
            assert bad.reason in causes(refused.value.cause), (wid, update, causes(refused.value.cause))

    # Every one still runs and answers, and none failed a workflow task; a new workload is still admitted.
    for wid, (_, name, arg) in targets.items():
        handle = client.get_workflow_handle(wid)
        if name is not None:
            await asyncio.wait_for(handle.query(name, *([arg] if arg is not None else []), rpc_timeout=timedelta(seconds=3)), 4)
        assert (await handle.describe()).status.name == "RUNNING", wid
        assert await task_failures(handle) == [], wid
    await af.apply(loaded(workload_manifest("after", cpu="1")))

    async def reserved():
        r = await query(engine, "default/after")
        return r.status.has_condition("QuotaReserved")

    await eventually(reserved)
