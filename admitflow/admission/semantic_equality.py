"""Whether two pod templates are equal as Kubernetes' `equality.Semantic.DeepEqual` sees them after
decoding into core/v1 structs, computed on their JSON (`same(a, b)`).

What makes JSON that differs equal there, and so here:

- quantities are compared by value (`1` cpu equals `1000m`, `1Gi` equals `1073741824`), as
  `resource.Quantity`'s registered equality (`Cmp`); Kubernetes keeps nano precision, rounding up;
- an empty list equals an absent one (Go's nil and empty slices are semantically equal), and so
  does an empty map (labels, annotations, nodeSelector, requests, limits, ...);
- an empty string equals an absent one (string fields are values in core/v1, so unset is "");
- `{}` equals an absent object only where core/v1 holds the object by value (a container's
  `resources`, the template's `metadata` and `spec`, an affinity term's `podAffinityTerm` or
  `preference`, a claim template's `spec` and `metadata`); elsewhere the field is a pointer, and
  `affinity: {}` differs from no affinity, as in Go.

Numbers and booleans are compared as written: `false` and `0` differ from absent, which is Go's
answer for pointer fields (`priority`, `automountServiceAccountToken`, ...) and not for the few
plain ones (`hostNetwork: false`), which templates rarely spell out.
"""

from __future__ import annotations

from decimal import ROUND_CEILING, Decimal
from typing import Any

from admitflow.api.quantity import QuantityError, parse_quantity

# Maps whose values are quantities, and fields that are one quantity.
_QUANTITY_MAPS = frozenset({"requests", "limits", "overhead"})
_QUANTITY_FIELDS = frozenset({"sizeLimit", "divisor"})
_MAPS = frozenset(
    {"labels", "annotations", "nodeSelector", "matchLabels", "volumeAttributes", "options", *_QUANTITY_MAPS}
)
# Objects held by value: (parent field, field), `*` for any parent.
_VALUE_OBJECTS = frozenset(
    {
        ("", "metadata"),
        ("", "spec"),
        ("containers", "resources"),
        ("initContainers", "resources"),
        ("ephemeralContainers", "resources"),
        ("*", "podAffinityTerm"),
        ("*", "preference"),
        ("volumeClaimTemplate", "spec"),
        ("volumeClaimTemplate", "metadata"),
    }
)
_NANO = Decimal("1e-9")


def same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two pod templates (wire JSON) are semantically equal."""
    return normalized(a) == normalized(b)


def normalized(template: dict[str, Any]) -> dict[str, Any]:
    """The template with every difference `same` ignores taken out."""
    return _object(template, "")


def _quantity(value: Any) -> Any:
    try:
        return ("quantity", parse_quantity(str(value)).quantize(_NANO, rounding=ROUND_CEILING))
    except (QuantityError, ArithmeticError):
        return value


def _empty(value: Any) -> bool:
    return value is None or value == "" or value == [] or value == {}


def _object(obj: dict[str, Any], parent: str) -> dict[str, Any]:
    out = {}
    for key, value in obj.items():
        if key in _QUANTITY_FIELDS:
            child = _quantity(value)
        elif key in _MAPS and isinstance(value, dict):
            child = {k: _quantity(v) if key in _QUANTITY_MAPS else _value(v, key) for k, v in value.items()}
        else:
            child = _value(value, key)
        if child == {} and not (key in _MAPS or (parent, key) in _VALUE_OBJECTS or ("*", key) in _VALUE_OBJECTS):
            out[key] = child  # a pointer to an empty object is not nil
        elif not _empty(child):
            out[key] = child
    return out


def _value(value: Any, key: str) -> Any:
    if isinstance(value, dict):
        return _object(value, key)
    if isinstance(value, list):
        return [_value(v, key) for v in value]
    return value
