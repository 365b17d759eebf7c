"""The base of every Kueue-shaped model: Kueue's camelCase JSON names outside, snake_case inside."""

from __future__ import annotations


from pydantic import ConfigDict

from admitflow.wire import WireModel

from .field_error import FieldError


class KueueModel(WireModel):
    """A Kueue API structure.

    Attribute names are Kueue's JSON field names in snake_case (`resourceGroups` ->
    `resource_groups`); the wire format is the camelCase JSON Kueue itself reads and writes
    (`to_wire`, from `WireModel`). Unlike our own messages, unknown fields are refused
    (`extra="forbid"`), as the apiserver's strict field validation refuses them, and values are not
    coerced across JSON types (`"5"` is not an integer).
    """

    model_config = ConfigDict(extra="forbid", strict=True)

    def validation_errors(self, path: str = "") -> list[FieldError]:
        """Rules across fields that Kueue enforces in CEL rules and admission webhooks.

        Schema-level rules (types, enums, limits, patterns) are enforced when the model is
        built; these are the ones that need several fields at once. An empty list means the
        object would be accepted on create.
        """
        return []
