"""Histories written by earlier releases replay against the current workflow code.

Each set under `histories/` is what the main job's scenario wrote with the code of its time:
`before-checks/` (the examples admitted, one finished), `check-controllers/` (admitted through the
budget controller's activities, two sent back by a late Retry into their backoff, one finished),
`provisioning/` (the same, plus the GPU queue's ProvisioningRequest check: attempts 1 and 2 fail
while the node group is not online, the workload backs off twice, attempt 3 is provisioned; the
child workflows of each attempt and the simulated autoscaler), `pods-ready/` (the same with the
Configuration's WaitForPodsReady timers and the local runner: `start_workload` for every admission,
`set_pods_ready` and `finish` from the runner, `stop_workload` after a Retry and a finish by hand),
`edges/` (`python -m tests.replay.record edges edges`: every run of a ClusterQueue and of the
blockAdmission gate that continued as new every 60 events, a preemption, PodsReady timeouts with
their backoff and the limit's deactivation), `autoscaler-signals/` (the main job once the
simulated backend signals the autoscaler instead of sending it updates: `create_request` with start,
`pods_scheduled`, `delete_request`), `eviction-after-finish/` (a workload told to finish and
preempted in one workflow task, written before the fix: it was evicted after Finished and released
twice; `workflow.patched("no-eviction-after-finish")` replays it as it was). Every set before
`lifecycle-step/` replays through `workflows/workload_legacy.py`; `lifecycle-step/` (the main job)
and `lifecycle-step-edges/` (the edges, continued-as-new runs included) were written by the loop
over `admitflow.admission.lifecycle.step`, marked `workflow.patched("lifecycle-step")`.
`cohorts-before/` (`python -m tests.replay.record NAME cohorts`, recorded before cohorts were
built): two ClusterQueues that name a cohort the code then ignored, one holding a workload and one
waiting, the other's finished; they replay because the handover to a cohort tree is taken only on
a view that carries the tree, marked `workflow.patched("cohorts")`.
`notice-in-task/` and `notice-in-task-edges/` (the main job and the edges again) were written while
the workload sent its notices to the ClusterQueue (`admitted`, `release`) by local activity in the
deciding task, marked `workflow.patched("tell-queue-in-task")`. `forwarding-before/`
(`python -m tests.replay.record NAME forwarding`): two ClusterQueues of one cohort whose homes
forwarded to the tree through their outbox's activity, before `workflow.patched("forward-in-task")`.
`patches-of-2026-11/` (the main job, each workload run under the one marker of that name) was
written while a runner's own `finish` cancelled its `start_workload` and sent `stop_workload`
(train-small's history has them, and the task its activity's completion refused, UnhandledCommand);
`patches-of-2026-12/` once that finish ends the run (`workflow.patched("runner-finish-ends-run")`,
taken under the marker `patches-of-2026-12`). `enqueue-answers/` (the main job) and
`straight-to-tree/` (`forwarding`) were written once `take_messages` answered with a receipt: an
enqueue's first pending reason in its answer, and, in a cohort, the workloads' messages sent
straight to the tree once the home named it. `runner-returns/` (`runner-returns`): a runner's
`start_workload` returning the finish (`workflow.patched("runner-returns-finish")`, taken under the
marker `patches-of-2026-12.2`): a success, a failure, and a value that is no finish, refused.
`patches-of-2026-12.3/` (the main job) under the marker that also takes
`workflow.patched("next-ticket-notices")`: a queue notice about the next ticket that comes before
the run has decided to enqueue it waits for that enqueue's answer. `patches-of-2026-12.4/` (the
main job) under the marker that also takes `workflow.patched("gives-back-unasked-tickets")`: a next
ticket its queue has and the run decided not to enqueue is taken and released. `patches-of-2026-12.5/`
(the main job) under the marker that also takes `workflow.patched("unasked-tickets-to-their-queue")`:
such a ticket goes back to the queue its notice names; its ClusterQueues' notices name them.
`patches-of-2026-12.6/` (the main job) and `reservations-in-answers-tree/` (`forwarding`): a
reservation made in the pass that takes its enqueue told in the enqueue's answer, not by signal
(`workflow.patched("reservations-in-answers")`, in the ClusterQueue and the cohort tree), and the
workloads under the marker that also takes `workflow.patched("evicts-unheard-reservations")`: an
eviction of the ticket a run is queued with counts though the run never heard of its reservation.
`patches-of-2026-12.7/` (the main job) under the marker that also takes
`workflow.patched("admitted-after-a-moment")`: the `admitted` notice goes after a timer, or at once
with the next notice. `view-from-start/` (the main job's ClusterQueues): a queue the catalog started
with its view takes it without fetching it (`workflow.patched("view-from-start")`).
`runner-lost-before/` and `runner-lost/` (`runner-lost`): a runner's `start_workload` silent past
its heartbeat timeout, before and after `workflow.patched("restart-lost-runner")`: before, the
workload recorded `RunnerLost` and was finished by hand; after, it is started again for the same
admission and finishes from that run.
`runner-drained-before/` and `runner-drained/` (`runner-drained`): a runner's worker shut down while
its `start_workload` ran (the SDK's `WorkerShutdown` failure), before and after
`workflow.patched("restart-drained-runner")`, the same two outcomes.
`python -m tests.replay.record NAME` records a new set. A change that breaks them needs
`workflow.patched`; this test says so first.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory

from worker.main import replayer

ROOT = Path(__file__).parent / "histories"
HISTORIES = sorted(ROOT.glob("*/*.json"))


def recorded(path: Path) -> WorkflowHistory:
    """A recorded history; its file is named after its workflow ID (`/` as `__`), `@N` for the N-th
    run of a workflow that continued as new."""
    return WorkflowHistory.from_json(path.stem.split("@")[0].replace("__", "/"), path.read_text())


@pytest.mark.parametrize("path", HISTORIES, ids=[f"{p.parent.name}/{p.stem}" for p in HISTORIES])
async def test_a_recorded_history_replays(path: Path):
    result = await replayer().replay_workflow(recorded(path))
    assert result.replay_failure is None, result.replay_failure


async def test_a_replay_slower_than_the_deadlock_bound_still_replays(monkeypatch):
    """A replay checks the commands, not the speed: one activation that takes 3 s (as a full garbage
    collection in a loaded test process once did, in CI) does not fail it."""
    from admitflow.admission import conditions

    find, slowed = conditions.find, []

    def slow_once(*args, **kwargs):
        if not slowed:
            slowed.append(True)
            time.sleep(3)
        return find(*args, **kwargs)

    monkeypatch.setattr(conditions, "find", slow_once)
    path = next(p for p in HISTORIES if p.stem.startswith("workload__"))
    result = await replayer().replay_workflow(recorded(path), raise_on_replay_failure=False)
    assert slowed, "the replay never reached the slowed function"
    assert result.replay_failure is None, result.replay_failure
