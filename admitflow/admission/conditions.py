"""Kubernetes-style status conditions, as `meta.SetStatusCondition` and Kueue's helpers treat them."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from admitflow.api import Condition, ConditionStatus

# Kueue truncates condition messages at 32 KiB and event notes at 1 KiB, marking the cut with " ..."
# (pkg/util/api/api.go).
MAX_CONDITION_MESSAGE = 32 * 1024
MAX_EVENT_MESSAGE = 1024
_ELLIPSIS = " ..."


def truncate(message: str, limit: int) -> str:
    encoded = message.encode()
    if len(encoded) <= limit:
        return message
    return encoded[: limit - len(_ELLIPSIS)].decode(errors="ignore") + _ELLIPSIS


def second(t: datetime) -> datetime:
    """Kubernetes serializes times with second precision; keep them so in memory too, so that what a
    query shows and what the next decision compares are the same instant."""
    return t.replace(microsecond=0)


def find(conditions: Sequence[Condition], type_: str) -> Condition | None:
    return next((c for c in conditions if c.type == type_), None)


def is_true(conditions: Sequence[Condition], type_: str) -> bool:
    c = find(conditions, type_)
    return c is not None and c.status == "True"


def set_condition(
    conditions: Sequence[Condition],
    type_: str,
    status: bool,
    reason: str,
    message: str,
    now: datetime,
) -> list[Condition]:
    """Return the conditions with `type_` set; the transition time moves only when the status flips."""
    status_str: ConditionStatus = "True" if status else "False"
    message = truncate(message, MAX_CONDITION_MESSAGE)
    out: list[Condition] = []
    found = False
    for c in conditions:
        if c.type != type_:
            out.append(c)
            continue
        found = True
        ltt = c.last_transition_time if c.status == status_str else second(now)
        out.append(
            Condition(
                type=type_, status=status_str, reason=reason, message=message, last_transition_time=ltt
            )
        )
    if not found:
        out.append(
            Condition(
                type=type_, status=status_str, reason=reason, message=message, last_transition_time=second(now)
            )
        )
    return out


def remove_condition(conditions: Sequence[Condition], type_: str) -> list[Condition]:
    return [c for c in conditions if c.type != type_]
