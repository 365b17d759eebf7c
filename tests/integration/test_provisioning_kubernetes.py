"""The ProvisioningRequest check through the `kubernetes` backend, end to end: the engine on the dev
server, the backend talking to the local HTTP fake of the API server (tests/k8s_fake.py). This is the
path where the attempt's workflow watches the request instead of being pushed its changes. No API
server or cluster autoscaler runs here (docs/kubernetes-backend.md)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from kubernetes.aio import client

from admitflow.activities.provisioning.kubernetes import KubernetesBackend
from admitflow.client import AdmitflowClient
from tests.integration.test_admission import eventually
from tests.integration.test_admission_checks import checks_of, until
from tests.integration.test_provisioning import config, setup, submit
from tests.k8s_fake import PODTEMPLATES, PROVISIONING_REQUESTS, FakeApiServer
from admitflow.worker.main import build_worker

pytestmark = pytest.mark.integration

TASK_QUEUE = "admitflow-kubernetes"


@pytest_asyncio.fixture
async def cluster(engine) -> AsyncIterator[tuple[AdmitflowClient, FakeApiServer]]:
    """An engine on its own task queue whose ProvisioningRequests go to the fake API server."""
    fake = FakeApiServer().start()
    # Watches of 5 s: the shared watch is opened again several times during a test.
    backend = KubernetesBackend(client.Configuration(host=fake.url), heartbeat_seconds=1, watch_seconds=5)
    try:
        async with build_worker(engine.client, TASK_QUEUE, provisioning=backend):
            yield AdmitflowClient(engine.client, TASK_QUEUE), fake
    finally:
        await backend.close()
        fake.stop()


async def stored(fake: FakeApiServer, name: str, present: bool = True) -> dict | None:
    async def there():
        obj = fake.get(PROVISIONING_REQUESTS, "default", name)
        return (obj or True) if (obj is not None) == present else None

    return await eventually(there)


async def test_a_watched_request_admits_the_workload_and_goes_when_it_finishes(cluster):
    af, fake = cluster
    await setup(af)
    await submit(af)
    request = await stored(fake, "job-prov-1")
    assert request["spec"]["provisioningClassName"] == "check-capacity.autoscaling.x-k8s.io"
    assert fake.names(PODTEMPLATES) == ["ppt-job-prov-1-main"]

    fake.set_condition("default", "job-prov-1", "Provisioned", message="Capacity is found in the cluster")
    r = await until(af, "Admitted")
    (prov,) = r.status.admission_checks
    assert (prov.state, prov.message) == ("Ready", "Capacity is found in the cluster")
    assert prov.pod_set_updates[0].annotations["autoscaling.x-k8s.io/consume-provisioning-request"] == "job-prov-1"

    await af.finish("default/job")
    await stored(fake, "job-prov-1", present=False)

    # The same delete takes the templates after the request (a loaded machine saw one still there).
    async def no_templates():
        return fake.names(PODTEMPLATES) == []

    await eventually(no_templates)


async def test_a_request_deleted_by_someone_else_is_made_again(cluster):
    af, fake = cluster
    # A backoff long enough to be seen: with the default 1 s, a loaded machine polled the phase
    # only after the workload had left Backoff for its second attempt.
    await setup(af, cfg=config(retryStrategy={"backoffLimitCount": 2, "backoffBaseSeconds": 30}))
    await submit(af)
    first = await stored(fake, "job-prov-1")
    fake.remove(PROVISIONING_REQUESTS, "default", "job-prov-1")

    async def remade():
        obj = fake.get(PROVISIONING_REQUESTS, "default", "job-prov-1")
        return obj if obj is not None and obj["metadata"]["uid"] != first["metadata"]["uid"] else None

    await eventually(remade, timeout=30)
    fake.set_condition("default", "job-prov-1", "Failed", message="out of capacity")
    r = await until(af, "Backoff")
    assert checks_of(r) == [("prov", "Pending", 1)]
    await stored(fake, "job-prov-1", present=False)
