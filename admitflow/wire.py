"""The wire format every message and state object uses: JSON with camelCase names (the contract)."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel
from pydantic_core import to_json

from admitflow import schema


class WireModel(BaseModel):
    """Base for messages and workflow state. Unknown fields are ignored rather than refused, so a
    payload written by a newer or older worker still decodes during replay and continue-as-new."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        extra="ignore",
    )

    def to_wire(self) -> dict:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class CarriedState(WireModel):
    """A state a run carries to the next across continue-as-new, maybe to a newer build: it says
    which shape it has, and one of an earlier shape is brought up to this build's as it is read
    (admitflow.schema)."""

    schema_version: int = Field(default=schema.SCHEMA_VERSION, description="The shape it has (admitflow.schema).")

    @model_validator(mode="before")
    @classmethod
    def _upgrade(cls, data: Any) -> Any:
        return schema.upgrade(cls.__name__, data)


class Fact(WireModel):
    """An event or a command of a decide-then-execute loop (admission.lifecycle,
    admission.provisioning_attempt): a fact or an order, never changed once made."""

    model_config = ConfigDict(frozen=True)


def first_error(err: ValidationError, where: str = "") -> str:
    """`loc.of.field: message` for the first thing pydantic refused (`where` when it names no field):
    the one line our refusals give."""
    first = err.errors()[0]
    return f"{'.'.join(str(p) for p in first['loc']) or where}: {first['msg']}"


class Undecodable(WireModel):
    """A payload the engine's worker could not decode (admitflow.codec), in a workflow where an
    untyped argument or result stood: a message is then refused with `reason`, one line, and
    recorded; a controller's answer counts as a failed one."""

    model_config = ConfigDict(frozen=True)

    encoding: str = Field(description="The encoding the payload claimed (its `encoding` metadata).")
    reason: str = Field(description="Why it could not be decoded, e.g. `payload encoding binary/zlib does not decompress: ...`.")


M = TypeVar("M", bound=BaseModel)


class PayloadRefused(ValueError):
    """A message's arguments are not what it takes; the message is the one-line reason."""


def one_argument(payload: tuple[Any, ...]) -> Any:
    """The one argument of a message, as the worker decoded it without a type, or PayloadRefused:
    none or several arguments, or one it could not decode (an `Undecodable`, with its reason).

    Every handler takes `*payload: Any` rather than a typed parameter, because a typed one lets
    through what fails the workflow task: the SDK hands a typed handler a `binary/null` payload (the
    Python client's None) as None, and calls it with however many arguments came."""
    if len(payload) != 1:
        raise PayloadRefused(f"expected one payload, got {len(payload)} arguments")
    [value] = payload
    if isinstance(value, Undecodable):
        raise PayloadRefused(value.reason)
    return value


def parse_model(value: Any, model: type[M], field: str = "payload") -> M:
    """One decoded argument as `model`, decoded from its JSON as the SDK's pydantic converter decodes
    a typed argument (strict Kubernetes models included), or PayloadRefused naming the first field
    it refuses (`field` when the argument as a whole is wrong)."""
    try:
        return model.model_validate_json(to_json(value))
    except ValidationError as err:
        raise PayloadRefused(first_error(err, field)) from None
    except ValueError as err:  # not JSON at all (pydantic_core's serialization error)
        raise PayloadRefused(f"{field}: {err}") from None


def parse_payload(payload: tuple[Any, ...], model: type[M], field: str = "payload", optional: bool = False) -> M:
    """The one model a message takes, from its arguments, or PayloadRefused. `optional`: no
    argument, or null, stands for the model with its defaults."""
    if optional and (not payload or payload == (None,)):
        return model()
    return parse_model(one_argument(payload), model, field)


def after(items: list, last: Any) -> list:
    """The items after the last one equal to `last` (the whole list if `last` is gone or None):
    what a loop has not logged yet. Equal, not identical: each step returns a new state."""
    for i in range(len(items) - 1, -1, -1):
        if items[i] == last:
            return items[i + 1 :]
    return list(items)
