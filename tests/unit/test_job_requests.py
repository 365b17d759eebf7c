"""Every request the job runners send a Job (activities/jobs/reconciler.py: Kueue's admission and
eviction writes, a runner's status writes) is one a real apiserver takes: applied as a JSON merge
patch to the stored Job, the result is valid against Kubernetes 1.37's OpenAPI schema of batch/v1
Job (and core/v1 inside it), and keeps the update rules the schema does not carry
(admitflow.jobs.store); each carries the resourceVersion it was computed from, and a conflict is
answered by computing it again."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
import yaml

from admitflow.activities.jobs import reconciler
from admitflow.activities.jobs.api import JobConflict, JobNotFound
from admitflow.admission.pod_set_updates import PodSetInfo
from admitflow.api import merge_patch, parse_manifest
from admitflow.api.job import Job
from admitflow.api.pod import Toleration
from admitflow.jobs import framework, job_controller, store
from admitflow.jobs.batch_job import BatchJob
from tests.k8s_schema import SchemaError, check, check_with_the_package
from tests.unit.test_job_manifests import PUBLISHED

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
UID = "0f5c3d1e-7a2b-4c9d-8e6f-1a2b3c4d5e6f"


class CheckedJobs:
    """A JobApi that applies each patch as the apiserver does and checks the result against the
    real schema before storing it; `races` changes the Job under the caller before its next patch
    (a writer in between: the patch must conflict)."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.races = 0

    async def get_job(self, namespace: str, name: str) -> Job:
        if name != self.job.metadata.name:
            raise JobNotFound(name)
        return self.job

    async def patch_job(self, namespace: str, name: str, patch: dict[str, Any], subresource: str = "") -> Job:
        self.sent.append((subresource, patch))
        if self.races:
            self.races -= 1
            self.job = store.patched(self.job, {"metadata": {"annotations": {"other-writer": str(self.races)}}})
        assert (patch.get("metadata") or {}).get("resourceVersion"), "every patch carries its resourceVersion"
        check(merge_patch.apply(self.job.to_wire(), patch))
        self.job = store.with_suspension(store.patched(self.job, patch, subresource), NOW)
        return self.job


def stored_job(**spec) -> Job:
    doc = yaml.safe_load((PUBLISHED / "quick-start-job.yaml").read_text())
    doc["spec"].update(spec)
    job, _ = parse_manifest(doc)
    return store.with_suspension(store.created(job, UID, NOW), NOW)


def admitted_workload(job: Job):
    workload = framework.construct_workload(BatchJob(job))
    status = {
        "conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "m",
                        "lastTransitionTime": "2026-12-01T12:00:00Z"}],
        "admission": {"clusterQueue": "cluster-queue",
                      "podSetAssignments": [{"name": "main", "flavors": {"cpu": "default-flavor"}, "count": 3}]},
    }
    return workload.model_copy(update={"status": type(workload.status).model_validate(status)})


INFO = PodSetInfo(
    name="main", count=3, labels={"kueue.x-k8s.io/podset": "main"}, node_selector={"instance-type": "on-demand"},
    tolerations=[Toleration(key="spot", operator="Exists", effect="NoSchedule")],
)


async def run_a_lifecycle(api: CheckedJobs) -> None:
    job = api.job
    workload = admitted_workload(job)
    await reconciler.start_job(api, "default", job.metadata.name, [INFO], workload)
    await reconciler.update_status(api, "default", job.metadata.name,
                                   lambda j: j.model_copy(update={"status": j.status.model_copy(update={"active": 3, "ready": 3})}))
    await reconciler.stop_job(api, "default", job.metadata.name, workload.spec.pod_sets)
    await reconciler.start_job(api, "default", job.metadata.name, [INFO], workload)
    ending = job_controller.ending(api.job.model_copy(update={"status": api.job.status.model_copy(update={"succeeded": 3})}), NOW)

    def finish(j: Job) -> Job:
        status = j.status.model_copy(update={"succeeded": 3, "active": None, "ready": None, "completion_time": NOW,
                                             "conditions": [*(j.status.conditions or ()), ending]})
        return j.model_copy(update={"status": status})

    await reconciler.update_status(api, "default", job.metadata.name, finish)


async def test_every_request_of_an_admission_an_eviction_and_the_status_writes_is_valid_against_the_real_schema():
    api = CheckedJobs(stored_job(suspend=True))
    await run_a_lifecycle(api)
    kinds = [(sub, sorted(body)) for sub, body in api.sent]
    assert kinds == [
        ("", ["metadata", "spec"]),  # start: the podSet info and suspend: false
        ("status", ["metadata", "status"]),  # pods active and ready
        ("", ["metadata", "spec"]),  # stop 1: suspend, the stopping annotation
        ("status", ["metadata", "status"]),  # stop 2: startTime cleared
        ("", ["metadata", "spec"]),  # stop 3: the template restored, the annotation dropped
        ("", ["metadata", "spec"]),  # start again
        ("status", ["metadata", "status"]),  # complete
    ], kinds
    assert api.sent[3][1]["status"] == {"startTime": None}
    assert api.job.status.conditions[-1].type == "Complete"
    assert api.job.spec.template.spec.node_selector == {"instance-type": "on-demand"}


async def test_a_write_that_meets_another_writer_conflicts_and_is_computed_again():
    api = CheckedJobs(stored_job(suspend=True))
    api.races = 2
    sent = await reconciler.start_job(api, "default", "sample-job", [INFO], admitted_workload(api.job))
    assert sent.job.spec.suspend is False and sent.requests == 6, "3 reads, 2 conflicting patches, 1 taken"
    assert api.job.metadata.annotations == {"other-writer": "0"}, "the other writer's change is kept"


async def test_a_writer_that_always_conflicts_gives_up_after_max_conflicts():
    api = CheckedJobs(stored_job(suspend=True))
    api.races = reconciler.MAX_CONFLICTS
    with pytest.raises(JobConflict):
        await reconciler.start_job(api, "default", "sample-job", [INFO], admitted_workload(api.job))


@pytest.mark.parametrize(
    "broken",
    [
        pytest.param({"spec": {"suspend": "false"}}, id="a-string-where-the-schema-wants-a-boolean"),
        pytest.param({"spec": {"template": {"spec": {"nodeSelector": {"pool": 1}}}}}, id="a-number-in-a-string-map"),
        pytest.param({"spec": {"template": {"spec": {"tolerations": {"key": "a"}}}}}, id="an-object-where-a-list-belongs"),
        pytest.param({"spec": {"suspended": True}}, id="a-field-the-job-does-not-have"),
        pytest.param({"status": {"startTime": 5}}, id="a-time-that-is-not-a-string"),
    ],
)
@pytest.mark.parametrize("checker", [check, check_with_the_package], ids=["cached", "kubernetes-validate's-own"])
def test_a_deliberately_broken_body_fails_the_schema_check(broken, checker):
    job = stored_job(suspend=True).to_wire()
    checker(job)  # the stored Job itself is valid
    with pytest.raises(SchemaError):
        checker(merge_patch.apply(job, merge_patch.with_resource_version(broken, "1")))


async def test_a_start_for_a_job_replaced_by_another_of_its_name_writes_nothing():
    api = CheckedJobs(stored_job(suspend=True))
    with pytest.raises(JobNotFound):
        await reconciler.start_job(api, "default", "sample-job", [INFO], admitted_workload(api.job), uid="the-deleted-jobs-uid")
    assert api.sent == [] and api.job.spec.suspend is True


async def test_a_stop_leaves_a_job_that_ended_as_it_is():
    api = CheckedJobs(stored_job(suspend=True))
    workload = admitted_workload(api.job)
    await reconciler.start_job(api, "default", "sample-job", [INFO], workload)
    ending = job_controller.ending(api.job.model_copy(update={"status": api.job.status.model_copy(update={"succeeded": 3})}), NOW)
    await reconciler.update_status(api, "default", "sample-job", lambda j: j.model_copy(
        update={"status": j.status.model_copy(update={"succeeded": 3, "conditions": [*(j.status.conditions or ()), ending]})}))
    sent = len(api.sent)
    stopped, stopped_now = await reconciler.stop_job(api, "default", "sample-job", workload.spec.pod_sets)
    assert (len(api.sent), stopped_now, stopped.changed) == (sent, False, False)
    assert api.job.spec.suspend is False and api.job.spec.template.spec.node_selector == {"instance-type": "on-demand"}
