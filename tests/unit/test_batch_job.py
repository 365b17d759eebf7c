"""What admission, eviction and the Job controller's status mean for a batch/v1 Job, as Kueue's Job
integration has it (RunWithPodSetsInfo, Stop and RestorePodSetsInfo, PodsReady, Finished, the
webhook's annotation checks)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from admitflow.admission.pod_set_updates import PodSetInfo, PodSetUpdateConflict
from admitflow.api import Job, Toleration, parse_manifest
from admitflow.api.job import with_defaults
from admitflow.jobs import batch_job, framework
from admitflow.jobs.batch_job import STOPPING_ANNOTATION, BatchJob, PodSetInfoError

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SPOT = Toleration(key="spot", operator="Exists", effect="NoSchedule")
GPU = Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")


def job(pod: dict | None = None, meta: dict | None = None, annotations: dict | None = None, status: dict | None = None, **spec) -> Job:
    """A stored Job of parallelism 3, queued and suspended, unless told otherwise."""
    metadata = {"name": "train", "uid": "u1", "labels": {"kueue.x-k8s.io/queue-name": "lq"}}
    if annotations:
        metadata["annotations"] = annotations
    template = {"spec": {"containers": [{"name": "main", "image": "busybox"}], "restartPolicy": "Never", **(pod or {})}}
    if meta is not None:
        template["metadata"] = meta
    obj, _ = parse_manifest(
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": {"parallelism": 3, "suspend": True, "template": template, **spec}}
    )
    obj = with_defaults(obj)
    if status is not None:
        obj = obj.model_copy(update={"status": type(obj.status).model_validate(status)})
    return obj


def info(labels: dict | None = None, annotations: dict | None = None, node_selector: dict | None = None, tolerations=(), count: int = 3):
    return PodSetInfo(
        name="main",
        count=count,
        labels={"kueue.x-k8s.io/podset": "main", **(labels or {})},
        annotations=annotations or {},
        node_selector=node_selector or {},
        tolerations=list(tolerations),
    )


def template(j: Job) -> dict:
    return j.spec.template.to_wire()


# --- admission ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "infos", "meta", "pod"),
    [
        pytest.param(
            job(),
            [info(node_selector={"pool": "spot"}, tolerations=[SPOT])],
            {"labels": {"kueue.x-k8s.io/podset": "main"}},
            {"nodeSelector": {"pool": "spot"}, "tolerations": [SPOT.to_wire()]},
            id="the-flavors-node-labels-and-tolerations-join-the-template",
        ),
        pytest.param(
            job(meta={"labels": {"app": "x"}, "annotations": {"a": "1"}}, pod={"nodeSelector": {"zone": "z1"}, "tolerations": [SPOT.to_wire()]}),
            [info(labels={"team": "a"}, annotations={"b": "2"}, node_selector={"pool": "spot"}, tolerations=[SPOT, GPU])],
            {"labels": {"app": "x", "kueue.x-k8s.io/podset": "main", "team": "a"}, "annotations": {"a": "1", "b": "2"}},
            {"nodeSelector": {"zone": "z1", "pool": "spot"}, "tolerations": [SPOT.to_wire(), GPU.to_wire()]},
            id="the-templates-own-entries-stay-and-a-toleration-it-has-is-not-added-twice",
        ),
        pytest.param(
            job(pod={"nodeSelector": {"pool": "spot"}}),
            [info(node_selector={"pool": "spot"})],
            {"labels": {"kueue.x-k8s.io/podset": "main"}},
            {"nodeSelector": {"pool": "spot"}},
            id="the-same-value-twice-is-no-conflict",
        ),
    ],
)
def test_admission_merges_the_pod_set_info_into_the_template_and_unsuspends(given, infos, meta, pod):
    started = batch_job.run_with_pod_sets_info(given, infos)
    wire = template(started)
    assert started.spec.suspend is False
    assert wire.get("metadata") == meta
    assert {k: wire["spec"][k] for k in pod} == pod
    assert started.spec.parallelism == 3


@pytest.mark.parametrize(
    ("given", "infos", "message"),
    [
        pytest.param(
            job(pod={"nodeSelector": {"pool": "on-demand"}}),
            [info(node_selector={"pool": "spot"})],
            "invalid admission check PodSetUpdate: conflict for nodeSelector: conflict for key=pool, value1=on-demand, value2=spot",
            id="a-node-selector-the-template-sets-otherwise-is-a-conflict",
        ),
        pytest.param(
            job(meta={"labels": {"team": "b"}}),
            [info(labels={"team": "a"})],
            "invalid admission check PodSetUpdate: conflict for labels: conflict for key=team, value1=b, value2=a",
            id="a-label-the-template-sets-otherwise-is-a-conflict",
        ),
        pytest.param(
            job(meta={"annotations": {"x": "1"}}, pod={"nodeSelector": {"pool": "on-demand"}}),
            [info(annotations={"x": "2"}, node_selector={"pool": "spot"})],
            "invalid admission check PodSetUpdate: conflict for annotations: conflict for key=x, value1=1, value2=2",
            id="annotations-are-checked-first",
        ),
    ],
)
def test_a_conflicting_info_leaves_the_job_alone(given, infos, message):
    with pytest.raises(PodSetUpdateConflict) as err:
        batch_job.run_with_pod_sets_info(given, infos)
    assert str(err.value) == message


@pytest.mark.parametrize(
    ("infos", "message"),
    [
        pytest.param([], "invalid podset infos: expecting 1 podset, got 0", id="no-info-is-refused"),
        pytest.param([info(), info()], "invalid podset infos: expecting 1 podset, got 2", id="two-infos-for-one-pod-set-are-refused"),
    ],
)
def test_a_job_takes_exactly_one_pod_set_info(infos, message):
    with pytest.raises(PodSetInfoError, match=message):
        batch_job.run_with_pod_sets_info(job(), infos)


@pytest.mark.parametrize(
    ("annotations", "completion_mode", "expected"),
    [
        pytest.param({}, "NonIndexed", (5, 5), id="without-min-parallelism-the-counts-stay"),
        pytest.param({"kueue.x-k8s.io/job-min-parallelism": "2"}, "NonIndexed", (4, 5), id="with-min-parallelism-parallelism-is-the-admitted-count"),
        pytest.param(
            {"kueue.x-k8s.io/job-min-parallelism": "2", "kueue.x-k8s.io/job-completions-equal-parallelism": "true"},
            "Indexed",
            (4, 4),
            id="completions-follow-parallelism-when-the-annotation-says-so",
        ),
    ],
)
def test_min_parallelism_makes_parallelism_the_admitted_count(annotations, completion_mode, expected):
    given = job(annotations=annotations, parallelism=5, completions=5, completionMode=completion_mode)
    started = batch_job.run_with_pod_sets_info(given, [info(count=4)])
    assert (started.spec.parallelism, started.spec.completions) == expected
    pod_sets = BatchJob(given).pod_sets()
    stopped = batch_job.stop(started, pod_sets).job
    assert (stopped.spec.parallelism, stopped.spec.completions) == (5, 5)


# --- eviction ---------------------------------------------------------------------------------------


def running(given: Job) -> Job:
    """`given` admitted with the spot flavor and a check's label, started at T0 with 3 pods."""
    started = batch_job.run_with_pod_sets_info(given, [info(labels={"team": "a"}, node_selector={"pool": "spot"}, tolerations=[SPOT])])
    return started.model_copy(update={"status": started.status.model_copy(update={"start_time": T0, "active": 3})})


@pytest.mark.parametrize(
    "given",
    [
        pytest.param(job(), id="a-plain-template-comes-back-as-it-was"),
        pytest.param(
            job(meta={"labels": {"app": "x"}, "annotations": {"a": "1"}}, pod={"nodeSelector": {"zone": "z1"}, "tolerations": [GPU.to_wire()]}),
            id="the-templates-own-labels-node-selector-and-tolerations-come-back",
        ),
    ],
)
def test_eviction_suspends_and_restores_the_template_the_workload_keeps(given):
    pod_sets = BatchJob(given).pod_sets()
    result = batch_job.stop(running(given), pod_sets)
    assert result.stopped_now
    assert [w.subresource for w in result.writes] == ["", "status", ""]
    suspend, reset, restore = (w.job for w in result.writes)
    assert suspend.spec.suspend is True and suspend.metadata.annotations == {STOPPING_ANNOTATION: "true"}
    assert suspend.spec.template == running(given).spec.template  # the template waits for startTime to go
    assert reset.status.start_time is None
    assert restore.spec.template == given.spec.template
    assert restore.metadata.annotations == given.metadata.annotations
    assert restore.status.active == 3  # the Job controller ends the pods; Kueue clears startTime only


def test_a_stop_of_a_suspended_job_only_restores():
    given = job()
    result = batch_job.stop(given, BatchJob(given).pod_sets())
    assert not result.stopped_now
    assert [w.subresource for w in result.writes] == [""]
    assert result.job == given


def test_the_job_controllers_labels_keep_their_current_values_on_restore():
    controller = {"job-name": "train", "controller-uid": "u1", "batch.kubernetes.io/job-name": "train", "batch.kubernetes.io/controller-uid": "u1"}
    given = job(meta={"labels": {**controller, "app": "x"}})
    pod_sets = BatchJob(given).pod_sets()
    assert pod_sets[0].template.metadata.labels == {"batch.kubernetes.io/job-name": "train", "app": "x"}
    restored = batch_job.stop(running(given), pod_sets).job
    assert restored.spec.template.metadata.labels == {**controller, "app": "x"}


def test_a_job_stopped_half_way_is_stopped_again():
    # The stopping mark is left when the restore did not go through: the Job is not taken as suspended.
    given = job(annotations={STOPPING_ANNOTATION: "true"})
    assert not batch_job.is_suspended(given)
    result = batch_job.stop(given, BatchJob(given).pod_sets())
    assert result.stopped_now and result.job.metadata.annotations is None


def test_restore_without_pod_sets_changes_nothing():
    started = running(job())
    assert batch_job.restore_pod_sets_info(started, []) == started


# --- status -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "status", "ready"),
    [
        pytest.param({}, {}, False, id="a-job-without-pods-is-not-ready"),
        pytest.param({}, {"active": 3, "ready": 3}, True, id="every-pod-ready-is-ready"),
        pytest.param({}, {"active": 3, "ready": 2}, False, id="one-pod-short-is-not-ready"),
        pytest.param({}, {"ready": 1, "succeeded": 2}, True, id="pods-that-succeeded-count-as-ready"),
        pytest.param({}, {"ready": 2, "uncountedTerminatedPods": {"succeeded": ["p1"]}}, True, id="succeeded-pods-not-yet-counted-count-too"),
        pytest.param({}, {"ready": 2, "uncountedTerminatedPods": {"failed": ["p1"]}}, False, id="failed-pods-do-not"),
        pytest.param({"completions": 2}, {"ready": 2}, True, id="fewer-completions-than-parallelism-need-fewer-pods"),
    ],
)
def test_pods_ready_counts_ready_and_succeeded_pods_against_the_pod_set(spec, status, ready):
    assert batch_job.pods_ready(job(status=status, **spec)) is ready


def condition(type_: str, status: str = "True", message: str = "") -> dict:
    return {"type": type_, "status": status, "message": message, "lastTransitionTime": "2026-01-01T00:00:00Z"}


@pytest.mark.parametrize(
    ("conditions", "expected"),
    [
        pytest.param([], None, id="a-job-without-conditions-runs"),
        pytest.param([condition("Complete", message="Reached expected number of succeeded pods")], (True, "Reached expected number of succeeded pods"), id="complete-is-success-with-its-message"),
        pytest.param([condition("Failed", message="Job has reached the specified backoff limit")], (False, "Job has reached the specified backoff limit"), id="failed-is-failure-with-its-message"),
        pytest.param([condition("Complete", "False")], None, id="a-false-condition-is-no-end"),
        pytest.param([condition("FailureTarget"), condition("SuccessCriteriaMet")], None, id="the-interim-conditions-are-not-the-end"),
        pytest.param([condition("Suspended"), condition("Failed", message="m")], (False, "m"), id="the-first-terminal-condition-decides"),
    ],
)
def test_a_job_is_finished_by_its_complete_or_failed_condition(conditions, expected):
    done = batch_job.finished(job(status={"conditions": conditions}))
    assert ((done.succeeded, done.message) if done else None) == expected


# --- the webhook's checks -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("annotations", "spec", "expected"),
    [
        pytest.param({}, {}, [], id="a-job-without-kueues-annotations-is-fine"),
        pytest.param({"kueue.x-k8s.io/job-min-parallelism": "2"}, {}, [], id="a-min-parallelism-below-the-count-is-fine"),
        pytest.param(
            {"kueue.x-k8s.io/job-min-parallelism": "3"},
            {},
            ["metadata.annotations[kueue.x-k8s.io/job-min-parallelism]: Invalid value: 3: should be between 0 and 2"],
            id="a-min-parallelism-of-the-whole-count-is-refused",
        ),
        pytest.param(
            {"kueue.x-k8s.io/job-min-parallelism": "x"},
            {},
            ['metadata.annotations[kueue.x-k8s.io/job-min-parallelism]: Invalid value: "x": strconv.Atoi: parsing "x": invalid syntax'],
            id="a-min-parallelism-that-is-no-integer-is-refused",
        ),
        pytest.param(
            {"kueue.x-k8s.io/job-completions-equal-parallelism": "yes"},
            {},
            ['metadata.annotations[kueue.x-k8s.io/job-completions-equal-parallelism]: Invalid value: "yes": strconv.ParseBool: parsing "yes": invalid syntax'],
            id="completions-equal-parallelism-must-be-a-go-boolean",
        ),
        pytest.param(
            {"kueue.x-k8s.io/job-completions-equal-parallelism": "true"},
            {"completions": 2},
            [
                'metadata.annotations[kueue.x-k8s.io/job-completions-equal-parallelism]: Invalid value: "true": should not be enabled for NonIndexed jobs',
                "spec.completions: Invalid value: 2: should be equal to parallelism when kueue.x-k8s.io/job-completions-equal-parallelism annotation is true",
            ],
            id="completions-equal-parallelism-needs-an-indexed-job-of-equal-counts",
        ),
        pytest.param(
            {"kueue.x-k8s.io/admission-gated-by": "budget"},
            {},
            ['metadata.annotations[kueue.x-k8s.io/admission-gated-by]: Invalid value: "budget": must be a domain-prefixed path (such as "acme.io/foo")'],
            id="admission-gates-are-domain-prefixed-paths",
        ),
    ],
)
def test_the_job_webhook_checks_kueues_annotations(annotations, spec, expected):
    assert [str(e) for e in batch_job.validate_create(job(annotations=annotations, **spec))] == expected


def test_the_batch_job_wraps_the_functions_for_the_framework():
    wrapped = BatchJob(job(suspend=False))
    assert not wrapped.is_suspended() and wrapped.suspended().is_suspended()
    assert wrapped.priority_class() is None
    assert wrapped.with_labels({"a": "b"}).metadata.labels == {"a": "b"}
    started = wrapped.run_with_pod_sets_info([info()])
    assert started.restore_pod_sets_info(wrapped.pod_sets()).job.spec.template == wrapped.job.spec.template
    assert framework.construct_workload(wrapped).spec.pod_sets[0].count == 3
