"""The argument of a message to an entity workflow (catalog, ClusterQueue, gate, ProvisioningRequest
attempt, simulated autoscaler): the one model its handler takes, or a one-line refusal.

Their handlers take `*payload: Any` rather than a typed parameter, because a typed one lets through
what fails the workflow task: the SDK hands a typed handler a `binary/null` payload (the Python
client's None) as None, and calls it with however many arguments came, so no argument or two is a
TypeError. Here the argument is checked against the handler's model, decoded from its JSON as the
SDK's pydantic converter decodes a typed argument (strict Kubernetes models included), so a valid
message does exactly what it did; anything else is refused with `invalid <name>: <reason>`:

- a signal is dropped, with a Warning `message_refused` naming it and the reason in the worker's log
  (`workflow.logger`, silent while replaying);
- an update's validator rejects it with that line (ApplicationError `InvalidMessage`), so it never
  reaches the handler nor the history;
- a query fails with that line.

A payload the engine's worker cannot decode arrives as an `Undecodable` (admitflow.codec) and is
refused with its reason.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel
from temporalio import workflow
from temporalio.exceptions import ApplicationError

from admitflow import contract
from admitflow.codec import PayloadDecodeError
from admitflow.admission.protocol import Message, Messages
from admitflow.wire import PayloadRefused, Undecodable, parse_payload

M = TypeVar("M", bound=BaseModel)
# What a handler needs of its argument beyond its model: the one-line reason it cannot take it, or None.
Check = Callable[[Any], str | None]


def parse(
    payload: tuple[Any, ...], model: type[M], *, optional: bool = False, check: Check | None = None, field: str = "payload"
) -> M:
    """The handler's model from the message's arguments (admitflow.wire.parse_payload), or
    PayloadRefused; one the worker could not decode keeps its decoding error as the cause."""
    try:
        parsed = parse_payload(payload, model, field, optional=optional)
    except PayloadRefused as err:
        undecodable = next((p for p in payload if isinstance(p, Undecodable)), None)
        raise err from (PayloadDecodeError(undecodable.reason) if undecodable is not None and len(payload) == 1 else None)
    problem = check(parsed) if check is not None else None
    if problem:
        raise PayloadRefused(problem)
    return parsed


def signal(name: str, payload: tuple[Any, ...], model: type[M], *, optional: bool = False, check: Check | None = None) -> M | None:
    """The signal's model, or None once it is refused and logged: drop the message."""
    try:
        return parse(payload, model, optional=optional, check=check)
    except PayloadRefused as err:
        workflow.logger.warning("message_refused", extra={"signal": name, "reason": f"invalid {name}: {err}"})
        return None


def update(name: str, payload: tuple[Any, ...], model: type[M], *, check: Check | None = None) -> M:
    """The update's model; for its validator, which rejects it with the refusal."""
    try:
        return parse(payload, model, check=check)
    except PayloadRefused as err:
        raise refusal(name, err) from err.__cause__


def messages(payload: tuple[Any, ...], carried: frozenset[str]) -> list[tuple[int, Message]]:
    """The messages of a `take_messages` update (`admitflow.messages.Messages`, its validator
    refuses any other shape) that its receiver takes by the signal they name (`carried`), each with
    its place in the update (its answer's, in the receipt); any other name is dropped with a Warning
    `message_refused`, as an unknown signal would be."""
    taken = []
    for i, m in enumerate(update(contract.TAKE_MESSAGES, payload, Messages).messages):
        if m.signal in carried:
            taken.append((i, m))
        else:
            workflow.logger.warning("message_refused", extra={"signal": m.signal, "reason": f"{contract.TAKE_MESSAGES} does not carry {m.signal!r}"})
    return taken


def query(name: str, payload: tuple[Any, ...], model: type[M], *, optional: bool = False) -> M:
    """The query's model; the query fails with the refusal."""
    try:
        return parse(payload, model, optional=optional)
    except PayloadRefused as err:
        raise refusal(name, err) from err.__cause__


def no_argument(name: str, payload: tuple[Any, ...]) -> None:
    """For a query that takes nothing: it fails when given something."""
    if payload:
        raise refusal(name, PayloadRefused(f"expected no payload, got {len(payload)} arguments"))


def refusal(name: str, err: PayloadRefused) -> ApplicationError:
    return ApplicationError(f"invalid {name}: {err}", type="InvalidMessage", non_retryable=True)
