"""The engine worker's pollers: the SDK's default (5 simple pollers) on both of its task queues
unless a number is given, which sets the simple poller behaviour (docs/operations.md, "Worker
settings"). The SDK's autoscaling pollers, the default for a day, let a burst of new workloads
crowd out the running ones (docs/performance-log.md)."""

from __future__ import annotations

from temporalio.worker import PollerBehaviorSimpleMaximum

from admitflow.worker.main import build_worker, sdk_options


def behaviours(worker) -> list[tuple[object, object]]:
    return [(w.config()["workflow_task_poller_behavior"], w.config()["activity_task_poller_behavior"]) for w in worker.workers]


async def test_the_engine_polls_as_the_sdk_does_unless_given_a_number(engine) -> None:
    default = behaviours(build_worker(engine.client, "pollers-default"))
    assert default == [(PollerBehaviorSimpleMaximum(maximum=5), PollerBehaviorSimpleMaximum(maximum=5))] * 2, \
        "the engine's task queue and its entities'"
    given = behaviours(build_worker(engine.client, "pollers-given", **sdk_options(workflow_task_pollers=3)))
    assert given == [(PollerBehaviorSimpleMaximum(maximum=3), PollerBehaviorSimpleMaximum(maximum=5))] * 2
