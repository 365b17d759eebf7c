"""Property tests (hypothesis) of the pure admission rules, over random sequences of events.

What is proven, for every generated sequence (each checked after every single step):

1. ClusterQueue: enqueues, scheduling passes (with or without preemption, StrictFIFO or
   BestEffortFIFO, two flavors), releases, forgets and re-enqueues never reserve more than a
   flavor's nominal quota of a resource; a key is never both pending and reserved; a key has at
   most one pending entry and one reservation.
2. Workload: `Admitted` only goes False->True in a step after which every admission check is
   Ready; an admitted workload holds quota and is active.
3. Workload, with the workflow loop modelled as `workflows/workload.py` runs it (end a due backoff,
   then enqueue when `_needs_enqueue`): an active, unfinished workload without quota is queued or
   in a backoff that ends later (no backoff left due and unended); and no check is ever left in
   Retry or Rejected once a step is over (eviction resets checks to Pending).
4. Workload: a check's retryCount only changes at an eviction (see the rule on
   `test_retry_count_only_moves_at_an_eviction`).

Runs are derandomized and keep no example database, so CI sees the same examples every time.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from types import SimpleNamespace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from admitflow.admission import checks, pods_ready, scheduler
from admitflow.admission import conditions as cond
from admitflow.admission import cluster_queue as cq
from admitflow.admission import workload as wl
from admitflow.admission.cluster_queue import AdmissionCheckInfo, Notice, QueueEntry
from admitflow.admission.requests import PodSetRequest
from admitflow.api.admission_check import AdmissionCheckRetryStrategy
from admitflow.api.configuration import WaitForPodsReady
from tests.unit.test_cluster_queue import NOW, state_with, view
from tests.unit.test_workload_status import T0, reserved_notice, submitted
from workflows.workload import WorkloadWorkflow

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


# --- one workload through random events -------------------------------------------------------------

# "a" has no retry strategy (a Retry without delay requeues at once); "b" retries after 30s, twice,
# then turns Rejected (admitflow's retry strategy).
CHECK_INFO = {
    "a": AdmissionCheckInfo(controller_name="ctl-a", active=True),
    "b": AdmissionCheckInfo(controller_name="ctl-b", active=True, retry_strategy=AdmissionCheckRetryStrategy(
        strategy="Static", base_delay_seconds=30, backoff_limit_count=2)),
}
PODS_READY = WaitForPodsReady(timeout="5m", requeuingStrategy={"backoffLimitCount": 3, "backoffBaseSeconds": 10, "backoffMaxSeconds": 60})

dt = st.integers(0, 400)  # seconds that pass before the event
WL_OPS = {
    "verdict": st.tuples(st.sampled_from("ab"), st.sampled_from(["Ready", "Ready", "Pending", "Retry", "Retry", "Rejected"]),
                         st.none() | st.integers(0, 300), dt),
    "answer": st.tuples(st.sampled_from("ab"), st.sampled_from([*checks.STATES, "error"]), dt),
    "pods_ready": st.tuples(st.booleans(), dt),
    "pods_ready_timeout": st.tuples(),
    "backoff_timer": st.tuples(),
    # The checks the ClusterQueue gives on reservation, or later (its checks changed).
    **{kind: st.tuples(st.sampled_from([("a", "b")] * 3 + [("a",), ()]), dt) for kind in ("reserve", "checks")},
    **{kind: st.tuples(dt) for kind in ("told_pending", "preempt", "deactivate", "activate", "dequeued")},
}
# Kinds are repeated to weigh them: admission takes a reservation and two Ready verdicts.
KINDS = [*["verdict"] * 6, *["reserve"] * 3, *["pods_ready_timeout", "backoff_timer"] * 2, *WL_OPS]
wl_op = st.sampled_from(KINDS).flatmap(lambda kind: WL_OPS[kind].map(lambda args: (kind, *args)))
wl_ops = st.lists(wl_op, min_size=15, max_size=50)


@dataclass
class Step:
    op: tuple
    before: wl.WorkloadState
    after: wl.WorkloadState
    now: datetime


def _notice(state: wl.WorkloadState, kind: str, **more) -> Notice:
    return Notice(key=state.key, uid=state.workload.metadata.uid, ticket=state.ticket, kind=kind, **more)


def wl_step(state: wl.WorkloadState, op: tuple, now: datetime) -> datetime:
    """Carry out one event as the workload workflow's inbox does; returns the time after it."""
    kind, *args = op
    if kind not in ("pods_ready_timeout", "backoff_timer"):
        now += timedelta(seconds=args.pop())  # every other event comes some seconds after the last
    if kind == "verdict":
        name, verdict, after = args
        checks.receive(state, {"name": name, "state": verdict, "requeueAfterSeconds": after}, now, 0.5)
    elif kind == "answer":
        name, verdict = args
        check = next((c for c in state.status.admission_checks or () if c.name == name), None)
        if check is not None:
            error = "controller crashed" if verdict == "error" else ""
            checks.answer(state, name, checks.attempt_of(check), None if error else {"state": verdict}, error, now, 0.5)
    elif kind in ("reserve", "checks"):
        n = reserved_notice(checks=list(args[0]), ticket=state.ticket).model_copy(update={
            "kind": kind, "checks_info": {c: CHECK_INFO[c] for c in args[0]}, "wait_for_pods_ready": PODS_READY})
        if kind == "reserve" and wl.accepts(state, n):
            wl.reserve_quota(state, n, now)
        elif kind == "checks" and wl.accepts_eviction(state, n):
            wl.take_checks(state, n, now)
            checks.reconcile(state, now)
    elif kind == "told_pending":
        n = _notice(state, "pending", reason="WaitingForQuota", message="no room", admission_checks=["a", "b"])
        if wl.accepts(state, n):
            wl.set_pending(state, n.reason, n.message, now)
            wl.take_checks_before_reservation(state, n.admission_checks, now)
    elif kind == "preempt":
        n = _notice(state, "evicted", reason="Preempted", message="preempted", preemption_reason="InClusterQueue")
        if wl.accepts_eviction(state, n):
            wl.evict(state, n.reason, n.message, now, preemption_reason=n.preemption_reason)
    elif kind == "pods_ready":
        pods_ready.report(state, {"ready": args[0]}, now)
    elif kind == "pods_ready_timeout":
        due = pods_ready.deadline(state, state.wait_for_pods_ready)
        if due is not None:  # the timer fires at the deadline
            now = max(now, due[0])
            pods_ready.time_out(state, state.wait_for_pods_ready, due[1], now, 0.5)
    elif kind == "backoff_timer":
        if checks.in_backoff(state):  # the timer fires at requeueAt
            now = max(now, checks.requeue_at(state))
    elif kind == "deactivate":
        if state.workload.spec.active is not False:
            checks.deactivate(state, now)
    elif kind == "activate":
        checks.activate(state, now)
    elif kind == "dequeued":
        n = _notice(state, "dequeued", reason="Misconfigured", message="LocalQueue lq is terminating or missing")
        if wl.accepts(state, n):
            wl.sent_back(state, n.reason, n.message, now)
    return now


def workflow_loop(state: wl.WorkloadState, now: datetime) -> None:
    """The top of the workflow's loop: end a backoff that is due, then enqueue when it must (the
    enqueue activity always finds the queue here)."""
    checks.finish_backoff_if_due(state, now)
    if WorkloadWorkflow._needs_enqueue(SimpleNamespace(state=state)):
        state.ticket += 1
        state.queued, state.sent_back = True, False


def simulate(ops: list[tuple], finish: bool) -> list[Step]:
    state, now, steps = submitted(), T0, []
    before = state.model_copy(deep=True)
    for op in [*ops, ("finish",)] if finish else ops:
        if op[0] == "finish":
            wl.finish(state, True, "done", now)  # the workflow's loop ends here
        else:
            now = wl_step(state, op, now)
            workflow_loop(state, now)
        after = state.model_copy(deep=True)
        steps.append(Step(op, before, after, now))
        before = after
    return steps


def where(i: int, s: Step) -> str:
    return f"step {i} {s.op} at +{int((s.now - T0).total_seconds())}s"


# --- 2. never admitted with a check not Ready --------------------------------------------------------


@PROPERTY
@given(ops=wl_ops, finish=st.booleans())
def test_admission_needs_every_check_ready(ops, finish):
    # Kueue's SyncAdmittedCondition only runs while not admitted: a check turning Pending later does
    # not take the admission back (a Retry evicts, a Rejected deactivates). So the rule is about the
    # False->True transition, plus: admitted means quota held and active.
    for i, s in enumerate(simulate(ops, finish)):
        if wl.is_admitted(s.after) and not wl.is_admitted(s.before):
            states = [(c.name, c.state) for c in s.after.status.admission_checks or ()]
            assert all(state == "Ready" for _, state in states), f"{where(i, s)}: admitted with {states}"
        if wl.is_admitted(s.after):
            assert wl.has_quota(s.after) and s.after.status.admission is not None, f"{where(i, s)}: admitted without quota"
            assert s.after.workload.spec.active is not False, f"{where(i, s)}: admitted while inactive"


# --- 3. no way left without a way forward ------------------------------------------------------------


@PROPERTY
@given(ops=wl_ops, finish=st.booleans())
def test_a_workload_without_quota_always_has_a_way_forward(ops, finish):
    for i, s in enumerate(simulate(ops, finish)):
        a = s.after
        stuck = [(c.name, c.state) for c in a.status.admission_checks or () if c.state in ("Retry", "Rejected")]
        assert not stuck, f"{where(i, s)}: checks left {stuck} (quota held: {wl.has_quota(a)})"
        if wl.is_finished(a) or a.workload.spec.active is False or wl.has_quota(a):
            continue
        at = checks.requeue_at(a)
        assert a.queued or a.waiting_for_queue or (at is not None and at > s.now), (
            f"{where(i, s)}: not queued, requeueAt={at}, Requeued={[c for c in a.status.conditions if c.type == 'Requeued']}"
        )
        assert not (a.queued and checks.in_backoff(a)), f"{where(i, s)}: queued during a backoff"


# --- 4. retryCount ----------------------------------------------------------------------------------


@PROPERTY
@given(ops=wl_ops, finish=st.booleans())
def test_retry_count_only_moves_at_an_eviction(ops, finish):
    # The rule asserted, from `reset_checks_on_eviction` (Kueue's resetChecksOnEviction, reference
    # §1.5, §1.7 point 4): retryCount is counted by the reset at eviction, never by a verdict. So
    # between two steps a check's retryCount (nil read as 0) is unchanged, except in a step that
    # evicts (quota held before, not after; a deactivation with quota is such an eviction):
    #   - a check the eviction names as Retry (`Evicted` reason AdmissionCheck) counts exactly +1;
    #   - any other check keeps its count, or goes back to nil when reset from Ready or Rejected
    #     (Kueue's merge-patch reset; the reference warns that under SSA a co-owner may keep it,
    #     so this nil is admitflow's reading, and "monotonic" holds only between such resets).
    # Deactivation without quota, activation, backoff ends and verdicts never touch it.
    for i, s in enumerate(simulate(ops, finish)):
        old = {c.name: c for c in s.before.status.admission_checks or ()}
        evicted = wl.has_quota(s.before) and not wl.has_quota(s.after)
        eviction = cond.find(s.after.status.conditions, wl.EVICTED)
        for c in s.after.status.admission_checks or ():
            if c.name not in old:
                continue
            r0, r1 = old[c.name].retry_count or 0, c.retry_count or 0
            change = f"{where(i, s)}: retryCount of {c.name} {r0} -> {c.retry_count} ({c.message!r})"
            if not evicted:
                assert r1 == r0, change
            elif eviction.reason == "AdmissionCheck" and f'"{c.name}"' in eviction.message:
                assert r1 == r0 + 1, change
            elif r1 != r0:
                reset_from = c.message.removeprefix("Reset to Pending after eviction. Previously: ")
                assert c.retry_count is None and reset_from in ("Ready", "Rejected"), change
