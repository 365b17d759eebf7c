"""The simulated cluster autoscaler (admitflow/simulation/autoscaler.py): fitting requests into node
groups, the cluster autoscaler's conditions and timers (reference provisioning-request-api.md
§1.3-1.6), revocation, conditions set by hand, and the catalog's node-group pushes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from admitflow.admission import catalog
from admitflow.admission.catalog import CatalogState, ObjectRef
from admitflow.api.node_group import SimulatedNodeGroup
from admitflow.api.provisioning_request import PodTemplate, ProvisioningRequest
from admitflow.simulation import autoscaler as sim
from admitflow.simulation.autoscaler import AutoscalerError, AutoscalerState
from tests.builders import manifest

T0 = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
GPU = "nvidia.com/gpu"
CHECK = "check-capacity.autoscaling.x-k8s.io"
ATOMIC = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def group(name: str = "pool", capacity: dict[str, str] | None = None, created: datetime = T0, **spec: Any) -> SimulatedNodeGroup:
    g = manifest(
        {
            "apiVersion": "admitflow.io/v1",
            "kind": "SimulatedNodeGroup",
            "metadata": {"name": name},
            "spec": {"capacity": capacity or {GPU: "4", "cpu": "16"}, **spec},
        }
    )
    g.metadata.creation_timestamp = created
    return g


def provreq(
    name: str, gpus: int = 1, count: int = 1, cls: str = CHECK, no_retry: bool = False,
    selector: dict[str, str] | None = None, namespace: str = "default", templates: bool = True,
) -> tuple[ProvisioningRequest, list[PodTemplate]]:
    """A request for `count` pods of one template asking for `gpus` GPUs and 1 cpu each."""
    template = f"ppt-{name}-main"
    request = ProvisioningRequest.model_validate(
        {
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "provisioningClassName": cls,
                "parameters": {"noRetry": "true"} if no_retry else {},
                "podSets": [{"podTemplateRef": {"name": template}, "count": count}],
            },
        }
    )
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}, "limits": {GPU: str(gpus)}}}]}
    if selector:
        spec["nodeSelector"] = selector
    pt = PodTemplate.model_validate({"metadata": {"name": template, "namespace": namespace}, "template": {"spec": spec}})
    return request, [pt] if templates else []


def cluster(*groups: SimulatedNodeGroup) -> AutoscalerState:
    st = AutoscalerState()
    sim.set_node_groups(st, groups, 1, T0)
    return st


def uids():
    n = iter(range(1, 1000))
    return lambda: f"uid-{next(n)}"


_UIDS = uids()


def create(st: AutoscalerState, name: str, when: datetime = T0, **kw: Any) -> list[sim.Push]:
    """Create a request and run the pass the workflow runs right after."""
    request, templates = provreq(name, **kw)
    _, pushes = sim.create(st, request, templates, f"watcher/{name}", when, _UIDS)
    return pushes + sim.step(st, when)


def cond(st: AutoscalerState, name: str, type_: str, namespace: str = "default") -> tuple[str, str, str] | None:
    c = st.requests[f"{namespace}/{name}"].request.condition(type_)
    return (c.status, c.reason, c.message) if c else None


def holds(st: AutoscalerState, name: str) -> str | None:
    return st.requests[f"default/{name}"].node_group


def details(st: AutoscalerState, name: str) -> dict[str, str] | None:
    return st.requests[f"default/{name}"].request.status.provisioning_class_details


FOUND = ("True", "CapacityIsFound", "Capacity is found in the cluster")
NOT_FOUND = ("False", "CapacityIsNotFound", "Capacity is not found, CA will try to find it later.")
FAILED = ("True", "CapacityIsNotFound", "CA could not find requested capacity")


# --- creation -------------------------------------------------------------------------------------


def test_creation_accepts_and_stamps_metadata():
    st = cluster(group())
    request, templates = provreq("job-prov-1")
    stored, pushes = sim.create(st, request, templates, "provisioning/default/job/prov/1", at(0.4), uids())
    assert stored.metadata.uid == "uid-1"
    assert stored.metadata.resource_version == "1"
    assert stored.metadata.creation_timestamp == T0
    assert [(c.type, c.status, c.reason, c.message) for c in stored.status.conditions] == [
        ("Accepted", "True", "Accepted", "ProvisioningRequest is accepted by ClusterAutoscaler")
    ]
    assert [(p.watcher, p.request.metadata.resource_version) for p in pushes] == [("provisioning/default/job/prov/1", "1")]


def test_creating_the_same_name_again_returns_the_stored_request_unchanged():
    st = cluster(group())
    create(st, "job-prov-1")
    request, templates = provreq("job-prov-1", gpus=3)
    again, pushes = sim.create(st, request, templates, "someone-else", at(5), uids())
    assert pushes == []
    assert again.metadata.uid == st.requests["default/job-prov-1"].request.metadata.uid
    assert again.metadata.resource_version == "2", "Accepted, then Provisioned"
    assert cond(st, "job-prov-1", "Provisioned") == FOUND


def test_every_write_bumps_the_resource_version_and_is_pushed():
    st = cluster(group(provisioningDelaySeconds=30))
    pushes = create(st, "a", cls=ATOMIC)
    pushes += sim.step(st, at(30))
    pushes += sim.pods_scheduled(st, "default", "a", at(40))
    assert [(p.request.metadata.resource_version, [c.type for c in p.request.status.conditions]) for p in pushes] == [
        ("1", ["Accepted"]),
        ("2", ["Accepted", "Provisioned"]),
        ("3", ["Accepted", "Provisioned", "BookingExpired"]),
    ]
    assert {p.watcher for p in pushes} == {"watcher/a"}


# --- fitting --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("groups", "request_", "provisioned", "failed", "node_group"),
    [
        pytest.param([group()], {"gpus": 2, "count": 2}, FOUND, None, "pool", id="a-request-that-fits-is-provisioned-at-once"),
        pytest.param([group()], {"gpus": 1, "count": 5}, NOT_FOUND, None, None, id="more-than-the-capacity-waits"),
        pytest.param(
            [group(capacity={"cpu": "16"})], {"gpus": 1}, NOT_FOUND, None, None,
            id="a-resource-the-group-does-not-list-does-not-fit",
        ),
        pytest.param(
            [group(labels={"accelerator": "a100", "zone": "a"})], {"selector": {"accelerator": "a100"}}, FOUND, None, "pool",
            id="labels-that-include-the-node-selector-fit",
        ),
        pytest.param(
            [group(labels={"accelerator": "h100"})], {"selector": {"accelerator": "a100"}}, NOT_FOUND, None, None,
            id="labels-that-contradict-the-node-selector-do-not-fit",
        ),
        pytest.param(
            [group(labels=None)], {"selector": {"accelerator": "a100"}}, NOT_FOUND, None, None,
            id="a-group-without-labels-fits-no-node-selector",
        ),
        pytest.param([group("b"), group("a")], {}, FOUND, None, "a", id="groups-are-tried-in-name-order"),
        pytest.param(
            [group("a", capacity={GPU: "1", "cpu": "1"}), group("b")], {"gpus": 2}, FOUND, None, "b",
            id="the-first-group-with-room-is-taken",
        ),
        pytest.param([group()], {"gpus": 5, "no_retry": True}, None, FAILED, None, id="no-retry-fails-instead-of-waiting"),
        pytest.param([], {}, NOT_FOUND, None, None, id="without-node-groups-nothing-fits"),
        pytest.param(
            [group(availableAfterSeconds=40)], {}, NOT_FOUND, None, None, id="a-group-still-out-of-stock-does-not-fit"
        ),
        pytest.param(
            [group(provisioningDelaySeconds=300)], {}, FOUND, None, "pool",
            id="check-capacity-ignores-the-provisioning-delay",
        ),
        pytest.param(
            [group()], {"cls": ATOMIC}, ("True", "CapacityIsProvisioned", "Capacity is found in the cluster"), None, "pool",
            id="a-scale-up-class-without-delay-is-provisioned-at-once",
        ),
        pytest.param(
            [group()], {"templates": False}, None,
            ("True", "FailedToCreatePods", 'Couldn\'t create pods, err: podtemplates "ppt-job-main" not found'), None,
            id="a-missing-pod-template-fails-the-request",
        ),
    ],
)
def test_fitting(groups, request_, provisioned, failed, node_group):
    st = cluster(*groups)
    create(st, "job", **request_)
    assert cond(st, "job", "Provisioned") == provisioned
    assert cond(st, "job", "Failed") == failed
    assert holds(st, "job") == node_group


def test_provisioned_details_name_the_node_group_and_add_the_class_details():
    st = cluster(group(classDetails={"zone": "eu-1"}))
    create(st, "job")
    assert details(st, "job") == {"nodeGroup": "pool", "zone": "eu-1"}


def test_requests_share_a_group_until_it_is_full():
    st = cluster(group())
    for name in ("a", "b", "c"):
        create(st, name, gpus=2)
    assert [cond(st, n, "Provisioned")[0] for n in ("a", "b", "c")] == ["True", "True", "False"]
    assert sim.usage(st) == {"pool": {"cpu": "2", GPU: "4"}}


# --- waiting and trying again -----------------------------------------------------------------------


def test_waiting_requests_try_again_after_the_autoscalers_backoff():
    st = cluster(group())
    create(st, "big", gpus=5)
    waits, now = [], T0
    for _ in range(6):
        due = sim.next_due(st, now)
        waits.append((due.at - now).total_seconds())
        now = due.at
        pushes = sim.step(st, now)
        assert [p.request.condition("Provisioned").last_transition_time for p in pushes] == [now], "each try is written"
    assert waits == [60, 120, 240, 480, 600, 600]
    assert cond(st, "big", "Provisioned") == NOT_FOUND
    assert sim.next_due(st, T0).summary == "try big again"


@pytest.mark.parametrize(
    ("release", "when"),
    [
        pytest.param(lambda st: sim.delete(st, "default", "first", at(10)), 10, id="deleting-the-holder"),
        pytest.param(lambda st: sim.set_condition(st, "default", "first", "Failed", at(10)), 10, id="failing-the-holder-by-hand"),
        pytest.param(lambda st: None, 600, id="the-holders-booking-expiring"),
        pytest.param(lambda st: sim.set_node_groups(st, [group(capacity={GPU: "8", "cpu": "16"})], 2, at(10)), 10, id="the-group-growing"),
    ],
)
def test_released_capacity_makes_a_waiting_request_fit_at_once(release, when):
    st = cluster(group())
    create(st, "first", gpus=4)
    create(st, "second", gpus=4)
    assert cond(st, "second", "Provisioned") == NOT_FOUND
    release(st)
    sim.step(st, at(when))
    assert cond(st, "second", "Provisioned") == FOUND
    assert st.requests["default/second"].request.condition("Provisioned").last_transition_time == at(when)


def test_a_group_coming_online_wakes_waiting_requests_before_their_backoff():
    st = cluster(group(availableAfterSeconds=40))
    create(st, "job")
    due = sim.next_due(st, T0)
    assert (due.at, due.summary) == (at(40), "node group pool comes online")
    assert sim.step(st, at(39)) == []
    sim.step(st, at(40))
    assert cond(st, "job", "Provisioned") == FOUND


def test_available_after_counts_from_when_the_group_was_first_applied():
    st = cluster(group(availableAfterSeconds=40, created=at(-30)))
    create(st, "job")
    assert cond(st, "job", "Provisioned") == NOT_FOUND
    sim.step(st, at(10))
    assert cond(st, "job", "Provisioned") == FOUND


def test_a_request_not_provisioned_within_seven_days_fails_as_expired():
    st = cluster(group())
    create(st, "big", gpus=5)
    week = timedelta(days=7).total_seconds()
    sim.step(st, at(week - 1))
    assert cond(st, "big", "Failed") is None
    sim.step(st, at(week))
    assert cond(st, "big", "Failed") == ("True", "Expired", "ProvisioningRequest is expired")
    assert sim.next_due(st, at(week)) is None


# --- provisioning delay, booking, consumption --------------------------------------------------------


def test_a_scale_up_holds_capacity_from_the_start_and_is_provisioned_after_the_delay():
    st = cluster(group(provisioningDelaySeconds=30))
    create(st, "a", cls=ATOMIC, gpus=4)
    assert cond(st, "a", "Provisioned") is None
    assert holds(st, "a") == "pool"
    create(st, "b", cls=ATOMIC, gpus=1, when=at(1))
    assert cond(st, "b", "Provisioned") == NOT_FOUND, "the capacity is held while it is being provisioned"
    due = sim.next_due(st, at(1))
    assert (due.at, due.summary) == (at(30), "a provisioned in pool")
    sim.step(st, at(29))
    assert cond(st, "a", "Provisioned") is None
    sim.step(st, at(30))
    assert cond(st, "a", "Provisioned") == ("True", "CapacityIsProvisioned", "Capacity is found in the cluster")
    assert details(st, "a") == {"nodeGroup": "pool"}


def test_an_unconsumed_booking_expires_ten_minutes_after_provisioned_and_frees_the_capacity():
    st = cluster(group())
    create(st, "a", gpus=4)
    assert sim.next_due(st, T0).summary == "booking of a expires"
    sim.step(st, at(599))
    assert cond(st, "a", "BookingExpired") is None
    sim.step(st, at(600))
    assert cond(st, "a", "BookingExpired") == ("True", "CapacityReservationTimeExpired", "Capacity reservation time is expired")
    assert holds(st, "a") is None
    assert sim.usage(st) == {"pool": {}}


def test_a_consumed_booking_keeps_its_capacity_until_the_request_is_deleted():
    st = cluster(group())
    create(st, "a", gpus=4)
    assert len(sim.pods_scheduled(st, "default", "a", at(100))) == 1
    assert cond(st, "a", "BookingExpired") == ("True", "CapacityBookingConsumed", "Capacity booking consumed: all pods scheduled")
    assert sim.next_due(st, at(100)) is None, "no booking expiry any more"
    sim.step(st, at(100_000))
    create(st, "b", when=at(100_000))
    assert cond(st, "b", "Provisioned") == NOT_FOUND
    assert sim.delete(st, "default", "a", at(100_001)) is True
    sim.step(st, at(100_001))
    assert cond(st, "b", "Provisioned") == FOUND


@pytest.mark.parametrize(
    ("setup", "when"),
    [
        pytest.param({"gpus": 5}, 10, id="a-request-not-provisioned-is-not-consumed"),
        pytest.param({}, 700, id="an-expired-booking-is-not-consumed"),
    ],
)
def test_pods_scheduled_without_a_live_booking_changes_nothing(setup, when):
    st = cluster(group())
    create(st, "a", **setup)
    sim.step(st, at(when))
    version = st.resource_version
    assert sim.pods_scheduled(st, "default", "a", at(when)) == []
    assert sim.pods_scheduled(st, "default", "nobody", at(when)) == []
    assert st.resource_version == version


# --- revocation -------------------------------------------------------------------------------------


def test_a_shrinking_group_revokes_its_newest_requests_until_the_rest_fits():
    st = cluster(group())
    for name in ("a", "b", "c", "d"):
        create(st, name)
    pushes = sim.set_node_groups(st, [group(capacity={GPU: "2", "cpu": "16"})], 2, at(10))
    assert [(p.request.metadata.name, p.request.condition("CapacityRevoked").reason) for p in pushes] == [
        ("d", "CapacityRevoked"), ("c", "CapacityRevoked"),
    ]
    assert cond(st, "d", "CapacityRevoked") == ("True", "CapacityRevoked", "Capacity revoked: node group pool shrank")
    assert [holds(st, n) for n in ("a", "b", "c", "d")] == ["pool", "pool", None, None]
    sim.step(st, at(600))
    assert cond(st, "c", "BookingExpired") is None, "a revoked request is done"


def test_deleting_a_group_revokes_everything_it_holds():
    st = cluster(group("pool"), group("spare"))
    create(st, "a")
    sim.pods_scheduled(st, "default", "a", at(1))
    pushes = sim.set_node_groups(st, [group("spare")], 2, at(10))
    assert [p.request.metadata.name for p in pushes] == ["a"]
    assert cond(st, "a", "CapacityRevoked") == ("True", "CapacityRevoked", "Capacity revoked: node group pool was deleted")


def test_a_scale_up_cut_short_by_a_shrinking_group_waits_for_capacity_again():
    st = cluster(group("a", provisioningDelaySeconds=60), group("b", provisioningDelaySeconds=60))
    create(st, "job", cls=ATOMIC, gpus=4)
    assert holds(st, "job") == "a"
    pushes = sim.set_node_groups(st, [group("a", capacity={"cpu": "1"}), group("b", provisioningDelaySeconds=60)], 2, at(10))
    assert pushes == []
    sim.step(st, at(10))
    assert holds(st, "job") == "b"
    assert cond(st, "job", "CapacityRevoked") is None


def test_node_groups_from_an_older_catalog_revision_are_ignored():
    st = cluster(group())
    sim.set_node_groups(st, [group(capacity={"cpu": "1"})], 5, T0)
    assert sim.set_node_groups(st, [], 4, T0) == []
    assert sim.usage(st) == {"pool": {}}
    assert st.node_groups["pool"].spec.capacity == {"cpu": "1"}


# --- conditions set by hand -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("start", "type_", "status", "holds_after", "automatic_after"),
    [
        pytest.param("waiting", "Provisioned", "True", None, False, id="provisioned-by-hand-holds-no-capacity-and-stops-retries"),
        pytest.param("booked", "Provisioned", "True", None, False, id="provisioned-by-hand-over-a-booking-releases-it"),
        pytest.param("booked", "Failed", "True", None, False, id="failed-by-hand-releases-and-stops-the-booking-expiry"),
        pytest.param("booked", "BookingExpired", "True", None, False, id="booking-expired-by-hand-releases-an-unconsumed-booking"),
        pytest.param("consumed", "BookingExpired", "True", "pool", False, id="booking-expired-by-hand-keeps-a-consumed-booking"),
        pytest.param("consumed", "CapacityRevoked", "True", None, False, id="revoked-by-hand-releases-even-a-consumed-booking"),
        pytest.param("waiting", "Provisioned", "False", None, True, id="provisioned-false-by-hand-is-written-and-retries-go-on"),
        pytest.param("booked", "Failed", "False", "pool", True, id="a-terminal-condition-set-false-changes-nothing-else"),
        pytest.param("waiting", "Accepted", "Unknown", None, True, id="accepted-by-hand-is-only-written"),
    ],
)
def test_set_condition_by_hand(start, type_, status, holds_after, automatic_after):
    st = cluster(group())
    create(st, "job", gpus=5 if start == "waiting" else 4)
    if start == "consumed":
        sim.pods_scheduled(st, "default", "job", T0)
    stored, pushes = sim.set_condition(st, "default", "job", type_, at(5), status=status, message="by a test", details={"eta": "1h"})
    assert [p.request for p in pushes] == [stored]
    c = stored.condition(type_)
    assert (c.status, c.reason, c.message, c.last_transition_time) == (status, "SetByHand", "by a test", at(5))
    assert stored.status.provisioning_class_details["eta"] == "1h"
    assert holds(st, "job") == holds_after
    assert (sim.next_due(st, at(5)) is not None) == automatic_after


def test_capacity_freed_by_hand_goes_to_the_next_waiting_request():
    st = cluster(group())
    create(st, "first", gpus=4)
    create(st, "second", gpus=4)
    sim.set_condition(st, "default", "first", "Provisioned", at(5))
    sim.step(st, at(5))
    assert cond(st, "second", "Provisioned") == FOUND


@pytest.mark.parametrize(
    ("name", "type_", "status", "reason", "message"),
    [
        pytest.param("nobody", "Failed", "True", "R", 'provisioningrequests.autoscaling.x-k8s.io "nobody" not found', id="an-unknown-request"),
        pytest.param(
            "job", "Ready", "True", "R",
            'unknown condition type "Ready": must be one of Accepted, Provisioned, Failed, BookingExpired, CapacityRevoked',
            id="an-unknown-condition-type",
        ),
        pytest.param("job", "Failed", "Yes", "R", 'condition status "Yes": must be True, False or Unknown', id="a-status-that-is-not-true-false-or-unknown"),
        pytest.param(
            "job", "Failed", "True", "not camel",
            'condition reason "not camel": must be CamelCase: a letter, then letters, digits, "_", "," or ":"',
            id="a-reason-that-is-not-camel-case",
        ),
    ],
)
def test_set_condition_refusals_change_nothing(name, type_, status, reason, message):
    st = cluster(group())
    create(st, "job")
    before = st.model_dump()
    with pytest.raises(AutoscalerError) as err:
        sim.set_condition(st, "default", name, type_, at(5), status=status, reason=reason)
    assert str(err.value) == message
    assert st.model_dump() == before


# --- the catalog's side -----------------------------------------------------------------------------


def node_group_manifest(name: str = "pool", gpus: str = "8") -> dict[str, Any]:
    return {"apiVersion": "admitflow.io/v1", "kind": "SimulatedNodeGroup", "metadata": {"name": name}, "spec": {"capacity": {GPU: gpus}}}


def test_the_catalog_sends_node_groups_only_when_they_change():
    st = CatalogState()
    assert catalog.changed_node_groups(st) is None, "nothing is sent while there never were node groups"
    catalog.apply(st, [manifest(node_group_manifest("b")), manifest(node_group_manifest("a"))], uids(), T0)
    assert [g.metadata.name for g in catalog.changed_node_groups(st)] == ["a", "b"]
    assert catalog.changed_node_groups(st) is None
    catalog.apply(st, [manifest({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "f"}})], uids(), T0)
    assert catalog.changed_node_groups(st) is None, "other kinds do not concern the autoscaler"
    catalog.apply(st, [manifest(node_group_manifest("a", gpus="4"))], uids(), at(5))
    (a, _b) = catalog.changed_node_groups(st)
    assert (a.spec.capacity, a.metadata.creation_timestamp) == ({GPU: "4"}, T0), "first applied stays the first apply"
    catalog.delete(st, [ObjectRef(kind="SimulatedNodeGroup", key="a"), ObjectRef(kind="SimulatedNodeGroup", key="b")], at(6))
    assert catalog.changed_node_groups(st) == [], "deleting the last group is sent too"
