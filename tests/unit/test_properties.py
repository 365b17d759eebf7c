"""Property tests (hypothesis) of the pure admission rules, over random sequences of events.

What is proven, for every generated sequence (each checked after every single step):

1. ClusterQueue: enqueues, scheduling passes (with or without preemption, StrictFIFO or
   BestEffortFIFO, two flavors), releases, forgets and re-enqueues never reserve more than a
   flavor's nominal quota of a resource; a key is never both pending and reserved; a key has at
   most one pending entry and one reservation.

A workload's lifecycle (admission only with every check Ready, quota held exactly while reserved,
check attempts, the Retry backoff, a way forward, controller failures backing off) is modelled once,
through `admitflow.admission.lifecycle.step`, in tests/unit/test_lifecycle_model.py.

Runs are derandomized and keep no example database, so CI sees the same examples every time.
"""

from __future__ import annotations

from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from admitflow.admission import cluster_queue as cq
from admitflow.admission import scheduler
from admitflow.admission.cluster_queue import QueueEntry
from admitflow.admission.requests import PodSetRequest
from tests.unit.test_cluster_queue import NOW, state_with, view

PROPERTY = settings(
    max_examples=250, deadline=None, derandomize=True, database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# --- 1. ClusterQueue: quota is never over-committed ------------------------------------------------

QUOTAS = {"default": {"cpu": "4"}, "spot": {"cpu": "3"}}
NAMES = [f"w{i}" for i in range(8)]

CQ_OPS = {
    "enqueue": st.tuples(st.sampled_from(NAMES), st.sampled_from([500, 1000, 1500, 2000, 3000, 4000, 8000]),
                         st.integers(1, 2), st.integers(0, 3)),
    "schedule": st.tuples(),
    **{kind: st.tuples(st.integers(0, 7)) for kind in ("release", "release_pending", "forget", "admit")},
}
cq_op = st.sampled_from([*["enqueue"] * 4, *["schedule"] * 3, *CQ_OPS]).flatmap(
    lambda kind: CQ_OPS[kind].map(lambda args: (kind, *args)))


def cq_step(state: cq.ClusterQueueState, op: tuple, tickets: dict[str, int]) -> None:
    kind, *args = op
    reserved, pending = sorted(state.reservations), [e.key for e in state.pending]
    if kind == "enqueue":
        # A new workload, or (for a key the queue knows) its next ticket: a re-enqueue after an
        # eviction whose release has not arrived, which replaces what the queue held.
        name, cpu, count, priority = args
        tickets[name] = tickets.get(name, 0) + 1
        cq.enqueue(state, QueueEntry(
            key=f"default/{name}", uid=f"uid-{name}", ticket=tickets[name], local_queue="lq", priority=priority,
            timestamp=NOW - timedelta(seconds=len(tickets)), pod_sets=[PodSetRequest(name="main", count=count, per_pod={"cpu": cpu})],
        ))
    elif kind == "schedule":
        scheduler.schedule([state], NOW)
    elif kind == "release" and reserved:
        r = state.reservations[reserved[args[0] % len(reserved)]]
        cq.release(state, r.key, r.uid, r.ticket)
    elif kind == "release_pending" and pending:
        e = state.pending.get(pending[args[0] % len(pending)])
        cq.release(state, e.key, e.uid, e.ticket)
    elif kind == "forget" and reserved + pending:
        key = (reserved + pending)[args[0] % len(reserved + pending)]
        cq.forget(state, key, f"uid-{key.split('/')[1]}")
    elif kind == "admit" and reserved:
        r = state.reservations[reserved[args[0] % len(reserved)]]
        cq.mark_admitted(state, r.key, r.uid, r.ticket)


@PROPERTY
@given(
    strategy=st.sampled_from([None, "StrictFIFO"]),
    policy=st.sampled_from(["Never", "LowerPriority", "LowerOrNewerEqualPriority"]),
    ops=st.lists(cq_op, min_size=10, max_size=50),
)
def test_cluster_queue_never_over_commits_quota(strategy, policy, ops):
    state = state_with(view(flavors=tuple(QUOTAS), quotas=QUOTAS, strategy=strategy, preemption={"withinClusterQueue": policy}))
    nominal = {(fq.name, res): v for g in cq.quota_groups(state.view.spec) for fq in g.flavors for res, v in fq.nominal.items()}
    tickets: dict[str, int] = {}
    for i, op in enumerate(ops):
        cq_step(state, op, tickets)
        used = cq.usage(state.reservations.values())
        for fr, amount in used.items():
            assert amount <= nominal.get(fr, 0), f"step {i} {op}: {fr} uses {amount} > nominal {nominal.get(fr, 0)}"
        pending = [e.key for e in state.pending]
        assert len(pending) == len(set(pending)), f"step {i} {op}: a key pending twice"
        assert not set(pending) & set(state.reservations), f"step {i} {op}: pending and reserved"
        assert all(k == r.key for k, r in state.reservations.items()), f"step {i} {op}: reservation under another key"
