"""objectRetentionPolicies.workloads.afterDeactivatedByKueue: the rule's table, and the lifecycle
deleting the workload on its timer (its workflow then ends)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from admitflow.admission import lifecycle as lc
from admitflow.admission import intake
from admitflow.admission import retention
from admitflow.api.configuration import Configuration, WorkloadRetentionPolicy
from tests.unit.test_lifecycle import World


def rejected(after: str | None, how: str = "rejected") -> World:
    """A workload whose check `a` was Rejected (the engine deactivates it), or that a person
    deactivated, with this afterDeactivatedByKueue in force."""
    w = World()
    policy = WorkloadRetentionPolicy(after_deactivated_by_kueue=after) if after is not None else None
    w.reserve("a", workload_retention=policy)
    if how == "rejected":
        w.batch(intake.verdict(w.verdict("a", "Rejected", message="no")), after=10)
    else:
        w.batch(lc.Deactivated(), after=10)
    assert w.phase() == "Inactive"
    return w


@pytest.mark.parametrize(
    ("after", "how", "want"),
    [
        pytest.param("1h", "rejected", timedelta(hours=1), id="deactivated-by-the-engine-is-deleted-after-its-retention"),
        pytest.param("0s", "rejected", timedelta(0), id="0s-deletes-at-once"),
        pytest.param("1h", "by-a-person", None, id="deactivated-by-a-person-is-kept"),
        pytest.param(None, "rejected", None, id="no-policy-keeps-it"),
    ],
)
def test_the_deletion_deadline(after, how, want):
    w = rejected(after, how)
    due = retention.deletion_due(w.state)
    assert (due[0] - w.now if due else None) == want


def test_the_workload_is_deleted_on_its_timer_and_its_workflow_ends():
    w = rejected("1h")
    at, summary = lc.next_wake(w.state)
    assert (at - w.now, summary) == (timedelta(hours=1), "delete: deactivated 1h ago (afterDeactivatedByKueue)")
    w.batch(lc.TimerFired(at=at - timedelta(seconds=1)), after=3599)  # another timer, a second early
    assert not w.state.deleted, "not before its time"
    w.batch(lc.TimerFired(at=at), after=1)
    assert w.state.deleted and lc.next_wake(w.state) is None
    (event,) = [e for e in w.state.events if e.reason == retention.REASON]
    assert event.message == "Deleted 1h after it was deactivated (objectRetentionPolicies.workloads.afterDeactivatedByKueue)"


def test_reactivated_before_its_retention_it_is_kept():
    w = rejected("1h")
    w.batch(lc.Activated(), after=60)
    assert retention.deletion_due(w.state) is None
    w.batch(lc.TimerFired(), after=3600)
    assert not w.state.deleted


@pytest.mark.parametrize(
    ("policy", "error"),
    [
        ({"afterFinished": "1h", "afterDeactivatedByKueue": "0s"}, None),
        ({"afterDeactivatedByKueue": "-1m"}, "objectRetentionPolicies.workloads.afterDeactivatedByKueue"),
        ({"afterFinished": "-1s"}, "must be greater than or equal to 0"),
        ({"afterFinished": "later"}, "afterFinished"),
    ],
)
def test_the_policy_is_validated(policy, error):
    doc = {"objectRetentionPolicies": {"workloads": policy}}
    if error is None:
        assert Configuration.model_validate(doc).object_retention_policies.workloads.after_deactivated_by_kueue == "0s"
    else:
        with pytest.raises(ValueError, match=error):
            Configuration.model_validate(doc)


def test_after_finished_is_kept_and_said_to_have_nothing_to_do():
    from admitflow.api import parse_manifest

    config, warnings = parse_manifest({
        "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
        "objectRetentionPolicies": {"workloads": {"afterFinished": "1h", "afterDeactivatedByKueue": "2h"}},
    })
    assert config.object_retention_policies.workloads.after_deactivated_by_kueue == "2h"
    assert warnings == [
        "Configuration: field objectRetentionPolicies.workloads.afterFinished is not used by admitflow "
        "(a finished workload's workflow completes at once; the Temporal namespace's retention keeps its history)"
    ]
