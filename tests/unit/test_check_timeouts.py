"""Per-check timeouts (`spec.pendingTimeout` of an AdmissionCheck or a ProvisioningRequestConfig):
the rule's table, and the lifecycle carrying it out on its timer."""

from __future__ import annotations

from datetime import timedelta

import pytest

from admitflow.admission import check_timeouts as ct
from admitflow.admission import conditions as cond
from admitflow.admission import lifecycle as lc
from admitflow.admission import intake
from admitflow.admission import workload as wl
from admitflow.admission.cluster_queue import AdmissionCheckInfo
from admitflow.admission.workload import WorkloadState
from admitflow.api.admission_check import AdmissionCheckSpec, PendingTimeout
from admitflow.codec import DATA_CONVERTER
from tests.unit.test_lifecycle import World
from tests.unit.test_provisioning import holding
from tests.unit.test_workload_status import T0

HOUR = timedelta(hours=1)


def timed(duration: str | None, verdict: str = "Retry", **more) -> AdmissionCheckInfo:
    timeout = PendingTimeout(duration=duration, verdict=verdict) if duration else None
    return AdmissionCheckInfo(controller_name="ctl-a", active=True, pending_timeout=timeout, **more)


def world(info: AdmissionCheckInfo, after: float = 0) -> World:
    w = World()
    notice_info = {"a": info}
    w.reserve("a", after=after, checks_info=notice_info)
    return w


@pytest.mark.parametrize(
    ("info", "verdicts", "want"),
    [
        pytest.param(timed(None), [], None, id="no-timeout-no-deadline"),
        pytest.param(timed("1h"), [], HOUR, id="pending-counts-from-the-reservation"),
        pytest.param(timed("1h"), [("Pending", 600, "still looking")], HOUR, id="a-pending-verdict-does-not-restart-the-clock"),
        pytest.param(timed("1h"), [("Ready", 600, "")], None, id="a-ready-check-has-no-deadline"),
        pytest.param(timed("90s", "Rejected"), [], timedelta(seconds=90), id="rejected-on-its-own-deadline"),
    ],
)
def test_the_deadline_of_a_pending_check(info, verdicts, want):
    w = world(info)
    reserved = w.now
    for state, after, message in verdicts:
        w.batch(intake.verdict(w.verdict("a", state, message=message)), after=after)
    got = ct.deadlines(w.state).get("a")
    assert (got - reserved if got else None) == want


def test_past_its_timeout_a_check_is_treated_as_retry_and_backs_off():
    w = world(timed("1h"))
    at, summary = lc.next_wake(w.state)
    assert (at - w.now, summary) == (HOUR, "pendingTimeout of check a")
    w.batch(lc.TimerFired(at=at), after=3600)
    assert w.phase() == "Pending" and not wl.has_quota(w.state)
    evicted = cond.find(w.state.status.conditions, wl.EVICTED)
    assert (evicted.status, evicted.reason) == ("True", "AdmissionCheck")
    (check,) = w.state.status.admission_checks
    assert check.retry_count == 1
    (event,) = [e for e in w.state.events if e.reason == lc.PENDING_TIMEOUT_REASON]
    assert event.message == "Admission check a: Pending for longer than its pendingTimeout (1h): treated as Retry"
    assert w.told(w.commands)[-1] == "release"


def test_past_its_timeout_a_check_configured_rejected_deactivates():
    w = world(timed("10m", "Rejected"))
    at, _ = lc.next_wake(w.state)
    w.batch(lc.TimerFired(at=at), after=600)
    assert w.phase() == "Inactive" and w.state.workload.spec.active is False
    (check,) = w.state.status.admission_checks
    assert check.message == "Reset to Pending after eviction. Previously: Rejected"
    (event,) = [e for e in w.state.events if e.reason == lc.PENDING_TIMEOUT_REASON]
    assert event.message == "Admission check a: Pending for longer than its pendingTimeout (10m): treated as Rejected"


def test_the_clock_survives_a_continue_as_new():
    """Durable: the deadline comes from the state, so a new run (or a replay) keeps it."""
    w = world(timed("1h"))
    before = lc.next_wake(w.state)
    payloads = DATA_CONVERTER.payload_converter.to_payloads([w.state])
    w.state = DATA_CONVERTER.payload_converter.from_payloads(payloads, [WorkloadState])[0]
    w.batch(lc.Started(), after=1800)
    assert lc.next_wake(w.state) == before


def test_a_provisioning_check_takes_its_configs_timeout_and_backoff():
    st = holding(config={"pendingTimeout": {"duration": "24h"}, "retryStrategy": {"backoffBaseSeconds": 60}})
    st.checks_info["prov"] = st.checks_info["prov"].model_copy(update={"pending_timeout": PendingTimeout(duration="1h")})
    assert ct.deadlines(st) == {"prov": T0 + timedelta(hours=24)}, "the config's overrides the AdmissionCheck's"
    assert ct.due(st, T0 + timedelta(hours=23), 0.5) == []
    (v,) = ct.due(st, T0 + timedelta(hours=24), 0.5)
    assert (v.state, v.requeue_after_seconds) == ("Retry", 60)
    assert v.message.startswith("Retrying: Pending for longer than its pendingTimeout (24h)")


def test_a_provisioning_check_past_its_backoff_limit_is_rejected_on_timeout():
    st = holding(config={"pendingTimeout": {"duration": "1h"}, "retryStrategy": {"backoffLimitCount": 0}})
    (v,) = ct.due(st, T0 + HOUR, 0.5)
    assert v.state == "Rejected"


@pytest.mark.parametrize(
    ("timeout", "error"),
    [
        ({"duration": "24h"}, None),
        ({"duration": "0s"}, "spec.pendingTimeout.duration"),
        ({"duration": "-1h"}, "spec.pendingTimeout.duration"),
        ({"duration": "1h", "verdict": "Ready"}, "verdict"),
        ({"duration": "soon"}, "duration"),
    ],
)
def test_a_pending_timeout_is_validated(timeout, error):
    try:
        spec = AdmissionCheckSpec.model_validate({"controllerName": "c", "pendingTimeout": timeout})
    except ValueError as err:
        assert error is not None and error in str(err)
        return
    errors = [e.path for e in spec.validation_errors()]
    assert errors == ([] if error is None else [error])
