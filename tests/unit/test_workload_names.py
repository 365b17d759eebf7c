"""The Workload's name as Kueue's GetWorkloadNameForOwnerWithGVK computes it, checked against
Kueue's own test vectors (pkg/controller/jobframework/workload_names_test.go: TestGenerateWorkloadName
and TestGenerateWorkloadNameWithExtra; inputs and expected names copied as data)."""

from __future__ import annotations

import pytest

from admitflow.jobs.workload_names import HASH_LENGTH, max_prefix_length, workload_name, workload_name_prefix

# Kueue's 260-symbol owner name of its truncation cases.
LONG = (
    "marketing-campaign-autumn-2024-region-north-america-department-digital-strategy-sub-department-"
    "social-media-engagement-tracker-and-analytics-dashboard-v2-final-revision-by-engineering-team-lead-"
    "senior-architect-validation-checked-approved-by-legal-and-ops-dept"
)


@pytest.mark.parametrize(
    ("owner", "uid", "extra", "short", "expected"),
    [
        pytest.param("name", "uid", "", False, "job-name-ef3a1", id="a-short-name-gets-the-kind-and-five-hex-digits"),
        pytest.param("name", "uid", "1", False, "job-name-2514c", id="an-extra-part-changes-only-the-hash"),
        pytest.param(
            LONG,
            "uid",
            "",
            False,
            "job-marketing-campaign-autumn-2024-region-north-america-department-digital-strategy-sub-department-"
            "social-media-engagement-tracker-and-analytics-dashboard-v2-final-revision-by-engineering-team-lead-"
            "senior-architect-validation-checked-approved-by-l-218b8",
            id="a-long-name-is-cut-to-253-characters-with-the-hash-of-the-whole-name",
        ),
        pytest.param(
            LONG,
            "uid",
            "",
            True,
            "job-marketing-campaign-autumn-2024-region-north-america-d-218b8",
            id="with-short-workload-names-the-cut-is-at-63-characters",
        ),
    ],
)
def test_the_workload_name_is_kueues_on_kueues_vectors(owner, uid, extra, short, expected):
    assert workload_name(owner, uid, "Job", "batch", extra=extra, short=short) == expected


@pytest.mark.parametrize(
    ("owner", "short"),
    [
        pytest.param("a" * 300, False, id="the-long-limit-holds-the-name-to-253-characters"),
        pytest.param("a" * 300, True, id="the-short-limit-holds-the-name-to-63-characters"),
        pytest.param("a" * 63, False, id="a-63-character-job-name-fits-without-a-cut"),
    ],
)
def test_the_name_is_the_prefix_a_dash_and_the_hash(owner, short):
    name = workload_name(owner, "uid", "Job", "batch", short=short)
    prefix = workload_name_prefix(owner, "Job", short=short)
    assert name.startswith(prefix + "-")
    assert len(name) == len(prefix) + 1 + HASH_LENGTH
    assert len(prefix) == min(len("job-" + owner), max_prefix_length(short))


@pytest.mark.parametrize(
    ("first", "second", "same"),
    [
        pytest.param(("job-a", "uid-1", "Job", "batch"), ("job-a", "uid-1", "Job", "batch"), True, id="the-same-job-gets-the-same-name"),
        pytest.param(("job-a", "uid-1", "Job", "batch"), ("job-a", "uid-2", "Job", "batch"), False, id="a-new-uid-gets-a-new-name"),
        pytest.param(("x", "uid-1", "Job", "batch"), ("x", "uid-1", "JobSet", "jobset.x-k8s.io"), False, id="another-kind-gets-another-name"),
    ],
)
def test_the_name_depends_on_kind_group_name_and_uid(first, second, same):
    assert (workload_name(*first) == workload_name(*second)) is same


def test_a_cut_may_end_in_a_dash_as_kueues_does():
    # The cut ignores separators: 246 characters of name and a dash at position 247 stay.
    owner = "a" * (max_prefix_length() - len("job-") - 1) + "-b"
    assert workload_name_prefix(owner, "Job").endswith("-")
    assert "--" in workload_name(owner, "uid", "Job", "batch")
