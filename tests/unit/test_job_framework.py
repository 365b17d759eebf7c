"""The job framework's rules (Kueue's pkg/controller/jobframework): which jobs are managed, what the
webhook sets on create, and the Workload Kueue's reconciler makes of a batch/v1 Job."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from admitflow.admission.pod_set_updates import PodSetInfo, PodSetUpdateConflict
from admitflow.admission.priority import PriorityError
from admitflow.api import Admission, AdmissionCheckState, LabelSelector, PriorityClass, parse_manifest
from admitflow.api.job import with_defaults
from admitflow.api.meta import ObjectMeta
from admitflow.api.workload import PodSetAssignment, PodSetUpdate
from admitflow.jobs import framework
from admitflow.jobs.batch_job import BatchJob
from admitflow.jobs.framework import JobError

UID = "0f5c3d1e-7a2b-4c9d-8e6f-1a2b3c4d5e6f"
QUEUE = "kueue.x-k8s.io/queue-name"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def job(
    name: str | None = "train",
    labels: dict | None = None,
    annotations: dict | None = None,
    namespace: str = "default",
    uid: str | None = UID,
    pod: dict | None = None,
    pod_labels: dict | None = None,
    **spec,
) -> BatchJob:
    """A Job as the apiserver stores it, queued in `lq` unless `labels` says otherwise."""
    metadata = {"namespace": namespace, "labels": {QUEUE: "lq"} if labels is None else labels}
    metadata.update({"name": name} if name else {"generateName": "train-"})
    if annotations:
        metadata["annotations"] = annotations
    pod_spec = {"containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}], "restartPolicy": "Never"}
    template = {"spec": {**pod_spec, **(pod or {})}}
    if pod_labels is not None:
        template["metadata"] = {"labels": pod_labels}
    obj, _ = parse_manifest({"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": {"template": template, **spec}})
    obj = with_defaults(obj)
    if uid:
        obj = obj.model_copy(update={"metadata": obj.metadata.model_copy(update={"uid": uid})})
    return BatchJob(obj)


def pc(name: str, value: int, default: bool = False) -> PriorityClass:
    return PriorityClass(metadata=ObjectMeta(name=name), value=value, global_default=default)


def test_a_batch_job_is_a_generic_job():
    assert isinstance(job(), framework.GenericJob)


# --- which jobs are managed ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "selector", "expected"),
    [
        pytest.param(job(), framework.DEFAULT_MANAGED_JOBS_NAMESPACE_SELECTOR, None, id="a-job-with-a-queue-name-in-default-is-managed"),
        pytest.param(
            job(labels={}),
            framework.DEFAULT_MANAGED_JOBS_NAMESPACE_SELECTOR,
            "metadata.labels[kueue.x-k8s.io/queue-name]: Required value: a Job without a queue name is not managed "
            "(Kueue's manageJobsWithoutQueueName is false): name a LocalQueue of namespace default",
            id="a-job-without-a-queue-name-is-left-alone",
        ),
        pytest.param(
            job(labels={QUEUE: ""}),
            framework.DEFAULT_MANAGED_JOBS_NAMESPACE_SELECTOR,
            "metadata.labels[kueue.x-k8s.io/queue-name]: Required value: a Job without a queue name is not managed "
            "(Kueue's manageJobsWithoutQueueName is false): name a LocalQueue of namespace default",
            id="an-empty-queue-name-is-no-queue-name",
        ),
        pytest.param(
            job(namespace="kube-system"),
            framework.DEFAULT_MANAGED_JOBS_NAMESPACE_SELECTOR,
            'metadata.namespace: Forbidden: namespace "kube-system" is not selected by managedJobsNamespaceSelector: '
            "Kueue manages no job there",
            id="kueues-default-selector-leaves-kube-system-alone-even-with-a-queue-name",
        ),
        pytest.param(job(namespace="kueue-system"), None, None, id="without-a-selector-every-namespace-is-managed"),
        pytest.param(
            job(namespace="team-b"),
            LabelSelector(match_labels={"kubernetes.io/metadata.name": "team-a"}),
            'metadata.namespace: Forbidden: namespace "team-b" is not selected by managedJobsNamespaceSelector: '
            "Kueue manages no job there",
            id="a-selector-matches-the-namespaces-name-label",
        ),
    ],
)
def test_kueue_manages_a_job_with_a_queue_name_in_a_selected_namespace(given, selector, expected):
    reason = framework.unmanaged_reason(given, selector=selector)
    assert (str(reason) if reason else None) == expected


# --- the webhook --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "local_queues", "wpcs", "labels", "suspend"),
    [
        pytest.param(job(), (), (), {QUEUE: "lq"}, True, id="a-queued-job-is-stored-suspended"),
        pytest.param(job(suspend=True), (), (), {QUEUE: "lq"}, True, id="a-suspended-job-stays-suspended"),
        pytest.param(job(labels={}), (), (), {}, False, id="a-job-without-a-queue-is-not-suspended"),
        pytest.param(
            job(labels={}), ("default",), (), {QUEUE: "default"}, True, id="a-namespace-with-a-default-local-queue-queues-it-there"
        ),
        pytest.param(job(labels={}), ("other",), (), {}, False, id="only-a-local-queue-named-default-is-a-default"),
        pytest.param(
            job(labels={}, namespace="kube-system"), ("default",), (), {}, False,
            id="the-default-queue-is-not-given-in-an-unmanaged-namespace",
        ),
        pytest.param(
            job(),
            (),
            ("default",),
            {QUEUE: "lq", "kueue.x-k8s.io/priority-class": "default"},
            True,
            id="a-workload-priority-class-named-default-is-given-to-a-job-naming-none",
        ),
        pytest.param(
            job(labels={QUEUE: "lq", "kueue.x-k8s.io/priority-class": "high"}),
            (),
            ("default", "high"),
            {QUEUE: "lq", "kueue.x-k8s.io/priority-class": "high"},
            True,
            id="a-job-naming-a-workload-priority-class-keeps-it",
        ),
    ],
)
def test_the_webhook_queues_prioritizes_and_suspends_jobs_as_kueues(given, local_queues, wpcs, labels, suspend):
    out = framework.apply_webhook_defaults(given, local_queues=local_queues, workload_priority_classes=wpcs)
    assert (out.metadata.labels or {}) == labels
    assert out.job.spec.suspend is suspend


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        pytest.param({QUEUE: "lq"}, [], id="a-subdomain-queue-name-is-fine"),
        pytest.param(
            {QUEUE: "LQ"},
            ['metadata.labels[kueue.x-k8s.io/queue-name]: Invalid value: "LQ": a lowercase RFC 1123 subdomain must consist'],
            id="a-queue-name-that-is-no-subdomain-is-refused",
        ),
        pytest.param(
            {QUEUE: "lq", "kueue.x-k8s.io/max-exec-time-seconds": "ten"},
            ['metadata.labels[kueue.x-k8s.io/max-exec-time-seconds]: Invalid value: "ten": strconv.Atoi: parsing "ten": invalid syntax'],
            id="a-maximum-execution-time-that-is-no-integer-is-refused-with-gos-words",
        ),
        pytest.param(
            {QUEUE: "lq", "kueue.x-k8s.io/max-exec-time-seconds": "0"},
            ['metadata.labels[kueue.x-k8s.io/max-exec-time-seconds]: Invalid value: "0": should be greater than 0'],
            id="a-maximum-execution-time-must-be-positive",
        ),
    ],
)
def test_the_webhook_checks_kueues_labels(labels, expected):
    errors = [str(e) for e in framework.validate_labels(job(labels=labels))]
    assert len(errors) == len(expected)
    assert all(e.startswith(x) for e, x in zip(errors, expected, strict=True))


# --- the Workload -----------------------------------------------------------------------------------


def test_the_sample_jobs_workload_is_kueues():
    wl = framework.construct_workload(job("sample-job-abc12", parallelism=3, completions=3))
    assert wl.to_wire() == {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": "job-sample-job-abc12-69fcf",
            "namespace": "default",
            "labels": {"kueue.x-k8s.io/job-uid": UID},
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": "sample-job-abc12", "uid": UID, "controller": True, "blockOwnerDeletion": True}
            ],
        },
        "spec": {
            "podSets": [
                {
                    "name": "main",
                    "count": 3,
                    "template": {
                        "spec": {
                            "containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}],
                            "restartPolicy": "Never",
                        }
                    },
                }
            ],
            "queueName": "lq",
            "priority": 0,
            "active": True,
        },
        "status": {"conditions": []},
    }
    assert wl.validation_errors() == []


@pytest.mark.parametrize(
    ("spec", "count"),
    [
        pytest.param({"parallelism": 3, "completions": 3}, 3, id="parallelism-equal-to-completions-is-the-count"),
        pytest.param({"parallelism": 5, "completions": 3}, 3, id="fewer-completions-than-parallelism-count-the-completions"),
        pytest.param({"parallelism": 2, "completions": 10}, 2, id="more-completions-than-parallelism-count-the-parallelism"),
        pytest.param({"parallelism": 4}, 4, id="without-completions-parallelism-is-the-count"),
        pytest.param({"completions": 4}, 1, id="without-parallelism-the-apiserver-default-of-one-is-the-count"),
        pytest.param({}, 1, id="a-job-giving-neither-counts-one-pod"),
    ],
)
def test_the_pod_set_count_is_min_parallelism_completions(spec, count):
    (pod_set,) = framework.construct_workload(job(**spec)).spec.pod_sets
    assert (pod_set.name, pod_set.count) == ("main", count)


def test_min_parallelism_is_read_but_cleared_as_kueue_does_without_partial_admission():
    given = job(annotations={"kueue.x-k8s.io/job-min-parallelism": "2"}, parallelism=5, completions=5)
    assert given.pod_sets()[0].min_count == 2
    assert framework.construct_workload(given).spec.pod_sets[0].min_count is None


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        pytest.param({QUEUE: "lq", "kueue.x-k8s.io/max-exec-time-seconds": "600"}, 600, id="the-label-gives-the-maximum-execution-time"),
        pytest.param({QUEUE: "lq", "kueue.x-k8s.io/max-exec-time-seconds": "0"}, None, id="a-zero-time-gives-none"),
        pytest.param({QUEUE: "lq", "kueue.x-k8s.io/max-exec-time-seconds": "ten"}, None, id="a-time-that-is-no-integer-gives-none"),
        pytest.param({QUEUE: "lq", "kueue.x-k8s.io/max-exec-time-seconds": "2147483648"}, None, id="a-time-past-int32-gives-none"),
        pytest.param({QUEUE: "lq"}, None, id="without-the-label-there-is-no-maximum"),
    ],
)
def test_the_maximum_execution_time_comes_from_its_label(labels, expected):
    assert framework.construct_workload(job(labels=labels)).spec.maximum_execution_time_seconds == expected


@pytest.mark.parametrize(
    ("labels", "pod", "wpcs", "classes", "expected"),
    [
        pytest.param({}, {}, {}, {}, (None, 0), id="no-class-anywhere-gives-priority-zero"),
        pytest.param(
            {"kueue.x-k8s.io/priority-class": "high"},
            {"priorityClassName": "pods"},
            {"high": 500},
            {"pods": pc("pods", 7)},
            (("kueue.x-k8s.io", "WorkloadPriorityClass", "high"), 500),
            id="a-workload-priority-class-wins-over-the-pods-class",
        ),
        pytest.param(
            {},
            {"priorityClassName": "pods"},
            {},
            {"pods": pc("pods", 7), "fallback": pc("fallback", 1, default=True)},
            (("scheduling.k8s.io", "PriorityClass", "pods"), 7),
            id="the-pods-priority-class-wins-over-the-global-default",
        ),
        pytest.param(
            {},
            {},
            {},
            {"a": pc("a", 9, default=True), "b": pc("b", 3, default=True), "c": pc("c", 1)},
            (("scheduling.k8s.io", "PriorityClass", "b"), 3),
            id="of-several-global-defaults-the-lowest-value-wins",
        ),
        pytest.param(
            {},
            {"priorityClassName": "system-cluster-critical"},
            {},
            {},
            (("scheduling.k8s.io", "PriorityClass", "system-cluster-critical"), 2_000_000_000),
            id="the-system-classes-are-always-there",
        ),
    ],
)
def test_the_priority_comes_from_the_workload_class_then_the_pods_class_then_the_default(labels, pod, wpcs, classes, expected):
    wl = framework.construct_workload(job(labels={QUEUE: "lq", **labels}, pod=pod), wpcs, classes)
    ref = wl.spec.priority_class_ref
    assert ((ref.group, ref.kind, ref.name) if ref else None, wl.spec.priority) == expected


@pytest.mark.parametrize(
    ("labels", "pod", "expected"),
    [
        pytest.param(
            {"kueue.x-k8s.io/priority-class": "gone"},
            {},
            'workloadpriorityclasses.kueue.x-k8s.io "gone" not found',
            id="a-missing-workload-priority-class-stops-the-workload",
        ),
        pytest.param({}, {"priorityClassName": "gone"}, 'priorityclasses.scheduling.k8s.io "gone" not found', id="a-missing-pod-class-stops-the-workload"),
    ],
)
def test_a_missing_priority_class_is_refused_with_the_apiservers_not_found(labels, pod, expected):
    with pytest.raises(PriorityError, match=expected):
        framework.construct_workload(job(labels={QUEUE: "lq", **labels}, pod=pod))


@pytest.mark.parametrize(
    ("given", "message"),
    [
        pytest.param(job(None), "Job default/train-: it has no name yet: one is generated when it is created", id="a-job-with-only-a-generate-name-has-no-workload-yet"),
        pytest.param(job(uid=None), "Job default/train: it has no UID yet: one is given when it is stored", id="a-job-without-a-uid-has-no-workload-yet"),
    ],
)
def test_a_workload_needs_the_jobs_name_and_uid(given, message):
    with pytest.raises(JobError, match=message):
        framework.construct_workload(given)


def test_only_kueues_labels_and_annotations_reach_the_workload():
    given = job(
        labels={QUEUE: "lq", "team": "a", "cost-center": "42", "kueue.x-k8s.io/job-uid": "forged"},
        annotations={
            "provreq.kueue.x-k8s.io/maxRunDurationSeconds": "600",
            "kueue.x-k8s.io/admission-gated-by": "example.com/budget",
            "note": "not copied",
        },
    )
    wl = framework.construct_workload(given, label_keys_to_copy=("team", "kueue.x-k8s.io/job-uid"))
    assert wl.metadata.labels == {"team": "a", "kueue.x-k8s.io/job-uid": UID}
    assert wl.metadata.annotations == {
        "provreq.kueue.x-k8s.io/maxRunDurationSeconds": "600",
        "kueue.x-k8s.io/admission-gated-by": "example.com/budget",
    }


def test_a_uid_that_is_no_label_value_is_not_a_label():
    wl = framework.construct_workload(job(uid="not/a/label"))
    assert "kueue.x-k8s.io/job-uid" not in (wl.metadata.labels or {})


def test_the_pod_template_loses_the_job_controllers_labels_but_the_job_name():
    managed = {
        "job-name": "train",
        "controller-uid": UID,
        "batch.kubernetes.io/job-name": "train",
        "batch.kubernetes.io/controller-uid": UID,
        "app": "x",
    }
    (pod_set,) = framework.construct_workload(job(pod_labels=managed)).spec.pod_sets
    assert pod_set.template.metadata.labels == {"batch.kubernetes.io/job-name": "train", "app": "x"}


def test_repeated_env_vars_become_one_in_the_first_place_with_the_last_value():
    env = [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}, {"name": "A", "value": "3"}]
    containers = [{"name": "main", "image": "busybox", "env": env}]
    (pod_set,) = framework.construct_workload(job(pod={"containers": containers, "initContainers": containers})).spec.pod_sets
    wire = pod_set.template.to_wire()["spec"]
    for field in ("containers", "initContainers"):
        assert wire[field][0]["env"] == [{"name": "A", "value": "3"}, {"name": "B", "value": "2"}]


def test_the_workload_name_does_not_change_when_the_workload_is_made_again():
    first = framework.construct_workload(job("train"))
    again = framework.construct_workload(job("train", parallelism=7))
    assert first.metadata.name == again.metadata.name == framework.workload_name_for(job("train"))


# --- admission: the queue labels ------------------------------------------------------------------------


def admitted(cluster_queue: str = "cluster-queue", checks: list | None = None):
    wl = framework.construct_workload(job())
    wl.status.admission = Admission(cluster_queue=cluster_queue, pod_set_assignments=[PodSetAssignment(name="main", count=1)])
    wl.status.admission_checks = checks
    return wl


def info(**labels: str) -> PodSetInfo:
    return PodSetInfo(name="main", count=1, labels={"kueue.x-k8s.io/podset": "main", **labels})


@pytest.mark.parametrize(
    ("cluster_queue", "expected"),
    [
        pytest.param(
            "cluster-queue",
            {"kueue.x-k8s.io/podset": "main", "kueue.x-k8s.io/local-queue-name": "lq", "kueue.x-k8s.io/cluster-queue-name": "cluster-queue"},
            id="the-pods-name-their-local-and-cluster-queues",
        ),
        pytest.param(
            "cq.example",
            {"kueue.x-k8s.io/podset": "main", "kueue.x-k8s.io/local-queue-name": "lq"},
            id="a-cluster-queue-name-that-is-no-dns-label-is-left-out",
        ),
    ],
)
def test_admitted_pods_carry_their_queue_names(cluster_queue, expected):
    (out,) = framework.with_queue_labels([info()], admitted(cluster_queue))
    assert out.labels == expected


def test_a_check_giving_a_queue_label_another_value_is_that_checks_conflict():
    checks = [AdmissionCheckState(name="budget", state="Ready", last_transition_time=T0,
                                  pod_set_updates=[PodSetUpdate(name="main", labels={"kueue.x-k8s.io/local-queue-name": "other"})])]
    with pytest.raises(PodSetUpdateConflict) as err:
        framework.with_queue_labels([info(**{"kueue.x-k8s.io/local-queue-name": "other"})], admitted(checks=checks))
    assert str(err.value) == (
        'in admission check "budget": invalid admission check PodSetUpdate: conflict for labels: '
        "conflict for key=kueue.x-k8s.io/local-queue-name, value1=lq, value2=other"
    )


@pytest.mark.parametrize(
    ("active", "expected"),
    [
        pytest.param(None, True, id="a-job-without-pods-gets-its-workload"),
        pytest.param(0, True, id="a-job-whose-pods-are-gone-gets-its-workload"),
        pytest.param(2, False, id="a-job-still-running-pods-waits-for-them-to-go"),
    ],
)
def test_a_workload_is_made_only_once_the_jobs_pods_are_gone(active, expected):
    given = job()
    given = BatchJob(given.job.model_copy(update={"status": given.job.status.model_copy(update={"active": active})}))
    assert framework.workload_may_be_created(given) is expected


# --- the reconciler's next step --------------------------------------------------------------------------


def job_in(suspend: bool = True, active: int | None = None, ended: str | None = None, stopping: bool = False) -> BatchJob:
    """A queued Job, suspended or running, with `active` pods, ended by a True `ended` condition."""
    given = job(annotations={"kueue.x-k8s.io/stopping": "true"} if stopping else None, suspend=suspend).job
    conditions = [{"type": ended, "status": "True", "message": f"the Job is {ended}"}] if ended else None
    status = type(given.status).model_validate({"active": active, "conditions": conditions})
    return BatchJob(given.model_copy(update={"status": status}))


DONE = framework.Finished(succeeded=True, message="the Job is Complete")
FAILED = framework.Finished(succeeded=False, message="the Job is Failed")


@pytest.mark.parametrize(
    ("given", "workload", "admitted", "here", "expected"),
    [
        pytest.param(job_in(), "absent", None, False, framework.CreateWorkload(), id="a-suspended-job-without-a-workload-gets-one"),
        pytest.param(job_in(suspend=False, active=3), "absent", None, False, framework.StopJob(framework.MISSING_WORKLOAD),
                     id="a-job-created-unsuspended-is-stopped-first-missing-workload"),
        pytest.param(job_in(active=3), "absent", None, False, framework.Nothing("its pods are still active: its Workload is made once they are gone"),
                     id="a-stopped-job-whose-pods-still-run-waits-for-them-before-its-workload"),
        pytest.param(job_in(active=0), "deleted", None, False, framework.CreateWorkload(),
                     id="a-job-whose-workload-was-deleted-gets-it-again-once-its-pods-are-gone"),
        pytest.param(job_in(suspend=False), "deleted", None, False, framework.StopJob(framework.WORKLOAD_DELETED),
                     id="a-running-job-whose-workload-was-deleted-is-stopped-workload-is-deleted"),
        pytest.param(job_in(stopping=True), "absent", None, False, framework.StopJob(framework.MISSING_WORKLOAD),
                     id="a-job-left-half-stopped-is-stopped-again"),
        pytest.param(job_in(suspend=False, ended="Complete"), "absent", None, False, framework.Nothing("it ended without a Workload"),
                     id="a-job-that-ended-gets-no-workload"),
        pytest.param(job_in(suspend=False, ended="Complete"), "present", True, True, framework.Nothing("its run reports its end"),
                     id="a-job-that-ended-while-its-run-is-here-is-finished-by-its-run"),
        pytest.param(job_in(suspend=False, ended="Failed"), "present", None, False, framework.FinishWorkload(FAILED),
                     id="a-job-that-ended-without-its-run-here-finishes-its-workload-failed"),
        pytest.param(job_in(suspend=False, ended="Complete"), "present", True, False, framework.FinishWorkload(DONE),
                     id="a-job-that-ended-while-admitted-elsewhere-finishes-its-workload"),
        pytest.param(job_in(suspend=False), "finished", None, False, framework.Nothing("its Workload is finished"),
                     id="a-job-whose-workload-finished-is-left-alone"),
        pytest.param(job_in(), "present", None, False, framework.Nothing(), id="a-suspended-job-waits-for-its-admission"),
        pytest.param(job_in(suspend=False), "present", None, True, framework.Nothing(), id="a-job-running-its-admission-here-runs-on"),
        pytest.param(job_in(suspend=False), "present", None, False, framework.AskAdmitted(),
                     id="a-running-job-without-a-run-here-asks-whether-its-workload-is-admitted"),
        pytest.param(job_in(suspend=False), "present", True, False, framework.Nothing(), id="a-running-job-whose-workload-is-admitted-runs-on"),
        pytest.param(job_in(suspend=False), "present", False, False, framework.StopJob(framework.NOT_ADMITTED),
                     id="a-running-job-whose-workload-is-not-admitted-is-stopped-not-admitted-by-cluster-queue"),
    ],
)
def test_the_reconcilers_next_step_is_kueues(given, workload, admitted, here, expected):
    assert framework.next_step(given, workload, admitted, here) == expected
