"""Kubernetes objects checked against the real OpenAPI schema of the release the pinned client is
made from (kubernetes==37.0.2: Kubernetes 1.37), as shipped by the `kubernetes-validate` package:
its strict schemas (unknown fields refused), read from its files once per kind, so that the fake
API server can check every object it stores (tests/k8s_fake.py) at well under a millisecond each
(kubernetes_validate.validate reads and parses the 6 MB of definitions at every call)."""

from __future__ import annotations

import functools
import re
from typing import Any

import jsonschema
import kubernetes_validate
from kubernetes_validate import utils
from referencing import Registry, Resource

KUBERNETES_RELEASE = "1.37.0"
_SCHEMAS = f"kubernetes-json-schema/v{KUBERNETES_RELEASE}-local-strict"


class SchemaError(AssertionError):
    """An object the apiserver's schema refuses; the message says where and why."""


@functools.cache
def _validator(api_version: str, kind: str) -> jsonschema.Validator:
    # kubernetes_validate's file names: rbac.authorization.k8s.io/v1 -> rbac-v1, batch/v1 -> batch-v1.
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    schema = utils.schema_contents(f"{_SCHEMAS}/{kind.lower()}-{group_version}.json", KUBERNETES_RELEASE)
    definitions = utils.schema_contents(f"{_SCHEMAS}/_definitions.json", KUBERNETES_RELEASE)
    registry = Resource.from_contents(definitions) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


def check(obj: dict[str, Any]) -> None:
    """Raise SchemaError unless `obj` (apiVersion and kind included) is valid, unknown fields refused."""
    try:
        _validator(obj["apiVersion"], obj["kind"]).validate(obj)
    except jsonschema.ValidationError as err:
        path = ".".join(str(p) for p in err.path)
        raise SchemaError(f"{obj.get('kind')} {path or '<root>'}: {err.message}") from None


def check_with_the_package(obj: dict[str, Any]) -> None:
    """`check` as kubernetes_validate's own entry point does it (slow): the two must agree."""
    try:
        kubernetes_validate.validate(obj, KUBERNETES_RELEASE, strict=True)
    except kubernetes_validate.ValidationError as err:
        path = ".".join(str(p) for p in err.path)
        raise SchemaError(f"{obj.get('kind')} {path or '<root>'}: {err.message}") from None
