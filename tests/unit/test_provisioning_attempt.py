"""`provisioning_attempt.step` case by case, each case the sentence it proves (the behaviour of the
ProvisioningRequest attempt loop before `step`, kept), then the attempt under random interleavings
of messages and answers with its invariants checked after every step."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as s
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from admitflow.admission import provisioning_attempt as pa
from admitflow.api.provisioning_request import PodTemplate, ProvisioningRequest
from tests.unit.test_workload_status import T0

NAME = "job-prov-1"


def request(rv: str | None = None) -> ProvisioningRequest:
    meta: dict = {"name": NAME, "namespace": "team-a"}
    if rv is not None:
        meta["resourceVersion"] = rv
    return ProvisioningRequest.model_validate_json(json.dumps({
        "metadata": meta,
        "spec": {"provisioningClassName": "check-capacity.autoscaling.x-k8s.io", "podSets": [{"podTemplateRef": {"name": "ppt-main"}, "count": 1}]},
    }))


TEMPLATE = PodTemplate.model_validate_json(json.dumps({
    "metadata": {"name": "ppt-main", "namespace": "team-a"}, "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}},
}))


def fresh(**more: Any) -> pa.AttemptState:
    return pa.new_state("workload/team-a/job", "prov", 1, request(), [TEMPLATE], **more)


@dataclass
class B:
    """One batch: its events, then a Settle, `at` seconds after T0."""

    events: list[Any] = field(default_factory=list)
    at: float = 0
    suggested: bool = False


def b(*events: Any, at: float = 0, suggested: bool = False) -> B:
    return B(list(events), at, suggested)


def run(st: pa.AttemptState, batch: B) -> tuple[pa.AttemptState, list[Any]]:
    out: list[Any] = []
    now = T0 + timedelta(seconds=batch.at)
    for event in [*batch.events, pa.Settle(continue_as_new_suggested=batch.suggested)]:
        st, commands = pa.step(st, event, now, 0.5)
        out += commands
    return st, out


def said(c: Any) -> str:
    if isinstance(c, pa.Report):
        if c.error:
            return f"Report error={c.error}"
        return "Report deleted" if c.deleted else f"Report rv={c.request.metadata.resource_version}"
    if isinstance(c, pa.Watch):
        return f"Watch from {c.resource_version}"
    if isinstance(c, pa.Finish) and c.error:
        return f"Finish error={c.error}"
    return c.kind


STARTED = b(pa.Started())
PUSHED_1 = [STARTED, b(pa.Created(request=request("1"), push=True))]  # created, the backend pushes
PUSHED_5 = [STARTED, b(pa.Created(request=request("5"), push=True))]
WATCHED_1 = [STARTED, b(pa.Created(request=request("1"), push=False))]  # created, watched from version 1
REFUSED = [STARTED, b(pa.CreateFailed(error="forbidden"))]
REFUSAL = f'Report error=Error creating ProvisioningRequest "{NAME}": forbidden'

CASES = [
    ("a new attempt creates its request", [], STARTED, ["Create"], None),
    ("a refused create is reported on the check with its error", [STARTED], b(pa.CreateFailed(error="forbidden")), [REFUSAL],
     lambda st: pa.next_wake(st) == (T0 + timedelta(minutes=1), "create again")),
    ("a refused create is not tried again before its minute is up, whatever the task's clock says", REFUSED,
     b(pa.TimerFired(at=T0 + timedelta(seconds=30)), at=600), [], None),
    ("a refused create is tried again when its timer fires", REFUSED, b(pa.TimerFired(at=T0 + timedelta(minutes=1)), at=60), ["Create"], None),
    ("a created request is reported", [STARTED], b(pa.Created(request=request("1"), push=True)), ["Report rv=1"], None),
    ("a request of a watched backend is reported, then watched from its version", [STARTED],
     b(pa.Created(request=request("1"), push=False)), ["Report rv=1", "Watch from 1"], None),
    ("a stale push is ignored", PUSHED_5, b(pa.Pushed(request=request("3"))), [], None),
    ("a newer push is reported", PUSHED_5, b(pa.Pushed(request=request("6"))), ["Report rv=6"], None),
    ("of one batch of pushes, the last newer than the known request is reported, once", PUSHED_5,
     b(pa.Pushed(request=request("7")), pa.Pushed(request=request("6")), pa.Pushed(request=request("4"))), ["Report rv=6"], None),
    ("a watched change is reported and watched again from it", WATCHED_1, b(pa.Watched(request=request("2"))),
     ["Report rv=2", "Watch from 2"], None),
    ("a watch that saw no change is started again without a report", WATCHED_1, b(pa.Watched(request=request("1"))), ["Watch from 1"], None),
    ("a request deleted by someone else is reported deleted and the attempt ends without deleting it", WATCHED_1,
     b(pa.Watched(request=None)), ["Report deleted", "Finish"], lambda st: st.gone and not st.deleted),
    ("a delete stops the watch and deletes the request", WATCHED_1, b(pa.DeleteAsked()), ["StopWatching", "Delete"], None),
    ("a deleted request is reported deleted and the attempt ends", [*WATCHED_1, b(pa.DeleteAsked())], b(pa.Deleted()),
     ["Report deleted", "Finish"], lambda st: st.deleted and st.done),
    ("a delete given up on is still reported", [*PUSHED_1, b(pa.DeleteAsked())], b(pa.Deleted(error="deadline exceeded")),
     ["Report deleted", "Finish"], None),
    ("the result of a watch stopped for a delete is no news", [*WATCHED_1, b(pa.DeleteAsked())], b(pa.Watched(request=None)), [], None),
    ("a delete asked while creating waits for the create, which is reported, then deletes", [STARTED, b(pa.DeleteAsked())],
     b(pa.Created(request=request("1"), push=True)), ["Report rv=1", "Delete"], None),
    ("a delete asked while a refused create waits deletes at once", REFUSED, b(pa.DeleteAsked()), ["Delete"],
     lambda st: pa.next_wake(st) is None),
    ("pushes and a delete in one batch: the pushes are reported first", PUSHED_1,
     b(pa.Pushed(request=request("2")), pa.DeleteAsked()), ["Report rv=2", "Delete"], None),
    ("pods scheduled are told to the backend", PUSHED_1, b(pa.PodsScheduledAsked()), ["TellPodsScheduled"], None),
    ("pods scheduled are told only once", [*PUSHED_1, b(pa.PodsScheduledAsked())], b(pa.PodsScheduledTold(), pa.PodsScheduledAsked()), [], None),
    ("pods scheduled before the request exists are told once it is created and reported", [STARTED, b(pa.PodsScheduledAsked())],
     b(pa.Created(request=request("1"), push=True)), ["Report rv=1", "TellPodsScheduled"], None),
    ("pods scheduled are not told when a delete comes with them", PUSHED_1, b(pa.PodsScheduledAsked(), pa.DeleteAsked()), ["Delete"], None),
    ("the workload gone when its request is reported has the request deleted", PUSHED_1, b(pa.ParentGone()), ["Delete"], None),
    ("the workload gone when a refusal is reported has the request deleted", REFUSED, b(pa.ParentGone()), ["Delete"], None),
    ("the run continues as new when suggested", PUSHED_1, b(suggested=True), ["ContinueAsNew"], None),
    ("a watched attempt continues as new between two watches", WATCHED_1, b(pa.Watched(request=request("2")), suggested=True),
     ["Report rv=2", "ContinueAsNew"], None),
    ("no continue-as-new while a watch is in flight", WATCHED_1, b(suggested=True), [], None),
    ("no continue-as-new before the request is created", REFUSED, b(suggested=True), [], None),
    ("no continue-as-new before pods scheduled are told", [*PUSHED_1, b(pa.PodsScheduledAsked())], b(suggested=True), [], None),
    ("nothing is done or reported after the attempt finished", [*WATCHED_1, b(pa.Watched(request=None))],
     b(pa.DeleteAsked(), pa.Pushed(request=request("9")), pa.PodsScheduledAsked(), pa.ParentGone()), [], None),
    ("a watch that fails for good ends the run as failed, as it always has", WATCHED_1, b(pa.WatchFailed(error="nothing to watch")),
     ["Finish error=nothing to watch"], lambda st: st.done and not st.deleted),
]


@pytest.mark.parametrize(("given", "when", "then", "check"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_an_attempt(given: list[B], when: B, then: list[str], check: Any) -> None:
    st = fresh()
    for batch in given:
        st, _ = run(st, batch)
    st, commands = run(st, when)
    assert [said(c) for c in commands] == then
    assert st.not_applied == []
    if check is not None:
        assert check(st)


def test_the_state_carried_across_continue_as_new_restarts_its_watch() -> None:
    st = fresh()
    for batch in [*WATCHED_1, b(pa.PodsScheduledAsked()), b(pa.PodsScheduledTold(), pa.Watched(request=request("2")), suggested=True)]:
        st, _ = run(st, batch)
    carried = pa.AttemptState.model_validate_json(json.dumps(st.to_wire()))
    assert carried == st
    carried, commands = run(carried, STARTED)
    assert [said(c) for c in commands] == ["Watch from 2"]  # pods scheduled were told by the run before


def test_what_the_loop_before_step_carried_is_taken_over_and_a_carried_scheduled_was_told() -> None:
    st = fresh(latest=request("4"), push=False, scheduled=True)
    st, commands = run(st, STARTED)
    assert [said(c) for c in commands] == ["Watch from 4"]


def test_an_event_step_cannot_apply_leaves_the_state_as_it_was_and_is_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    st, _ = run(fresh(), PUSHED_1[0])

    def broken(st: pa.AttemptState, ev: Any, now: datetime) -> list[Any]:
        st.delete_asked = True
        raise RuntimeError("boom")

    monkeypatch.setitem(pa._HANDLERS, pa.DeleteAsked, broken)
    after, commands = pa.step(st, pa.DeleteAsked(), T0, 0.5)
    assert commands == []
    assert after.model_copy(update={"not_applied": []}) == st
    assert after.not_applied == ["DeleteAsked not applied: RuntimeError: boom"]


# --- the model: random interleavings, invariants after every step ---------------------------------


class AttemptModel(RuleBasedStateMachine):
    """One attempt stepped as its workflow steps it (each batch, then Settle; a report's answer at
    once), with the answers of creates, watches, pods-scheduled and deletes coming back whenever the
    model chooses, and the invariants: step never raises (nothing recorded as not applied); the
    request is deleted at most once, and before Finish unless someone else deleted it (or a watch
    failed for good, which fails the run as it always has); nothing is ordered after Finish; an
    attempt told to delete always ends."""

    def __init__(self) -> None:
        super().__init__()
        self.st = fresh()
        self.seconds = 0.0
        self.parent_here = True
        self.creating = self.telling = self.deleting = False
        self.watching: str | None = None
        self.deletes = 0
        self.finished = False
        self.rv = 1
        self.continued = False
        self.batch([pa.Started()])

    # -- driving ----------------------------------------------------------------------------------

    def batch(self, events: list[Any], suggested: bool = False, at: datetime | None = None) -> None:
        pending: list[Any] = [*events, pa.Settle(continue_as_new_suggested=suggested)]
        rounds = 0
        self.continued = False
        while pending and not self.continued:
            event = pending.pop(0)
            self.st, commands = pa.step(self.st, event, T0 + timedelta(seconds=self.seconds), 0.5)
            assert self.st.not_applied == [], self.st.not_applied
            answers: list[Any] = []
            for c in commands:
                answers += self.order(c)
            if answers:
                pending[0:0] = answers
                if isinstance(event, pa.Settle):
                    rounds += 1
                    assert rounds < 20, "it settles without end"
                    pending.append(pa.Settle(continue_as_new_suggested=suggested))
        if self.continued:
            # A new run: the state as it travelled; nothing under way came along.
            self.st = pa.AttemptState.model_validate_json(json.dumps(self.st.to_wire()))
            self.watching = None
            self.batch([pa.Started()])

    def order(self, c: Any) -> list[Any]:
        assert not self.finished, f"{said(c)} ordered after Finish"
        if isinstance(c, pa.Create):
            assert not self.creating, "two creates at once"
            self.creating = True
        elif isinstance(c, pa.Report):
            return [] if self.parent_here else [pa.ParentGone()]
        elif isinstance(c, pa.Watch):
            assert self.watching is None, "two watches at once"
            self.watching = c.resource_version
        elif isinstance(c, pa.StopWatching):
            self.watching = None
        elif isinstance(c, pa.TellPodsScheduled):
            assert not self.st.scheduled_told, "pods scheduled told twice"
            self.telling = True
        elif isinstance(c, pa.Delete):
            self.deletes += 1
            assert self.deletes == 1, "the request deleted twice"
            self.deleting = True
        elif isinstance(c, pa.ContinueAsNew):
            self.continued = True  # the run ends here; `batch` starts the next one
        elif isinstance(c, pa.Finish):
            self.finished = True
            if not (self.st.gone or c.error):
                assert self.deletes == 1, "finished without deleting a request nobody else deleted"
        return []

    # -- rules --------------------------------------------------------------------------------------

    @rule(later=s.integers(0, 5))
    def push(self, later: int) -> None:
        self.batch([pa.Pushed(request=request(str(max(1, self.rv + later - 2))))])

    @rule()
    def ask_delete(self) -> None:
        self.batch([pa.DeleteAsked()])

    @rule()
    def ask_pods_scheduled(self) -> None:
        self.batch([pa.PodsScheduledAsked()])

    @rule()
    def workload_goes(self) -> None:
        self.parent_here = False

    @rule(suggested=s.booleans())
    def settle(self, suggested: bool) -> None:
        self.batch([], suggested=suggested)

    @precondition(lambda self: self.creating)
    @rule(ok=s.booleans(), push=s.booleans())
    def create_answers(self, ok: bool, push: bool) -> None:
        self.creating = False
        self.batch([pa.Created(request=request(str(self.rv)), push=push) if ok else pa.CreateFailed(error="forbidden")])

    @precondition(lambda self: self.telling)
    @rule()
    def pods_scheduled_told(self) -> None:
        self.telling = False
        self.batch([pa.PodsScheduledTold()])

    @precondition(lambda self: self.deleting)
    @rule(given_up=s.booleans())
    def delete_answers(self, given_up: bool) -> None:
        self.deleting = False
        self.batch([pa.Deleted(error="deadline exceeded" if given_up else "")])

    @precondition(lambda self: self.watching is not None)
    @rule(how=s.sampled_from(["same", "changed", "gone", "failed"]))
    def watch_answers(self, how: str) -> None:
        self.watching = None
        if how == "changed":
            self.rv += 1
        event = {
            "same": pa.Watched(request=request(str(self.rv))), "changed": pa.Watched(request=request(str(self.rv))),
            "gone": pa.Watched(request=None), "failed": pa.WatchFailed(error="nothing to watch"),
        }[how]
        self.batch([event])

    @precondition(lambda self: pa.next_wake(self.st) is not None)
    @rule(late=s.integers(0, 90))
    def timer_fires(self, late: int) -> None:
        at, _ = pa.next_wake(self.st)
        self.seconds = max(self.seconds, (at - T0).total_seconds() + late)
        self.batch([pa.TimerFired(at=at)])

    # -- invariants ---------------------------------------------------------------------------------

    @invariant()
    def told_to_delete_it_ends(self) -> None:
        """An attempt told to delete (or whose workload is gone) ends once what it ordered comes back."""
        if not (self.st.delete_asked or self.st.parent_gone) or self.st.done:
            return
        assert pa.way_forward(self.st) is not None, self.st
        st = self.st
        creating, deleting, telling = self.creating, self.deleting, self.telling
        for _ in range(5):
            answers: list[Any] = []
            if creating:
                answers.append(pa.CreateFailed(error="forbidden"))
            if telling:
                answers.append(pa.PodsScheduledTold())
            if deleting:
                answers.append(pa.Deleted())
            creating = deleting = telling = False
            for event in [*answers, pa.Settle()]:
                st, commands = pa.step(st, event, T0 + timedelta(seconds=self.seconds), 0.5)
                for c in commands:
                    creating |= isinstance(c, pa.Create)
                    deleting |= isinstance(c, pa.Delete)
                    telling |= isinstance(c, pa.TellPodsScheduled)
            if st.done:
                return
        raise AssertionError(f"told to delete, it never ends: {st}")


AttemptModel.TestCase.settings = settings(
    max_examples=60, stateful_step_count=30, deadline=None, derandomize=True, database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestAttemptModel = AttemptModel.TestCase
