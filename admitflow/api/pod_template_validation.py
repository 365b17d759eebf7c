"""What a Kubernetes API server refuses in a pod template, checked before admitflow takes one: at
`admitflow apply` (every podSet's template) and before the kubernetes backend sends a PodTemplate.

Two parts, as the API server has them:

- **The schema**: core/v1 `PodTemplateSpec` in the OpenAPI schema of Kubernetes 1.37 (the release of
  the pinned `kubernetes` client), as the `kubernetes-validate` package ships it, strict: types
  (`priority: "high"` is no integer), unknown fields, required fields; with the formats the
  schema names checked too (int32, int64, and quantities, which it leaves free-form).
- **The Go rules the schema does not carry** (`RULES`): what `ValidatePodTemplateSpec` in
  k8s.io/kubernetes pkg/apis/core/validation checks and admitflow checks too (label syntax and
  length, a container's `image`, the enums of restartPolicy and friends, ...), each with the
  message the API server gives. It is a subset: what is not in the table reaches the API server.

Every message is in Kubernetes' field-error form, with the path of the template given.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from . import field_error as fe
from .bounds import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN
from .field_error import FieldError
from .meta import annotation_errors, label_errors
from .names import dns1123_label_errors, dns1123_subdomain_errors, label_value_errors, qualified_name_errors
from .quantity import QuantityError, parse_quantity

# The schemas kubernetes-validate ships for the Kubernetes release of the pinned client.
SCHEMA_RELEASE = "v1.37.0-local-strict"
_QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
_FORMAT_RANGES = {"int32": (INT32_MIN, INT32_MAX), "int64": (INT64_MIN, INT64_MAX)}


def pod_template_errors(template: dict[str, Any], path: str) -> list[FieldError]:
    """Everything admitflow finds wrong in a core/v1 PodTemplateSpec (wire JSON) at `path`: the
    schema's errors first (unknown fields before the others, as decoding fails first), then
    the table's."""
    errors = _schema_errors(template, path)
    if errors:
        return errors
    return [e for rule in RULES for value, where in _at(template, rule.path, path) for e in rule.check(value, where, template)]


# --- the schema -------------------------------------------------------------------------------------


@functools.cache
def _validator() -> Any:
    from importlib import resources

    import jsonschema
    from referencing import Registry, Resource

    root = resources.files("kubernetes_validate") / "kubernetes-json-schema" / SCHEMA_RELEASE
    template = json.loads((root / "podtemplatespec-v1.json").read_text())
    definitions = json.loads((root / "_definitions.json").read_text())
    # The schema says quantities are strings or numbers; the API server parses them.
    definitions["$defs"][_QUANTITY]["format"] = "quantity"
    registry = Registry().with_resources(
        [(template["$id"], Resource.from_contents(template)), (definitions["$id"], Resource.from_contents(definitions))]
    )
    checker = jsonschema.FormatChecker(formats=())
    for name, (low, high) in _FORMAT_RANGES.items():
        checker.checks(name)(lambda v, low=low, high=high: not isinstance(v, int) or isinstance(v, bool) or low <= v <= high)
    # Other types are the schema's type error, not a second one here.
    checker.checks("quantity", raises=QuantityError)(
        lambda v: isinstance(v, bool) or not isinstance(v, (str, int, float)) or _parses(v)
    )
    return jsonschema.Draft202012Validator(template, registry=registry, format_checker=checker)


def _parses(value: str | int | float) -> bool:
    parse_quantity(str(value))
    return True


@functools.lru_cache(maxsize=1024)
def _schema_errors_of(text: str, path: str) -> tuple[FieldError, ...]:
    # Many workloads share one template: the same text is checked once.
    found = [_field_error(e, path) for e in _validator().iter_errors(json.loads(text))]
    unknown = [e for e in found if e.message.startswith("unknown field")]
    return tuple(unknown + [e for e in found if e not in unknown])


def _schema_errors(template: dict[str, Any], path: str) -> list[FieldError]:
    return list(_schema_errors_of(json.dumps(template, sort_keys=True), path))


def _path(error: Any, base: str) -> str:
    """The Kubernetes field path of a schema error: fields as `.name`, map keys and list
    indices as `[key]`, read off the schema path (`properties`, `additionalProperties`, `items`)."""
    instance = list(error.absolute_path)
    tokens = list(error.absolute_schema_path)
    out = base
    i = 0
    while i < len(tokens) and instance:
        token = tokens[i]
        if token == "properties":
            out = fe.join_path(out, str(instance.pop(0)))
            i += 2  # the property's name follows
            continue
        if token in ("additionalProperties", "items", "prefixItems"):
            out += f"[{instance.pop(0)}]"
        i += 1
    for rest in instance:
        out += f"[{rest}]"
    return out


def _expected(schema: dict[str, Any]) -> str:
    kinds = schema.get("type")
    if isinstance(kinds, list):
        kinds = next((k for k in kinds if k != "null"), "null")
    return kinds or "string"


def _field_error(error: Any, base: str) -> FieldError:
    path = _path(error, base)
    value = error.instance
    kind = error.validator
    if kind == "additionalProperties":
        known = set(error.schema.get("properties") or {})
        extra = next(k for k in value if k not in known)
        where = fe.join_path(path, extra)
        return FieldError(where, f'unknown field "{where}"')
    if kind == "required":
        missing = next(k for k in error.validator_value if k not in value)
        return fe.required(fe.join_path(path, missing))
    if kind == "type":
        expected = _expected(error.schema)
        return fe.invalid(path, value, f'{path} in body must be of type {expected}: "{fe.json_type(value)}"')
    if kind == "oneOf" and error.validator_value and all("type" in s for s in error.validator_value):
        # A quantity or an int-or-string given something else.
        return fe.invalid(path, value, f'{path} in body must be of type string: "{fe.json_type(value)}"')
    if kind == "enum":
        return fe.not_supported(path, value, error.validator_value)
    if kind == "format" and error.validator_value in _FORMAT_RANGES:
        low, high = _FORMAT_RANGES[error.validator_value]
        bound = f"less than or equal to {high}" if value > high else f"greater than or equal to {low}"
        return fe.invalid(path, value, f"{path} in body should be {bound}")
    if kind == "format" and error.validator_value == "quantity":
        return fe.invalid(path, value, str(error.cause) if error.cause else "must be a quantity")
    return fe.invalid(path, value, error.message)


# --- the Go rules --------------------------------------------------------------------------------------

Check = Callable[[Any, str, dict[str, Any]], list[FieldError]]


@dataclass(frozen=True)
class Rule:
    """One rule of core/v1 validation: `path` in the template (`[*]` for each item of a list; the
    last field may be absent, then the check sees None), the check, and the Go function it follows."""

    path: str
    check: Check
    source: str


def _at(obj: Any, pattern: str, base: str) -> Iterator[tuple[Any, str]]:
    parts = pattern.replace("[*]", ".[*]").split(".")

    def walk(value: Any, index: int, where: str) -> Iterator[tuple[Any, str]]:
        if index == len(parts):
            yield value, where
            return
        part = parts[index]
        if part == "[*]":
            for i, item in enumerate(value if isinstance(value, list) else ()):
                yield from walk(item, index + 1, f"{where}[{i}]")
        elif isinstance(value, dict):
            child = value.get(part)
            if child is not None or index == len(parts) - 1:
                yield from walk(child, index + 1, fe.join_path(where, part))

    yield from walk(obj, 0, base)


def _one_of(*supported: str) -> Check:
    """An enum the API server defaults when it is absent."""
    return lambda v, p, _: [] if v is None or v in supported else [fe.not_supported(p, v, supported)]


def _messages(validate: Callable[[str], list[str]]) -> Check:
    """A name rule: one Invalid per message, when the value is given."""
    return lambda v, p, _: [] if not v else [fe.invalid(p, v, m) for m in validate(v)]


def _labels(v: Any, p: str, _: Any) -> list[FieldError]:
    return label_errors(v, p)


def _annotations(v: Any, p: str, _: Any) -> list[FieldError]:
    return annotation_errors(v, p)


def _not_empty(v: Any, p: str, _: Any) -> list[FieldError]:
    return [fe.required(p)] if not v else []


def _image(v: Any, p: str, _: Any) -> list[FieldError]:
    if not v:
        return [fe.required(p)]
    if v != v.strip():
        return [fe.invalid(p, v, "must not have leading or trailing whitespace")]
    return []


def _duplicate_names(items: Iterator[tuple[str, dict[str, Any]]]) -> list[FieldError]:
    """A Duplicate for each (path, item) whose `name` an earlier item has."""
    seen: set[str] = set()
    errors = []
    for where, item in items:
        name = item.get("name")
        if name in seen:
            errors.append(fe.duplicate(f"{where}.name", name))
        seen.add(name)
    return errors


def _unique_container_names(_: Any, p: str, template: dict[str, Any]) -> list[FieldError]:
    """Container and init container names are unique together."""
    spec = template.get("spec") or {}
    return _duplicate_names(
        (f"{p}.{field}[{i}]", c) for field in ("containers", "initContainers") for i, c in enumerate(spec.get(field) or ())
    )


def _unique_names(v: Any, p: str, _: Any) -> list[FieldError]:
    return _duplicate_names((f"{p}[{i}]", item) for i, item in enumerate(v or ()))


def _port(v: Any, p: str, _: Any) -> list[FieldError]:
    return [fe.invalid(p, v, "must be between 1 and 65535, inclusive")] if isinstance(v, int) and not 1 <= v <= 65535 else []


def _resources(v: Any, p: str, _: Any) -> list[FieldError]:
    """ValidateContainerResourceRequirements: no negative amount, and a request at most its limit."""
    errors = []
    limits = (v or {}).get("limits") or {}
    requests = (v or {}).get("requests") or {}
    for kind, amounts in (("limits", limits), ("requests", requests)):
        for name, amount in amounts.items():
            if parse_quantity(str(amount)) < 0:
                errors.append(fe.invalid(f"{p}.{kind}[{name}]", str(amount), "must be greater than or equal to 0"))
    for name, request in requests.items():
        if name in limits and parse_quantity(str(request)) > parse_quantity(str(limits[name])):
            errors.append(
                fe.invalid(f"{p}.requests[{name}]", str(request), f"must be less than or equal to {name} limit of {limits[name]}")
            )
    return errors


def _tolerations(v: Any, p: str, _: Any) -> list[FieldError]:
    """ValidateTolerations."""
    errors = []
    for i, t in enumerate(v or ()):
        item = f"{p}[{i}]"
        key, operator, value, effect = t.get("key") or "", t.get("operator") or "", t.get("value") or "", t.get("effect") or ""
        if key:
            errors += [fe.invalid(f"{item}.key", key, m) for m in qualified_name_errors(key)]
        if not key and operator != "Exists":
            errors.append(
                fe.invalid(f"{item}.operator", operator, "operator must be Exists when `key` is empty, which means \"match all values and all keys\"")
            )
        if t.get("tolerationSeconds") is not None and effect != "NoExecute":
            errors.append(fe.invalid(f"{item}.effect", effect, "effect must be 'NoExecute' when `tolerationSeconds` is set"))
        if operator in ("", "Equal"):
            messages = label_value_errors(value)
            if messages:
                errors.append(fe.invalid(f"{item}.operator", value, ";".join(messages)))
        elif operator == "Exists":
            if value:
                errors.append(fe.invalid(f"{item}.operator", t, "value must be empty when `operator` is 'Exists'"))
        else:
            errors.append(fe.not_supported(f"{item}.operator", operator, ("Equal", "Exists")))
        if effect and effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            errors.append(fe.not_supported(f"{item}.effect", effect, ("NoSchedule", "PreferNoSchedule", "NoExecute")))
    return errors


def _active_deadline(v: Any, p: str, _: Any) -> list[FieldError]:
    return [] if v is None or 1 <= v <= INT32_MAX else [fe.invalid(p, v, f"must be between 1 and {INT32_MAX}, inclusive")]


_CONTAINER_RULES = [
    ("name", _messages(dns1123_label_errors), "validateContainerCommon: ValidateDNS1123Label"),
    ("image", _image, "validateContainers: a container's image is required"),
    ("imagePullPolicy", _one_of("Always", "IfNotPresent", "Never"), "validatePullPolicy"),
    ("terminationMessagePolicy", _one_of("File", "FallbackToLogsOnError"), "validateContainerCommon"),
    ("ports[*].containerPort", _port, "validateContainerPorts"),
    ("ports[*].protocol", _one_of("TCP", "UDP", "SCTP"), "validateContainerPorts"),
    ("resources", _resources, "ValidateContainerResourceRequirements"),
]

RULES: list[Rule] = [
    Rule("metadata.labels", _labels, "ValidatePodTemplateSpec: ValidateLabels"),
    Rule("metadata.annotations", _annotations, "ValidatePodTemplateSpec: ValidateAnnotations"),
    Rule("spec.containers", _not_empty, "validateContainers: at least one container"),
    *(Rule(f"spec.{field}[*].{sub}", check, source) for field in ("containers", "initContainers") for sub, check, source in _CONTAINER_RULES),
    Rule("spec", _unique_container_names, "validateInitContainers: names unique with the containers'"),
    Rule("spec.volumes", _unique_names, "ValidateVolumes: names unique"),
    Rule("spec.volumes[*].name", _messages(dns1123_label_errors), "ValidateVolumes: ValidateDNS1123Label"),
    Rule("spec.restartPolicy", _one_of("Always", "OnFailure", "Never"), "validateRestartPolicy"),
    Rule("spec.dnsPolicy", _one_of("ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"), "validateDNSPolicy"),
    Rule("spec.preemptionPolicy", _one_of("PreemptLowerPriority", "Never"), "ValidatePreemptionPolicy"),
    Rule("spec.nodeSelector", _labels, "ValidatePodSpec: ValidateLabels(nodeSelector)"),
    Rule("spec.tolerations", _tolerations, "ValidateTolerations"),
    Rule("spec.priorityClassName", _messages(dns1123_subdomain_errors), "ValidatePriorityClassName"),
    Rule("spec.serviceAccountName", _messages(dns1123_subdomain_errors), "ValidateServiceAccountName"),
    Rule("spec.nodeName", _messages(dns1123_subdomain_errors), "ValidateNodeName"),
    Rule("spec.hostname", _messages(dns1123_label_errors), "ValidatePodSpec: ValidateDNS1123Label(hostname)"),
    Rule("spec.subdomain", _messages(dns1123_label_errors), "ValidatePodSpec: ValidateDNS1123Label(subdomain)"),
    Rule("spec.activeDeadlineSeconds", _active_deadline, "ValidatePodSpec: activeDeadlineSeconds"),
]
