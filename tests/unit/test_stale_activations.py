"""worker/stale_activations.stale: which first activation after a replay runs on a clock no new
workflow task can have (the integration test tests/integration/test_stale_activations.py shows the
whole sequence on the dev server)."""

from __future__ import annotations

import pytest
from temporalio.bridge.proto.workflow_activation import WorkflowActivation

from admitflow.worker.stale_activations import stale

MAX_AGE = 10.0
NOW = 1_800_000_100.0  # the worker's clock, seconds since the epoch


def activation(at: float | None, *jobs: str, replaying: bool = False) -> WorkflowActivation:
    act = WorkflowActivation(run_id="r", is_replaying=replaying)
    if at is not None:
        act.timestamp.FromNanoseconds(int(at * 1e9))
    for job in jobs:
        getattr(act.jobs.add(), job).SetInParent()
    return act


@pytest.mark.parametrize(
    ("act", "last_replayed", "expected"),
    [
        # a real workflow task after the replay: started just now, after the last replayed one
        (activation(NOW - 0.2, "fire_timer"), NOW - 30, False),
        (activation(NOW - 9.9, "signal_workflow"), NOW - 30, False),
        # the query's fallback: the clock of a workflow task that started before the replayed end ...
        (activation(NOW - 30, "fire_timer"), NOW - 30, True),
        (activation(NOW - 31, "signal_workflow", "fire_timer"), NOW - 30, True),
        # ... or of one with no activation of its own (an eager task), older than the sticky timeout
        (activation(NOW - 12, "fire_timer"), NOW - 15, True),
        (activation(NOW - MAX_AGE, "resolve_activity"), NOW - 15, True),
        # replaying, a brand-new run, a query alone, eviction, no timestamp: never refused
        (activation(NOW - 30, "fire_timer", replaying=True), NOW - 30, False),
        (activation(NOW - 30, "initialize_workflow"), None, False),
        (activation(NOW - 30, "query_workflow"), NOW - 30, False),
        (activation(None, "remove_from_cache"), NOW - 30, False),
        (activation(None, "fire_timer"), NOW - 30, False),
    ],
    ids=[
        "new-task", "new-task-late-in-its-timeout", "same-clock-as-replayed", "older-than-replayed",
        "older-than-sticky-timeout", "exactly-the-sticky-timeout", "replaying", "new-run", "query-only",
        "eviction", "no-timestamp",
    ],
)
def test_stale(act, last_replayed, expected):
    assert stale(act, last_replayed, MAX_AGE, now=NOW) is expected


class _Instance:
    """Stands for the SDK's workflow instance: records what reaches workflow code."""

    def __init__(self) -> None:
        self.seen: list[WorkflowActivation] = []

    def activate(self, act):
        self.seen.append(act)
        from temporalio.bridge.proto.workflow_completion import WorkflowActivationCompletion

        return WorkflowActivationCompletion(run_id=act.run_id)


def test_a_replay_longer_than_the_sticky_timeout_does_not_make_its_own_task_stale(monkeypatch):
    """A long history takes long to replay: the new workflow task it ends in is judged by its age when
    it reached the worker, not after the replay, or every attempt of it is refused and replayed again
    (a cohort tree's entity livelocked so)."""
    from admitflow.worker import stale_activations

    clock = [NOW]
    monkeypatch.setattr(stale_activations.time, "time", lambda: clock[0])
    instance = _Instance()
    guarded = stale_activations._Guarded(instance, MAX_AGE)
    guarded.activate(activation(NOW - 60, "initialize_workflow", replaying=True))
    clock[0] += 30  # the replay of its history takes 30 s
    guarded.activate(activation(NOW - 0.5, "signal_workflow", replaying=True))
    live = guarded.activate(activation(NOW - 0.2, "signal_workflow"))
    assert not live.HasField("failed")
    assert len(instance.seen) == 3


def test_a_query_fallback_is_still_refused_however_fast_the_replay(monkeypatch):
    from admitflow.worker import stale_activations

    monkeypatch.setattr(stale_activations.time, "time", lambda: NOW)
    instance = _Instance()
    guarded = stale_activations._Guarded(instance, MAX_AGE)
    guarded.activate(activation(NOW - 40, "initialize_workflow", replaying=True))
    guarded.activate(activation(NOW - 30, "signal_workflow", replaying=True))
    refused = guarded.activate(activation(NOW - 30, "fire_timer"))
    assert refused.failed.failure.message == stale_activations.REFUSED
    assert len(instance.seen) == 2
