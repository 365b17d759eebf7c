"""A cluster's Jobs as a JobApi (activities/jobs/kubernetes.py), against the fake API server:
reads come from the one watch, a write whose copy lagged conflicts once and is computed again from
the server's, Kueue's events are what the API server takes, note cut as Kueue cuts it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
import yaml
from kubernetes.aio import client

from admitflow.activities.jobs import reconciler
from admitflow.activities.jobs.api import JobNotFound
from admitflow.activities.jobs.kube_runner import namespace_selector
from admitflow.activities.jobs.kubernetes import NOTE_LIMIT, KubernetesJobs, truncated
from tests.integration.test_admission import eventually
from tests.k8s_fake import JOBS, FakeApiServer

PUBLISHED = Path(__file__).resolve().parents[1] / "data" / "kueue-examples" / "published"


@pytest_asyncio.fixture
async def cluster() -> AsyncIterator[tuple[FakeApiServer, KubernetesJobs]]:
    fake = FakeApiServer().start()
    jobs = KubernetesJobs(client.Configuration(host=fake.url), watch_seconds=5)
    jobs.start()
    assert await jobs.informer.sync(10)
    try:
        yield fake, jobs
    finally:
        await jobs.close()
        fake.stop()


def sample_job(**spec) -> dict:
    doc = yaml.safe_load((PUBLISHED / "sample-job.yaml").read_text())
    doc["spec"].update(spec)
    return doc


async def test_reads_come_from_the_watch_without_a_request(cluster):
    fake, jobs = cluster
    name = fake.create_job(sample_job(suspend=True))["metadata"]["name"]

    async def seen():
        stored = jobs.stored(("default", name))
        return stored is not None and stored["metadata"]["resourceVersion"] == fake.get(JOBS, "default", name)["metadata"]["resourceVersion"]

    await eventually(seen, timeout=5)
    before = len(fake.calls())
    job = await jobs.get_job("default", name)
    assert job.metadata.name == name and job.spec.suspend is True
    assert fake.calls()[before:] == [], "the watch's copy: no request"


async def test_a_patch_that_conflicts_is_computed_again_from_the_servers_copy(cluster):
    fake, jobs = cluster
    name = fake.create_job(sample_job())["metadata"]["name"]  # unsuspended: Kueue's stop has three writes
    async def started():
        stored = jobs.stored(("default", name))
        return stored is not None and "startTime" in (stored.get("status") or {})

    await eventually(started, timeout=5)
    before = len(fake.calls())
    sent, stopped_now = await reconciler.stop_job(jobs, "default", name, [])
    assert stopped_now and sent.job.spec.suspend is True
    calls = [(r.method, r.path.rsplit("/", 1)[-1], r.status) for r in fake.calls()[before:]]
    # The first write (suspend) is answered by the Job controller's own write: the second conflicts,
    # the Job is read from the server, the second is made again, then the third.
    assert calls == [("PATCH", name, 200), ("PATCH", "status", 409), ("GET", name, 200), ("PATCH", "status", 200), ("PATCH", name, 200)], calls
    stored = fake.get(JOBS, "default", name)
    assert stored["spec"]["suspend"] is True and "startTime" not in stored["status"]
    assert "kueue.x-k8s.io/stopping" not in (stored["metadata"].get("annotations") or {})


async def test_a_job_that_is_not_there_is_not_found_from_the_server(cluster):
    fake, jobs = cluster
    with pytest.raises(JobNotFound):
        await jobs.get_job("default", "nothing")
    assert [(r.method, r.status) for r in fake.calls() if r.path.endswith("/nothing")] == [("GET", 404)]


async def test_an_event_is_one_the_api_server_takes(cluster):
    fake, jobs = cluster
    name = fake.create_job(sample_job(suspend=True))["metadata"]["name"]
    job = await jobs.get_job("default", name)
    await jobs.record_event(job, "Stopped", "é" * 1000)
    ((reason, note),) = fake.events_about(name)
    assert reason == "Stopped" and len(note.encode()) == NOTE_LIMIT and note.endswith(" ...")
    assert fake.refused() == []


@pytest.mark.parametrize(
    ("note", "expected"),
    [
        pytest.param("short", "short", id="a-short-note-is-kept"),
        pytest.param("x" * NOTE_LIMIT, "x" * NOTE_LIMIT, id="a-note-of-exactly-the-limit-is-kept"),
        pytest.param("x" * (NOTE_LIMIT + 1), "x" * (NOTE_LIMIT - 4) + " ...", id="a-longer-one-is-cut-and-the-suffix-fills-the-limit"),
        pytest.param("é" * 600, "é" * 510 + " ...", id="a-cut-never-splits-a-character"),
    ],
)
def test_an_events_note_is_cut_as_kueue_cuts_it(note, expected):
    assert truncated(note) == expected



@pytest.mark.parametrize(
    ("selector", "labels", "selected"),
    [
        pytest.param("admitflow.io/managed=true", {"admitflow.io/managed": "true"}, True, id="a-label-of-that-value-is-selected"),
        pytest.param("admitflow.io/managed=true", {}, False, id="a-namespace-without-it-is-not"),
        pytest.param("admitflow.io/managed", {"admitflow.io/managed": "no"}, True, id="a-bare-key-asks-only-for-the-label"),
        pytest.param("!admitflow.io/managed", {"admitflow.io/managed": "true"}, False, id="kueues-side-of-the-split-leaves-it-out"),
        pytest.param("team notin (a,b)", {"team": "c"}, True, id="notin-selects-another-value"),
        pytest.param("", {"kubernetes.io/metadata.name": "kube-system"}, True, id="an-empty-selector-selects-every-namespace"),
    ],
)
def test_the_managed_namespaces_are_a_kubectl_selector_read_as_kueues_label_selector(selector, labels, selected):
    assert namespace_selector(selector).matches(labels) is selected


def test_a_selector_kubectl_would_not_parse_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r'label selector "a in \(": unbalanced "\("'):
        namespace_selector("a in (")
