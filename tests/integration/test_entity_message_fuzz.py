"""Malformed messages to the entity workflows: none fails a workflow task, none changes anything.

The workload workflow takes any payload and refuses a bad one (tests/workflows/test_message_fuzz.py).
Here the other five get the same treatment: the catalog, a ClusterQueue, the blockAdmission gate,
the simulated autoscaler and a ProvisioningRequest attempt, each started the way users start them
(manifests applied through AdmitflowClient). Every signal each one takes is sent every malformed
payload through the plain Temporal client: null (as the Python SDK sends None, `binary/null`, and
as `temporal workflow signal --input null` sends it, JSON), a list, a string, a number, an empty
object, an object of the wrong shape, two arguments and none; every update and query it answers
gets the same. A payload is malformed when the handler's model (admitflow.messages) does not
validate it from JSON; where a handler's argument is optional, null and no argument are valid and
not sent. Two well-formed ones are malformed too: a `watch_queue` for a LocalQueue key without a
namespace, and a gate `request` for a ClusterQueue whose workflow ID the server would refuse. Then,
for each workflow:

1. its history holds no `WorkflowTaskFailed` and its status query still answers (the `engine`
   fixture also replays every history the test wrote, and fails on a failed workflow task);
2. each signal was refused with a Warning `message_refused` in the worker's log naming the signal
   and an `invalid <signal>: ...` line; each update was rejected and each query failed with such a
   line;
3. nothing changed: its status reads as before;
4. a valid message afterwards still does what it always did (a workload is admitted, a grant goes
   to the next queue, a request is provisioned, booked and deleted).

On the code before every test here failed. A null from the Python SDK reached the typed handlers
as None, two arguments or none made the SDK call them with the wrong number, and the two
well-formed ones failed the catalog's loop and the gate's answer: each failed the workflow task, and
as every retry of that task meets the same message again, the workflow stayed wedged (its queries
failing too). JSON null, lists, strings, numbers and objects of the wrong shape were dropped by the
SDK with its own log line; updates were rejected with `Failed decoding arguments` or a TypeError,
or, in the autoscaler's three updates without a validator, accepted and then failed the task.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError
from pydantic_core import to_json
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.client import (
    Client,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.converter import PayloadCodec
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from admitflow import contract, ids
from admitflow.admission.checks import Verdict
from admitflow.admission.cluster_queue import ClusterQueueView
from admitflow.admission.pending_queue import QueueEntry
from admitflow.admission.pods_ready_gate import GateAnswer, GateState
from admitflow.api.provisioning_request import ProvisioningRequest
from admitflow.codec import DATA_CONVERTER
from admitflow.messages import (
    AdmissionCheckActive,
    ApplyRequest,
    ClusterQueueRef,
    CreateProvisioningRequest,
    DeleteRequest,
    LocalQueueRef,
    NodeGroupsUpdate,
    ObjectList,
    ObjectQuery,
    ProvisioningNotice,
    ProvisioningRequestCondition,
    ProvisioningRequestList,
    ProvisioningRequestQuery,
    ProvisioningRequestRef,
    WatchRequest,
)
from admitflow.admission.protocol import ClusterQueueReport, ForceRelease, StatusQuery
from admitflow.admission.protocol import GateRequest, GateSettled, GateUse, ReleaseRequest
from tests.builders import (
    cluster_queue_manifest,
    configuration_manifest,
    flavor_manifest,
    local_queue_manifest,
    workload_manifest,
)
from tests.conftest import Engine
from tests.integration.test_admission import eventually, loaded
from tests.integration.test_admission_checks import until
from tests.integration.test_provisioning import gpu_workload, has, gone, setup as provisioning_setup

pytestmark = pytest.mark.integration

RPC = timedelta(seconds=3)


# --- the malformed payloads -----------------------------------------------------------------------


@dataclass(frozen=True)
class Junk:
    id: str
    args: tuple[Any, ...]
    json_null: bool = False  # sent through a client that writes None as JSON `null`, as the CLI does


WRONG = [[[]]]  # a value no field of ours takes: not a string, number, bool, object or list of those


def wrong_shape(model: type[BaseModel] | None) -> dict:
    """An object with each of the model's fields (by its wire name) of the wrong type."""
    if model is None:
        return {"unexpected": True}
    return {(f.alias or name): WRONG for name, f in model.model_fields.items()}


def junk_for(model: type[BaseModel] | None) -> list[Junk]:
    return [
        Junk("null", (None,)),
        Junk("JSON null", (None,), json_null=True),
        Junk("a list", ([1, "two"],)),
        Junk("a string", ("junk",)),
        Junk("a number", (7,)),
        Junk("an empty object", ({},)),
        Junk("an object of the wrong shape", (wrong_shape(model),)),
        Junk("two arguments", ({}, {})),
        Junk("no argument", ()),
    ]


@dataclass(frozen=True)
class Handler:
    kind: str  # signal, update, query
    name: str
    model: type[BaseModel] | None  # None: takes no argument
    optional: bool = False  # no argument, or null, stands for the model's defaults
    impossible: tuple[Junk, ...] = ()  # well-formed, but a value the workflow cannot act on
    refusal: str = ""  # how its refusals begin, when not `invalid <name>: `

    @property
    def refused_with(self) -> str:
        return self.refusal or f"invalid {self.name}: "

    def malformed(self, junk: Junk) -> bool:
        if self.model is None:
            return bool(junk.args)
        if len(junk.args) != 1:
            return not (self.optional and not junk.args)
        [value] = junk.args
        if value is None:
            return not self.optional
        try:
            self.model.model_validate_json(to_json(value))
        except ValidationError:
            return True
        return False

    def junk(self) -> list[Junk]:
        return [j for j in junk_for(self.model) if self.malformed(j)] + list(self.impossible)


def signal(name: str, model: type[BaseModel] | None, optional: bool = False, impossible: tuple[Junk, ...] = ()) -> Handler:
    return Handler("signal", name, model, optional, impossible)


def update(name: str, model: type[BaseModel], refusal: str = "") -> Handler:
    return Handler("update", name, model, refusal=refusal)


def query(name: str, model: type[BaseModel] | None, optional: bool = False) -> Handler:
    return Handler("query", name, model, optional)


CLUSTER_QUEUE = [
    signal(contract.SET_VIEW, ClusterQueueView),
    signal(contract.ENQUEUE, QueueEntry),
    signal(contract.RELEASE, ReleaseRequest),
    signal(contract.ADMITTED, ReleaseRequest),
    signal(contract.CLUSTER_QUEUE_GATE_ANSWER, GateAnswer),
    update(contract.FORCE_RELEASE, ForceRelease),
    query(contract.CLUSTER_QUEUE_STATUS, StatusQuery, optional=True),
    query(contract.CLUSTER_QUEUE_GAUGES, None),
]
CATALOG = [
    update(contract.CATALOG_APPLY, ApplyRequest),
    update(contract.CATALOG_DELETE, DeleteRequest),
    update(contract.SET_ADMISSION_CHECK_ACTIVE, AdmissionCheckActive),
    signal(
        contract.WATCH_QUEUE, WatchRequest,
        impossible=(Junk("a LocalQueue key without a namespace", ({"localQueue": "lq", "workflowId": "workload/default/x"},)),),
    ),
    query(contract.CATALOG_GET, ObjectQuery),
    query(contract.CATALOG_DRY_RUN, ApplyRequest),
    query(contract.RESOLVE_LOCAL_QUEUE, LocalQueueRef),
    query(contract.CATALOG_VIEW, ClusterQueueRef),
    query(contract.CATALOG_NODE_GROUPS, None),
]
GATE = [
    signal(
        contract.GATE_REQUEST, GateRequest,
        # Past the server's limit for a workflow ID (1000 on the dev server, 255 on SQL).
        impossible=(Junk("a ClusterQueue name too long for a workflow ID", ({"clusterQueue": "q" * 1100},)),),
    ),
    signal(contract.GATE_USED, GateUse),
    signal(contract.GATE_RETURNED, GateRequest),
    signal(contract.GATE_SETTLED, GateSettled),
    signal(contract.GATE_UNSETTLED, GateSettled),
    query(contract.GATE_STATUS, None),
]
AUTOSCALER = [
    signal(contract.AUTOSCALER_CREATE_REQUEST, CreateProvisioningRequest),
    signal(contract.AUTOSCALER_DELETE_REQUEST, ProvisioningRequestRef),
    signal(contract.AUTOSCALER_PODS_SCHEDULED, ProvisioningRequestRef),
    signal(contract.SET_NODE_GROUPS, NodeGroupsUpdate),
    update(contract.AUTOSCALER_CREATE_PROVISIONING_REQUEST, CreateProvisioningRequest),
    update(contract.AUTOSCALER_DELETE_PROVISIONING_REQUEST, ProvisioningRequestRef),
    update(contract.AUTOSCALER_PROVISIONING_PODS_SCHEDULED, ProvisioningRequestRef),
    update(contract.SET_PROVISIONING_REQUEST_CONDITION, ProvisioningRequestCondition, refusal="invalid condition: "),
    query(contract.PROVISIONING_REQUESTS_QUERY, ProvisioningRequestQuery, optional=True),
    query(contract.PROVISIONING_REQUEST_QUERY, ProvisioningRequestRef),
    query(contract.NODE_GROUP_USAGE_QUERY, None),
]
PROVISIONING = [
    signal(contract.PROVISIONING_REQUEST_STATUS, ProvisioningRequest),
    signal(contract.PROVISIONING_CHECK_DELETE, ProvisioningNotice, optional=True),
    signal(contract.PROVISIONING_CHECK_PROBE, ProvisioningNotice, optional=True),
    signal(contract.PROVISIONING_CHECK_PODS_SCHEDULED, ProvisioningNotice, optional=True),
]


# --- sending them -----------------------------------------------------------------------------------


class JsonNull(PayloadCodec):
    """Writes a `binary/null` payload as JSON `null`, as the `temporal` CLI sends `--input null`."""

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [
            Payload(metadata={"encoding": b"json/plain"}, data=b"null") if p.metadata.get("encoding") == b"binary/null" else p
            for p in payloads
        ]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)


@dataclass
class Outcome:
    """What the malformed messages did to one workflow."""

    problems: list[str] = dataclasses.field(default_factory=list)
    signals_sent: dict[str, int] = dataclasses.field(default_factory=dict)


def one_line(err: BaseException) -> str:
    cause = err
    while cause.__cause__ is not None and not isinstance(cause, ApplicationError):
        cause = cause.__cause__
    return cause.message if isinstance(cause, ApplicationError) else str(cause)


async def send_junk(engine: Engine, workflow_id: str, handlers: list[Handler]) -> Outcome:
    """Every malformed payload to every handler; what went wrong, as lines naming the payload."""
    plain = engine.client.get_workflow_handle(workflow_id)
    json_null = Client(**{**engine.client.config(), "data_converter": dataclasses.replace(DATA_CONVERTER, payload_codec=JsonNull())})
    out = Outcome()
    for h in handlers:
        for j in h.junk():
            handle = json_null.get_workflow_handle(workflow_id) if j.json_null else plain
            what = f"{h.kind} {h.name} with {j.id}"
            try:
                if h.kind == "signal":
                    await handle.signal(h.name, args=list(j.args), rpc_timeout=RPC)
                    out.signals_sent[h.name] = out.signals_sent.get(h.name, 0) + 1
                elif h.kind == "update":
                    await asyncio.wait_for(handle.execute_update(h.name, args=list(j.args), rpc_timeout=RPC), 10)
                    out.problems.append(f"{what}: accepted")
                else:
                    await asyncio.wait_for(handle.query(h.name, args=list(j.args), rpc_timeout=RPC), 5)
                    out.problems.append(f"{what}: answered")
            except (WorkflowUpdateFailedError, WorkflowQueryFailedError) as err:
                line = one_line(err)
                if not line.startswith(h.refused_with) or "\n" in line:
                    out.problems.append(f"{what}: refused with {line!r}, not one line `{h.refused_with}...`")
            except (RPCError, WorkflowUpdateRPCTimeoutOrCancelledError, asyncio.TimeoutError) as err:
                out.problems.append(f"{what}: {type(err).__name__} {err}")
    return out


async def task_failures(handle: WorkflowHandle) -> list[str]:
    history = await handle.fetch_history()
    return [
        f"event {e.event_id}: {e.workflow_task_failed_event_attributes.failure.message.splitlines()[0]}"
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
    ]


async def settled(handle: WorkflowHandle) -> None:
    """Wait until a workflow task has taken every signal sent so far (completed or failed)."""

    async def taken():
        events = (await handle.fetch_history()).events
        last_signal = max((e.event_id for e in events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED), default=0)
        return any(
            e.event_id > last_signal
            and e.event_type in (EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED, EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED)
            for e in events
        )

    await eventually(taken)


async def signalled(handle: WorkflowHandle, name: str) -> int:
    events = (await handle.fetch_history()).events
    return sum(
        e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED and e.workflow_execution_signaled_event_attributes.signal_name == name
        for e in events
    )


def refusals(caplog: pytest.LogCaptureFixture) -> dict[str, list[str]]:
    """signal -> the reasons of its `message_refused` warnings."""
    out: dict[str, list[str]] = {}
    for r in caplog.records:
        if r.levelno == logging.WARNING and r.getMessage().startswith("message_refused"):
            out.setdefault(getattr(r, "signal", "?"), []).append(getattr(r, "reason", ""))
    return out


async def exercise(
    engine: Engine,
    caplog: pytest.LogCaptureFixture,
    workflow_id: str,
    handlers: list[Handler],
    status: Callable[[], Awaitable[Any]] | None,
) -> None:
    """Send the junk, then check 1 to 3 of the module's docstring; 4 is each test's own."""
    caplog.set_level(logging.WARNING, logger="temporalio.workflow")
    handle = engine.client.get_workflow_handle(workflow_id)
    before = await status() if status is not None else None
    out = await send_junk(engine, workflow_id, handlers)
    problems = list(out.problems)
    try:
        await settled(handle)
    except AssertionError as err:
        problems.append(f"the signals were never taken: {err}")
    problems += [f"workflow task failed, {f}" for f in await task_failures(handle)]
    if status is not None:
        try:
            after = await asyncio.wait_for(status(), 10)
        except Exception as err:  # noqa: BLE001 - reported with the rest
            problems.append(f"status query fails: {type(err).__name__}: {one_line(err)}")
        else:
            if after != before:
                problems.append(f"status changed:\nbefore {before!r}\nafter  {after!r}")
    logged = refusals(caplog)
    for name, count in out.signals_sent.items():
        lines = logged.get(name, [])
        if len(lines) < count or not all(line.startswith(f"invalid {name}: ") for line in lines):
            problems.append(f"signal {name}: {count} malformed sent, refusals logged: {lines}")
    assert not problems, f"{workflow_id}:\n" + "\n".join(problems)


# --- one test per workflow ----------------------------------------------------------------------------


async def test_a_cluster_queue_refuses_every_malformed_message_and_still_admits(engine: Engine, caplog):
    af = engine.admitflow
    await af.apply(loaded(flavor_manifest(), cluster_queue_manifest(), local_queue_manifest(), workload_manifest("w1", cpu="1")))
    await until(af, "Admitted", "w1")
    cq = engine.client.get_workflow_handle(ids.cluster_queue_id("cq"))

    async def status() -> ClusterQueueReport:
        return await cq.query(contract.CLUSTER_QUEUE_STATUS, result_type=ClusterQueueReport, rpc_timeout=RPC)

    await exercise(engine, caplog, cq.id, CLUSTER_QUEUE, status)

    # It still takes a workload's enqueue and release, and an operator's force_release.
    await af.apply(loaded(workload_manifest("w2", cpu="1")))
    await until(af, "Admitted", "w2")
    await af.finish("default/w1")

    async def w1_gone():
        return [r.name for r in (await status()).reserving] == ["w2"]

    await eventually(w1_gone)
    _, outcome = await af.release("default/w2", force=True)
    assert outcome.released == "quota"


async def test_the_catalog_refuses_every_malformed_message_and_still_applies_and_wakes(engine: Engine, caplog):
    af = engine.admitflow
    await af.apply(loaded(flavor_manifest(), cluster_queue_manifest(), local_queue_manifest()))
    catalog = engine.client.get_workflow_handle(ids.CATALOG_ID)

    async def status() -> ObjectList:
        return await catalog.query(contract.CATALOG_GET, ObjectQuery(kind="ClusterQueue"), result_type=ObjectList, rpc_timeout=RPC)

    await exercise(engine, caplog, catalog.id, CATALOG, status)

    # A workload whose LocalQueue is missing asks to be woken (watch_queue); applying it wakes it.
    watches = await signalled(catalog, contract.WATCH_QUEUE)
    await af.apply(loaded(workload_manifest("waiter", cpu="1", queue="later")))

    async def watching():
        return await signalled(catalog, contract.WATCH_QUEUE) > watches

    await eventually(watching)
    await af.apply(loaded(local_queue_manifest("later")))
    await until(af, "Admitted", "waiter")


async def test_the_pods_ready_gate_refuses_every_malformed_message_and_still_grants(engine: Engine, caplog):
    af = engine.admitflow
    await af.apply(
        loaded(
            configuration_manifest(timeout="10m", recoveryTimeout="10m", blockAdmission=True),
            flavor_manifest(), cluster_queue_manifest(), local_queue_manifest(), workload_manifest("w1", cpu="1"),
        )
    )
    await until(af, "Admitted", "w1")
    await af.apply(loaded(workload_manifest("w2", cpu="1")))
    gate = engine.client.get_workflow_handle(ids.PODS_READY_GATE_ID)

    async def status() -> GateState:
        return await gate.query(contract.GATE_STATUS, result_type=GateState, rpc_timeout=RPC)

    async def w2_waits():
        held = (await af.workload("default/w2")).status.condition("QuotaReserved")
        return held is not None and held.reason == "WaitingForPodsReady" and "default/w1" in (await status()).not_ready

    await eventually(w2_waits)
    await exercise(engine, caplog, gate.id, GATE, status)

    # w1's pods are ready: it settles, and the grant goes to the queue, which admits w2.
    await af.pods_ready("default/w1", ready=True)
    await until(af, "Admitted", "w2")


async def test_the_simulated_autoscaler_refuses_every_malformed_message_and_still_provisions(engine: Engine, caplog):
    af = engine.admitflow
    await provisioning_setup(af)
    await af.apply(loaded(gpu_workload("job")))
    await until(af, "Admitted", "job")
    await has(engine, "job-prov-1", "BookingExpired")  # consumed: nothing more happens to it
    autoscaler = engine.client.get_workflow_handle(ids.AUTOSCALER_ID)

    async def status() -> tuple:
        requests = await autoscaler.query(contract.PROVISIONING_REQUESTS_QUERY, result_type=ProvisioningRequestList, rpc_timeout=RPC)
        usage = await autoscaler.query(contract.NODE_GROUP_USAGE_QUERY, rpc_timeout=RPC)
        return requests, usage

    await exercise(engine, caplog, autoscaler.id, AUTOSCALER, status)

    # A new request is created and provisioned (create_request); a finished one is deleted (delete_request).
    await af.apply(loaded(gpu_workload("job2")))
    await until(af, "Admitted", "job2")
    await has(engine, "job2-prov-1", "Provisioned")
    await af.finish("default/job")
    await gone(engine, "job-prov-1")


async def test_a_provisioning_attempt_refuses_every_malformed_message_and_still_carries_its_request(engine: Engine, caplog):
    af = engine.admitflow
    await provisioning_setup(af, approval=True)
    await af.apply(loaded(gpu_workload("job")))
    await has(engine, "job-prov-1", "Provisioned")
    attempt = engine.client.get_workflow_handle("provisioning/default/job/prov/1")

    await exercise(engine, caplog, attempt.id, PROVISIONING, None)

    # The workload is admitted: the attempt hears pods_scheduled and the booking is consumed; the
    # workload finishes: delete_provisioning_request deletes the request and ends the attempt.
    await af.verdict("default/job", Verdict(name="approval", state="Ready"))
    await until(af, "Admitted", "job")
    consumed = await has(engine, "job-prov-1", "BookingExpired")
    assert consumed.condition("BookingExpired").reason == "CapacityBookingConsumed"
    await af.finish("default/job")
    await gone(engine, "job-prov-1")
    result = await asyncio.wait_for(attempt.result(), 20)
    assert result is None
    assert await task_failures(attempt) == []
