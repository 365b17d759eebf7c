"""One validation problem, phrased the way the Kubernetes apiserver phrases it.

`FieldError` is apimachinery's `field.Error` in miniature: a JSON field path
(`spec.resourceGroups[0].flavors[1].name`) and a message such as
`Duplicate value: "spot"`. The constructors below build the message bodies with the same
wording and value quoting as `k8s.io/apimachinery/pkg/util/validation/field`, and
`from_pydantic` turns a pydantic error into the message the apiserver's schema validation
would have given for the same mistake.
"""

from __future__ import annotations

import json
import re
import types
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticCustomError

# Error type for messages that are already complete apiserver bodies ("Invalid value: ...").
K8S_ERROR = "k8s"
# Error type for JSON type mismatches whose message needs the field path ("... in body must be
# of type integer").
K8S_TYPE_ERROR = "k8s_type"


@dataclass(frozen=True)
class FieldError:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


def go_value(value: Any) -> str:
    """Render a bad value like apimachinery's `field.Error.ErrorBody`."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, dict):
        return '"object"'
    if isinstance(value, (list, tuple)):
        return '"array"'
    return json.dumps(str(value), ensure_ascii=False)


def go_list(values: Sequence[Any]) -> str:
    """A decoded JSON list as Go's %#v prints it."""
    return "[]interface {}{" + ", ".join(go_value(v) for v in values) + "}"


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, (list, tuple)):
        return "array"
    return type(value).__name__


# Message bodies, named after apimachinery's constructors.


def required_body(detail: str = "") -> str:
    return "Required value" + (f": {detail}" if detail else "")


def invalid_body(value: Any, detail: str) -> str:
    return f"Invalid value: {go_value(value)}: {detail}"


def not_supported_body(value: Any, supported: Sequence[Any]) -> str:
    body = f"Unsupported value: {go_value(value)}"
    if supported:
        body += ": supported values: " + ", ".join(json.dumps(str(s)) for s in supported)
    return body


def duplicate_body(value: Any) -> str:
    return f"Duplicate value: {go_value(value)}"


def not_found_body(value: Any) -> str:
    return f"Not found: {go_value(value)}"


def too_many_body(actual: int, maximum: int) -> str:
    return f"Too many: {actual}: must have at most {maximum} items"


def too_long_body(maximum: int) -> str:
    unit = "byte" if maximum == 1 else "bytes"
    return f"Too long: may not be more than {maximum} {unit}"


def forbidden_body(detail: str) -> str:
    return f"Forbidden: {detail}"


def cel_body(kind: str, message: str) -> str:
    # x-kubernetes-validations failures name the JSON type of the checked value, not the value.
    return f'Invalid value: "{kind}": {message}'


def required(path: str, detail: str = "") -> FieldError:
    return FieldError(path, required_body(detail))


def invalid(path: str, value: Any, detail: str) -> FieldError:
    return FieldError(path, invalid_body(value, detail))


def not_supported(path: str, value: Any, supported: Sequence[Any]) -> FieldError:
    return FieldError(path, not_supported_body(value, supported))


def duplicate(path: str, value: Any) -> FieldError:
    return FieldError(path, duplicate_body(value))


def not_found(path: str, value: Any) -> FieldError:
    return FieldError(path, not_found_body(value))


def too_many(path: str, actual: int, maximum: int) -> FieldError:
    return FieldError(path, too_many_body(actual, maximum))


def forbidden(path: str, detail: str) -> FieldError:
    return FieldError(path, forbidden_body(detail))


def cel(path: str, kind: str, message: str) -> FieldError:
    return FieldError(path, cel_body(kind, message))


def k8s_error(body: str) -> PydanticCustomError:
    """A pydantic error whose message is already the apiserver's text after `<path>: `."""
    return PydanticCustomError(K8S_ERROR, "{k8s}", {"k8s": body})


def k8s_type_error(expected: str) -> PydanticCustomError:
    return PydanticCustomError(K8S_TYPE_ERROR, "must be of type {expected}", {"expected": expected})


def join_path(base: str, child: str) -> str:
    if not base:
        return child
    if child.startswith("["):
        return base + child
    return f"{base}.{child}"


# From pydantic errors to apiserver messages.

_PYDANTIC_TYPE_NAMES = {
    "int": "integer",
    "float": "number",
    "string": "string",
    "bool": "boolean",
    "dict": "object",
    "model": "object",
    "model_attributes": "object",
    "list": "array",
    "tuple": "array",
}


def _unwrap(tp: Any) -> Any:
    while True:
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            tp = typing.get_args(tp)[0]
            continue
        if origin in (typing.Union, types.UnionType):
            members = [a for a in typing.get_args(tp) if a is not type(None)]
            if len(members) == 1:
                tp = members[0]
                continue
            return tp
        return tp


def _render_loc(root: type[BaseModel] | None, loc: Sequence[Any]) -> str:
    """Turn a pydantic loc into a Kubernetes field path, telling map keys from field names."""
    path = ""
    tp: Any = root
    for item in loc:
        tp = _unwrap(tp)
        origin = typing.get_origin(tp)
        if item == "[key]":
            continue
        if isinstance(tp, type) and issubclass(tp, BaseModel) and isinstance(item, str):
            field_type = None
            for name, info in tp.model_fields.items():
                if item in (name, info.alias):
                    item = info.alias or name
                    field_type = info.annotation
                    break
            path = join_path(path, item)
            tp = field_type
        elif origin in (list, Sequence, tuple) and isinstance(item, int):
            path += f"[{item}]"
            args = typing.get_args(tp)
            tp = args[0] if args else None
        elif origin is dict:
            path += f"[{item}]"
            args = typing.get_args(tp)
            tp = args[1] if len(args) == 2 else None
        elif isinstance(item, int):
            path += f"[{item}]"
            tp = None
        else:
            path = join_path(path, str(item))
            tp = None
    return path


def _quoted_expected(ctx: dict[str, Any]) -> list[str]:
    return re.findall(r"'((?:[^'\\]|\\.)*)'", str(ctx.get("expected", "")))


def from_pydantic(error: dict[str, Any], root: type[BaseModel] | None = None, prefix: str = "") -> FieldError:
    """Phrase one pydantic error like the apiserver's CRD schema validation would."""
    path = join_path(prefix, _render_loc(root, error["loc"])) if error["loc"] else prefix
    kind = error["type"]
    ctx = error.get("ctx") or {}
    value = error.get("input")
    if kind == K8S_ERROR:
        return FieldError(path, ctx["k8s"])
    if kind == "missing":
        return required(path)
    if kind == "extra_forbidden":
        return FieldError(path, f'unknown field "{path}"')
    if kind in ("literal_error", "enum"):
        return not_supported(path, value, _quoted_expected(ctx))
    if kind == "too_long":
        if ctx.get("field_type") in ("List", "Dictionary", "Tuple", "Set"):
            actual = len(value) if hasattr(value, "__len__") else ctx.get("actual_length")
            return too_many(path, actual, ctx["max_length"])
        return FieldError(path, too_long_body(ctx["max_length"]))
    if kind == "string_too_long":
        return FieldError(path, too_long_body(ctx["max_length"]))
    if kind == "too_short":
        # The apiserver prints the short list itself, Go-style (`[]interface {}{}` when empty).
        shown = go_list(value) if isinstance(value, (list, tuple)) else go_value(value)
        return FieldError(path, f"Invalid value: {shown}: {path} in body should have at least {ctx['min_length']} items")
    if kind == "string_too_short":
        return invalid(path, value, f"{path} in body should be at least {ctx['min_length']} chars long")
    if kind == "greater_than_equal":
        return invalid(path, value, f"{path} in body should be greater than or equal to {go_value(ctx['ge'])}")
    if kind == "greater_than":
        return invalid(path, value, f"{path} in body should be greater than {go_value(ctx['gt'])}")
    if kind == "less_than_equal":
        return invalid(path, value, f"{path} in body should be less than or equal to {go_value(ctx['le'])}")
    if kind == "less_than":
        return invalid(path, value, f"{path} in body should be less than {go_value(ctx['lt'])}")
    if kind == "string_pattern_mismatch":
        return invalid(path, value, f"{path} in body should match '{ctx['pattern']}'")
    if kind == K8S_TYPE_ERROR:
        actual = ctx.get("actual", json_type(value))
        return invalid(path, value, f'{path} in body must be of type {ctx["expected"]}: "{actual}"')
    base = kind.split("_")[0] if kind.endswith(("_type", "_parsing", "_from_float")) else None
    if kind.startswith("model_attributes"):
        base = "model_attributes"
    if base in _PYDANTIC_TYPE_NAMES:
        expected = _PYDANTIC_TYPE_NAMES[base]
        return invalid(path, value, f'{path} in body must be of type {expected}: "{json_type(value)}"')
    message = error.get("msg", "invalid")
    message = message.removeprefix("Value error, ").removeprefix("Assertion failed, ")
    return invalid(path, value, message)


def list_map_duplicates(keys: Sequence[Any], path: str, key_name: str = "name") -> list[FieldError]:
    """Duplicates in a `+listType=map` list, reported like the apiserver's schema validation."""
    errors = []
    seen: set[Any] = set()
    for i, key in enumerate(keys):
        if key in seen:
            errors.append(
                FieldError(f"{path}[{i}]", f'Duplicate value: map[string]interface {{}}{{"{key_name}":{go_value(key)}}}')
            )
        seen.add(key)
    return errors


def list_set_duplicates(values: Sequence[Any], path: str) -> list[FieldError]:
    """Duplicates in a `+listType=set` list."""
    errors = []
    seen: set[Any] = set()
    for i, value in enumerate(values):
        if value in seen:
            errors.append(duplicate(f"{path}[{i}]", value))
        seen.add(value)
    return errors
