"""Kubernetes objects checked against the real OpenAPI schema of the release the pinned client is
made from (kubernetes==37.0.2: Kubernetes 1.37), as shipped by the `kubernetes-validate` package."""

from __future__ import annotations

from typing import Any

import kubernetes_validate

KUBERNETES_RELEASE = "1.37.0"


class SchemaError(AssertionError):
    """An object the apiserver's schema refuses; the message says where and why."""


def check(obj: dict[str, Any]) -> None:
    """Raise SchemaError unless `obj` (apiVersion and kind included) is valid, unknown fields refused."""
    try:
        kubernetes_validate.validate(obj, KUBERNETES_RELEASE, strict=True)
    except kubernetes_validate.ValidationError as err:
        path = ".".join(str(p) for p in err.path)
        raise SchemaError(f"{obj.get('kind')} {path or '<root>'}: {err.message}") from None
