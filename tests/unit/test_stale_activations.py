"""worker/stale_activations: which activations run history events on a clock no new workflow task
can have (the integration test tests/integration/test_stale_activations.py shows the
whole sequence on the dev server)."""

from __future__ import annotations

import pytest
from temporalio.bridge.proto.workflow_activation import WorkflowActivation

from admitflow.worker.stale_activations import Task, stale, task_of, without_a_task

NOW = 1_800_000_100.0  # the server's clock, seconds since the epoch


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
        # a real workflow task after the replay: started after the last replayed one, however long ago
        (activation(NOW - 0.2, "fire_timer"), NOW - 30, False),
        (activation(NOW - 9.9, "signal_workflow"), NOW - 30, False),
        (activation(NOW - 29, "resolve_activity"), NOW - 30, False),
        # the query's fallback: the clock of the workflow task the replay ended with, or an older one
        (activation(NOW - 30, "fire_timer"), NOW - 30, True),
        (activation(NOW - 31, "signal_workflow", "fire_timer"), NOW - 30, True),
        # replaying, a brand-new run, a query alone, eviction, no timestamp: never refused
        (activation(NOW - 30, "fire_timer", replaying=True), NOW - 30, False),
        (activation(NOW - 30, "initialize_workflow"), None, False),
        (activation(NOW - 30, "query_workflow"), NOW - 30, False),
        (activation(None, "remove_from_cache"), NOW - 30, False),
        (activation(None, "fire_timer"), NOW - 30, False),
    ],
    ids=[
        "new-task", "new-task-late-in-its-timeout", "new-task-much-later", "same-clock-as-replayed",
        "older-than-replayed", "replaying", "new-run", "query-only", "eviction", "no-timestamp",
    ],
)
def test_stale(act, last_replayed, expected):
    assert stale(act, last_replayed) is expected


class _Instance:
    """Stands for the SDK's workflow instance: records what reaches workflow code."""

    def __init__(self) -> None:
        self.seen: list[WorkflowActivation] = []

    def activate(self, act):
        self.seen.append(act)
        from temporalio.bridge.proto.workflow_completion import WorkflowActivationCompletion

        return WorkflowActivationCompletion(run_id=act.run_id)


@pytest.mark.parametrize("ahead", [0.0, 30.0, 3600.0, -30.0], ids=["in-step", "30s-ahead", "an-hour-ahead", "30s-behind"])
def test_a_worker_whose_clock_is_off_takes_every_real_task_after_a_replay(monkeypatch, ahead):
    """No rule reads the worker's wall clock: a real workflow task that reaches a worker without the
    run cached (replayed, then run live) passes however far that worker's clock is off, and so does
    one that reaches it after a 30 s replay."""
    import time

    monkeypatch.setattr(time, "time", lambda: NOW + ahead)
    from admitflow.worker import stale_activations

    instance = _Instance()
    guarded = stale_activations._Guarded(instance)
    guarded.activate(activation(NOW - 60, "initialize_workflow", replaying=True))
    guarded.activate(activation(NOW - 0.5, "signal_workflow", replaying=True))
    live = guarded.activate(activation(NOW - 0.2, "signal_workflow"))
    assert not live.HasField("failed")
    assert len(instance.seen) == 3


def test_a_query_fallback_is_still_refused_however_fast_the_replay():
    from admitflow.worker import stale_activations

    instance = _Instance()
    guarded = stale_activations._Guarded(instance)
    guarded.activate(activation(NOW - 40, "initialize_workflow", replaying=True))
    guarded.activate(activation(NOW - 30, "signal_workflow", replaying=True))
    refused = guarded.activate(activation(NOW - 30, "fire_timer"))
    assert refused.failed.failure.message == stale_activations.REFUSED
    assert len(instance.seen) == 2


def _public_methods(cls: type) -> set[str]:
    """What an SDK base class gives its subclasses to implement or inherit: every public callable
    defined on it or its bases (the dunders and `object`'s aside)."""
    return {
        name
        for klass in cls.__mro__ if klass is not object
        for name, value in vars(klass).items()
        if not name.startswith("_") and callable(value)
    }


@pytest.mark.parametrize(
    ("sdk", "wrapper"),
    [("WorkflowInstance", "_Guarded"), ("WorkflowRunner", "StaleActivationGuard")],
    ids=["instance", "runner"],
)
def test_the_guard_forwards_every_method_the_sdk_defines(sdk, wrapper):
    """A method the SDK adds to its WorkflowInstance or WorkflowRunner (a default one included) that
    the guard does not forward would answer for the wrapped runner with the SDK's default: each one
    is defined by the guard itself."""
    import temporalio.worker as sdk_worker

    from admitflow.worker import stale_activations

    guard = getattr(stale_activations, wrapper)
    missing = sorted(n for n in _public_methods(getattr(sdk_worker, sdk)) if n not in vars(guard))
    assert not missing, f"{wrapper} does not forward {missing} of temporalio.worker.{sdk}"


async def test_the_engine_worker_guards_its_sandboxed_and_unsandboxed_runners(monkeypatch):
    """A workflow declared `sandboxed=False` runs through the worker's unsandboxed runner: both are
    the guard, on both of the engine's task queues."""
    from temporalio.client import Client

    from admitflow.codec import DATA_CONVERTER
    from admitflow.worker import main
    from admitflow.worker.stale_activations import StaleActivationGuard

    made: list[dict] = []
    monkeypatch.setattr(main, "Worker", lambda client, **options: made.append(options))
    client = await Client.connect("127.0.0.1:1", data_converter=DATA_CONVERTER, lazy=True)
    main.build_worker(client, "admitflow")
    assert len(made) == 2
    for options in made:
        assert isinstance(options["workflow_runner"], StaleActivationGuard)
        assert options["unsandboxed_workflow_runner"] is options["workflow_runner"]


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


def test_a_cached_run_refuses_the_events_a_query_brings_without_a_workflow_task():
    """What the server-restart fault test recorded for the simulated autoscaler, as activations:
    its task at event 191 was applied in two activations live (an activity's result and signals
    that came with a query the server sent on by itself, then the rest) and in one by any replay,
    so the replay armed one timer fewer (`Timer machine does not handle ActivityTaskScheduled`).
    The query's events are refused; a real task's activations, a local activity's result and an
    activity cancelled with TRY_CANCEL later in that task are not."""
    from admitflow.worker import stale_activations

    instance = _Instance()
    guarded = stale_activations._Guarded(instance)
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


def query(at: float, length: int, query_id: str) -> WorkflowActivation:
    act = at_length(at, length, "query_workflow", replaying=True)  # the SDK marks query-only activations replaying
    act.jobs[0].query_workflow.query_id = query_id
    return act


REPLAYED = [at_length(NOW - 40, 3, "initialize_workflow", replaying=True), at_length(NOW - 30, 9, "signal_workflow", replaying=True)]


@pytest.mark.parametrize(
    ("after_replay", "asked", "refused"),
    [
        # the query task's own history, run live on the clock of a task that made no activation in the replay
        ([at_length(NOW - 20, 22, "fire_timer")], query(NOW - 20, 22, "legacy_query"), True),
        # ... and its local activity's result, later in that activation's "task"
        ([at_length(NOW - 20, 22, "fire_timer"), at_length(NOW - 19.9, 22, "resolve_activity")], query(NOW - 19.9, 22, "legacy_query"), True),
        # a real task came since: the history grew
        ([at_length(NOW - 20, 22, "fire_timer"), at_length(NOW - 5, 26, "signal_workflow")], query(NOW - 5, 26, "legacy_query"), False),
        # replayed, nothing new to run: the query is answered on the replayed state
        ([], query(NOW - 30, 9, "legacy_query"), False),
        # a query that came with a workflow task
        ([at_length(NOW - 20, 22, "fire_timer")], query(NOW - 20, 22, "q-1"), False),
    ],
    ids=[
        "query-task-after-its-own-history", "after-a-local-activity-result", "a-task-since", "nothing-new-since-the-replay",
        "query-with-a-task",
    ],
)
def test_a_query_task_to_a_run_rebuilt_for_it_is_refused(after_replay, asked, refused):
    from admitflow.worker import stale_activations

    instance = _Instance()
    guarded = stale_activations._Guarded(instance)
    for act in [*REPLAYED, *after_replay]:
        assert not guarded.activate(act).HasField("failed")
    answer = guarded.activate(asked)
    assert answer.HasField("failed") is refused
    if refused:
        assert answer.failed.failure.message == stale_activations.REFUSED_REPLAYED


def test_a_new_run_answers_its_query_tasks():
    """A run this worker started (no replay) went live with its first task: nothing to refuse."""
    from admitflow.worker import stale_activations

    guarded = stale_activations._Guarded(_Instance())
    assert not guarded.activate(at_length(NOW - 1, 3, "initialize_workflow")).HasField("failed")
    assert not guarded.activate(query(NOW - 1, 3, "legacy_query")).HasField("failed")
