"""worker/stale_activations.stale: which first activation after a replay runs on a clock no new
workflow task can have (the integration test tests/integration/test_stale_activations.py shows the
whole sequence on the dev server)."""

from __future__ import annotations

import pytest
from temporalio.bridge.proto.workflow_activation import WorkflowActivation

from admitflow.worker.stale_activations import Task, stale, task_of, without_a_task

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


def at_length(at: float, length: int, *jobs: str, replaying: bool = False) -> WorkflowActivation:
    act = activation(at, *jobs, replaying=replaying)
    act.history_length = length
    return act


@pytest.mark.parametrize(
    ("task", "last", "expected"),
    [
        # a new workflow task: later clock, longer history
        (Task(NOW, 200), Task(NOW - 1, 191), False),
        # later in the same task: a local activity's result, an activity cancelled with TRY_CANCEL
        (Task(NOW - 1, 191), Task(NOW - 1, 191), False),
        # a local activity moved the clock on, the history did not grow
        (Task(NOW - 0.5, 191), Task(NOW - 1, 191), False),
        # a query sent on by itself with the events that arrived after the task: longer, same clock
        (Task(NOW - 1, 195), Task(NOW - 1, 191), True),
        # ... or on a clock a local activity had moved past
        (Task(NOW - 1, 195), Task(NOW - 0.5, 191), True),
        # a speculative task the server dropped: a shorter history on a later clock
        (Task(NOW, 189), Task(NOW - 1, 191), False),
        # nothing to compare with, or nothing brought
        (Task(NOW, 195), None, False),
        (None, Task(NOW - 1, 191), False),
    ],
    ids=[
        "new-task", "same-task", "local-activity-clock", "query-sent-on", "query-after-local-activity",
        "dropped-speculative-task", "first", "query-only",
    ],
)
def test_without_a_task(task, last, expected):
    assert without_a_task(task, last) is expected


def test_task_of_counts_only_history_events():
    assert task_of(at_length(NOW, 191, "signal_workflow", "resolve_activity")) == Task(NOW, 191)
    assert task_of(at_length(NOW, 191, "query_workflow")) is None
    assert task_of(at_length(NOW, 191, "remove_from_cache")) is None
    assert task_of(at_length(NOW, 0, "fire_timer")) is None
    assert task_of(activation(None, "fire_timer")) is None


def test_a_cached_run_refuses_the_events_a_query_brings_without_a_workflow_task(monkeypatch):
    """What the server-restart fault test recorded for the simulated autoscaler, as activations:
    its task at event 191 was applied in two activations live (an activity's result and signals
    that came with a query the server sent on by itself, then the rest) and in one by any replay,
    so the replay armed one timer fewer (`Timer machine does not handle ActivityTaskScheduled`).
    The query's events are refused; a real task's activations, a local activity's result and an
    activity cancelled with TRY_CANCEL later in that task are not."""
    from admitflow.worker import stale_activations

    monkeypatch.setattr(stale_activations.time, "time", lambda: NOW)
    instance = _Instance()
    guarded = stale_activations._Guarded(instance, MAX_AGE)
    task = NOW - 5.0
    passed = [
        at_length(task - 10, 3, "initialize_workflow"),
        at_length(task, 180, "signal_workflow", "resolve_activity"),
        at_length(task, 180, "resolve_activity"),  # cancelled with TRY_CANCEL, resolved at once
        at_length(task + 0.2, 180, "resolve_activity"),  # a local activity's result moved the clock
        at_length(task, 185, "query_workflow"),
    ]
    for act in passed:
        assert not guarded.activate(act).HasField("failed")
    refused = guarded.activate(at_length(task, 185, "resolve_activity", "signal_workflow"))
    assert refused.failed.failure.message == stale_activations.REFUSED_EVENTS
    assert instance.seen == passed
