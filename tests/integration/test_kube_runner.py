"""The Kubernetes runner (activities/jobs/kube_runner.py) against the fake API server
(tests/k8s_fake.py, whose Jobs' status the tests set as Kubernetes' Job controller would) and the
engine on the dev server: Kueue's job reconciler, with the Workloads in admitflow.

Every body the runner sends is checked by the fake as a real API server checks it (the schema of
Kubernetes 1.37, the Job's update rules, the Event rules): each test ends with none refused."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml
from kubernetes.aio import client

from admitflow import ids
from admitflow.activities.jobs.kube_runner import RUNNER_LABEL, KubeRunner, namespace_selector
from admitflow.activities.jobs.kubernetes import KubernetesJobs
from admitflow.admission.checks import Verdict
from admitflow.admission.workload import WorkloadReport
from admitflow.api.workload import RUNNER_ANNOTATION, PodSetUpdate
from admitflow.client import AdmitflowClient
from admitflow.jobs.workload_names import workload_name
from tests.cli_process import ADMITFLOW, run_admitflow
from tests.integration.test_admission import eventually, loaded
from tests.k8s_fake import JOBS, NAMESPACES, PRIORITY_CLASSES, FakeApiServer
from tests.support.waits import until_phase as _until_phase

pytestmark = pytest.mark.integration

PUBLISHED = Path(__file__).resolve().parents[1] / "data" / "kueue-examples" / "published"
V1BETA2 = "kueue.x-k8s.io/v1beta2"
TASK_QUEUE = "kube"
ON_DEMAND = {"instance-type": "on-demand"}
SPOT = {"key": "spot", "operator": "Exists", "effect": "NoSchedule"}


def setup_manifests(checks: list[str] | None = None, cpu: int = 9) -> list:
    flavor = {"apiVersion": V1BETA2, "kind": "ResourceFlavor", "metadata": {"name": "on-demand"},
              "spec": {"nodeLabels": ON_DEMAND, "tolerations": [SPOT]}}
    cq_spec: dict[str, Any] = {
        "namespaceSelector": {},
        "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [
            {"name": "on-demand", "resources": [{"name": "cpu", "nominalQuota": cpu}, {"name": "memory", "nominalQuota": "36Gi"}]}]}],
    }
    docs: list[dict] = []
    for name in checks or ():
        docs.append({"apiVersion": V1BETA2, "kind": "AdmissionCheck", "metadata": {"name": name}, "spec": {"controllerName": "tests"}})
        cq_spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": n} for n in checks]}
    docs += [
        flavor,
        {"apiVersion": V1BETA2, "kind": "ClusterQueue", "metadata": {"name": "cluster-queue"}, "spec": cq_spec},
        {"apiVersion": V1BETA2, "kind": "LocalQueue", "metadata": {"namespace": "default", "name": "user-queue"},
         "spec": {"clusterQueue": "cluster-queue"}},
    ]
    return loaded(*docs)


def sample_job(**spec: Any) -> dict:
    """Kueue's sample-job.yaml as published (generateName, three pods, no `suspend`), `spec` changed."""
    doc = yaml.safe_load((PUBLISHED / "sample-job.yaml").read_text())
    doc["spec"].update(spec)
    return doc


async def until_phase(af: AdmitflowClient, keys: list[str], *phases: str, timeout: float = 30.0) -> None:
    """Every workload of `keys` exists (the runner makes them) and is in one of `phases`."""
    async def made():
        return all([await af.workload(k, missing_ok=True) is not None for k in keys])

    await eventually(made, timeout=timeout)
    await _until_phase(af, keys, *phases, timeout=timeout)


def workload_key(job: dict) -> str:
    meta = job["metadata"]
    return f"{meta['namespace']}/{workload_name(meta['name'], meta['uid'], 'Job', 'batch')}"


@dataclass
class Cluster:
    af: AdmitflowClient
    fake: FakeApiServer
    runner: KubeRunner

    def job(self, name: str) -> dict:
        return self.fake.get(JOBS, "default", name)

    async def job_where(self, name: str, check) -> dict:
        async def now():
            job = self.job(name)
            return job if job is not None and check(job) else None

        return await eventually(now, timeout=30)


def runner_on(af: AdmitflowClient, fake: FakeApiServer, **options: Any) -> KubeRunner:
    jobs = KubernetesJobs(client.Configuration(host=fake.url), watch_seconds=5)
    settings = {"resync_seconds": 1.0, "heartbeat_seconds": 0.5, "ask_every": 1.0, **options}
    return KubeRunner(af, jobs, TASK_QUEUE, **settings)


RBAC = Path(__file__).resolve().parents[2] / "deploy" / "kube-runner-rbac.yaml"


def granted() -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) the ClusterRole of deploy/kube-runner-rbac.yaml grants."""
    role = next(d for d in yaml.safe_load_all(RBAC.read_text()) if d["kind"] == "ClusterRole")
    return {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}


def used(fake: FakeApiServer) -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) of every request the fake served, as the API server authorizes it."""
    out = set()
    for r in fake.calls():
        parts = r.path.strip("/").split("/")
        group = "" if parts[0] == "api" else parts[1]
        rest = parts[2:] if parts[0] == "api" else parts[3:]
        if rest[:1] == ["namespaces"] and len(rest) > 2:  # in a namespace (else the namespaces themselves)
            rest = rest[2:]
        resource = rest[0] + (f"/{rest[2]}" if len(rest) > 2 else "")
        watch = r.query.get("watch") == "true"
        verb = {"POST": "create", "PATCH": "patch", "DELETE": "delete"}.get(r.method) or (
            "watch" if watch else "get" if len(rest) > 1 else "list")
        out.add((group, resource, verb))
    return out


@asynccontextmanager
async def a_cluster(engine, checks: list[str] | None = None, cpu: int = 9, **fake_options: Any) -> AsyncIterator[Cluster]:
    af = engine.admitflow
    await af.apply(setup_manifests(checks, cpu))
    for name in checks or ():
        await af.set_admission_check_active(name)
    fake = FakeApiServer(**fake_options).start()
    try:
        async with runner_on(af, fake) as runner:
            yield Cluster(af, fake, runner)
        # The tests write to the fake's store directly: every request it served is the runner's.
        assert fake.refused() == [], "every body the runner sent is one the API server takes"
        assert used(fake) <= granted(), f"deploy/kube-runner-rbac.yaml lacks {used(fake) - granted()}"
    finally:
        fake.stop()


@pytest_asyncio.fixture
async def cluster(engine) -> AsyncIterator[Cluster]:
    async with a_cluster(engine) as c:
        yield c


def running(job: dict) -> bool:
    return job["spec"].get("suspend") is False and "kueue.x-k8s.io/stopping" not in (job["metadata"].get("annotations") or {})


def suspended(job: dict) -> bool:
    return job["spec"].get("suspend") is True and "kueue.x-k8s.io/stopping" not in (job["metadata"].get("annotations") or {})


async def condition(af: AdmitflowClient, key: str, type_: str, status: str = "True"):
    async def now():
        c = (await af.workload(key)).status.condition(type_)
        return c if c is not None and c.status == status else None

    return await eventually(now, timeout=30)


async def test_kueues_sample_job_is_suspended_when_seen_admitted_with_its_flavor_and_finishes_from_its_status(cluster):
    af, fake = cluster.af, cluster.fake
    created = fake.create_job(sample_job())  # kubectl create -f sample-job.yaml: no webhook suspends it
    name = created["metadata"]["name"]
    key = workload_key(created)
    await until_phase(af, [key], "Admitted", timeout=30)
    job = await cluster.job_where(name, running)
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == ON_DEMAND and pod["tolerations"] == [SPOT], "the flavor's nodeLabels and tolerations"
    labels = job["spec"]["template"]["metadata"]["labels"]
    assert (labels["kueue.x-k8s.io/podset"], labels["kueue.x-k8s.io/local-queue-name"], labels["kueue.x-k8s.io/cluster-queue-name"]) == (
        "main", "user-queue", "cluster-queue")
    assert fake.events_about(name) == [
        ("Stopped", "Missing Workload; unable to restore pod templates"),
        ("CreatedWorkload", f"Created Workload: {key}"),
        ("Started", "Admitted by clusterQueue cluster-queue"),
    ]
    report = await af.workload(key)
    owner = report.metadata.owner_references[0]
    assert (owner.kind, owner.name, owner.uid, owner.controller) == ("Job", name, created["metadata"]["uid"], True)
    assert (report.spec.queue_name, report.spec.pod_sets[0].count) == ("user-queue", 3)
    assert report.metadata.annotations[RUNNER_ANNOTATION] == TASK_QUEUE and report.metadata.labels[RUNNER_LABEL] == TASK_QUEUE

    # PodsReady as Kueue's PodsReady() counts a Job: succeeded + ready reach the podSet's count.
    fake.set_job_status("default", name, {"active": 2, "ready": 2, "succeeded": 1})
    ready = await condition(af, key, "PodsReady")
    assert ready.reason == "Started"
    fake.set_job_status("default", name, {"active": 2, "ready": 1, "succeeded": 1})
    lost = await condition(af, key, "PodsReady", "False")
    assert lost.reason == "WaitForRecovery"

    fake.end_job("default", name, message="Reached expected number of succeeded pods")
    await until_phase(af, [key], "Finished", timeout=30)
    finished = (await af.workload(key)).status.condition("Finished")
    assert (finished.reason, finished.message) == ("Succeeded", "Reached expected number of succeeded pods")
    assert fake.events_about(name)[-1] == ("FinishedWorkload", f"Workload '{key}' is declared finished")
    assert running(cluster.job(name)), "a Job that ended is left as it is"


async def test_a_retry_eviction_suspends_the_job_and_restores_its_template_and_a_failed_job_fails_its_workload(engine):
    async with a_cluster(engine, checks=["check"]) as cluster:
        af, fake = cluster.af, cluster.fake
        created = fake.create_job(sample_job(suspend=True))
        name, key = created["metadata"]["name"], workload_key(created)
        template = created["spec"]["template"]
        await until_phase(af, [key], "QuotaReserved", timeout=30)
        assert suspended(cluster.job(name)), "nothing starts before the checks say Ready"
        update = PodSetUpdate(name="main", labels={"approved-by": "alice"}, node_selector={"pool": "gpu"})
        await af.verdict(key, Verdict(name="check", state="Ready", pod_set_updates=[update]))
        job = await cluster.job_where(name, running)
        assert job["spec"]["template"]["spec"]["nodeSelector"] == {**ON_DEMAND, "pool": "gpu"}, "the flavor's and the check's"
        assert job["spec"]["template"]["metadata"]["labels"]["approved-by"] == "alice", "the check's podSetUpdates"
        await cluster.job_where(name, lambda j: "startTime" in (j.get("status") or {}))

        await af.verdict(key, Verdict(name="check", state="Retry", message="not now", requeue_after_seconds=1))
        job = await cluster.job_where(name, suspended)
        assert job["spec"]["template"] == template, "the template as the Workload keeps it: no nodeSelector, no tolerations"
        assert "startTime" not in job["status"], "cleared through the status subresource"
        assert not [c for c in job["status"]["conditions"] if c["type"] not in ("Suspended",)], "Kueue sets no condition on the Job"
        stops = [note for reason, note in fake.events_about(name) if reason == "Stopped"]
        assert len(stops) == 1 and "not now" in stops[0], stops
        first_stop = next(r.body for r in _patches(fake, name) if (r.body.get("spec") or {}).get("suspend") is True)
        assert first_stop["metadata"]["annotations"] == {"kueue.x-k8s.io/stopping": "true"}, "suspended with Kueue's stopping mark"
        status_writes = [r.body for r in fake.calls("PATCH", JOBS) if r.path.endswith("/status")]
        assert {"startTime": None} in [b["status"] for b in status_writes]

        await until_phase(af, [key], "QuotaReserved", timeout=30)  # requeued after its backoff
        await af.verdict(key, Verdict(name="check", state="Ready"))
        await cluster.job_where(name, running)
        fake.end_job("default", name, succeeded=False, message="Job has reached the specified backoff limit")
        await until_phase(af, [key], "Finished", timeout=30)
        finished = (await af.workload(key)).status.condition("Finished")
        assert (finished.reason, finished.message) == ("Failed", "Job has reached the specified backoff limit")


async def test_a_deleted_job_deletes_its_workload_and_a_deleted_workload_is_made_again_with_its_name(cluster):
    af, fake = cluster.af, cluster.fake
    gone = fake.create_job(sample_job(suspend=True, parallelism=1, completions=1))
    running_job = fake.create_job(sample_job(suspend=True, parallelism=1, completions=1))
    waiting = fake.create_job(sample_job(suspend=True, parallelism=10, completions=10))  # more than the quota: it waits
    keys = [workload_key(j) for j in (gone, running_job, waiting)]
    await until_phase(af, keys[:2], "Admitted", timeout=30)
    await until_phase(af, keys[2:], "Pending", timeout=30)

    fake.remove(JOBS, "default", gone["metadata"]["name"])
    await eventually(lambda: _ended(af, keys[0]), timeout=30)
    last = await af.client.get_workflow_handle(ids.workload_id(keys[0]), result_type=WorkloadReport).result()
    assert last.deleted is True, "deleted with its Job, not finished"

    name = running_job["metadata"]["name"]
    await cluster.job_where(name, running)
    await af.delete("Workload", keys[1])
    # Made again with the same name, and admitted again at once: the Job ran, was stopped, and runs again.
    await eventually(lambda: _runs_are(af, keys[1], 2), timeout=30)
    await until_phase(af, [keys[1]], "Admitted", timeout=30)
    await cluster.job_where(name, running)
    assert [r for r, _ in fake.events_about(name)] == ["CreatedWorkload", "Started", "Stopped", "CreatedWorkload", "Started"]
    assert ("Stopped", "Workload is deleted") in fake.events_about(name)
    restores = [r.body for r in _patches(fake, name) if "template" in (r.body.get("spec") or {})][1:2]
    assert restores and restores[0]["spec"]["template"]["spec"] == {"nodeSelector": None, "tolerations": None}, (
        "its template restored as the deleted Workload kept it")

    await af.delete("Workload", keys[2])  # deleted while it waits: the resync finds it gone
    await eventually(lambda: _runs_are(af, keys[2], 2), timeout=30)
    await until_phase(af, [keys[2]], "Pending", timeout=30)
    assert [r for r, _ in fake.events_about(waiting["metadata"]["name"])] == ["CreatedWorkload", "CreatedWorkload"]


async def _ended(af: AdmitflowClient, key: str) -> bool:
    desc = await af.client.get_workflow_handle(ids.workload_id(key)).describe()
    return desc.status.name != "RUNNING"


async def _runs(af: AdmitflowClient, key: str) -> int:
    return len([wf async for wf in af.client.list_workflows(f"WorkflowId = '{ids.workload_id(key)}'")])


async def _runs_are(af: AdmitflowClient, key: str, count: int) -> bool:
    return await _runs(af, key) == count


async def test_a_runner_restart_mid_lifecycle_loses_and_duplicates_nothing(engine):
    async with a_cluster(engine, cpu=3) as cluster:
        af, fake = cluster.af, cluster.fake
        one = dict(parallelism=1, completions=1)
        admitted = fake.create_job(sample_job(suspend=True, **one))
        finishes = fake.create_job(sample_job(suspend=True, **one))
        deleted = fake.create_job(sample_job(suspend=True, **one))
        waits = fake.create_job(sample_job(suspend=True, parallelism=4, completions=4))  # more than the quota: it waits
        keys = {n: workload_key(j) for n, j in (("admitted", admitted), ("finishes", finishes), ("deleted", deleted), ("waits", waits))}
        await until_phase(af, [keys["admitted"], keys["finishes"], keys["deleted"]], "Admitted", timeout=30)
        await until_phase(af, [keys["waits"]], "Pending", timeout=30)
        for job in (admitted, finishes):
            await cluster.job_where(job["metadata"]["name"], running)
            fake.set_job_status("default", job["metadata"]["name"], {"active": 1, "ready": 1})
        await condition(af, keys["admitted"], "PodsReady")

        await cluster.runner.__aexit__(None, None, None)  # stopped, as a rollout stops it
        # While it is down: a Job ends, one is deleted, one is created unsuspended.
        fake.end_job("default", finishes["metadata"]["name"])
        fake.remove(JOBS, "default", deleted["metadata"]["name"])
        created = fake.create_job(sample_job(parallelism=1, completions=1))
        started = {admitted["metadata"]["name"], finishes["metadata"]["name"]}
        starts_before = {n: c for n, c in _starts(fake).items() if n in started}

        async with runner_on(af, fake):
            await until_phase(af, [keys["finishes"]], "Finished", timeout=30)
            await eventually(lambda: _ended(af, keys["deleted"]), timeout=30)
            new_key = workload_key(created)
            await until_phase(af, [new_key], "Admitted", "Pending", timeout=30)
            await condition(af, keys["admitted"], "PodsReady")  # reported ready again by the run started again
            fake.end_job("default", admitted["metadata"]["name"])
            await until_phase(af, [keys["admitted"]], "Finished", timeout=30)

        for key in (*keys.values(), new_key):
            assert await _runs(af, key) == 1, f"{key}: one Workload, never made twice"
        assert {n: c for n, c in _starts(fake).items() if n in started} == starts_before == dict.fromkeys(started, 1), (
            "no Job resumed again: the running ones ran on")
        assert (await af.workload(keys["finishes"])).status.condition("Finished").reason == "Succeeded"
        assert running(cluster.job(admitted["metadata"]["name"]))


def _patches(fake: FakeApiServer, name: str) -> list:
    """The patches of the Job `name` the API server took, in order."""
    return [r for r in fake.calls("PATCH", JOBS) if r.path.split("/jobs/")[1].split("/")[0] == name and r.status == 200]


def _starts(fake: FakeApiServer) -> dict[str, int]:
    """Per Job, the patches that resumed it."""
    out: dict[str, int] = {}
    for r in fake.calls("PATCH", JOBS):
        if (r.body.get("spec") or {}).get("suspend") is False and r.status == 200:
            name = r.path.rsplit("/", 1)[1]
            out[name] = out.get(name, 0) + 1
    return out


async def test_many_jobs_in_flight_share_one_watch_no_thread_each_and_a_bounded_number_of_requests(engine):
    count = 40
    async with a_cluster(engine, cpu=count, job_run_seconds=1.0) as cluster:
        af, fake = cluster.af, cluster.fake
        threads = _own_threads()
        started = time.monotonic()
        small = {"resources": {"requests": {"cpu": "1", "memory": "20Mi"}}}
        jobs = []
        for _ in range(count):
            doc = sample_job(suspend=True, parallelism=1, completions=1)
            doc["spec"]["template"]["spec"]["containers"][0].update(small)
            jobs.append(fake.create_job(doc))
        keys = [workload_key(j) for j in jobs]
        await until_phase(af, keys, "Finished", timeout=120)
        took = time.monotonic() - started
        per_job = _requests_per_job(fake, [j["metadata"]["name"] for j in jobs])
        spread = sorted(Counter(per_job.values()).items())
        print(f"\n{count} Jobs: {took:.1f}s; requests per Job (count: Jobs) {spread}; peak watches {fake.peak_watches}; "
              f"threads {len(threads)} -> {len(_own_threads())}")
        assert fake.peak_watches == 1, "one watch of every Job"
        assert len(_own_threads()) <= len(threads) + 2, [t.name for t in _own_threads()]
        # CreatedWorkload, the resume, Started, FinishedWorkload; a read and a second patch when
        # the watch's copy lagged behind the Job controller's write.
        assert max(per_job.values()) <= 6, per_job
        assert all([(await af.workload(k)).status.condition("Finished").reason == "Succeeded" for k in keys])


def _own_threads() -> list[threading.Thread]:
    """This process's threads but the fake API server's (one per connection) and those of the
    engine's workflow workers, which this test process runs too."""
    return [t for t in threading.enumerate() if not t.name.startswith(("fake-apiserver", "temporal_workflow"))]


def _requests_per_job(fake: FakeApiServer, names: list[str]) -> dict[str, int]:
    """Requests about one Job (its reads, patches and Events) but the test's own create; the shared
    list and watch are no one Job's."""
    counts = dict.fromkeys(names, 0)
    for r in fake.calls():
        if r.method == "POST" and r.path.endswith("/jobs"):
            continue
        name = (r.body or {}).get("regarding", {}).get("name") if r.path.endswith("/events") else r.path.rsplit("/jobs/", 1)[-1].split("/")[0]
        if name in counts:
            counts[name] += 1
    return counts


async def test_beside_kueue_the_runner_manages_only_the_namespaces_its_selector_selects(engine):
    af = engine.admitflow
    queues = [{"apiVersion": V1BETA2, "kind": "LocalQueue", "metadata": {"namespace": ns, "name": "user-queue"},
               "spec": {"clusterQueue": "cluster-queue"}} for ns in ("team-a", "kueue-team")]
    await af.apply(setup_manifests() + loaded(*queues))
    fake = FakeApiServer().start()
    for ns, labels in (("team-a", {"admitflow.io/managed": "true"}), ("kueue-team", {})):
        fake.put(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                              "metadata": {"name": ns, "labels": {"kubernetes.io/metadata.name": ns, **labels}}})
    try:
        async with runner_on(af, fake, managed_namespaces=namespace_selector("admitflow.io/managed=true")):
            kueues = fake.create_job({**sample_job(suspend=True), "metadata": {**sample_job()["metadata"], "namespace": "kueue-team"}})
            mine = fake.create_job({**sample_job(suspend=True), "metadata": {**sample_job()["metadata"], "namespace": "team-a"}})
            await until_phase(af, [workload_key(mine)], "Admitted")  # reconciled after the other one, which came first
            other = kueues["metadata"]["name"]
            assert await af.workload(workload_key(kueues), missing_ok=True) is None, "Kueue's Job gets no Workload here"
            assert [r.path for r in fake.calls() if other in r.path or (r.body or {}).get("regarding", {}).get("name") == other] == []

            # Its namespace handed to admitflow: the next resync reads the labels, and the Job is managed.
            fake.patch(NAMESPACES, "", "kueue-team", {"metadata": {"labels": {"admitflow.io/managed": "true"}}})
            await until_phase(af, [workload_key(kueues)], "Pending", "QuotaReserved", "Admitted")
        assert fake.refused() == [] and used(fake) <= granted()
    finally:
        fake.stop()


async def test_a_jobs_priority_comes_from_admitflows_workload_priority_class_or_the_clusters_priority_class(engine):
    af = engine.admitflow
    await af.apply(loaded({"apiVersion": V1BETA2, "kind": "WorkloadPriorityClass", "metadata": {"name": "high"}, "value": 1000}))
    async with a_cluster(engine) as cluster:
        fake = cluster.fake
        fake.put(PRIORITY_CLASSES, {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "urgent"}, "value": 500})
        one = dict(suspend=True, parallelism=1, completions=1)
        named = sample_job(**one)
        named["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = "high"
        by_pods = sample_job(**one)
        by_pods["spec"]["template"]["spec"]["priorityClassName"] = "urgent"
        missing = sample_job(**one)
        missing["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = "nope"
        jobs = [fake.create_job(d) for d in (named, by_pods, missing)]
        await until_phase(af, [workload_key(j) for j in jobs[:2]], "Admitted")
        specs = [(await af.workload(workload_key(j))).spec for j in jobs[:2]]
        assert [(s.priority, s.priority_class_ref.kind, s.priority_class_ref.name) for s in specs] == [
            (1000, "WorkloadPriorityClass", "high"), (500, "PriorityClass", "urgent")]
        warned = await eventually(lambda: _now([n for r, n in fake.events_about(jobs[2]["metadata"]["name"]) if r == "WorkloadPriorityClassNotFound"]))
        assert warned[0] == 'workloadpriorityclasses.kueue.x-k8s.io "nope" not found'
        assert await af.workload(workload_key(jobs[2]), missing_ok=True) is None, "Kueue makes no Workload then"


KUBECONFIG = """
apiVersion: v1
kind: Config
clusters: [{name: fake, cluster: {server: "%s"}}]
users: [{name: nobody, user: {}}]
contexts: [{name: fake, context: {cluster: fake, user: nobody}}, {name: other, context: {cluster: fake, user: nobody}}]
current-context: other
"""


async def test_the_kube_runner_command_runs_the_jobs_of_the_cluster_its_kubeconfig_names_and_stops_on_sigterm(engine, tmp_path):
    af = engine.admitflow
    await af.apply(setup_manifests())
    fake = FakeApiServer().start()
    config = tmp_path / "kubeconfig"
    config.write_text(KUBECONFIG % fake.url)
    runner = await asyncio.create_subprocess_exec(
        ADMITFLOW, "kube-runner", "--kubeconfig", str(config), "--context", "fake", "--runner-queue", TASK_QUEUE,
        "--address", engine.address, "--namespace", engine.namespace, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    try:
        created = fake.create_job(sample_job(suspend=True))
        await until_phase(af, [workload_key(created)], "Admitted", timeout=60)
        await eventually(lambda: _now(running(fake.get(JOBS, "default", created["metadata"]["name"]))), timeout=30)
        runner.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(runner.wait(), 30) == 0
        assert fake.refused() == []
    finally:
        if runner.returncode is None:
            runner.kill()
            await runner.wait()
        fake.stop()


async def _now(value: Any) -> Any:
    return value


@pytest.mark.parametrize(
    ("args", "error"),
    [
        pytest.param(["--runner-queue", "a b"], '--runner-queue "a b": it names the runner in the label admitflow.io/kube-runner: '
                     "a valid label must be", id="a-runner-queue-that-is-no-label-value"),
        pytest.param(["--kubeconfig", "/nope/config"], "kubeconfig /nope/config does not exist", id="a-kubeconfig-that-is-not-there"),
    ],
)
async def test_the_kube_runner_command_refuses_bad_flags_in_one_line(args, error):
    done = await run_admitflow("kube-runner", *args)
    assert done.returncode == 2
    assert done.stderr.startswith(f"error: {error}") and done.stderr.count("\n") == 1, done.stderr
