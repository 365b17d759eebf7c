"""Kueue's "Run a Kubernetes Job" and quick-start pages, as a Kueue user follows them, on the dev
server: the published manifests applied and created unmodified, each Job kept with the Workload
Kueue's job framework makes from it, and the local runner running its pods as processes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from admitflow import ids
from admitflow.api import load_manifests
from admitflow.client import AdmitflowError
from admitflow.jobs import framework
from admitflow.jobs.batch_job import BatchJob
from tests.cli_process import run_admitflow
from tests.integration.test_admission import eventually, loaded
from tests.support.runners import local_runner
from tests.support.waits import until_phase

PUBLISHED = Path(__file__).resolve().parents[1] / "data" / "kueue-examples" / "published"


def published(name: str):
    return load_manifests([str(PUBLISHED / name)])


async def job_named(af, prefix: str):
    jobs = [j for j in await af.jobs("default") if (j.metadata.name or "").startswith(prefix)]
    return jobs[0] if len(jobs) == 1 else None


def workload_key(job) -> str:
    return f"{job.metadata.namespace}/{framework.workload_name_for(BatchJob(job))}"


def job_manifest(name: str, command: list[str] | None, **spec) -> dict:
    container = {"name": "main", "image": "busybox:1.36", "resources": {"requests": {"cpu": "1"}}}
    if command is not None:
        container["command"] = command
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": "default", "labels": {"kueue.x-k8s.io/queue-name": "user-queue"}},
        "spec": {**spec, "template": {"spec": {"containers": [container], "restartPolicy": "Never"}}},
    }


async def test_kueues_run_a_job_page_creates_the_sample_job_and_its_three_pods_run(engine, tmp_path):
    af = engine.admitflow
    await af.apply(published("single-clusterqueue-setup.yaml"))
    with pytest.raises(AdmitflowError, match=r"from sample-job-: cannot use generate name with apply"):
        await af.apply(published("sample-job.yaml"))
    assert await af.jobs() == [], "a refused apply stores nothing"
    async with local_runner(engine.client, tmp_path):
        (outcome,) = await af.create(published("sample-job.yaml"))
        assert outcome.kind == "Job" and outcome.action == "created"
        name = outcome.key.split("/")[1]
        assert name.startswith("sample-job-") and len(name) == len("sample-job-") + 5
        job = await af.job(outcome.key)
        key = workload_key(job)
        assert key == f"default/job-{name}-{key[-5:]}"
        await until_phase(af, [key], "Admitted")

        async def running():
            j = await af.job(outcome.key)
            return j if (j.status.active or 0) == 3 else None

        job = await eventually(running, timeout=30)
        assert job.spec.suspend is False and job.status.start_time is not None
        labels = job.spec.template.metadata.labels
        assert labels["kueue.x-k8s.io/podset"] == "main" and labels["kueue.x-k8s.io/cluster-queue-name"] == "cluster-queue"
        logs = sorted(tmp_path.glob(f"default_{name}-*.log"))
        assert len(logs) == 3
        assert "image registry.k8s.io/e2e-test-images/agnhost:2.53 (not pulled" in logs[0].read_text()
        report = await af.workload(key)
        assert report.status.condition("PodsReady").status == "True"
        assert report.spec.pod_sets[0].count == 3 and report.metadata.owner_references[0].name == name

        # kubectl's columns, and the Workload found by its Job.
        got = await run_admitflow("get", "jobs", "--address", engine.address, "--namespace", engine.namespace)
        header, row = got.stdout.splitlines()
        assert header.split() == ["NAMESPACE", "NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"]
        assert row.split()[:4] == ["default", name, "Running", "0/3"]
        described = await run_admitflow("describe", "job", name, "--address", engine.address, "--namespace", engine.namespace)
        assert "Pods Statuses:  3 Active (3 Ready) / 0 Succeeded / 0 Failed" in described.stdout
        assert f"Workload:       {key} (Admitted;" in described.stdout
        explained = await run_admitflow("explain", "workload", name, "-o", "json", "--address", engine.address, "--namespace", engine.namespace)
        assert json.loads(explained.stdout)["workload"] == key

        # Deleting the Job deletes its Workload: the quota comes back and the pods stop.
        (deleted,) = [await af.delete("Job", outcome.key)]
        assert deleted.action == "deleted"
        await eventually(lambda: _gone(af, key), timeout=30)
        assert await af.job(outcome.key) is None
        cq = await af.cluster_queue_report("cluster-queue")
        assert cq.status.reserving_workloads == 0


async def _gone(af, key: str) -> bool:
    return await af.workload(key, missing_ok=True) is None


async def test_the_quick_start_job_is_applied_unmodified_and_finishes_once_its_three_pods_succeed(engine, tmp_path):
    af = engine.admitflow
    async with local_runner(engine.client, tmp_path):
        outcomes = await af.apply(published("quick-start-setup.yaml") + published("quick-start-job.yaml"))
        assert [(o.kind, o.key, o.action) for o in outcomes][-1] == ("Job", "default/sample-job", "created")
        again = await af.apply(published("quick-start-job.yaml"))
        assert [(o.key, o.action) for o in again] == [("default/sample-job", "unchanged")], "a fixed name makes no second Job"
        job = await af.job("default/sample-job")
        key = workload_key(job)
        await until_phase(af, [key], "Finished", timeout=90)
    report = await af.workload(key)
    finished = report.status.condition("Finished")
    assert (finished.reason, finished.message) == ("Succeeded", "Reached expected number of succeeded pods")
    job = await af.job("default/sample-job")
    assert job.status.succeeded == 3 and not job.status.active
    assert [c.type for c in job.status.conditions if c.status == "True"] == ["Complete"]
    assert job.status.completion_time is not None
    await _replay(engine, key)


async def test_a_job_fails_past_its_backoff_limit_and_a_container_without_a_command_says_why(engine, tmp_path):
    af = engine.admitflow
    await af.apply(published("single-clusterqueue-setup.yaml"))
    async with local_runner(engine.client, tmp_path):
        await af.apply(loaded(
            job_manifest("flaky", ["/bin/sh", "-c", "exit 3"], backoffLimit=1),
            job_manifest("no-command", None, backoffLimit=0),
            job_manifest("two-of-three", ["/bin/sh", "-c", 'test "$JOB_COMPLETION_INDEX" != 1'],
                         completions=3, parallelism=3, completionMode="Indexed", backoffLimit=0),
        ))
        keys = {n: workload_key(await af.job(f"default/{n}")) for n in ("flaky", "no-command", "two-of-three")}
        await until_phase(af, list(keys.values()), "Finished", timeout=60)
    for name in keys:
        report = await af.workload(keys[name])
        finished = report.status.condition("Finished")
        assert (finished.reason, finished.message) == ("Failed", "Job has reached the specified backoff limit"), name
    flaky = await af.job("default/flaky")
    assert flaky.status.failed == 2, "backoffLimit 1: the second failure fails the Job"
    indexed = await af.job("default/two-of-three")
    assert (indexed.status.succeeded, indexed.status.failed, indexed.status.completed_indexes) == (2, 1, "0,2")
    (log,) = tmp_path.glob("default_no-command-*.log")
    assert "error: container main has no command: the local runner does not know the entrypoint of image busybox:1.36" in log.read_text()


async def test_jobs_kueue_would_leave_alone_are_refused_and_an_unsuspended_job_is_stored_suspended(engine):
    af = engine.admitflow
    await af.apply(published("single-clusterqueue-setup.yaml"))
    unqueued = job_manifest("no-queue", ["true"])
    del unqueued["metadata"]["labels"]
    with pytest.raises(AdmitflowError, match=r"metadata.labels\[kueue.x-k8s.io/queue-name\]: Required value: a Job without a queue name"):
        await af.apply(loaded(unqueued))
    long_name = job_manifest("j" * 64, ["true"])
    with pytest.raises(Exception, match="must be no more than 63 characters"):
        loaded(long_name)
    await af.apply(loaded(job_manifest("unsuspended", ["true"], suspend=False)))
    job = await af.job("default/unsuspended")
    assert job.spec.suspend is True, "Kueue's webhook would have suspended it"
    assert [(c.type, c.status) for c in job.status.conditions] == [("Suspended", "True")]
    with pytest.raises(AdmitflowError, match=r'jobs.batch "unsuspended" already exists'):
        await af.create(loaded(job_manifest("unsuspended", ["true"])))
    with pytest.raises(AdmitflowError, match=r"is stored already and differs"):
        await af.apply(loaded(job_manifest("unsuspended", ["false"])))


async def _replay(engine, key: str) -> None:
    from tests.workflows.test_lifecycle import replay_all

    await replay_all(engine, [ids.workload_id(key)])

