"""Kubernetes meta/v1 types Kueue objects carry: Time, ObjectMeta, Condition, LabelSelector."""

from __future__ import annotations

import re
from datetime import datetime, UTC
from typing import Annotated, Any, Literal

from pydantic_core import PydanticCustomError
from pydantic import BeforeValidator, ConfigDict, Field, PlainSerializer, WithJsonSchema, field_validator

from . import field_error as fe
from .base import KueueModel
from .bounds import INT64_MAX
from .field_error import FieldError, invalid_body, k8s_error
from .names import (
    DNS1123_SUBDOMAIN_PATTERN,
    dns1123_label_errors,
    dns1123_subdomain_errors,
    label_value_errors,
    qualified_name_errors,
)

_RFC3339 = re.compile(
    r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$"
)
TOTAL_ANNOTATION_SIZE_LIMIT = 256 * 1024


def _parse_time(value: Any) -> datetime:
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, str):
        if not _RFC3339.match(value):
            raise PydanticCustomError(
                fe.K8S_TYPE_ERROR, "must be of type {expected}", {"expected": "date-time", "actual": value}
            )
        parsed = datetime.fromisoformat(value.replace("z", "Z").replace("t", "T"))
    else:
        raise fe.k8s_type_error("string")
    if parsed.tzinfo is None:
        # Kubernetes times are UTC; a naive datetime from Python code means UTC too.
        parsed = parsed.replace(tzinfo=UTC)
    # metav1.Time keeps whole seconds on the wire; keeping them in memory too makes a value
    # equal to itself after a JSON round trip.
    return parsed.astimezone(UTC).replace(microsecond=0)


def _format_time(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


Time = Annotated[
    datetime,
    BeforeValidator(_parse_time),
    PlainSerializer(_format_time, return_type=str, when_used="json"),
    WithJsonSchema({"type": "string", "format": "date-time"}),
]
"""A Kubernetes timestamp: accepts RFC 3339 text or datetimes, holds tz-aware UTC with second
precision, and is written as `YYYY-MM-DDTHH:MM:SSZ`."""


def label_errors(labels: dict[str, str] | None, path: str) -> list[FieldError]:
    """metav1 validation.ValidateLabels: keys are qualified names, values label values."""
    errors = []
    for key, value in (labels or {}).items():
        errors.extend(fe.invalid(path, key, msg) for msg in qualified_name_errors(key))
        errors.extend(fe.invalid(path, value, msg) for msg in label_value_errors(value))
    return errors


def annotation_errors(annotations: dict[str, str] | None, path: str) -> list[FieldError]:
    """apivalidation.ValidateAnnotations: qualified keys (case-insensitive), 256 KiB in total."""
    errors = []
    total = 0
    for key, value in (annotations or {}).items():
        errors.extend(fe.invalid(path, key, msg) for msg in qualified_name_errors(key.lower()))
        total += len(key) + len(value)
    if total > TOTAL_ANNOTATION_SIZE_LIMIT:
        errors.append(FieldError(path, fe.too_long_body(TOTAL_ANNOTATION_SIZE_LIMIT)))
    return errors


def _raise_first(errors: list[FieldError]) -> None:
    if errors:
        raise k8s_error(errors[0].message)


class OwnerReference(KueueModel):
    """A metav1.OwnerReference: the object this one belongs to (a Workload's Job)."""

    api_version: str = Field(min_length=1, description="API version of the owner (`batch/v1`). Required.")
    kind: str = Field(min_length=1, description="Kind of the owner (`Job`). Required.")
    name: str = Field(min_length=1, description="Name of the owner, in this object's namespace. Required.")
    uid: str = Field(min_length=1, description="UID of the owner. Required.")
    controller: bool | None = Field(default=None, description="True for the managing controller; at most one reference.")
    block_owner_deletion: bool | None = Field(
        default=None, description="The owner's foreground deletion waits for this object to be deleted."
    )


class ObjectMeta(KueueModel):
    """Standard object metadata. Fields Kubernetes adds that we do not use (managedFields,
    finalizers, ...) are dropped, so objects exported with kubectl apply as-is."""

    model_config = ConfigDict(extra="ignore")

    name: str = Field(
        description=(
            "Name of the object, unique per kind (and namespace, for namespaced kinds). Required; "
            "a lowercase RFC 1123 subdomain of at most 253 characters."
        ),
        json_schema_extra={"maxLength": 253, "pattern": DNS1123_SUBDOMAIN_PATTERN},
    )
    namespace: str | None = Field(
        default=None,
        description=(
            "Namespace of a namespaced object (LocalQueue, Workload; defaults to `default`); "
            "ignored for cluster-scoped kinds. A lowercase RFC 1123 label of at most 63 characters."
        ),
        json_schema_extra={"maxLength": 63},
    )
    uid: str | None = Field(default=None, description="Unique id assigned when the object is stored.")
    resource_version: str | None = Field(
        default=None, description="Opaque version of the stored object, changed on every write."
    )
    generation: int | None = Field(
        default=None,
        ge=0,
        le=INT64_MAX,
        description="Sequence number of spec changes, assigned by the store; 0 to 2^63-1 (int64).",
    )
    creation_timestamp: Time | None = Field(
        default=None, description="When the object was first stored (UTC, second precision)."
    )
    labels: dict[str, str] | None = Field(
        default=None,
        description="Labels: keys are qualified names (`[prefix/]name`), values at most 63 characters.",
    )
    annotations: dict[str, str] | None = Field(
        default=None,
        description="Annotations: keys are qualified names; keys and values total at most 256 KiB.",
    )
    owner_references: list[OwnerReference] | None = Field(
        default=None,
        description="Objects this one belongs to (a Workload's Job); at most one is its controller.",
    )

    @field_validator("name")
    @classmethod
    def _valid_name(cls, value: str) -> str:
        if not value:
            raise k8s_error(fe.required_body("name or generateName is required"))
        for msg in dns1123_subdomain_errors(value):
            raise k8s_error(invalid_body(value, msg))
        return value

    @field_validator("namespace")
    @classmethod
    def _valid_namespace(cls, value: str | None) -> str | None:
        if value:
            for msg in dns1123_label_errors(value):
                raise k8s_error(invalid_body(value, msg))
        return value

    @field_validator("labels")
    @classmethod
    def _valid_labels(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        _raise_first(label_errors(value, ""))
        return value

    @field_validator("annotations")
    @classmethod
    def _valid_annotations(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        _raise_first(annotation_errors(value, ""))
        return value

    @field_validator("owner_references")
    @classmethod
    def _one_controller(cls, value: list[OwnerReference] | None) -> list[OwnerReference] | None:
        controllers = [f"{r.kind}/{r.name}" for r in value or () if r.controller]
        if len(controllers) > 1:
            raise k8s_error(
                invalid_body(
                    [],
                    "Only one reference can have Controller set to true. "
                    f'Found "true" in references for {controllers[0]} and {controllers[1]}',
                )
            )
        return value


class NamespacedObjectMeta(ObjectMeta):
    """Metadata of a namespaced object: `namespace` defaults to `default`, as kubectl does."""

    namespace: str = Field(
        default="default",
        description="Namespace of the object; defaults to `default`. A lowercase RFC 1123 label (63).",
        json_schema_extra={"maxLength": 63},
    )

    @field_validator("namespace", mode="before")
    @classmethod
    def _default_namespace(cls, value: Any) -> Any:
        return "default" if value in ("", None) else value


CONDITION_TYPE_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
CONDITION_REASON_PATTERN = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"

ConditionStatus = Literal["True", "False", "Unknown"]


class Condition(KueueModel):
    """A metav1.Condition: one observation of one aspect of an object's state."""

    type: str = Field(
        description="Condition type in CamelCase or `domain/Type` (e.g. `Admitted`); at most 316 characters.",
        max_length=316,
        pattern=CONDITION_TYPE_PATTERN,
    )
    status: ConditionStatus = Field(description="One of True, False, Unknown.")
    observed_generation: int | None = Field(
        default=None,
        ge=0,
        le=INT64_MAX,
        description="The metadata.generation the condition was set for; optional, 0 to 2^63-1 (int64).",
    )
    last_transition_time: Time = Field(
        description="When the status last changed (UTC, second precision). Required."
    )
    reason: str = Field(
        description="Machine-readable CamelCase reason for the last transition; 1 to 1024 characters.",
        min_length=1,
        max_length=1024,
        pattern=CONDITION_REASON_PATTERN,
    )
    message: str = Field(
        default="", max_length=32768, description="Human-readable details; may be empty; at most 32768 characters."
    )


SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


class LabelSelectorRequirement(KueueModel):
    """One `key operator values` term of a label selector."""

    key: str = Field(description="Label key the term applies to; a qualified name.")
    operator: str = Field(description="One of In, NotIn, Exists, DoesNotExist.")
    values: list[str] | None = Field(
        default=None,
        description="Values for In/NotIn (at least one); must be empty for Exists/DoesNotExist.",
    )

    def validation_errors(self, path: str = "") -> list[FieldError]:
        errors = []
        values = self.values or []
        if self.operator in ("In", "NotIn"):
            if not values:
                errors.append(
                    fe.required(fe.join_path(path, "values"), "must be specified when `operator` is 'In' or 'NotIn'")
                )
        elif self.operator in ("Exists", "DoesNotExist"):
            if values:
                errors.append(
                    fe.forbidden(
                        fe.join_path(path, "values"),
                        "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                    )
                )
        else:
            errors.append(fe.invalid(fe.join_path(path, "operator"), self.operator, "not a valid selector operator"))
        errors.extend(fe.invalid(fe.join_path(path, "key"), self.key, m) for m in qualified_name_errors(self.key))
        for i, value in enumerate(values):
            errors.extend(fe.invalid(fe.join_path(path, f"values[{i}]"), value, m) for m in label_value_errors(value))
        return errors

    def matches(self, labels: dict[str, str]) -> bool:
        present = self.key in labels
        if self.operator == "In":
            return present and labels[self.key] in (self.values or [])
        if self.operator == "NotIn":
            return not present or labels[self.key] not in (self.values or [])
        if self.operator == "Exists":
            return present
        if self.operator == "DoesNotExist":
            return not present
        return False


class LabelSelector(KueueModel):
    """A metav1.LabelSelector. `{}` selects everything; the terms are ANDed."""

    match_labels: dict[str, str] | None = Field(
        default=None, description="Labels that must all be present with these values."
    )
    match_expressions: list[LabelSelectorRequirement] | None = Field(
        default=None, description="Terms that must all hold."
    )

    def validation_errors(self, path: str = "") -> list[FieldError]:
        errors = label_errors(self.match_labels, fe.join_path(path, "matchLabels"))
        for i, expr in enumerate(self.match_expressions or []):
            errors.extend(expr.validation_errors(fe.join_path(path, f"matchExpressions[{i}]")))
        return errors

    def matches(self, labels: dict[str, str]) -> bool:
        if any(labels.get(k) != v for k, v in (self.match_labels or {}).items()):
            return False
        return all(expr.matches(labels) for expr in self.match_expressions or [])
