"""JSON merge patches (RFC 7386, `application/merge-patch+json`), as Kubernetes' apiserver applies
them and as controller-runtime's `client.MergeFrom` makes them: an object's keys merge key by key,
`null` removes a key, and anything else (a list included) replaces what was there whole.

`diff(before, after)` is the patch that takes `before` to `after`; `apply(target, patch)` applies
one. `apply(before, diff(before, after)) == after` for any JSON objects whose values are not null
(a stored Kubernetes object never holds a null: the apiserver drops them).
"""

from __future__ import annotations

import copy
from typing import Any

JSON = dict[str, Any]


def apply(target: Any, patch: Any) -> Any:
    """RFC 7386 MergePatch(target, patch): a new value; neither argument is changed."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = apply(out.get(key), value)
    return out


def diff(before: JSON, after: JSON) -> JSON:
    """The merge patch from `before` to `after`: only what changed, `null` for a key `after` drops."""
    patch: JSON = {}
    for key in before.keys() - after.keys():
        patch[key] = None
    for key, value in after.items():
        old = before.get(key, _MISSING)
        if isinstance(value, dict) and isinstance(old, dict):
            inner = diff(old, value)
            if inner:
                patch[key] = inner
        elif old != value:
            patch[key] = copy.deepcopy(value)
    return dict(sorted(patch.items()))


def with_resource_version(patch: JSON, resource_version: str) -> JSON:
    """The patch with `metadata.resourceVersion`, as controller-runtime's strict MergeFrom sends it:
    the apiserver then applies it only to that version of the object and answers 409 Conflict to
    any other."""
    metadata = dict(patch.get("metadata") or {})
    metadata["resourceVersion"] = resource_version
    return {**patch, "metadata": metadata}


_MISSING = object()
