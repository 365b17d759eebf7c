"""One ProvisioningRequest attempt as one pure transition: decide, then execute.

`step(state, event, now, random) -> (state, [Command])` owns every rule of an attempt's workflow
(`ProvisioningCheckWorkflow`, `provisioning/<namespace>/<workload>/<check>/<attempt>`): create the
request (again, a minute after a refusal), tell the workload every change of it (pushed by the
backend, or watched), tell the backend once that the workload's pods are scheduled, and delete it
when the workload says so or is gone. The workflow only turns messages into events, runs `step`,
and carries out the commands.

Events change the state; `Settle`, which the workflow steps after every batch of messages and every
timer, orders what the state calls for and is not under way. It carries whether the server
suggests continuing as new, so that decision is made here too (never while a watch runs).

A terminal state (`done`) takes no event: nothing is reported after `Finish`. `step` never raises:
an event it cannot apply leaves the state as it was and is recorded in `not_applied`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal, Union

from pydantic import Field

from admitflow.admission import provisioning
from admitflow.api.provisioning_request import PodTemplate, ProvisioningRequest
from admitflow.wire import Fact, WireModel

# A permanent creation error (the API server refuses the object) is reported on the check and the
# request is created again after this long, as Kueue's reconcile does.
AFTER_REFUSAL = timedelta(minutes=1)
# How many `not_applied` records a state keeps (the latest).
NOT_APPLIED_KEPT = 10


class AttemptState(WireModel):
    """What an attempt was asked to do and what its workflow knows; carried across continue-as-new."""

    # What was asked.
    parent: str = Field(description="The workload workflow it reports to.")
    check: str
    attempt: int
    request: ProvisioningRequest = Field(description="The request to create.")
    pod_templates: list[PodTemplate]
    # What is known.
    latest: ProvisioningRequest | None = Field(default=None, description="The request as last reported; None until created.")
    push: bool = Field(default=True, description="The backend pushes status changes; else the request is watched.")
    pushed: list[ProvisioningRequest] = Field(default_factory=list, description="Pushes not settled yet.")
    creating: bool = Field(default=False, description="A create is under way.")
    create_failures: int = 0
    retry_create_at: datetime | None = Field(default=None, description="When a refused create is tried again.")
    watching: bool = Field(default=False, description="A watch is under way.")
    delete_asked: bool = Field(default=False, description="The workload said to delete the request.")
    parent_gone: bool = Field(default=False, description="A report found the workload gone.")
    deleting: bool = Field(default=False, description="Delete ordered.")
    deleted: bool = Field(default=False, description="Deleted by this attempt (or given up on).")
    gone: bool = Field(default=False, description="Deleted by someone else.")
    scheduled_asked: bool = Field(default=False, description="The workload said its pods are scheduled.")
    scheduled_telling: bool = False
    scheduled_told: bool = Field(default=False, description="The backend was told the pods are scheduled.")
    failed: str = Field(default="", description="Why the run failed (a watch that failed for good).")
    done: bool = Field(default=False, description="Finish ordered: the run ends.")
    not_applied: list[str] = Field(default_factory=list, description="Events step could not apply, the latest last.")

    @property
    def created(self) -> bool:
        return self.latest is not None


def new_state(
    parent: str, check: str, attempt: int, request: ProvisioningRequest, pod_templates: list[PodTemplate],
    latest: ProvisioningRequest | None = None, push: bool = True, scheduled: bool = False,
) -> AttemptState:
    """The state of a first run, or of a run continued from the loop before `step` (its input
    carried `latest`, `push` and `scheduled`: a carried `scheduled` was told already)."""
    return AttemptState(
        parent=parent, check=check, attempt=attempt, request=request, pod_templates=pod_templates,
        latest=latest, push=push, scheduled_asked=scheduled, scheduled_told=scheduled,
    )


# --- events: everything that can happen to an attempt ---------------------------------------------


class Started(Fact):
    """A run begins (the first, or after continue-as-new): nothing of an earlier run is under way."""

    kind: Literal["Started"] = "Started"


class Created(Fact):
    """The create activity came back: the request as stored, and whether its backend pushes."""

    kind: Literal["Created"] = "Created"
    request: ProvisioningRequest
    push: bool


class CreateFailed(Fact):
    """The backend refused the request for good (the message of its error)."""

    kind: Literal["CreateFailed"] = "CreateFailed"
    error: str


class Pushed(Fact):
    """A push backend signalled the request (`provisioning_request_status`)."""

    kind: Literal["Pushed"] = "Pushed"
    request: ProvisioningRequest


class Watched(Fact):
    """The watch came back: the request as it is now, None when it is gone."""

    kind: Literal["Watched"] = "Watched"
    request: ProvisioningRequest | None = None


class WatchFailed(Fact):
    """The watch failed for good (a non-retryable error: the backend has nothing to watch)."""

    kind: Literal["WatchFailed"] = "WatchFailed"
    error: str


class DeleteAsked(Fact):
    """The workload said to delete the request (`delete_provisioning_request`)."""

    kind: Literal["DeleteAsked"] = "DeleteAsked"


class PodsScheduledAsked(Fact):
    """The workload was admitted (`pods_scheduled`)."""

    kind: Literal["PodsScheduledAsked"] = "PodsScheduledAsked"


class PodsScheduledTold(Fact):
    """The `provisioning_pods_scheduled` activity came back."""

    kind: Literal["PodsScheduledTold"] = "PodsScheduledTold"


class ParentGone(Fact):
    """A report to the workload found no workflow to signal."""

    kind: Literal["ParentGone"] = "ParentGone"


class Deleted(Fact):
    """The delete activity came back; `error` when it was given up on (the request may be left)."""

    kind: Literal["Deleted"] = "Deleted"
    error: str = ""


class TimerFired(Fact):
    """The time `next_wake` named has come. Decisions are made on `at` (the deadline the timer was
    set for), never on the clock of the workflow task that runs it."""

    kind: Literal["TimerFired"] = "TimerFired"
    at: datetime | None = Field(default=None, description="The deadline it was set for; None: `now`.")


class Settle(Fact):
    """A batch of messages, or a timer, has been stepped: order what the state now calls for."""

    kind: Literal["Settle"] = "Settle"
    continue_as_new_suggested: bool = False


Event = Annotated[
    Union[
        Started, Created, CreateFailed, Pushed, Watched, WatchFailed, DeleteAsked, PodsScheduledAsked, PodsScheduledTold,
        ParentGone, Deleted, TimerFired, Settle,
    ],
    Field(discriminator="kind"),
]


# --- commands: everything an attempt does ---------------------------------------------------------


class Create(Fact):
    """Run `create_provisioning_request` (the PodTemplates, then the request); answers `Created` or
    `CreateFailed`."""

    kind: Literal["Create"] = "Create"
    request: ProvisioningRequest
    pod_templates: list[PodTemplate]


class Report(Fact):
    """Signal the workload: `provisioning_request_updated` with the request or the error, else
    `provisioning_request_deleted`. Answers `ParentGone` when the workload is gone."""

    kind: Literal["Report"] = "Report"
    request: ProvisioningRequest | None = None
    error: str = ""

    @property
    def deleted(self) -> bool:
        return self.request is None and not self.error


class Watch(Fact):
    """Start `watch_provisioning_request` from this version; answers `Watched` or `WatchFailed`."""

    kind: Literal["Watch"] = "Watch"
    resource_version: str = ""


class StopWatching(Fact):
    """Cancel the watch under way and wait for it to end."""

    kind: Literal["StopWatching"] = "StopWatching"


class TellPodsScheduled(Fact):
    """Run `provisioning_pods_scheduled`; answers `PodsScheduledTold`."""

    kind: Literal["TellPodsScheduled"] = "TellPodsScheduled"


class Delete(Fact):
    """Run `delete_provisioning_request`, given up after a bound; answers `Deleted`."""

    kind: Literal["Delete"] = "Delete"


class ContinueAsNew(Fact):
    """Continue as new with the state, unless messages arrived meanwhile."""

    kind: Literal["ContinueAsNew"] = "ContinueAsNew"


class Finish(Fact):
    """End the run; with `error`, as failed."""

    kind: Literal["Finish"] = "Finish"
    error: str = ""


Command = Annotated[
    Union[Create, Report, Watch, StopWatching, TellPodsScheduled, Delete, ContinueAsNew, Finish],
    Field(discriminator="kind"),
]


# --- the transition -------------------------------------------------------------------------------


def step(state: AttemptState, event: Event, now: datetime, random: float) -> tuple[AttemptState, list[Command]]:
    """The state after `event` at `now`, and what to do. Total: any event in any state returns; one
    it cannot apply leaves the state as it was, recorded in `not_applied`. A finished attempt takes
    no event."""
    new = state.model_copy(deep=True)
    if new.done:
        return new, []
    try:
        return new, _HANDLERS[type(event)](new, event, now)
    except Exception as err:  # noqa: BLE001 - no message may fail a workflow task
        kept = state.model_copy(deep=True)
        kept.not_applied = [*kept.not_applied, f"{type(event).__name__} not applied: {type(err).__name__}: {err}"][-NOT_APPLIED_KEPT:]
        return kept, []


def _started(st: AttemptState, ev: Started, now: datetime) -> list[Command]:
    # What an earlier run had under way did not come along; Settle orders it again.
    st.creating = st.watching = st.scheduled_telling = False
    return []


def _created(st: AttemptState, ev: Created, now: datetime) -> list[Command]:
    st.creating = False
    st.retry_create_at = None
    st.latest, st.push = ev.request, ev.push
    return [Report(request=ev.request)]


def _create_failed(st: AttemptState, ev: CreateFailed, now: datetime) -> list[Command]:
    st.creating = False
    st.create_failures += 1
    st.retry_create_at = now + AFTER_REFUSAL
    return [Report(error=f'Error creating ProvisioningRequest "{st.request.metadata.name}": {ev.error}')]


def _pushed(st: AttemptState, ev: Pushed, now: datetime) -> list[Command]:
    st.pushed.append(ev.request)  # Settle takes the batch: the last push newer than the known is news
    return []


def _watched(st: AttemptState, ev: Watched, now: datetime) -> list[Command]:
    if not st.watching:
        return []  # stopped: its result is no news
    st.watching = False
    if ev.request is None:
        # Deleted by someone else: the workload makes a new one if it still needs it.
        st.gone = st.done = True
        return [Report(), Finish()]
    if st.latest is None or ev.request.metadata.resource_version != st.latest.metadata.resource_version:
        st.latest = ev.request
        return [Report(request=ev.request)]
    return []


def _watch_failed(st: AttemptState, ev: WatchFailed, now: datetime) -> list[Command]:
    if not st.watching:
        return []
    st.watching = False
    st.failed = ev.error or "watch failed"
    st.done = True
    return [Finish(error=st.failed)]


def _delete_asked(st: AttemptState, ev: DeleteAsked, now: datetime) -> list[Command]:
    st.delete_asked = True
    return []


def _scheduled_asked(st: AttemptState, ev: PodsScheduledAsked, now: datetime) -> list[Command]:
    st.scheduled_asked = True
    return []


def _scheduled_told(st: AttemptState, ev: PodsScheduledTold, now: datetime) -> list[Command]:
    st.scheduled_telling = False
    st.scheduled_told = True
    return []


def _parent_gone(st: AttemptState, ev: ParentGone, now: datetime) -> list[Command]:
    st.parent_gone = True
    return []


def _deleted(st: AttemptState, ev: Deleted, now: datetime) -> list[Command]:
    if not st.deleting:
        return []
    st.deleted = st.done = True
    # The workload waits for this report before it can start the attempt again.
    return [Report(), Finish()]


def _timer(st: AttemptState, ev: TimerFired, now: datetime) -> list[Command]:
    at = ev.at or now
    if st.retry_create_at is not None and st.retry_create_at <= at:
        st.retry_create_at = None  # Settle creates again
    return []


# --- Settle: what the state calls for, against what is under way ----------------------------------


def _settle(st: AttemptState, ev: Settle, now: datetime) -> list[Command]:
    out: list[Command] = []
    if st.deleting:
        return out  # its Deleted ends the attempt
    if st.parent_gone and not st.creating:
        return _delete(st)
    latest = st.latest  # None until created
    if latest is not None and st.push and st.pushed:
        # Each push is compared with the request known before the batch, as the loop before did.
        fresh = [r for r in st.pushed if provisioning.newer(r, latest)]
        st.pushed = []
        if fresh:
            st.latest = latest = fresh[-1]
            out.append(Report(request=latest))
    elif latest is not None:
        st.pushed = []  # a backend that is watched pushes nothing worth keeping
    if st.delete_asked and not st.creating:
        return out + _delete(st)
    if latest is None:
        if not st.creating and st.retry_create_at is None and not st.delete_asked:
            st.creating = True
            out.append(Create(request=st.request, pod_templates=st.pod_templates))
        return out
    if st.scheduled_asked and not st.scheduled_told:
        if not st.scheduled_telling:
            st.scheduled_telling = True
            out.append(TellPodsScheduled())
        return out  # continue-as-new and the next watch wait for the answer
    if ev.continue_as_new_suggested and may_continue_as_new(st):
        return out + [ContinueAsNew()]
    if not st.push and not st.watching:
        st.watching = True
        out.append(Watch(resource_version=latest.metadata.resource_version or ""))
    return out


def _delete(st: AttemptState) -> list[Command]:
    st.deleting = True
    out: list[Command] = []
    if st.watching:
        st.watching = False
        out.append(StopWatching())
    return out + [Delete()]


def may_continue_as_new(st: AttemptState) -> bool:
    """Whether the run may continue as new once the server suggests it: the request is created,
    nothing is under way (no watch in flight), and nothing else is asked for."""
    return (
        st.created and not st.done and not st.deleting and not st.delete_asked and not st.parent_gone
        and not st.creating and not st.watching and not st.scheduled_telling
        and not (st.scheduled_asked and not st.scheduled_told)
    )


# --- timers ---------------------------------------------------------------------------------------


def next_wake(st: AttemptState) -> tuple[datetime, str] | None:
    """The one time the attempt must wake up without a message, and why (the timer's summary)."""
    if st.done or st.deleting or st.delete_asked or st.parent_gone or st.created or st.creating:
        return None
    if st.retry_create_at is not None:
        return st.retry_create_at, "create again"
    return None


def way_forward(st: AttemptState) -> str | None:
    """Why an attempt told to delete will still end, or None when nothing would move it (the model
    test asserts this never happens)."""
    if st.done:
        return "at rest"
    if st.deleting:
        return "its delete comes back"
    if st.creating:
        return "its create comes back, then it deletes"
    if st.delete_asked or st.parent_gone:
        return "the next Settle deletes"
    return None


# Each event type's handler takes that type: a table by type cannot say so, hence the Any.
_HANDLERS: dict[type[Fact], Callable[[AttemptState, Any, datetime], list[Command]]] = {
    Started: _started,
    Created: _created,
    CreateFailed: _create_failed,
    Pushed: _pushed,
    Watched: _watched,
    WatchFailed: _watch_failed,
    DeleteAsked: _delete_asked,
    PodsScheduledAsked: _scheduled_asked,
    PodsScheduledTold: _scheduled_told,
    ParentGone: _parent_gone,
    Deleted: _deleted,
    TimerFired: _timer,
    Settle: _settle,
}
