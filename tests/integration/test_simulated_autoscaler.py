"""The simulated cluster autoscaler on the dev server: node groups applied through the client, requests
created through the `simulated` backend, every status change pushed to the watcher, and
`admitflow provreq list|set-condition` as users run them."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
import pytest_asyncio
from temporalio import workflow
from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from admitflow.activities.provisioning.simulated import SimulatedBackend
from admitflow import ids
from admitflow.api.provisioning_request import PodTemplate, ProvisioningRequest
from admitflow.client import AdmitflowClient, AdmitflowError
from admitflow.codec import DATA_CONVERTER
from admitflow.devserver import DevServer
from tests.integration.test_admission import eventually, loaded
from tests.conftest import free_port
from tests.integration.test_cli import run
from admitflow.worker.main import build_worker

pytestmark = pytest.mark.integration

GPU = "nvidia.com/gpu"
CHECK = "check-capacity.autoscaling.x-k8s.io"


@workflow.defn(name="ProvisioningStatusRecorder")
class Recorder:
    """Stands in for the ProvisioningRequest check's workflow: keeps every status it is pushed."""

    def __init__(self) -> None:
        self.statuses: list[ProvisioningRequest] = []

    @workflow.signal(name="provisioning_request_status")
    def provisioning_request_status(self, request: ProvisioningRequest) -> None:
        self.statuses.append(request)

    @workflow.query(name="statuses")
    def seen(self) -> list[ProvisioningRequest]:
        return self.statuses

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: False)


def node_group(gpus: str = "4", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "admitflow.io/v1",
        "kind": "SimulatedNodeGroup",
        "metadata": {"name": "pool"},
        "spec": {"capacity": {GPU: gpus, "cpu": "32"}, "labels": {"accelerator": "a100"}, "classDetails": {"zone": "eu-1"}, **spec},
    }


def provreq(name: str, gpus: int, no_retry: bool = False) -> tuple[ProvisioningRequest, list[PodTemplate]]:
    template = f"ppt-{name}-main"
    request = ProvisioningRequest.model_validate(
        {
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "provisioningClassName": CHECK,
                "parameters": {"noRetry": "true"} if no_retry else {},
                "podSets": [{"podTemplateRef": {"name": template}, "count": 1}],
            },
        }
    )
    spec = {"nodeSelector": {"accelerator": "a100"}, "containers": [{"name": "c", "image": "x", "resources": {"limits": {GPU: str(gpus)}}}]}
    return request, [PodTemplate.model_validate({"metadata": {"name": template, "namespace": "default"}, "template": {"spec": spec}})]


class Watched:
    """A recorder workflow on its own worker, and the conditions it was told about."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self.task_queue = f"recorder-{uuid.uuid4().hex[:8]}"

    async def __aenter__(self) -> Watched:
        self.worker = Worker(
            self.engine.client, task_queue=self.task_queue, workflows=[Recorder], workflow_runner=UnsandboxedWorkflowRunner()
        )
        await self.worker.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.worker.__aexit__(*exc)

    async def watcher(self, name: str) -> str:
        workflow_id = f"recorder/{name}"
        await self.engine.client.start_workflow(Recorder.run, id=workflow_id, task_queue=self.task_queue)
        return workflow_id

    async def statuses(self, name: str) -> list[ProvisioningRequest]:
        return await self.engine.client.get_workflow_handle(f"recorder/{name}").query(Recorder.seen, result_type=list[ProvisioningRequest])

    async def until(self, name: str, type_: str, status: str = "True") -> list[ProvisioningRequest]:
        async def reached():
            seen = await self.statuses(name)
            return seen if seen and seen[-1].condition(type_) is not None and seen[-1].condition(type_).status == status else None

        return await eventually(reached, 10)


def conditions(r: ProvisioningRequest) -> list[tuple[str, str, str]]:
    return [(c.type, c.status, c.reason) for c in r.status.conditions]


async def test_requests_are_answered_from_node_groups_and_every_change_is_pushed(engine):
    backend = SimulatedBackend(engine.client, task_queue="admitflow")
    assert await backend.delete("default", "nobody") is False, "no autoscaler runs yet"
    assert await backend.list() == []
    outcomes = await engine.admitflow.apply(loaded(node_group()))
    assert [(o.kind, o.key, o.action) for o in outcomes] == [("SimulatedNodeGroup", "pool", "created")]

    async with Watched(engine) as watched:
        request, templates = provreq("first", gpus=3)
        stored = await backend.create(request, templates, await watched.watcher("first"))
        # Read back as stored: Accepted, and Provisioned too if the pass after it already ran.
        assert conditions(stored)[0] == ("Accepted", "True", "Accepted")
        assert stored.metadata.uid and stored.metadata.creation_timestamp is not None
        pushed = await watched.until("first", "Provisioned")
        assert [conditions(r) for r in pushed] == [
            [("Accepted", "True", "Accepted")],
            [("Accepted", "True", "Accepted"), ("Provisioned", "True", "CapacityIsFound")],
        ]
        assert stored.metadata.resource_version in [r.metadata.resource_version for r in pushed]
        assert int(pushed[1].metadata.resource_version) > int(pushed[0].metadata.resource_version)
        assert pushed[1].status.provisioning_class_details == {"nodeGroup": "pool", "zone": "eu-1"}
        assert pushed[1].condition("Provisioned").message == "Capacity is found in the cluster"

        again = await backend.create(request, templates, "recorder/elsewhere")
        assert again.metadata.uid == stored.metadata.uid, "creating the same name again returns the stored one"

        request, templates = provreq("second", gpus=2, no_retry=True)
        await backend.create(request, templates, await watched.watcher("second"))
        failed = (await watched.until("second", "Failed"))[-1]
        assert failed.condition("Failed").reason == "CapacityIsNotFound"
        assert failed.condition("Failed").message == "CA could not find requested capacity"

        await backend.pods_scheduled("default", "first")
        consumed = (await watched.until("first", "BookingExpired"))[-1]
        assert consumed.condition("BookingExpired").reason == "CapacityBookingConsumed"

        assert await backend.delete("default", "first") is True
        assert await backend.delete("default", "first") is False
        request, templates = provreq("third", gpus=4)
        await backend.create(request, templates, await watched.watcher("third"))
        third = (await watched.until("third", "Provisioned"))[-1]
        assert third.status.provisioning_class_details["nodeGroup"] == "pool", "the deleted request released its GPUs"

    usage = await engine.client.get_workflow_handle("admitflow/autoscaler").query("node_group_usage", result_type=dict)
    assert usage == {"pool": {GPU: "4"}}
    assert sorted(r.metadata.name for r in await backend.list()) == ["second", "third"]


async def test_provreq_list_and_set_condition_through_the_cli(engine):
    r = await run(engine, "provreq", "list")
    assert (r.returncode, r.stdout, r.stderr.strip()) == (0, "", "No resources found.")  # kubectl's: on stderr
    r = await run(engine, "apply", "-f", "-", stdin=json.dumps(node_group()))
    assert (r.returncode, r.stdout.strip()) == (0, "simulatednodegroup.admitflow.io/pool created"), r.stderr
    r = await run(engine, "get", "nodegroups")
    assert r.stdout.splitlines()[0].split() == ["NAME", "CAPACITY", "LABELS", "DELAY", "AGE"]
    assert r.stdout.splitlines()[1].split()[:4] == ["pool", f"{GPU}=4,cpu=32", "accelerator=a100", "0s"]

    backend = SimulatedBackend(engine.client, task_queue="admitflow")
    request, templates = provreq("job-prov-1", gpus=1)
    await backend.create(request, templates, "recorder/nobody")  # a watcher that is gone is dropped

    async def provisioned():
        return any(r.is_true("Provisioned") for r in await backend.list())

    await eventually(provisioned, 10)
    r = await run(engine, "provreq", "list")
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["NAMESPACE", "NAME", "CLASS", "ACCEPTED", "PROVISIONED", "FAILED", "BOOKINGEXPIRED", "CAPACITYREVOKED", "AGE"]
    assert lines[1].split()[:5] == ["default", "job-prov-1", CHECK, "True", "True"]
    r = await run(engine, "provreq", "list", "-n", "team-a")
    assert (r.stdout, r.stderr.strip()) == ("", "No resources found in team-a namespace.")

    before = (await backend.list())[0]
    for args, error in [
        (("default/job-prov-1", "Ready"), 'unknown condition type "Ready": must be one of Accepted, Provisioned, Failed, BookingExpired, CapacityRevoked'),
        (("default/job-prov-1", "Failed", "--status", "Maybe"), '--status "Maybe": must be True, False or Unknown'),
        (("default/job-prov-1", "Failed", "--reason", "not camel"), 'condition reason "not camel": must be CamelCase: a letter, then letters, digits, "_", "," or ":"'),
        (("default/nobody", "Failed"), 'provisioningrequests.autoscaling.x-k8s.io "nobody" not found'),
        (("default/job-prov-1", "Failed", "--detail", "no-equals-sign"), "--detail 'no-equals-sign': give KEY=VALUE"),
    ]:
        r = await run(engine, "provreq", "set-condition", *args)
        assert (r.returncode, r.stdout, r.stderr.splitlines()) == (2, "", [f"error: {error}"])
    assert (await backend.list())[0] == before, "a refused change changes nothing"

    r = await run(
        engine, "provreq", "set-condition", "default/job-prov-1", "CapacityRevoked", "--message", "the pool was reclaimed",
        "--detail", "reclaimedBy=ops",
    )
    assert (r.returncode, r.stdout.strip()) == (
        0, "provisioningrequest.autoscaling.x-k8s.io/default/job-prov-1 condition CapacityRevoked=True (SetByHand)"
    ), r.stderr
    r = await run(engine, "provreq", "list", "-o", "json")
    (item,) = json.loads(r.stdout)["items"]
    revoked = next(c for c in item["status"]["conditions"] if c["type"] == "CapacityRevoked")
    assert (revoked["status"], revoked["reason"], revoked["message"]) == ("True", "SetByHand", "the pool was reclaimed")
    assert item["status"]["provisioningClassDetails"] == {"nodeGroup": "pool", "zone": "eu-1", "reclaimedBy": "ops"}
    r = await run(engine, "provreq", "list")
    assert r.stdout.splitlines()[1].split()[3:6] == ["True", "True", "True"], "ACCEPTED, PROVISIONED, CAPACITYREVOKED"

    with pytest.raises(AdmitflowError, match="not found"):
        await backend.set_condition("default", "nobody", "Failed")


@pytest_asyncio.fixture
async def suggesting():
    """A dev server that suggests continue-as-new every few dozen events, with the engine worker."""
    server = DevServer(
        port=free_port(), db=None, headless=True, namespaces=("can",),
        dynamic_config={"limit.historyCount.suggestContinueAsNew": "40"},
    )
    await server.start()
    client = await Client.connect(server.address, namespace="can", data_converter=DATA_CONVERTER)
    try:
        async with build_worker(client, "admitflow"):
            yield client
    finally:
        server.stop()


async def test_requests_and_held_capacity_survive_continue_as_new(suggesting):
    client = suggesting
    backend = SimulatedBackend(client, task_queue="admitflow")
    await AdmitflowClient(client, "admitflow").apply(loaded(node_group(gpus="10")))
    for i in range(12):
        request, templates = provreq(f"r{i:02d}", gpus=1)
        await backend.create(request, templates, "recorder/gone")

    async def settled():
        found = await backend.list()
        return found if len(found) == 12 and all(r.condition("Provisioned") is not None for r in found) else None

    found = await eventually(settled, 20)
    assert [r.condition("Provisioned").status for r in found] == ["True"] * 10 + ["False"] * 2, "10 GPUs for 12 requests"
    versions = [int(r.metadata.resource_version) for r in found]
    assert len(set(versions)) == 12, "one counter across runs"
    assert len([wf async for wf in client.list_workflows(f"WorkflowId = '{ids.AUTOSCALER_ID}'")]) >= 2
    assert await backend.delete("default", "r00") is True

    async def moved_up():
        r = next(r for r in await backend.list() if r.metadata.name == "r10")
        return r.is_true("Provisioned")

    await eventually(moved_up, 10)
