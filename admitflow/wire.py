"""The wire format every message and state object uses: JSON with camelCase names (the contract)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel


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


def after(items: list, last: Any) -> list:
    """The items after the last one equal to `last` (the whole list if `last` is gone or None):
    what a loop has not logged yet. Equal, not identical: each step returns a new state."""
    for i in range(len(items) - 1, -1, -1):
        if items[i] == last:
            return items[i + 1 :]
    return list(items)
