"""The engine worker's pollers: autoscaled on both of its task queues unless a number is given,
which sets the simple poller behaviour (docs/operations.md, "Worker settings")."""

from __future__ import annotations

from temporalio.worker import PollerBehaviorAutoscaling, PollerBehaviorSimpleMaximum

from admitflow.worker.main import build_worker, sdk_options


def behaviours(worker) -> list[tuple[object, object]]:
    return [(w.config()["workflow_task_poller_behavior"], w.config()["activity_task_poller_behavior"]) for w in worker.workers]


async def test_the_engine_polls_autoscaled_unless_given_a_number(engine) -> None:
    autoscaled = behaviours(build_worker(engine.client, "pollers-default"))
    assert len(autoscaled) == 2, "the engine's task queue and its entities'"
    assert all(isinstance(b, PollerBehaviorAutoscaling) for pair in autoscaled for b in pair)
    given = behaviours(build_worker(engine.client, "pollers-given", **sdk_options(workflow_task_pollers=3)))
    assert all(wf == PollerBehaviorSimpleMaximum(maximum=3) and isinstance(act, PollerBehaviorAutoscaling) for wf, act in given)
