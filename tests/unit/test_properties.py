"""Property tests (hypothesis) of the pure admission rules, over random sequences of events.

What is proven, for every generated sequence (each checked after every single step):

1. ClusterQueue: enqueues, scheduling passes (with or without preemption, StrictFIFO or
   BestEffortFIFO, two flavors), releases, forgets and re-enqueues never reserve more than a
   flavor's nominal quota of a resource; a key is never both pending and reserved; a key has at
   most one pending entry and one reservation.

2. Cohort trees (flat and hierarchical, random nominal quotas, borrowing and lending limits,
   preemption policies and queueing strategies), driven by random enqueues, passes, releases,
   preempted workloads leaving and quota changes: a pass that starts with a healthy tree leaves it
   healthy (no Cohort or ClusterQueue uses more than it may: `QuotaTree.over_committed`), no
   ClusterQueue holds more than its nominal quota plus its borrowing limit, and lent quota is
   always reclaimable: after a pass, a ClusterQueue with reclaimWithinCohort Any whose first
   pending workload fits its nominal quota, next to what it holds, has it reserved, or a
   preemption is under way.

A workload's lifecycle (admission only with every check Ready, quota held exactly while reserved,
check attempts, the Retry backoff, a way forward, controller failures backing off) is modelled once,
through `admitflow.admission.lifecycle.step`, in tests/unit/test_lifecycle_model.py.

Runs are derandomized and keep no example database, so CI sees the same examples every time.
"""

from __future__ import annotations

from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from admitflow.admission import cluster_queue as cq
from admitflow.admission import scheduler
from admitflow.admission.cluster_queue import QueueEntry
from admitflow.admission.requests import PodSetRequest
from tests.unit.test_cluster_queue import NOW, state_with, view
from tests.unit.test_cohort_scheduling import entry, queue, quota_tree, tree

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


# --- 2. Cohort trees: shared quota is never over-committed, lent quota comes back -----------------

QUEUE_PARAMS = st.fixed_dictionaries({
    "nominal": st.integers(0, 6),
    "borrowing": st.none() | st.integers(0, 4),
    "lending": st.none() | st.integers(0, 6),
    "reclaim": st.sampled_from(["Any", "Any", "LowerPriority", "Never"]),
    "within": st.sampled_from(["Never", "LowerPriority"]),
    "strict": st.booleans(),
})
# Flat: ClusterQueues under the root. Hierarchical: under two Cohorts (with quota and lending
# limits of their own) under the root.
TREE_SHAPES = st.one_of(
    st.tuples(st.just("flat"), st.lists(QUEUE_PARAMS, min_size=2, max_size=4), st.just(())),
    st.tuples(
        st.just("hierarchical"),
        st.lists(QUEUE_PARAMS, min_size=2, max_size=4),
        st.lists(st.tuples(st.integers(0, 4), st.none() | st.integers(0, 4)), min_size=2, max_size=2),
    ),
)
CPUS = ["500m", "1", "2", "3", "4"]


class CohortModel(RuleBasedStateMachine):
    """One cohort tree's ClusterQueues, as the tree's scheduling entity holds them."""

    @initialize(shape=TREE_SHAPES)
    def build(self, shape) -> None:
        kind, params, cohorts = shape
        if kind == "flat":
            self.tree = tree("root")
            self.parents = ["root"] * len(params)
        else:
            self.tree = tree(
                "root",
                **{
                    f"team-{i}": ("root", {"default": {"cpu": (str(n), None, None if ll is None else str(min(ll, n)))}})
                    for i, (n, ll) in enumerate(cohorts)
                },
            )
            self.parents = [f"team-{i % 2}" for i in range(len(params))]
        self.params = list(params)
        self.states = [self.make(i, p) for i, p in enumerate(params)]
        self.workloads = 0
        self.trace: list[str] = [f"tree {kind}: {params} {cohorts}"]

    def make(self, i: int, p: dict, revision: int = 1):
        nominal = p["nominal"]
        lending = None if p["lending"] is None else str(min(p["lending"], nominal))
        borrowing = None if p["borrowing"] is None else str(p["borrowing"])
        spec = {"preemption": {"reclaimWithinCohort": p["reclaim"], "withinClusterQueue": p["within"]}}
        if p["strict"]:
            spec["queueingStrategy"] = "StrictFIFO"
        state = queue(f"cq-{i}", {"default": {"cpu": (str(nominal), borrowing, lending)}}, cohort=self.parents[i], tree=self.tree, **spec)
        state.view = state.view.model_copy(update={"revision": revision})
        return state

    # --- what happens to the tree -------------------------------------------------------------------

    @rule(batch=st.lists(st.tuples(st.integers(0, 3), st.sampled_from(CPUS), st.integers(0, 3)), min_size=1, max_size=4))
    def enqueue(self, batch) -> None:
        for q, cpu, priority in batch:
            state = self.states[q % len(self.states)]
            self.workloads += 1
            name = f"w{self.workloads}"
            cq.enqueue(state, entry(name, state.name, cpu=cpu, priority=priority, age=-self.workloads))
            self.trace.append(f"enqueue {name} ({cpu} cpu, priority {priority}) in {state.name}")
        self.schedule()

    def schedule(self) -> None:
        """The entity runs a pass after every batch of messages."""
        healthy = quota_tree(*self.states).over_committed() == []
        results = scheduler.schedule(self.states, NOW)
        got = {n: [r.key for r in res.reserved] for n, res in results.items() if res.reserved}
        self.trace.append(f"pass: reserved {got}, evicted {[n.key for r in results.values() for n in r.notices if n.kind == 'evicted']}")
        if not healthy:
            return  # a quota change left it over-committed: nothing may be added, nothing is evicted
        after = quota_tree(*self.states)
        assert after.over_committed() == [], self.failure(f"over-committed after a pass: {after.over_committed()}")
        for i, s in enumerate(self.states):
            limit = self.params[i]["borrowing"]
            if limit is not None:
                used = cq.usage(s.reservations.values()).get(("default", "cpu"), 0)
                assert used <= (self.params[i]["nominal"] + limit) * 1000, self.failure(f"{s.name} past nominal + borrowingLimit")
        self.check_reclaim()

    @rule(i=st.integers(0, 50))
    def release(self, i) -> None:
        held = [(s, r) for s in self.states for r in s.reservations.values()]
        if held:
            s, r = held[i % len(held)]
            cq.release(s, r.key, r.uid, r.ticket)
            self.freed(f"release {r.key} from {s.name}")
        self.schedule()

    @rule()
    def preempted_leave(self) -> None:
        """The victims finish their eviction and queue again, as a preempted workload does."""
        gone = [(s, r) for s in self.states for r in list(s.reservations.values()) if r.evicting]
        for s, r in gone:
            cq.release(s, r.key, r.uid, r.ticket)
            again = entry(r.key.split("/")[1], s.name, priority=r.priority)
            cq.enqueue(s, again.model_copy(update={"ticket": r.ticket + 1, "pod_sets": _requests_of(r)}))
        if gone:
            self.freed(f"preempted leave: {[r.key for _, r in gone]}")
        self.schedule()

    @rule(i=st.integers(0, 50))
    def drop_pending(self, i) -> None:
        pending = [(s, e) for s in self.states for e in s.pending]
        if pending:
            s, e = pending[i % len(pending)]
            cq.release(s, e.key, e.uid, e.ticket)
            self.trace.append(f"drop {e.key} from {s.name}")
        self.schedule()

    @rule(q=st.integers(0, 3), p=QUEUE_PARAMS)
    def change_quota(self, q, p) -> None:
        i = q % len(self.states)
        self.params[i] = p
        state = self.states[i]
        cq.set_view(state, self.make(i, p, revision=state.view.revision + 1).view, NOW)
        self.freed(f"quota of {state.name} now {p}")
        self.schedule()

    def freed(self, what: str) -> None:
        # The tree's entity looks again at every queue's set-aside workloads when quota is freed.
        self.trace.append(what)
        for s in self.states:
            cq.requeue_inadmissible(s)

    # --- what must hold -------------------------------------------------------------------------------

    def check_reclaim(self) -> None:
        if any(r.evicting for s in self.states for r in s.reservations.values()):
            return  # a preemption is under way: what it frees goes to the workloads waiting for it
        for i, s in enumerate(self.states):
            if self.params[i]["reclaim"] != "Any" or not s.pending:
                continue
            head = next(iter(s.pending))
            need = sum(ps.count * ps.per_pod.get("cpu", 0) for ps in head.pod_sets)
            held = cq.usage(s.reservations.values()).get(("default", "cpu"), 0)
            assert held + need > self.params[i]["nominal"] * 1000, self.failure(
                f"{s.name}'s head {head.key} fits its nominal quota and waits, nobody preempted: {head.notice}"
            )

    @invariant()
    def keys_are_in_one_place(self) -> None:
        seen: set[str] = set()
        for s in self.states:
            keys = [e.key for e in s.pending] + list(s.reservations)
            assert not seen & set(keys), self.failure("a workload in two places")
            assert len(keys) == len(set(keys)), self.failure(f"a workload twice in {s.name}")
            seen |= set(keys)

    def failure(self, message: str) -> str:
        tail = "\n  ".join(self.trace[-30:])
        return f"{message}\n  last steps:\n  {tail}"


def _requests_of(r) -> list[PodSetRequest]:
    return [PodSetRequest(name=ps.name, count=1, per_pod={"cpu": ps.resource_usage["cpu"]}) for ps in r.assignment.pod_sets]


CohortModel.TestCase.settings = settings(
    max_examples=100, stateful_step_count=25, deadline=None, derandomize=True, database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
TestCohortModel = CohortModel.TestCase
