"""Names as long as Kubernetes allows, on a server that stores workflow IDs as Temporal's SQL
persistence does (`limit.maxIDLength: 255`, as docker/temporal/dynamicconfig.yaml sets; the dev
server's own default is 1000). Before the cut, a ProvisioningRequest attempt of a workload named
with 235 characters had a 263-character workflow ID: the server refused the child's start and every
workflow task of the workload failed after that."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio
from temporalio.client import Client

from admitflow import ids
from admitflow.admission import provisioning
from admitflow.client import AdmitflowClient
from admitflow.codec import DATA_CONVERTER
from admitflow.devserver import DevServer
from tests.conftest import free_port
from tests.integration.test_admission_checks import until
from tests.integration.test_provisioning import gpu_workload, setup, submit
from tests.workflows.test_lifecycle import replay_all
from admitflow.worker.main import build_worker

NAME = "w" * 235  # workload/default/<name> is 252 characters: it fits


@pytest_asyncio.fixture
async def af() -> AsyncIterator[AdmitflowClient]:
    server = DevServer(port=free_port(), db=None, headless=True, dynamic_config={"limit.maxIDLength": str(ids.MAX_ID_LENGTH)})
    async with server:
        client = await Client.connect(server.address, data_converter=DATA_CONVERTER)
        async with build_worker(client, "admitflow"):
            yield AdmitflowClient(client, "admitflow")


async def test_a_long_named_workload_is_provisioned_through_a_cut_attempt_id(af):
    await setup(af)
    await submit(af, gpu_workload(NAME))
    report = await until(af, "Admitted", NAME, timeout=30)
    assert [(c.name, c.state) for c in report.status.admission_checks] == [("prov", "Ready")]
    uncut = f"provisioning/default/{NAME}/prov/1"
    cut = provisioning.workflow_id("default", NAME, "prov", 1)
    assert (len(uncut), len(cut)) == (263, 255)
    assert (await af.client.get_workflow_handle(cut).describe()).workflow_type == "ProvisioningCheckWorkflow"

    await af.finish(f"default/{NAME}")  # the request goes, and the attempt's workflow with it
    await af.client.get_workflow_handle(cut).result()
    assert await af.provisioning_requests() == []
    await replay_all(af, [ids.workload_id(f"default/{NAME}"), cut])
