"""AdmissionGatedBy: the annotation's rules (Kueue's webhook, pkg/util/webhook/validation_admissiongatedby.go
and its table in pkg/webhooks/workload_webhook_test.go), which gates a removal leaves, and what the
gates do to a workload's lifecycle, stepped through `lifecycle.step` as the workflow runs it."""

from __future__ import annotations

from datetime import timedelta

import pytest

from admitflow.admission import admission_gates as ag
from admitflow.admission import explain
from admitflow.admission import lifecycle as lc
from admitflow.admission import intake
from admitflow.admission import workload as wl
from admitflow.admission.workload import WorkloadState
from admitflow.wire import Undecodable
from tests.builders import manifest, workload_manifest
from tests.unit.test_workload_status import T0

PATH = "metadata.annotations[kueue.x-k8s.io/admission-gated-by]"


# --- the annotation, as Kueue's webhook checks it ----------------------------------------------


@pytest.mark.parametrize(
    ("value", "errors"),
    [
        pytest.param("example.com/controller", [], id="one-gate-is-valid"),
        pytest.param("example.com/a,not.example.com/b", [], id="two-gates-are-valid"),
        pytest.param(" example.com/gate", [], id="a-leading-space-is-trimmed"),
        pytest.param("example.com/gate ,example.com/gate2", [], id="a-space-before-a-comma-is-trimmed"),
        pytest.param("example.com/gate, example.com/gate2", [], id="a-space-after-a-comma-is-trimmed"),
        pytest.param("example.com/gate ", [], id="a-trailing-space-is-trimmed"),
        pytest.param("", [], id="an-empty-value-names-no-gate"),
        pytest.param("  ", [], id="a-blank-value-names-no-gate"),
        pytest.param(
            "this is an invalid value",
            [f'{PATH}: Invalid value: "this is an invalid value": must be a domain-prefixed path (such as "acme.io/foo")'],
            id="a-name-without-a-domain-is-refused",
        ),
        pytest.param(
            "duplicates.are/invalid,duplicates.are/invalid",
            [f'{PATH}: Invalid value: "duplicates.are/invalid,duplicates.are/invalid": duplicate gate name: duplicates.are/invalid'],
            id="a-gate-named-twice-is-refused",
        ),
        pytest.param(
            "example.com/gate name",
            [f"{PATH}: Invalid value: \"gate name\": Invalid path (regex used for validation is '[A-Za-z0-9/\\-._~%!$&'()*+,;=:]+')"],
            id="a-space-in-the-path-is-refused",
        ),
        pytest.param(
            "valid.com/gate,,other.com/gate",
            [f'{PATH}: Invalid value: "valid.com/gate,,other.com/gate": cannot contain empty gate names'],
            id="an-empty-name-between-commas-is-refused",
        ),
        pytest.param(
            "example.com/" + "x" * 52,
            [f"{PATH}: Too long: may not be more than 63 bytes"],
            id="a-name-past-63-characters-is-refused",
        ),
        pytest.param("example.com/" + "x" * 51, [], id="a-name-of-63-characters-is-valid"),
    ],
)
def test_format(value, errors):
    assert [str(e) for e in ag.format_errors(value)] == errors


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("example .com/gate", id="a-space-in-the-domain"),
        pytest.param("valid.com/gate,invalid gate.com/controller", id="one-bad-gate-among-good-ones"),
        pytest.param("Example.com/gate", id="an-upper-case-domain"),
        pytest.param("example.com/", id="nothing-after-the-slash"),
        pytest.param("/gate", id="nothing-before-the-slash"),
        pytest.param("example.com/a,", id="a-trailing-comma"),
    ],
)
def test_kueue_refuses_these_too(value):
    assert ag.format_errors(value)


@pytest.mark.parametrize(
    ("old", "new", "errors"),
    [
        pytest.param(None, "example.com/controller", [f"{PATH}: Forbidden: cannot add admission gate after creation"],
                     id="a-gate-cannot-be-added-after-creation"),
        pytest.param("", "example.com/controller", [f"{PATH}: Forbidden: cannot add admission gate after creation"],
                     id="nor-to-an-empty-annotation"),
        pytest.param("example.com/controller1", None, [], id="the-only-gate-may-be-removed"),
        pytest.param("example.com/controller1,example.com/controller2", None, [], id="every-gate-may-be-removed-at-once"),
        pytest.param("example.com/controller1,example.com/controller2", "example.com/controller2", [], id="one-gate-may-be-removed"),
        pytest.param("example.com/controller1,example.com/controller2", "example.com/controller3",
                     [f"{PATH}: Forbidden: can only remove gates, not add new ones"], id="a-new-gate-cannot-be-slipped-in"),
        pytest.param("example.com/controller1,example.com/controller2", "example.com/controller2, example.com/controller1", [],
                     id="gates-may-be-reordered"),
        pytest.param("example.com/a,example.com/b", "example.com/a,example.com/a",
                     [f'{PATH}: Invalid value: "example.com/a,example.com/a": duplicate gate name: example.com/a'],
                     id="the-new-value-must-be-well-formed"),
        pytest.param(None, None, [], id="no-annotation-before-or-after"),
    ],
)
def test_update(old, new, errors):
    assert [str(e) for e in ag.update_errors(old, new)] == errors


@pytest.mark.parametrize(
    ("old", "new", "removed"),
    [
        pytest.param("a.io/x,b.io/y", "b.io/y", ["a.io/x"], id="the-gate-left-out-is-removed"),
        pytest.param("a.io/x,b.io/y", None, ["a.io/x", "b.io/y"], id="no-annotation-removes-every-gate"),
        pytest.param("a.io/x,b.io/y", "b.io/y,a.io/x", [], id="a-reordering-removes-nothing"),
        pytest.param(None, None, [], id="nothing-to-remove"),
    ],
)
def test_what_an_update_removes(old, new, removed):
    assert ag.removed_by_update(old, new) == removed


# --- a removal: which gates remain --------------------------------------------------------------


@pytest.mark.parametrize(
    ("current", "removal", "left"),
    [
        pytest.param(["a.io/x", "b.io/y"], {"gates": ["a.io/x"]}, ["b.io/y"], id="removing-one-of-two-keeps-the-other"),
        pytest.param(["a.io/x", "b.io/y"], {"gates": ["b.io/y", "a.io/x"]}, [], id="removing-both-by-name-leaves-none"),
        pytest.param(["a.io/x", "b.io/y"], {"all": True}, [], id="all-leaves-none"),
        pytest.param(["a.io/x"], {"gates": [" a.io/x "]}, [], id="a-name-is-trimmed-as-the-annotation-is"),
        pytest.param(["a.io/x", "b.io/y"], {"gates": ["c.io/z"]},
                     "workload default/job is not gated by c.io/z (its gates: a.io/x, b.io/y)", id="a-gate-it-does-not-have-is-refused"),
        pytest.param(["a.io/x", "b.io/y"], {"gates": ["a.io/x", "c.io/z"]},
                     "workload default/job is not gated by c.io/z (its gates: a.io/x, b.io/y)",
                     id="one-unknown-gate-refuses-the-whole-removal"),
        pytest.param([], {"gates": ["a.io/x"]},
                     "workload default/job is not gated: it has no kueue.x-k8s.io/admission-gated-by annotation",
                     id="a-workload-that-is-not-gated-refuses"),
        pytest.param([], {"all": True},
                     "workload default/job is not gated: it has no kueue.x-k8s.io/admission-gated-by annotation",
                     id="even-all"),
    ],
)
def test_remaining(current, removal, left):
    if isinstance(left, str):
        with pytest.raises(ag.GateError) as err:
            ag.remaining(current, ag.parse(removal), "default/job")
        assert str(err.value) == left
    else:
        assert ag.remaining(current, ag.parse(removal), "default/job") == left


@pytest.mark.parametrize(
    ("args", "error"),
    [
        pytest.param((None,), "invalid admission gate removal: removal: Input should be an object", id="null"),
        pytest.param(("a.io/x",), "invalid admission gate removal: removal: Input should be an object", id="a-bare-string"),
        pytest.param(({"gates": "a.io/x"},), "invalid admission gate removal: gates: Input should be a valid array", id="gates-not-a-list"),
        pytest.param(({"gates": [7]},), "invalid admission gate removal: gates.0: Input should be a valid string", id="a-gate-not-a-string"),
        pytest.param(({},), "invalid admission gate removal: name the gates to remove (gates), or all", id="nothing-named"),
        pytest.param(({"gates": []},), "invalid admission gate removal: name the gates to remove (gates), or all", id="an-empty-list"),
        pytest.param(({"gates": ["a.io/x"], "all": True},), "invalid admission gate removal: give either gates or all, not both",
                     id="both-gates-and-all"),
        pytest.param(({"gates": ["a.io/x", "a.io/x"]},), "invalid admission gate removal: gates: duplicate gate name: a.io/x",
                     id="a-gate-twice"),
        pytest.param(({"gates": [" "]},), "invalid admission gate removal: gates: cannot contain empty gate names", id="a-blank-name"),
        pytest.param(({"all": True}, {"all": True}), "invalid admission gate removal: expected one payload, got 2 arguments",
                     id="two-arguments"),
    ],
)
def test_a_malformed_removal_is_refused_in_one_line(args, error):
    refused = intake.gate_removal(*args)
    assert isinstance(refused, lc.Refused) and (refused.reason, refused.detail) == (ag.REFUSED, error)


def test_a_removal_the_worker_cannot_decode_is_not_applied_with_the_reason():
    refused = intake.gate_removal(Undecodable(encoding="binary/zlib", reason="does not decompress"))
    assert (refused.reason, refused.detail) == (lc.NOT_APPLIED, "AdmissionGatesRemoved not applied: does not decompress")


# --- what the gates do, through lifecycle.step ----------------------------------------------------


NO_ARGUMENT = object()  # a removal sent with no payload at all


def gated(value: str | None) -> WorkloadState:
    """A submitted workload with this annotation, its run started and settled once."""
    m = workload_manifest("job")
    if value is not None:
        m["metadata"]["annotations"] = {ag.ANNOTATION: value, "other": "kept"}
    st = wl.new_state(manifest(m), "uid-1", T0)
    st, _ = lc.step(st, lc.Started(), T0, 0.0)
    return settle(st, 0)[0]


def settle(st: WorkloadState, seconds: int, *events) -> tuple[WorkloadState, list]:
    commands: list = []
    for ev in [*events, lc.Settle()]:
        st, out = lc.step(st, ev, T0 + timedelta(seconds=seconds), 0.0)
        commands += out
    return st, commands


def quota_reserved(st: WorkloadState) -> tuple[str, str, str]:
    c = st.status.condition(wl.QUOTA_RESERVED)
    return c.status, c.reason, c.message


def enqueues(commands: list) -> bool:
    return any(isinstance(c, lc.Enqueue) for c in commands)


def remove(**payload) -> lc.AdmissionGatesRemoved:
    return intake.gate_removal(payload)


def test_a_gated_workload_is_not_queued_and_says_why():
    m = workload_manifest("job")
    m["metadata"]["annotations"] = {ag.ANNOTATION: "example.com/a, example.com/b"}
    st = wl.new_state(manifest(m), "uid-1", T0)
    st, _ = lc.step(st, lc.Started(), T0, 0.0)
    st, commands = settle(st, 0)
    assert not enqueues(commands) and st.claim.ticket == 0 and not st.claim.queued
    assert quota_reserved(st) == ("False", "AdmissionGated", "Admission is gated by: example.com/a,example.com/b")
    assert [(e.reason, e.message) for e in st.events] == [("AdmissionGated", "Workload admission is gated by: example.com/a,example.com/b")]
    assert wl.phase(st) == "Pending"
    assert lc.way_forward(st) == "waiting for its admission gates to be removed"
    assert "admission gated by `example.com/a`, `example.com/b`" in explain.current_details(st)
    st, commands = settle(st, 30)
    assert not enqueues(commands) and len(st.events) == 1  # settled again: nothing new to say


def test_removing_one_of_two_gates_keeps_it_gated_and_the_last_one_queues_it():
    st = gated("example.com/a,example.com/b")
    st, commands = settle(st, 10, remove(gates=["example.com/a"]))
    assert not enqueues(commands)
    assert st.workload.metadata.annotations == {ag.ANNOTATION: "example.com/b", "other": "kept"}
    assert quota_reserved(st) == ("False", "AdmissionGated", "Admission is gated by: example.com/b")
    assert (st.events[-1].reason, st.events[-1].message) == ("AdmissionGated", "Workload admission is gated by: example.com/b")
    st, commands = settle(st, 20, remove(gates=["example.com/b"]))
    assert enqueues(commands)
    assert st.workload.metadata.annotations == {"other": "kept"}
    assert quota_reserved(st) == ("False", "PendingEvaluation", "AdmissionGatedBy cleared, waiting for quota reservation")
    assert (st.events[-1].reason, st.events[-1].message) == ("AdmissionGateCleared", "Admission gate cleared, workload is now admissible")
    # It enters its queue at the place its creation gives it, as any new workload.
    (enqueue,) = [c for c in commands if isinstance(c, lc.Enqueue)]
    assert enqueue.request.entry.timestamp == st.workload.metadata.creation_timestamp
    assert "admission gated" not in explain.current_details(st)


def test_all_removes_every_gate_and_the_annotation_goes():
    st = gated("example.com/a")
    st.workload.metadata.annotations = {ag.ANNOTATION: "example.com/a"}
    st, commands = settle(st, 5, remove(all=True))
    assert enqueues(commands) and st.workload.metadata.annotations is None


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param({"gates": ["example.com/c"]}, id="a-gate-it-does-not-have"),
        pytest.param({"gates": ["example.com/a", "example.com/c"]}, id="one-of-them-unknown"),
        pytest.param({"gates": "example.com/a"}, id="malformed"),
        pytest.param(None, id="null"),
        pytest.param(NO_ARGUMENT, id="no-argument"),
    ],
)
def test_a_refused_removal_changes_nothing_and_is_recorded(payload):
    before = gated("example.com/a,example.com/b")
    after, commands = settle(before, 5, intake.gate_removal() if payload is NO_ARGUMENT else intake.gate_removal(payload))
    assert not enqueues(commands)
    assert after.model_dump(exclude={"events"}) == before.model_dump(exclude={"events"})
    assert after.events[-1].type == "Warning" and after.events[-1].reason == "InvalidAdmissionGateRemoval"


def test_a_removal_to_a_workload_without_gates_changes_nothing():
    before = gated(None)
    after, _ = settle(before, 5, remove(gates=["example.com/a"]))
    assert after.model_dump(exclude={"events"}) == before.model_dump(exclude={"events"})
    assert after.events[-1].message == "workload default/job is not gated: it has no kueue.x-k8s.io/admission-gated-by annotation"


def test_deactivated_while_gated_then_ungated_then_activated_it_queues():
    st = gated("example.com/a")
    st, commands = settle(st, 5, lc.Deactivated())
    assert quota_reserved(st)[1] == "Deactivated" and not enqueues(commands)
    st, commands = settle(st, 6, remove(gates=["example.com/a"]))
    assert quota_reserved(st)[1] == "Deactivated" and not enqueues(commands)
    st, commands = settle(st, 7, lc.Activated())
    assert enqueues(commands) and quota_reserved(st)[1] == "PendingEvaluation"


def test_activated_while_still_gated_it_says_so_again():
    st = gated("example.com/a")
    st, _ = settle(st, 5, lc.Deactivated())
    st, commands = settle(st, 6, lc.Activated())
    assert not enqueues(commands)
    assert quota_reserved(st) == ("False", "AdmissionGated", "Admission is gated by: example.com/a")


def test_a_finished_workload_takes_no_removal():
    st = gated("example.com/a")
    st, _ = settle(st, 5, intake.finish({"succeeded": False, "message": "gave up"}))
    with pytest.raises(ag.GateError, match="is finished"):
        ag.validate(st, ag.parse({"gates": ["example.com/a"]}))


def test_a_continued_run_keeps_what_was_removed():
    """The state carried over continue-as-new holds the annotation as it is now."""
    st = gated("example.com/a,example.com/b")
    st, _ = settle(st, 5, remove(gates=["example.com/a"]))
    carried = WorkloadState.model_validate_json(st.model_dump_json(by_alias=True))
    carried, _ = lc.step(carried, lc.Started(), T0 + timedelta(seconds=9), 0.0)
    carried, commands = settle(carried, 9)
    assert not enqueues(commands) and ag.gates(carried.workload) == ["example.com/b"]
    carried, commands = settle(carried, 10, remove(gates=["example.com/b"]))
    assert enqueues(commands)
