"""The shape of the states runs carry across continue-as-new, and how a state an earlier build wrote
becomes this build's.

A run moves to a newer build only at continue-as-new (admitflow.versioning), so the state a
continue-as-new carries (a workload's, a ClusterQueue's, the catalog's, ...) may be read by the next
build. Each carries `schema_version`, the SCHEMA_VERSION of the build that wrote it; when a build
changes the shape of a state, it raises SCHEMA_VERSION and adds, under that state's name, the step
that turns the shape before into its own (`STEPS[name][old] = step`, a function of the JSON dict).
A state is brought up to this build's shape when it is read, step by step; one written by a newer
build (a rollback) is refused in one line, and its run waits for a worker of that build.

Messages between builds need no steps: every message model ignores fields it does not know and
gives every field it added a default, so build N reads what build N-1 sends and the other way round
(admitflow.wire.WireModel).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

SCHEMA_VERSION = 1
# State name (its class's) -> {the version a step reads: the step to the next}. None yet: 0.2 is the
# first release whose states are carried to another build.
STEPS: dict[str, dict[int, Callable[[dict[str, Any]], dict[str, Any]]]] = {}


class SchemaError(ValueError):
    """A carried state this build cannot read."""


def upgrade(name: str, data: Any) -> Any:
    """`data` (a carried state, as decoded) in this build's shape: unchanged when it already is
    (or is not a dict: validation then says what is wrong), else through each step."""
    if not isinstance(data, dict):
        return data
    written = data.get("schemaVersion", data.get("schema_version", 1))
    if written == SCHEMA_VERSION:
        return data
    if not isinstance(written, int) or isinstance(written, bool) or written < 1:
        raise SchemaError(f"{name}: schemaVersion {written!r} is not a version")
    if written > SCHEMA_VERSION:
        raise SchemaError(
            f"{name} of schema version {written}, written by a newer build: this build reads up to {SCHEMA_VERSION}"
        )
    steps = STEPS.get(name, {})
    for version in range(written, SCHEMA_VERSION):
        step = steps.get(version)
        if step is not None:
            data = step(dict(data))
    return {**data, "schemaVersion": SCHEMA_VERSION}
