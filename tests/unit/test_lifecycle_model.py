"""A model of one workload's whole lifecycle: hypothesis drives `lifecycle.step` through random
interleavings of everything that can happen to it, as `workflows/lifecycle.py` runs it, and checks
invariants after every step and every workflow task.

The machine plays every other party, minimally:

- the workflow: each rule is one workflow task (one message, or several batched), stepped event by
  event and then `Settle()`d; the commands are carried out as `WorkloadWorkflow._settle` and
  `_execute` carry them out (follow-up events stepped next, then another Settle, at most
  `MAX_ROUNDS` rounds). What is under way is kept here: the enqueue in flight, the controllers being
  asked (check -> attempt), the runner's admission, ProvisioningRequest children. A continue-as-new
  (`Started`) drops all of it, round-trips the state through the payload converter, and only happens
  with no runner running, as in the workflow. The timer fires as `TimerFired(at=<its deadline>)`:
  first when a message comes later than it, or in the same workflow task after the messages. A task
  may time out after its enqueue's local activity ran: its first attempt (the messages, stepped and
  settled on the side, nothing carried out) enqueued ticket T, the queue holds T, and the retry that
  counts gets the same messages and a deactivation after them, so it does not enqueue: the queue
  holds an orphan T the state does not name (T may be the run's very first ticket: then the run
  knows no ClusterQueue but the one the queue's notices name). The queue's rules act on
  the orphan as on any ticket; the next enqueue of T adopts it (the queue keeps what it has, and the
  answer finds its queue), a newer one replaces it. No continue-as-new while such an enqueue is under
  way (in the workflow an enqueue is answered in its own task);
- its ClusterQueue: holds the tickets it was given (queued, then reserved), reserves, says pending,
  preempts (reason Preempted, InClusterQueue), dequeues, changes the checks, sends stale notices
  (another ticket or run, a ticket just released), notices again about an orphan it holds, and junk,
  and records what the workload tells it (`release`, `admitted`); it forgets a run's orphans when
  that run's workflow ends. An enqueue of a ticket the queue dequeued answers that its LocalQueue is
  missing (the reason it was dequeued). In half the runs it is eager, as a queue with room to spare:
  the enqueue is answered in the same task and every queued ticket is reserved in the next one (so
  runs go through many reservations); in the others the rules say when;
- the catalog (the enqueue resolves to ClusterQueue `cq`, or to a missing LocalQueue or ClusterQueue,
  and later says the queue appeared), two check controllers ("a": no retry strategy, a pendingTimeout
  of 15 minutes; "b": Static 30 s, backoffLimitCount 2) answering what they were asked (Ready, Pending, Retry with or without
  requeueAfterSeconds, Rejected, garbage, a non-retryable error, a verdict about another check or
  attempt), answers and runner ends the workflow would drop (another attempt or admission), anyone
  sending verdicts (valid, stale, premature, out of range, of the wrong type, without a name,
  duplicated, both checks' Retry in one task or two, late), pods-ready reports (valid and junk), the
  runner stopping with and without an error or returning its finish (valid and junk), deactivate/activate, finish/delete (valid and junk),
  admission gate removals (one gate, all, a gate it does not have, junk) for workloads submitted with
  none, one or two gates (`kueue.x-k8s.io/admission-gated-by`); with WaitForPodsReady on, its
  ClusterQueue also gives it a retention policy (a workload the engine deactivates is deleted 20
  minutes later). Time advances 0..400 s per message.

A finished or deleted workload's workflow ends; the machine then submits a new one at once (same
name, new uid), so the rest of the run is not wasted. Hypothesis picks among the rules that apply with equal
odds (and turns some off per run): what moves a workload on has several rules, the junk shares one.

Invariants (each failure says which, with the last steps of the run):

1. `step` never raises, returns a list of commands, leaves the state it was given as it was, and
   never records `EventNotApplied` for the events generated here (each must be applied, or refused
   by its own rule).
2. `Admitted` goes False->True only in a step after which every check is Ready; an admitted workload
   holds quota and is active.
3. The ClusterQueue holds the workload's quota or place exactly while `state.claim.holder` names it (queued
   there while `queued`, reserved there while it holds quota); `holder` is set only while the
   workload holds quota (not finished nor deleted), is queued, or is being enqueued; the queue is
   never told `release` twice for a ticket, nor for one it never held (a ticket it dequeued itself
   may cross the release), nor `admitted` for a ticket it does not hold reserved, nor twice; no
   second enqueue while one is under way or the queue holds a ticket; a finished or deleted workload
   holds nothing. What is under way agrees with the state (enqueue, controllers, runner). An orphan
   (a ticket an attempt that timed out enqueued) is exempt from all this until the workload hears
   of it: after each workflow task in which a queue notice about an orphan was stepped, the workload
   has given it back (told `release`, once, like any ticket) or is enqueuing it itself (adopted: from
   then on it is the workload's like any other); the queue keeps what it held of an adopted ticket.
4. A (check, attempt) asked of a controller belongs to one reservation only (asking again in the
   same one, after a failure or a continue-as-new, is allowed); per check the attempts asked never
   decrease; `state.asks.attempts[c]` never decreases; an answer about an attempt not asked in this
   reservation changes neither quota nor activation; a check's retryCount changes only at an
   eviction by its own Retry, by exactly one (Kueue's resetChecksOnEviction; since `step` other
   checks keep theirs, whatever ended the reservation).
5. After an eviction by the checks' Retry, `requeueState.requeueAt` is >= every applied Retry's
   arrival + requeueAfterSeconds (the eviction's, and the late ones until the next reservation; a
   Retry without a delay of its own takes its check's strategy), the workload is not queued before
   then, and no reservation is accepted before then. A deactivation clears the backoff (Kueue clears
   requeueState), and so the bound.
6. After each workflow task, a workload that is not finished, deleted or inactive has a way forward
   (`lifecycle.way_forward` is not None); a Pending check of a workload holding quota and not
   admitted is being asked, was answered, or waits for its timer to be asked again; no check is
   left Retry or Rejected; the timer that fired for deadline W leaves the next one after W (no busy
   loop).
7. A controller's garbage or error never evicts nor deactivates; a controller that failed n times in
   a row is asked again no sooner than `checks.controller_backoff(n)` seconds later.
8. A workload's admission gates are never added to, only removed; while any remains it holds no
   quota, no place in its queue and no enqueue under way, and (active) says `AdmissionGated`.
9. A run its runner lost (`RunnerStopped` with `restart`: its heartbeats stopped, or the runner shut
   down) is started again for the same admission in that workflow task while the admission still
   wants it (admitted, holding quota, not finished nor deleted), up to `lifecycle.RUNNER_RESTARTS`
   times; no admission is started more often, and a run that failed otherwise is not started again.

CI runs the default number of examples (derandomized, no example database: every run sees the same
ones), without shrinking a failure (that took over 5 minutes once): the failure shows the last 40
steps and the whole run; `ADMITFLOW_MODEL_SHRINK=1` reruns it shrunk (the same example comes first,
derandomized). A long run, with what it went through printed at the end (`-s`):

    ADMITFLOW_MODEL_EXAMPLES=8000 .venv/bin/pytest tests/unit/test_lifecycle_model.py -q -s   # about 8 minutes on 2 cores
"""

from __future__ import annotations

import os
import time
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from admitflow.admission import admission_gates as ag
from admitflow.admission import checks
from admitflow.admission import conditions as cond
from admitflow.admission import lifecycle as lc
from admitflow.admission import intake
from admitflow.admission import workload as wl
from admitflow.admission.catalog import QueueResolution
from admitflow.admission.cluster_queue import AdmissionCheckInfo, Notice
from admitflow.admission.workload import WorkloadState
from admitflow.api.admission_check import AdmissionCheckRetryStrategy, PendingTimeout
from admitflow.api.configuration import WaitForPodsReady, WorkloadRetentionPolicy
from admitflow.codec import DATA_CONVERTER
from tests.unit.test_workload_status import T0, reserved_notice, submitted

EXAMPLES = int(os.environ.get("ADMITFLOW_MODEL_EXAMPLES", "300"))
STEPS = 40

# "a" has no retry strategy (a Retry without delay requeues at once) and may stay Pending 15 minutes
# (its pendingTimeout: then it is treated as Retry); "b" retries after 30 s, twice, then turns
# Rejected (admitflow's retry strategy). Both are answered by controllers.
CHECK_INFO = {
    "a": AdmissionCheckInfo(controller_name="ctl-a", active=True, pending_timeout=PendingTimeout(duration="15m")),
    "b": AdmissionCheckInfo(controller_name="ctl-b", active=True, retry_strategy=AdmissionCheckRetryStrategy(
        strategy="Static", base_delay_seconds=30, backoff_limit_count=2)),
}
PODS_READY = WaitForPodsReady(timeout="5m", requeuingStrategy={"backoffLimitCount": 3, "backoffBaseSeconds": 10, "backoffMaxSeconds": 60})
RUNNER = "runner-tq"
# With WaitForPodsReady on, a workload the engine deactivates is deleted 20 minutes later.
RETENTION = WorkloadRetentionPolicy(after_deactivated_by_kueue="20m")

# --- what the other parties send ---------------------------------------------------------------------

class Arguments(tuple):
    """A message sent with no argument or several, where one payload is expected."""


def sent(payload: object) -> tuple:
    """The arguments a message arrives with: `payload` alone, or the Arguments it stands for."""
    return tuple(payload) if isinstance(payload, Arguments) else (payload,)


dt = st.integers(0, 400)  # seconds before the message
CHECK_SETS = st.sampled_from([("a", "b"), ("a", "b"), ("a", "b"), ("a",), ("b",), ()])
AFTER = st.sampled_from([None, None, None, 0, 10, 45, 120, 10**12, -1, 2**31 - 1, 2**31, "10", "ten", 1.5, 30.0])
ATTEMPT = st.sampled_from(["none", "none", "current", "current", "asked", "stale", "future", 0, 2**31, "x"])
EXTRA = st.sampled_from([None, None, "message", "pods", "bad-pods"])
JUNK_VERDICTS = [
    42, None, "Ready", [], {"state": "Ready"}, {"name": "zz", "state": "Ready"}, {"name": "a", "state": "Bogus"},
    {"name": 5, "state": "Ready"}, {"name": "a"}, {"name": "b", "state": None}, Arguments((1, 2)), Arguments(()),
]
ANSWERS = ["Ready", "Ready", "Pending", "Retry", "Retry60", "Rejected", "bare-Ready",
           "Bogus", "42", "None", "error", "wrong-name", "wrong-attempt"]
PODS = [{"ready": True}, {"ready": True}, {"ready": False}, {"ready": True, "reason": "Started"},
        {"ready": False, "reason": "WaitForRecovery"}, 42, None, {"ready": "maybe"}, {"ready": True, "reason": "WaitForStart"},
        Arguments((1, 2))]
# "finish-by-runner": its runner reports the end of the admission it runs (and its `start_workload`
# then returns by itself: nothing stops it); "finish-other-admission": a runner of another admission.
# What a runner's `start_workload` may return: its finish (one that names another admission is about
# its own all the same), or values that are no finish.
RETURNED = {
    "succeeded": {"succeeded": True, "message": "done"}, "failed": {"succeeded": False, "message": "oom"},
    "names-another": {"succeeded": True, "admission": 99}, "junk-type": {"succeeded": "maybe"}, "junk": 42,
}
ENDS = ["finish", "finish-failed", "finish-none", "finish-by-runner", "finish-other-admission", "delete", "delete-junk"]
JUNK_ENDS = ["finish-junk", "finish-junk-type", "finish-args", "finish-list"]
# Mostly junk: a workload that ends has its workflow end, and most runs should get past their first
# reservation first.
END_KINDS = st.sampled_from([*ENDS, *JUNK_ENDS * 4])
GATES = ("example.com/a", "example.com/b")
PRIORITIES = {
    "up": {"priority": 1000}, "down": {"priority": -5}, "zero": {"priority": 0}, "junk-none": None,
    "junk-str": {"priority": "high"}, "junk-range": {"priority": 2**31}, "junk-args": Arguments((1, 2)),
}
UNGATES = ["first", "second", "all", "both", "absent", "junk-none", "junk-str", "junk-both", "junk-args"]
# "orphan": the queue says again where it holds an orphan (the next ticket, which an attempt that
# timed out enqueued): only when it holds one, and as it holds it (pending, or reserved or checks).
STALE = st.tuples(st.sampled_from(["reserved", "pending", "evicted", "dequeued", "checks"]),
                  st.sampled_from(["old-ticket", "orphan", "other-uid", "just-released"]))
JUNK_NOTICES = [42, None, {}, {"kind": "reserved"}, {"key": "default/job", "kind": "bogus"}, Arguments((1, 2))]

verdict_spec = st.one_of(
    st.tuples(st.just("verdict"), st.sampled_from("ab"), st.sampled_from(["Ready", "Ready", "Pending", "Retry", "Retry", "Rejected"]),
              AFTER, ATTEMPT, EXTRA),
    st.tuples(st.just("verdict-junk"), st.sampled_from(range(len(JUNK_VERDICTS)))),
)
answer_spec = st.tuples(st.just("answer"), st.integers(0, 1), st.sampled_from(ANSWERS))
queue_spec = st.one_of(
    st.tuples(st.just("reserve"), CHECK_SETS, st.booleans(), st.booleans(), st.booleans()),
    st.tuples(st.just("pending"), CHECK_SETS),
    st.tuples(st.just("preempt")),
    st.tuples(st.just("dequeue")),
    st.tuples(st.just("checks"), CHECK_SETS, st.booleans()),
)
noise_spec = st.one_of(
    st.tuples(st.just("stale"), STALE),
    st.tuples(st.just("notice-junk"), st.sampled_from(range(len(JUNK_NOTICES)))),
    st.tuples(st.just("pods"), st.sampled_from(range(len(PODS)))),
    st.tuples(st.sampled_from(["activate", "appear"])),
    st.tuples(st.just("wrong-attempt"), st.sampled_from("ab"), st.sampled_from([-1, 1, 2]), st.sampled_from(ANSWERS)),
    # What the workflow never delivers (it drops what it stopped or dropped), but step must take.
    st.tuples(st.sampled_from(["stale-runner", "stale-enqueue"]), st.sampled_from([-1, 1])),
)
# How a runner's `start_workload` ends, by the model's name for it: the workflow's reading of the
# activity's outcome (workflows/lifecycle.py `_runner_ending`), and its error.
RUNNER_ENDINGS = {
    "": ("returned", ""), "heartbeat timeout": ("lost", "activity Heartbeat timeout"),
    "worker shutdown": ("drained", "Worker is shutting down"), "the runner failed": ("failed", "the runner failed"),
}
other_spec = st.one_of(
    st.tuples(st.just("runner"), st.sampled_from(["", "heartbeat timeout", "worker shutdown", "the runner failed"])),
    st.tuples(st.sampled_from(["deactivate", "activate"])),
    st.tuples(st.just("enqueue"), st.sampled_from(["found", "found", "no-local-queue", "no-cluster-queue"])),
)
ungate_spec = st.tuples(st.just("ungate"), st.sampled_from(UNGATES))
# What makes a workload enqueue (with nothing: a plain Settle of one that wants its queue).
ENQUEUES = st.tuples(st.sampled_from(["preempt", "dequeue", "activate"]))
batch_item = st.one_of(verdict_spec, verdict_spec, answer_spec, answer_spec, queue_spec, queue_spec, noise_spec, other_spec,
                       st.tuples(st.just("end"), END_KINDS), ungate_spec)


def answer_of(kind: str, check: str, attempt: int) -> tuple[Any, str]:
    """A controller's `admission_check` result (or non-retryable error) of the given kind."""
    return {
        "Ready": ({"state": "Ready"}, ""),
        "bare-Ready": ("Ready", ""),
        "Pending": ({"state": "Pending", "message": "working on it"}, ""),
        "Retry": ({"state": "Retry"}, ""),
        "Retry60": ({"state": "Retry", "requeueAfterSeconds": 60}, ""),
        "Rejected": ({"state": "Rejected", "message": "no"}, ""),
        "Bogus": ({"state": "Bogus"}, ""),
        "42": (42, ""),
        "None": (None, ""),
        "error": (None, "the quota office burned down"),
        "wrong-name": ({"name": "b" if check == "a" else "a", "state": "Ready"}, ""),
        "wrong-attempt": ({"state": "Ready", "attempt": attempt + 1}, ""),
    }[kind]


def is_garbage(ev: lc.ControllerAnswered) -> bool:
    """An answer that is not a verdict about what was asked: an error, a state that does not exist,
    another check, another attempt."""
    if ev.error or ev.verdict is None:
        return True
    return ev.verdict.state not in checks.STATES or ev.verdict.name != ev.check or ev.verdict.attempt != ev.attempt


def retry_delay(before: WorkloadState, check: str, payload: Any, random: float) -> int:
    """The requeueAfterSeconds of an applied Retry: its own, else its check's retry strategy's."""
    raw = dict(payload) if isinstance(payload, dict) else {}
    try:
        # As the contract reads it: JSON with pydantic's lax numbers ("10" and 10.0 are 10).
        own = checks.Verdict.model_validate({"name": check, "state": "Retry", **raw, "requeueAfterSeconds": raw.get("requeueAfterSeconds")})
    except ValueError:
        own = None
    if own is not None and own.requeue_after_seconds is not None:
        return own.requeue_after_seconds
    info = before.checks_info.get(check)
    c = next((c for c in before.status.admission_checks or () if c.name == check), None)
    if info is None or info.retry_strategy is None or c is None:
        return 0
    return checks.retry_delay(info.retry_strategy, (c.retry_count or 0) + 1, random)


def changed_verdict(before: WorkloadState, after: WorkloadState):
    """The verdict record a step added (a step adds at most one), or None."""
    if len(after.verdicts) > len(before.verdicts) or (after.verdicts and after.verdicts != before.verdicts):
        return after.verdicts[-1]
    return None


def holds(state: WorkloadState) -> bool:
    return wl.has_quota(state) and not wl.is_finished(state) and not state.deleted


# What the runs went through, printed after a long run: how much was exercised, not just that it passed.
STATS: Counter[str] = Counter()


# --- the machine -----------------------------------------------------------------------------------


class LifecycleModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        STATS["examples"] += 1
        self.k = 0
        self.now = T0
        self.uids = 0
        self.trace: list[str] = []
        # The ClusterQueue: (uid, ticket) -> "pending" | "reserved"; what it let go of.
        self.queue: dict[tuple[str, int], str] = {}
        self.evicting: set[tuple[str, int]] = set()
        self.released: set[tuple[str, int]] = set()
        # Dequeued by the queue itself: a release may cross the `dequeued` notice (the queue ignores it).
        self.dropped: set[tuple[str, int]] = set()
        self.admitted: set[tuple[str, int]] = set()
        self.last_released: tuple[str, int] | None = None
        # Tickets an attempt that timed out enqueued, which the workload has neither given back nor
        # enqueued itself (orphans), and those of them a notice was stepped about in this workflow task.
        self.orphans: set[tuple[str, int]] = set()
        self.heard: set[tuple[str, int]] = set()

    # --- one workload ---------------------------------------------------------------------------

    def submit(self, max_exec: int | None, gates: int = 0) -> None:
        # Its workflow is gone: the queue forgets that run (its orphans; a ticket it held already
        # that was being enqueued, which the workflow answers in its own task, the model later).
        for key in [k for k in self.queue if self.uids and k[0] == self.uid]:
            if key not in self.orphans and key[1] != self.adopting:
                self.fail(3, f"the run ended and its queue still holds ticket {key[1]} as {self.queue[key]}")
            STATS["tickets forgotten with their run"] += 1
            del self.queue[key]
            self.evicting.discard(key)
        self.orphans.clear()
        self.uids += 1
        STATS["workloads"] += 1
        state = submitted()
        state.workload.metadata.uid = f"uid-{self.uids}"
        state.workload.spec.maximum_execution_time_seconds = max_exec
        if gates:
            state.workload.metadata.annotations = {ag.ANNOTATION: ",".join(GATES[:gates])}
            STATS["gated workloads"] += 1
        state.claim.ticket, state.claim.queued, state.cluster_queue = 0, False, None  # as `wl.new_state` leaves it
        self.state = state
        # Under way in this run.
        self.enqueuing: int | None = None
        self.adopting: int | None = None  # the enqueue under way is of an orphan the queue holds
        self.controllers: dict[str, int] = {}
        self.runner: int | None = None
        self.lost: int | None = None  # the admission whose run failed: its runner may still run it
        self.restart_due: int | None = None  # the admission whose run was lost by its heartbeats
        self.starts: Counter[int] = Counter()  # `start_workload`s per admission
        self.children: set[str] = set()
        # What the invariants remember.
        self.asked: dict[tuple[str, int], int] = {}  # (check, attempt) -> the ticket of its reservation
        self.last_asked: dict[str, int] = {}
        self.failed: dict[str, tuple[Any, int]] = {}  # check -> (time of its last failure, failures in a row)
        self.floor = None  # the earliest requeue the applied Retry verdicts allow
        self.trace.append(f"--- workload {state.workload.metadata.uid} (maximumExecutionTimeSeconds={max_exec}, {gates} gates)")
        self.deliver([], 0, started=True)

    @property
    def uid(self) -> str:
        return self.state.workload.metadata.uid

    def held(self) -> dict[int, str]:
        return {t: where for (u, t), where in self.queue.items() if u == self.uid}

    def ticket_where(self, where: str) -> int | None:
        return next((t for t, w in sorted(self.held().items()) if w == where), None)

    def fail(self, invariant: int, message: str) -> None:
        tail = "\n  ".join(self.trace[-40:])
        raise AssertionError(f"invariant {invariant}: {message}\n  at +{self.seconds()}s; last steps:\n  {tail}")

    def seconds(self) -> int:
        return int((self.now - T0).total_seconds())

    # --- the workflow -----------------------------------------------------------------------------

    def deliver(self, specs: list[tuple], seconds: int, timer_in_batch: bool = False, started: bool = False) -> None:
        """One workflow task: time passes (a timer due meanwhile fires first, or with the messages),
        the messages are stepped in order, then Settle."""
        target = self.now + timedelta(seconds=seconds)
        if not timer_in_batch and not started:  # a new run steps Started first, then sets its timer
            self.fire_timers(target)
        self.now = max(self.now, target)
        events: list[Any] = [lc.Started()] if started else []
        for spec in specs:
            events += self.resolve(spec)
        wake = lc.next_wake(self.state)  # the timer set after the last task, for its deadline
        if timer_in_batch and wake is not None and wake[0] <= self.now:
            events.append(lc.TimerFired(at=wake[0]))
        self.run(events)
        if self.eager:
            self.eager_queue()

    def eager_queue(self) -> None:
        """A ClusterQueue with room to spare: the enqueue is answered in the same workflow task (as the
        workflow's local activity answers it), and a queued ticket is reserved in the next one."""
        for _ in range(3):
            if self.enqueuing is not None:
                self.trace.append("  (eager queue: queues)")
                self.run(self.resolve(("enqueue", "found")))
            elif self.ticket_where("pending") is not None:
                self.trace.append("  (eager queue: reserves)")
                n = self.k % 4
                self.run(self.resolve(("reserve", ("a", "b") if n < 2 else ("b",) if n == 2 else ("a",), n % 2 == 0, n < 2, False)))
            else:
                return

    def fire_timers(self, until) -> None:
        for _ in range(50):
            wake = lc.next_wake(self.state)
            if wake is None or wake[0] > until:
                return
            self.now = max(self.now, wake[0])
            self.trace.append(f"+{self.seconds()}s timer: {wake[1]}")
            self.run([lc.TimerFired(at=wake[0])])
            if self.eager:
                self.eager_queue()
        self.fail(6, "the timer keeps firing")

    def run(self, events: list[Any]) -> None:
        """WorkloadWorkflow._settle: the workflow's own Driver, its steps checked (`step`)."""
        STATS["messages"] += len(events)
        self.heard = set()
        driver = lc.Driver(self.state, events, self.now, self.draw, stepper=self.step)
        while (command := driver.next()) is not None:
            driver.answer(self.execute(command))
        self.settled(timer=next((e.at for e in events if isinstance(e, lc.TimerFired)), None))
        if wl.is_finished(self.state) or self.state.deleted:
            # Its workflow ends: nothing more reaches this run. The next workload is submitted.
            self.trace.append("    (the workflow ends)")
            self.submit(900 if self.uids % 3 == 2 else None, gates=self.uids % 4 % 3)

    def draw(self) -> float:
        self.k += 1
        return (self.k * 0.6180339887498949) % 1.0

    def step(self, before: WorkloadState, event: Any, now: datetime, random: float) -> tuple[WorkloadState, list[Any]]:
        assert before is self.state and now == self.now, "the driver steps the model's state, at its time"
        self.trace.append(f"+{self.seconds()}s {event!r}"[:400])
        given = before.model_dump_json()
        try:
            after, commands = lc.step(before, event, self.now, random)
        except BaseException as err:  # noqa: BLE001
            self.fail(1, f"step raised {err!r} on {event!r}")
        if before.model_dump_json() != given:
            self.fail(1, f"step changed the state it was given, on {event!r}")
        if not isinstance(after, WorkloadState) or not isinstance(commands, list):
            self.fail(1, f"step returned {type(after).__name__}, {type(commands).__name__}")
        if after.events and after.events[-1].reason == lc.NOT_APPLIED:
            self.fail(1, f"{event!r} was not applied: {after.events[-1].message}")
        self.state = after
        if isinstance(event, lc.QueueNoticed) and self.orphans:
            n = event.notice
            if (n.uid, n.ticket) in self.orphans:
                self.heard.add((n.uid, n.ticket))
                STATS["orphans heard of"] += 1
        self.after_step(event, before, after, random)
        if commands:
            self.trace.append("    -> " + ", ".join(_short(c) for c in commands))
        return after, commands

    def after_step(self, event: Any, before: WorkloadState, after: WorkloadState, random: float) -> None:
        # 2. admission
        if wl.is_admitted(after) and not wl.is_admitted(before):
            states = [(c.name, c.state) for c in after.status.admission_checks or ()]
            if any(s != "Ready" for _, s in states):
                self.fail(2, f"admitted with checks {states}")
            STATS["admissions"] += 1
        if wl.is_admitted(after):
            if not wl.has_quota(after) or after.status.admission is None:
                self.fail(2, "admitted without quota")
            if after.workload.spec.active is False:
                self.fail(2, "admitted while inactive")
        if isinstance(event, lc.TimerFired) and any(e.reason == lc.PENDING_TIMEOUT_REASON for e in after.events[len(before.events):]):
            STATS["check pending timeouts"] += 1
        if after.deleted and not before.deleted and isinstance(event, lc.TimerFired):
            STATS["deleted by retention"] += 1
        # 8. gates are only ever removed; a gated workload never takes quota
        if any(g not in ag.gates(before.workload) for g in ag.gates(after.workload)):
            self.fail(8, f"admission gates went from {ag.gates(before.workload)} to {ag.gates(after.workload)}")
        if ag.holds_back(after) and wl.has_quota(after) and not wl.has_quota(before):
            self.fail(8, f"quota reserved while gated by {ag.gates(after.workload)}")
        if ag.gates(after.workload) != ag.gates(before.workload):
            STATS["gates removed"] += 1
            if not ag.gates(after.workload):
                STATS["workloads ungated"] += 1
        # 4. attempts never go back
        for c, n in before.asks.attempts.items():
            if after.asks.attempts.get(c, 1) < n:
                self.fail(4, f"attempts[{c}] went back from {n} to {after.asks.attempts.get(c, 1)}")
        # 4. retryCount moves only at an eviction by the check's own Retry, by one (Kueue's
        # resetChecksOnEviction; other checks keep theirs, as since lifecycle.step)
        old = {c.name: c.retry_count or 0 for c in before.status.admission_checks or ()}
        evicted = cond.find(after.status.conditions, wl.EVICTED)
        by_retry = wl.has_quota(before) and not wl.has_quota(after) and evicted is not None and evicted.reason == "AdmissionCheck"
        for c in after.status.admission_checks or ():
            if c.name in old:
                expected = old[c.name] + (1 if by_retry and f'"{c.name}"' in evicted.message else 0)
                if (c.retry_count or 0) != expected:
                    self.fail(4, f"retryCount of {c.name} went from {old[c.name]} to {c.retry_count} ({c.message!r})")
        # 5. the applied Retry verdicts, and reservations against them
        record = changed_verdict(before, after)
        if isinstance(event, (lc.VerdictReceived, lc.ControllerAnswered)) and record is not None \
                and record.state == "Retry" and record.outcome == "applied":
            payload = event.verdict.to_wire() if event.verdict is not None else None
            due = self.now + timedelta(seconds=retry_delay(before, record.check, payload, random))
            self.floor = due if self.floor is None else max(self.floor, due)
        if wl.has_quota(after) and not wl.has_quota(before):
            if self.floor is not None and self.now < self.floor:
                self.fail(5, f"reserved before the Retry's requeue time {self.floor.isoformat()}")
            self.floor = None
        if after.workload.spec.active is False or wl.is_finished(after) or after.deleted:
            self.floor = None  # the backoff no longer applies
        if wl.has_quota(after) and not wl.has_quota(before):
            STATS["reservations"] += 1
        if wl.has_quota(before) and not wl.has_quota(after):
            evicted = next((c for c in after.status.conditions if c.type == wl.EVICTED), None)
            STATS[f"evicted {evicted.reason if evicted else '?'}"] += 1
        if record is not None and record.outcome == "applied" and record.detail.startswith("applied to the backoff"):
            STATS["late Retry applied to a backoff"] += 1
        if after.asks.controller_failures != before.asks.controller_failures and after.asks.controller_failures:
            STATS["controller failures"] += 1
        # 4, 7. answers that must change neither quota nor activation
        if isinstance(event, lc.ControllerAnswered):
            garbage = is_garbage(event)
            not_asked = event.attempt != before.asks.asked_now.get(event.check)
            if (garbage or not_asked) and (
                wl.has_quota(before) != wl.has_quota(after) or before.workload.spec.active != after.workload.spec.active
            ):
                why = "garbage or an error" if garbage else f"attempt {event.attempt}, not the one asked ({before.asks.asked_now.get(event.check)})"
                self.fail(7 if garbage else 4, f"a controller's answer ({why}) evicted or deactivated the workload")
        # 7. failures, for the spacing of the next ask
        for c, n in after.asks.controller_failures.items():
            if n > before.asks.controller_failures.get(c, 0):
                self.failed[c] = (self.now, n)
        for c in list(self.failed):
            if c not in after.asks.controller_failures:
                del self.failed[c]

    def execute(self, c: Any) -> list[Any]:
        """WorkloadWorkflow._execute; returns the events answered at once."""
        if isinstance(c, lc.Enqueue):
            ticket = c.request.entry.ticket
            if self.enqueuing is not None:
                self.fail(3, f"a second enqueue (ticket {ticket}) while ticket {self.enqueuing} is being enqueued")
            for key in sorted(k for k in self.orphans if k[0] == self.uid):
                if key[1] > ticket:
                    self.fail(3, f"enqueued ticket {ticket} while its queue holds orphan {key[1]}, a newer one")
                self.orphans.discard(key)
                if key[1] < ticket:  # a newer ticket of the same run replaces it
                    self.queue.pop(key, None)
                    self.evicting.discard(key)
                    STATS["orphans replaced"] += 1
                elif key in self.queue:  # the queue keeps what it has: the workload's own from now on
                    self.adopting = ticket
                    STATS["orphans adopted"] += 1
            held = {t: w for t, w in self.held().items() if t != self.adopting}
            if held:
                self.fail(3, f"enqueued ticket {ticket} while its queue holds {held}")
            self.enqueuing = ticket
            if c.request.entry.priority != (self.state.workload.spec.priority or 0):
                self.fail(3, f"enqueued with priority {c.request.entry.priority}, its spec says {self.state.workload.spec.priority}")
        elif isinstance(c, lc.TellQueue):
            key = (c.request.uid, c.request.ticket)
            if c.cluster_queue != "cq":
                self.fail(3, f"told {c.signal} to ClusterQueue {c.cluster_queue!r}, not to its queue cq")
            if c.request.uid != self.uid:
                self.fail(3, f"told its queue about another run: {c!r}")
            if c.signal == "release":
                if key in self.released:
                    self.fail(3, f"release told twice for ticket {key[1]}")
                if key not in self.queue and key not in self.dropped:
                    self.fail(3, f"release told for ticket {key[1]}, which the queue never held")
                self.queue.pop(key, None)
                self.evicting.discard(key)
                self.released.add(key)
                self.last_released = key
                if key in self.orphans:
                    self.orphans.discard(key)
                    STATS["orphans given back"] += 1
            elif c.signal == "reprioritize":
                if key in self.released:
                    self.fail(3, f"reprioritize told for ticket {key[1]}, released before")
                if c.request.priority != (self.state.workload.spec.priority or 0):
                    self.fail(3, f"reprioritize told priority {c.request.priority}, its spec says {self.state.workload.spec.priority}")
            else:
                if self.queue.get(key) != "reserved":
                    self.fail(3, f"admitted told for ticket {key[1]}, which the queue holds as {self.queue.get(key)}")
                if key in self.admitted:
                    self.fail(3, f"admitted told twice for ticket {key[1]}")
                self.admitted.add(key)
        elif isinstance(c, lc.AskController):
            name, attempt = c.request.admission_check, c.request.attempt
            ticket = self.asked.setdefault((name, attempt), self.state.claim.ticket)
            if ticket != self.state.claim.ticket:
                self.fail(4, f"check {name} attempt {attempt} asked in the reservation of ticket {self.state.claim.ticket}, "
                             f"and before in that of ticket {ticket}")
            if attempt < self.last_asked.get(name, 0):
                self.fail(4, f"check {name} asked about attempt {attempt} after attempt {self.last_asked[name]}")
            self.last_asked[name] = attempt
            if name in self.failed:
                at, n = self.failed[name]
                if self.now < at + timedelta(seconds=checks.controller_backoff(n)):
                    self.fail(7, f"check {name} asked again {int((self.now - at).total_seconds())}s after failure {n} "
                                 f"(backoff {checks.controller_backoff(n)}s)")
            self.controllers[name] = attempt
        elif isinstance(c, lc.StopAsking):
            self.controllers.pop(c.check, None)
        elif isinstance(c, lc.StartRunner):
            if self.runner is not None:
                self.fail(3, f"runner started for admission {c.request.admission} while admission {self.runner} runs")
            self.runner = c.request.admission
            self.starts[c.request.admission] += 1
            if self.starts[c.request.admission] > 1:
                if self.restart_due != c.request.admission:
                    self.fail(9, f"admission {c.request.admission} started again though its run was not lost by its heartbeats")
                if self.starts[c.request.admission] > 1 + lc.RUNNER_RESTARTS:
                    self.fail(9, f"admission {c.request.admission} started {self.starts[c.request.admission]} times")
                STATS["lost runs started again"] += 1
            self.restart_due = None
        elif isinstance(c, lc.StopRunner):
            if c.request.admission not in (self.runner, self.lost):
                self.fail(3, f"runner told to stop admission {c.request.admission}, which neither runs ({self.runner}) "
                             f"nor was lost ({self.lost})")
            self.runner = self.lost = None
        elif isinstance(c, lc.StartProvisioning):
            self.children.add(c.plan.attempt.workflow_id)
        elif isinstance(c, lc.TellProvisioning):
            if c.workflow_id not in self.children:
                return [lc.ProvisioningEnded(workflow_id=c.workflow_id)]
            if c.signal == "delete_provisioning_request":
                self.children.discard(c.workflow_id)
                return [lc.ProvisioningEnded(workflow_id=c.workflow_id)]
        return []

    def settled(self, timer) -> None:
        """After a workflow task (`timer`: the deadline of the timer that fired in it, if one did)."""
        s = self.state
        # 3. an orphan the workload heard of is given back, or enqueued by the workload itself
        for key in sorted(self.heard & self.orphans):
            self.fail(3, f"its queue told it of ticket {key[1]}, which an attempt that timed out enqueued, and it neither "
                         f"gave it back nor enqueued it (the queue holds it as {self.queue.get(key)}; ticket {s.claim.ticket}, "
                         f"holder {s.claim.holder}, enqueuing {s.claim.enqueuing})")
        # 3. quota and place (what the queue holds for an orphan not heard of yet is not the workload's)
        held = {t: w for t, w in self.held().items() if (self.uid, t) not in self.orphans}
        mine = {s.claim.holder} if s.claim.holder is not None else set()
        if self.adopting is not None and self.adopting == s.claim.enqueuing and self.adopting in held:
            # The queue held the ticket being enqueued already: it is the workload's once the
            # enqueue's answer comes (in the workflow, in this task).
            del held[self.adopting]
        if set(held) != mine:
            self.fail(3, f"the queue holds tickets {held}, the workload's holder is {s.claim.holder}")
        if s.claim.holder is not None and not (holds(s) or s.claim.queued or s.claim.enqueuing is not None):
            self.fail(3, f"holder {s.claim.holder} set while neither holding quota, queued nor being enqueued")
        if s.claim.queued and held.get(s.claim.ticket) != "pending":
            self.fail(3, f"queued with ticket {s.claim.ticket}, which the queue holds as {held.get(s.claim.ticket)}")
        if holds(s) and held.get(s.claim.ticket) != "reserved":
            self.fail(3, f"holds quota with ticket {s.claim.ticket}, which the queue holds as {held.get(s.claim.ticket)}")
        if (wl.is_finished(s) or s.deleted) and (held or s.claim.holder is not None):
            self.fail(3, f"finished or deleted, and its queue still holds {held}")
        if self.enqueuing != s.claim.enqueuing:
            self.fail(3, f"enqueue under way {self.enqueuing}, the state says {s.claim.enqueuing}")
        if self.controllers != s.asks.asking:
            self.fail(3, f"controllers asked {self.controllers}, the state says {s.asks.asking}")
        if self.runner != s.run.running:
            self.fail(3, f"runner running {self.runner}, the state says {s.run.running}")
        wanted = wl.is_admitted(s) and holds(s) and not wl.is_finished(s) and not s.deleted
        if (self.restart_due == s.claim.ticket and wanted and self.runner is None
                and self.starts[s.claim.ticket] <= lc.RUNNER_RESTARTS):
            self.fail(9, f"the run of admission {s.claim.ticket} was lost by its heartbeats and not started again "
                         f"({self.starts[s.claim.ticket]} starts)")
        if self.lost is not None and not wanted:
            self.fail(3, f"the run of admission {self.lost} was lost and its admission is over ({wl.phase(s)}), "
                         f"and its runner was not told to stop")
        # 8. the gates keep it out of its queue, and say so
        if ag.holds_back(s):
            if held or s.claim.holder is not None or s.claim.queued or s.claim.enqueuing is not None or holds(s):
                self.fail(8, f"gated by {ag.gates(s.workload)} and yet in its queue: held {held}, holder {s.claim.holder}, "
                             f"queued {s.claim.queued}, enqueuing {s.claim.enqueuing}")
            reserved = s.status.condition(wl.QUOTA_RESERVED)
            if s.workload.spec.active is not False and not (wl.is_finished(s) or s.deleted) and reserved.reason != ag.GATED:
                self.fail(8, f"gated by {ag.gates(s.workload)}, and QuotaReserved says {reserved.reason}: {reserved.message}")
        # 5. the backoff honours the longest Retry
        at = checks.requeue_at(s)
        if self.floor is not None and self.floor > self.now and not wl.has_quota(s):
            if at is None or at < self.floor:
                self.fail(5, f"requeueAt {at} before the applied Retry's {self.floor.isoformat()}")
            if s.claim.queued:  # an enqueue under way is fine: it resolves into "not queued" (lifecycle._wants_queue)
                self.fail(5, f"queued during the backoff until {self.floor.isoformat()}")
        # 6. a way forward
        stuck = [(c.name, c.state) for c in s.status.admission_checks or () if c.state in ("Retry", "Rejected")]
        if stuck:
            self.fail(6, f"checks left {stuck}")
        if not (wl.is_finished(s) or s.deleted or s.workload.spec.active is False):
            if lc.way_forward(s) is None:
                self.fail(6, f"no way forward: {wl.phase(s)}, checks {[(c.name, c.state) for c in s.status.admission_checks or ()]}")
            if wl.has_quota(s) and not wl.is_admitted(s):
                for c in s.status.admission_checks or ():
                    if c.state == "Pending" and c.name not in s.asks.asking and c.name not in s.asks.answered and c.name not in s.asks.ask_again_at:
                        self.fail(6, f"check {c.name} is Pending and nobody is asked, answered nor asks again")
        wake = lc.next_wake(s)
        if timer is not None and wake is not None and wake[0] <= timer:
            self.fail(6, f"the timer for {timer.isoformat()} fired and the next one is for no later: {wake}")
        STATS["workflow tasks"] += 1

    # --- turning what the other parties send into events ------------------------------------------

    def resolve(self, spec: tuple) -> list[Any]:
        kind, *args = spec
        STATS[f"sent {kind}"] += 1
        s = self.state
        if kind == "verdict":
            name, state, after, attempt, extra = args
            payload: dict[str, Any] = {"name": name, "state": state}
            if after is not None:
                payload["requeueAfterSeconds"] = after
            at = wl.current_attempt(s, name)
            attempts = {"current": at, "asked": s.asks.asked_now.get(name, at), "stale": at - 1, "future": at + 1}
            if attempt != "none":
                payload["attempt"] = attempts.get(attempt, attempt)
            if extra == "message":
                payload["message"] = "decided"
            elif extra == "pods":
                payload["podSetUpdates"] = [{"name": "main", "labels": {"checked": name}}]
            elif extra == "bad-pods":
                payload["podSetUpdates"] = [{"name": "nope"}]
            return [intake.verdict(*sent(payload))]
        if kind == "verdict-junk":
            return [intake.verdict(*sent(JUNK_VERDICTS[args[0]]))]
        if kind == "answer":
            if not self.controllers:
                return []
            name, attempt = sorted(self.controllers.items())[args[0] % len(self.controllers)]
            del self.controllers[name]  # its activity is done
            result, error = answer_of(args[1], name, attempt)
            return [intake.controller_answer(name, attempt, result, error)]
        if kind == "wrong-attempt":
            name, offset, answer = args
            attempt = max(1, s.asks.asked_now.get(name, wl.current_attempt(s, name)) + offset)
            if self.controllers.get(name) == attempt:
                return []  # that one is the answer the workflow would deliver
            result, error = answer_of(answer, name, attempt)
            return [intake.controller_answer(name, attempt, result, error)]
        if kind in ("reserve", "pending", "preempt", "dequeue", "checks"):
            return self.queue_says(kind, args)
        if kind == "stale":
            notice_kind, which = args[0]
            ticket, uid = s.claim.ticket, self.uid
            if which == "old-ticket":
                ticket -= 1
            elif which == "orphan":
                ticket += 1
                where = self.queue.get((uid, ticket))
                if (uid, ticket) not in self.orphans or where is None:
                    return []
                notice_kind = "pending" if where == "pending" else "checks" if notice_kind == "checks" else "reserved"
            elif which == "other-uid":
                uid = "uid-other"
            elif self.last_released is None or self.last_released[0] != self.uid:
                return []
            else:
                ticket = self.last_released[1]
            signal = {"reserved": "quota_reserved", "pending": "pending_status", "evicted": "evicted",
                      "dequeued": "dequeued", "checks": "admission_checks_changed"}[notice_kind]
            n = self.notice(notice_kind, ticket, ("a", "b"), True, False, False, uid=uid)
            return [intake.notice(signal, n.to_wire())]
        if kind == "notice-junk":
            return [intake.notice("quota_reserved", *sent(JUNK_NOTICES[args[0]]))]
        if kind == "pods":
            return [intake.pods_ready_report(*sent(PODS[args[0]]))]
        if kind == "runner":
            if self.runner is None:
                return []
            admission, self.runner = self.runner, None
            ending, error = RUNNER_ENDINGS[args[0]]
            if ending != "returned" and admission == s.claim.ticket:
                self.lost = admission
            if ending in ("lost", "drained"):
                self.restart_due = admission
                STATS["runs lost by their heartbeats or their runner's shutdown"] += 1
            return [lc.RunnerStopped(admission=admission, ending=ending, error=error)]
        if kind == "priority":
            return [intake.priority_change(*sent(PRIORITIES[args[0]]))]
        if kind == "ungate":
            left = ag.gates(s.workload)
            payload = {
                "first": {"gates": left[:1]}, "second": {"gates": left[1:2]}, "all": {"all": True}, "both": {"gates": left},
                "absent": {"gates": ["example.com/nope"]}, "junk-none": None, "junk-str": {"gates": GATES[0]},
                "junk-both": {"gates": list(GATES), "all": True}, "junk-args": Arguments((1, 2)),
            }[args[0]]
            return [intake.gate_removal(*sent(payload))]
        if kind == "deactivate":
            return [lc.Deactivated()]
        if kind == "activate":
            return [lc.Activated()]
        if kind == "appear":
            return [lc.QueueAppeared()] if s.claim.waiting_for_queue else []
        if kind == "enqueue":
            if self.enqueuing is None:
                return []
            ticket, self.enqueuing = self.enqueuing, None
            found = self.enqueue_answer(ticket, args[0])
            if found == "found":
                self.queue.setdefault((self.uid, ticket), "pending")  # an adopted orphan stays as the queue holds it
                return [lc.EnqueueResolved(ticket=ticket, resolution=QueueResolution(cluster_queue="cq"))]
            if found == "no-local-queue":
                return [lc.EnqueueResolved(ticket=ticket, resolution=QueueResolution(
                    reason="Misconfigured", message="LocalQueue lq is terminating or missing"))]
            return [lc.EnqueueResolved(ticket=ticket, resolution=QueueResolution(
                cluster_queue="cq", reason="Misconfigured", message="ClusterQueue cq is terminating or missing"))]
        if kind == "stale-runner":
            if self.runner == s.claim.ticket + args[0]:
                return []
            return [lc.RunnerStopped(admission=max(0, s.claim.ticket + args[0]), ending="lost", error="activity Heartbeat timeout")]
        if kind == "enqueue-answered-late":
            # The queue took the enqueue and reserved it (or told why it waits), and its notice is
            # stepped before the enqueue's answer: the task that ran the local activity timed out or
            # failed after the queue took it, and the next attempt gets the signal first.
            if self.enqueuing is None:
                return []
            ticket, self.enqueuing = self.enqueuing, None
            if self.enqueue_answer(ticket, "found") != "found":
                return self.resolve(("enqueue-missing", ticket))
            self.queue.setdefault((self.uid, ticket), "pending")
            told = self.queue_says("reserve", args[0]) if args[1] else self.queue_says("pending", [args[0][0]])
            return [*told, lc.EnqueueResolved(ticket=ticket, resolution=QueueResolution(cluster_queue="cq"))]
        if kind == "enqueue-missing":  # an enqueue of a ticket its queue dequeued (its LocalQueue is missing)
            return [lc.EnqueueResolved(ticket=args[0], resolution=QueueResolution(
                reason="Misconfigured", message="LocalQueue lq is terminating or missing"))]
        if kind == "stale-enqueue":
            if s.claim.enqueuing == s.claim.ticket + args[0]:
                return []
            return [lc.EnqueueResolved(ticket=max(0, s.claim.ticket + args[0]), resolution=QueueResolution(cluster_queue="cq"))]
        if kind == "runner-returns":
            if self.runner is None:
                return []
            admission, self.runner = self.runner, None  # the run is over, whatever it returned
            return intake.runner_ended(admission, RETURNED[args[0]], "returned")
        if kind == "end" and args[0] in ("finish-by-runner", "finish-other-admission"):
            admission = (self.runner or s.claim.ticket) + (args[0] == "finish-other-admission")
            if args[0] == "finish-by-runner" and self.runner is not None and self.runner == s.claim.ticket:
                self.runner = None  # its run ends with its report; the end of the activity is not news
            return [intake.finish({"succeeded": True, "message": "done", "admission": max(1, admission)})]
        if kind == "end":
            payload = {
                "finish": {"succeeded": True, "message": "done"}, "finish-failed": {"succeeded": False, "message": "oom"},
                "finish-none": None, "finish-junk": 42, "finish-junk-type": {"succeeded": "maybe"},
                "finish-args": Arguments((1, 2)), "finish-list": ["done"], "delete": None, "delete-junk": 42,
            }[args[0]]
            return [intake.deletion(*sent(payload)) if args[0].startswith("delete") else intake.finish(*sent(payload))]
        raise AssertionError(f"unknown spec {spec}")

    def notice(self, kind: str, ticket: int, check_set: tuple, pods: bool, runner: bool, gated: bool, uid: str | None = None) -> Notice:
        base = reserved_notice(checks=list(check_set), ticket=ticket, uid=uid or self.uid)
        update: dict[str, Any] = {"kind": kind, "cluster_queue": "cq"}  # the queue names itself
        if kind in ("reserved", "checks"):
            update |= {"checks_info": {c: CHECK_INFO[c] for c in check_set}, "wait_for_pods_ready": PODS_READY if pods else None,
                       "workload_retention": RETENTION if pods else None}
        if kind == "reserved":
            update |= {"runner": RUNNER if runner else "", "gated": gated}
        else:
            update["assignment"] = None
        if kind == "pending":
            update |= {"reason": "Pending", "message": "couldn't assign flavors to pod set main: insufficient quota"}
        elif kind == "evicted":
            update |= {"reason": "Preempted", "message": "Preempted to accommodate a workload in the ClusterQueue",
                       "preemption_reason": "InClusterQueue", "admission_checks": []}
        elif kind == "dequeued":
            update |= {"reason": "Misconfigured", "message": "LocalQueue lq is terminating or missing", "admission_checks": []}
        return base.model_copy(update=update)

    def enqueue_answer(self, ticket: int, found: str) -> str:
        """How the enqueue of `ticket` resolves: as drawn, but an adopted orphan the queue holds finds
        its queue (it is there), and one the queue dequeued finds its LocalQueue missing (why it was
        dequeued)."""
        key = (self.uid, ticket)
        if self.adopting == ticket:
            self.adopting = None
            if key in self.queue:
                return "found"
        return "no-local-queue" if key in self.dropped else found

    def queue_says(self, kind: str, args: list) -> list[Any]:
        """The ClusterQueue acts on the ticket it holds, and tells the workload."""
        if kind in ("reserve", "pending", "dequeue"):
            ticket = self.ticket_where("pending")
        else:
            ticket = self.ticket_where("reserved")
            if kind == "preempt" and ticket is not None and (self.uid, ticket) in self.evicting:
                return []
        if ticket is None:
            return []
        key = (self.uid, ticket)
        if kind == "reserve":
            check_set, pods, runner, gated = args
            self.queue[key] = "reserved"
            n = self.notice("reserved", ticket, check_set, pods, runner, gated)
            return [intake.notice("quota_reserved", n.to_wire())]
        if kind == "pending":
            n = self.notice("pending", ticket, args[0], False, False, False)
            return [intake.notice("pending_status", n.to_wire())]
        if kind == "preempt":
            self.evicting.add(key)  # it holds the quota until the workload releases it
            return [intake.notice("evicted", self.notice("evicted", ticket, (), False, False, False).to_wire())]
        if kind == "dequeue":
            del self.queue[key]
            self.dropped.add(key)
            return [intake.notice("dequeued", self.notice("dequeued", ticket, (), False, False, False).to_wire())]
        n = self.notice("checks", ticket, args[0], args[1], False, False)
        return [intake.notice("admission_checks_changed", n.to_wire())]

    # --- rules ------------------------------------------------------------------------------------
    # Hypothesis picks among the rules that apply with equal odds: what moves a workload on (its
    # enqueue, a reservation, its controllers' answers) has several rules, the junk shares one.

    @initialize(max_exec=st.sampled_from([None, None, 900]), eager=st.booleans(), gates=st.sampled_from([0, 0, 1, 2]))
    def start(self, max_exec, eager, gates):
        """`eager`: its ClusterQueue reserves every ticket at once (see `eager_queue`); else the rules
        say when the enqueue resolves and the queue reserves. `gates`: how many admission gates it is
        submitted with."""
        self.eager = eager
        self.submit(max_exec, gates)

    @precondition(lambda self: self.enqueuing is not None)
    @rule(found=st.sampled_from(["found", "found", "found", "no-local-queue", "no-cluster-queue"]), seconds=st.integers(0, 2))
    def enqueue_resolves(self, found, seconds):
        """The enqueue (a local activity) comes back: queued in `cq`, or its queue is missing."""
        self.deliver([("enqueue", found)], seconds)

    @precondition(lambda self: self.enqueuing is not None)
    @rule()
    def enqueue_is_queued(self):
        self.deliver([("enqueue", "found")], 0)

    @precondition(lambda self: self.state.claim.waiting_for_queue)
    @rule(seconds=dt)
    def queue_appears(self, seconds):
        self.deliver([("appear",)], seconds)

    @precondition(lambda self: self.ticket_where("pending") is not None)
    @rule(check_set=CHECK_SETS, pods=st.booleans(), runner=st.booleans(), gated=st.booleans(), seconds=dt)
    def queue_reserves(self, check_set, pods, runner, gated, seconds):
        self.deliver([("reserve", check_set, pods, runner, gated)], seconds)

    @precondition(lambda self: self.ticket_where("pending") is not None)
    @rule(pods=st.booleans(), runner=st.booleans(), seconds=dt)
    def queue_reserves_with_both_checks(self, pods, runner, seconds):
        self.deliver([("reserve", ("a", "b"), pods, runner, False)], seconds)

    @precondition(lambda self: self.ticket_where("pending") is not None)
    @rule(seconds=dt)
    def queue_reserves_with_check_b(self, seconds):
        self.deliver([("reserve", ("b",) if seconds % 3 else ("a", "b"), seconds % 2 == 1, False, seconds % 5 == 0)], seconds)

    @precondition(lambda self: self.ticket_where("pending") is not None)
    @rule(check_set=CHECK_SETS, seconds=dt)
    def queue_says_pending(self, check_set, seconds):
        self.deliver([("pending", check_set)], seconds)

    @precondition(lambda self: self.enqueuing is not None)
    @rule(check_set=CHECK_SETS, pods=st.booleans(), runner=st.booleans(), reserved=st.booleans(), seconds=dt)
    def queue_answers_before_the_enqueue_does(self, check_set, pods, runner, reserved, seconds):
        self.deliver([("enqueue-answered-late", (check_set, pods, runner, False), reserved)], seconds)

    @precondition(lambda self: self.ticket_where("reserved") is not None)
    @rule(seconds=dt)
    def queue_preempts(self, seconds):
        self.deliver([("preempt",)], seconds)

    @precondition(lambda self: self.ticket_where("pending") is not None)
    @rule(seconds=dt)
    def queue_dequeues(self, seconds):
        self.deliver([("dequeue",)], seconds)

    @precondition(lambda self: self.ticket_where("reserved") is not None)
    @rule(check_set=CHECK_SETS, pods=st.booleans(), seconds=dt)
    def queue_changes_checks(self, check_set, pods, seconds):
        self.deliver([("checks", check_set, pods)], seconds)

    @precondition(lambda self: bool(self.controllers))
    @rule(spec=answer_spec, seconds=dt)
    def controller_answers(self, spec, seconds):
        """A controller asked answers (any of ANSWERS) about the attempt it was asked."""
        self.deliver([spec], seconds)

    @precondition(lambda self: bool(self.controllers))
    @rule(which=st.integers(0, 1), answer=st.sampled_from(["Ready", "Ready", "Ready", "Retry", "Retry60", "Pending"]), seconds=dt)
    def controller_decides(self, which, answer, seconds):
        self.deliver([("answer", which, answer)], seconds)

    @precondition(lambda self: bool(self.controllers))
    @rule(seconds=dt)
    def controller_says_ready(self, seconds):
        self.deliver([("answer", seconds, "Ready")], seconds)

    @rule(spec=verdict_spec, seconds=dt)
    def verdict(self, spec, seconds):
        """A verdict signal from anyone: valid, stale, premature, out of range, junk."""
        self.deliver([spec], seconds)

    @rule(check=st.sampled_from("ab"), state=st.sampled_from(["Ready", "Ready", "Retry", "Pending"]),
          extra=st.sampled_from([None, None, None, "pods"]), seconds=dt)
    def verdict_for_the_current_attempt(self, check, state, extra, seconds):
        """`pods`: with podSetUpdates, which conflict between the two checks (the admission fails)."""
        self.deliver([("verdict", check, state, None, "current", extra)], seconds)

    @rule(after=st.tuples(AFTER, AFTER), together=st.booleans(), swap=st.booleans(), seconds=dt, apart=dt)
    def both_checks_retry(self, after, together, swap, seconds, apart):
        """Both checks say Retry: in one workflow task, or in two."""
        specs = [("verdict", "a", "Retry", after[0], "none", None), ("verdict", "b", "Retry", after[1], "none", None)]
        if swap:
            specs.reverse()
        if together:
            self.deliver(specs, seconds)
        else:
            self.deliver(specs[:1], seconds)
            self.deliver(specs[1:], apart)

    @rule(ready=st.sampled_from([True, True, False]), seconds=dt)
    def pods_ready(self, ready, seconds):
        self.deliver([("pods", 0 if ready else 2)], seconds)

    @rule(spec=noise_spec, seconds=dt)
    def noise(self, spec, seconds):
        """Stale and junk ClusterQueue notices, controller answers about another attempt, pods-ready
        reports of every kind, an activation of an active workload, a catalog saying the queue exists."""
        self.deliver([spec], seconds)

    @precondition(lambda self: self.runner is not None)
    @rule(error=st.sampled_from(sorted(RUNNER_ENDINGS)), seconds=dt)
    def runner_stops(self, error, seconds):
        """Its runner's `start_workload` ends with the workload still running: its heartbeats stopped
        (the runner died, or the task was lost in a server restart), its runner shut down, it failed,
        or it returned nothing."""
        self.deliver([("runner", error)], seconds)

    @precondition(lambda self: self.runner is not None)
    @rule(seconds=dt)
    def runner_finishes(self, seconds):
        """Its runner reports the end of the admission it runs (its `start_workload` returns by itself)."""
        self.deliver([("end", "finish-by-runner")], seconds)

    @precondition(lambda self: self.runner is not None)
    @rule(returned=st.sampled_from(sorted(RETURNED)), seconds=dt)
    def runner_returns_its_finish(self, returned, seconds):
        """Its runner's `start_workload` returns the finish of the admission it ran (or a value that
        is none), instead of sending `finish` and returning."""
        self.deliver([("runner-returns", returned)], seconds)

    @rule(spec=ungate_spec, seconds=dt)
    def someone_removes_admission_gates(self, spec, seconds):
        self.deliver([spec], seconds)

    @rule(change=st.sampled_from(sorted(PRIORITIES)), seconds=dt)
    def someone_changes_its_priority(self, change, seconds):
        self.deliver([("priority", change)], seconds)

    @rule(seconds=dt)
    def someone_deactivates(self, seconds):
        self.deliver([("deactivate",)], seconds)

    @rule(seconds=dt)
    def someone_activates(self, seconds):
        self.deliver([("activate",)], seconds)

    @rule(kind=END_KINDS, seconds=dt)
    def finish_or_delete(self, kind, seconds):
        self.deliver([("end", kind)], seconds)

    @precondition(lambda self: lc.next_wake(self.state) is not None)
    @rule()
    def timer_fires(self):
        self.now = max(self.now, lc.next_wake(self.state)[0])
        self.deliver([], 0, timer_in_batch=True)

    @precondition(lambda self: self.runner is None and self.adopting is None)
    @rule(seconds=dt)
    def workflow_continues_as_new(self, seconds):
        """After a quiet while, the workflow continues as new (never while its runner runs): what was
        under way is gone, the state goes through the payload converter. Not while it enqueues a
        ticket its queue holds already (an orphan): in the workflow the enqueue is answered in its own
        task, and the next run would not know the queue holds it."""
        target = self.now + timedelta(seconds=seconds)
        self.fire_timers(target)
        if self.runner is not None:
            return
        if self.adopting is not None:
            return
        self.now = max(self.now, target)
        payloads = DATA_CONVERTER.payload_converter.to_payloads([self.state])
        self.state = DATA_CONVERTER.payload_converter.from_payloads(payloads, [WorkloadState])[0]
        self.enqueuing = None
        self.controllers = {}
        self.trace.append(f"+{self.seconds()}s continue-as-new")
        self.deliver([], 0, started=True)

    @rule(specs=st.lists(batch_item, min_size=2, max_size=4), seconds=dt, timer_too=st.booleans())
    def workflow_task(self, specs, seconds, timer_too):
        """Several messages in one workflow task, then one Settle."""
        self.deliver(specs, seconds, timer_in_batch=timer_too)

    @precondition(lambda self: self.enqueuing is None)
    @rule(specs=st.lists(st.one_of(ENQUEUES, ENQUEUES, batch_item), max_size=3), seconds=dt)
    def an_attempt_enqueued_then_timed_out(self, specs, seconds):
        """A workflow task's first attempt steps its messages and settles (on the side: its state is
        thrown away), its enqueue's local activity puts ticket T in the queue, and the task times out.
        The retry gets the same messages and a deactivation after them (so it does not enqueue): the
        queue holds an orphan T. An attempt that does not enqueue is an ordinary task. `preempt`,
        `dequeue`, `activate` (or nothing: a plain Settle) are what make a workload enqueue. Not while
        the workload is enqueuing (the attempt could not enqueue then); T may be its very first
        ticket (a workload that was never told its ClusterQueue, and learns it from the notices)."""
        target = self.now + timedelta(seconds=seconds)
        self.fire_timers(target)
        self.now = max(self.now, target)
        events: list[Any] = []
        for spec in specs:
            events += self.resolve(spec)
        state, enqueued = self.state, None
        for i, event in enumerate([*events, lc.Settle()]):
            state, commands = lc.step(state, event, self.now, (i * 0.3819660112501051) % 1.0)
            enqueued = next((c.request.entry.ticket for c in commands if isinstance(c, lc.Enqueue)), enqueued)
        if enqueued is not None and self.enqueuing is None:
            if self.state.claim.ticket == 0:
                STATS["orphans of a first ticket"] += 1
            key = (self.uid, enqueued)
            if key in self.queue and key not in self.orphans:
                self.fail(3, f"an attempt enqueued ticket {enqueued}, which its queue holds for it: {self.held()}")
            self.trace.append(f"+{self.seconds()}s (an attempt of this task enqueued ticket {enqueued} and timed out)")
            STATS["attempts that enqueued and timed out"] += 1
            STATS["orphans created" if key not in self.queue else "orphans enqueued again"] += 1
            self.queue.setdefault(key, "pending")  # the queue ignores a ticket it has
            self.orphans.add(key)
            events.append(lc.Deactivated())
        self.run(events)
        if self.eager:
            self.eager_queue()

    @precondition(lambda self: self.enqueuing is None)
    @rule(spec=st.one_of(ENQUEUES, st.none()), seconds=dt)
    def an_attempt_enqueued_then_timed_out_on_one_message(self, spec, seconds):
        """The same, with one of the messages that make a workload enqueue, or none."""
        self.an_attempt_enqueued_then_timed_out([spec] if spec else [], seconds)


LifecycleModel.TestCase.settings = settings(
    max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None, derandomize=True, database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    # Shrinking a failure took over 5 minutes once, and CI must stay under 15: it is asked for.
    phases=[p for p in Phase if p is not Phase.shrink or os.environ.get("ADMITFLOW_MODEL_SHRINK")],
)
TestLifecycleModel = LifecycleModel.TestCase


def test_a_new_run_steps_started_before_its_overdue_timer():
    """CI found this run: the pods-ready timeout fired within a quiet while, the run continued as new
    after it, and the backoff it set was overdue. The machine fired that timer before the new run's
    `Started` (and moved the clock twice), so `Started` dropped the enqueue the timer had begun and a
    second one followed. The workflow steps `Started` first and sets its timer after."""
    state = LifecycleModel()
    state.start(max_exec=None, eager=False, gates=0)
    state.enqueue_is_queued()
    state.workflow_task(seconds=0, specs=[("verdict", "a", "Ready", None, "none", None), ("verdict-junk", 0)], timer_too=False)
    state.queue_reserves_with_check_b(seconds=0)
    state.queue_changes_checks(check_set=(), pods=True, seconds=0)
    state.workflow_continues_as_new(seconds=300)
    assert state.seconds() == 300
    state.timer_fires()
    assert state.enqueuing == state.state.claim.ticket
    state.teardown()


@pytest.fixture(autouse=True, scope="module")
def figures():
    """With ADMITFLOW_MODEL_EXAMPLES set (a long run), print what was run (pytest -s shows it)."""
    started = time.monotonic()
    yield
    if "ADMITFLOW_MODEL_EXAMPLES" in os.environ:
        STATS["seconds"] = round(time.monotonic() - started)
        print("\nlifecycle model:", ", ".join(f"{k}: {v}" for k, v in sorted(STATS.items())))


def _short(c: Any) -> str:
    if isinstance(c, lc.Enqueue):
        return f"Enqueue#{c.request.entry.ticket}"
    if isinstance(c, lc.TellQueue):
        return f"TellQueue({c.signal}#{c.request.ticket})"
    if isinstance(c, lc.AskController):
        return f"Ask({c.request.admission_check}#{c.request.attempt})"
    if isinstance(c, lc.StopAsking):
        return f"StopAsking({c.check})"
    if isinstance(c, lc.StartRunner):
        return f"StartRunner#{c.request.admission}"
    if isinstance(c, lc.StopRunner):
        return f"StopRunner#{c.request.admission}"
    if isinstance(c, lc.TellGate):
        return f"TellGate({c.signal}#{c.request.ticket})"
    return c.kind
