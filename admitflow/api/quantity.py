"""Kubernetes resource quantities (`500m`, `2Gi`, `1.5`, `9`, `1e3`) and Kueue's integer view of them.

A `Quantity` keeps exactly what the user wrote, so manifests round-trip unchanged; arithmetic
goes through `parse_quantity` (an exact `Decimal`) or `resource_value` (the int64 Kueue computes
with: milli-units for cpu, whole units for everything else, rounded up away from zero).
`format_resource` goes the other way and prints what Kueue's `ResourceQuantity(name, value)`
prints, so usage in statuses reads like Kueue's (`36Gi`, `500m`).

The grammar follows `resource.ParseQuantity` in k8s.io/apimachinery: a signed decimal number and
one suffix, either binary (`Ki`..`Ei`), decimal SI (`n u m "" k M G T P E`) or a decimal
exponent (`e3`, `E-2`).
"""

from __future__ import annotations

import math
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal, localcontext
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, WithJsonSchema

from .field_error import invalid_body, k8s_error, k8s_type_error

FORMAT_ERROR = (
    "quantities must match the regular expression "
    "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)
NUMERIC_ERROR = "unable to parse quantity's numeric part"
SUFFIX_ERROR = "unable to parse quantity's suffix"

_SUFFIX_CHARS = set("eEinumkKMGTP")
_DIGITS = set("0123456789")
_BINARY_SUFFIXES = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL_SUFFIXES = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DECIMAL_BY_EXPONENT = {v: k for k, v in _DECIMAL_SUFFIXES.items()}
_BINARY_BY_POWER = {v: k for k, v in _BINARY_SUFFIXES.items()}
_INT64_MAX = 2**63 - 1
_INT64_MIN = -(2**63)

Format = Literal["BinarySI", "DecimalSI", "DecimalExponent"]


class QuantityError(ValueError):
    """The text is not a Kubernetes quantity; `str(err)` is the apimachinery message."""


def _split(text: str) -> tuple[bool, str, str, str]:
    # Mirrors parseQuantityString: sign, integer digits, optional fraction, suffix.
    if not text:
        raise QuantityError(FORMAT_ERROR)
    pos, end = 0, len(text)
    positive = True
    if text[0] in "+-":
        positive = text[0] == "+"
        pos += 1
    start = pos
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    whole = text[start:pos]
    fraction = ""
    if pos < end and text[pos] == ".":
        pos += 1
        start = pos
        while pos < end and text[pos] in _DIGITS:
            pos += 1
        fraction = text[start:pos]
    suffix_start = pos
    while pos < end and text[pos] in _SUFFIX_CHARS:
        pos += 1
    if pos < end and text[pos] in "+-":
        pos += 1
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    if pos != end:
        raise QuantityError(FORMAT_ERROR)
    return positive, whole, fraction, text[suffix_start:]


def _interpret_suffix(suffix: str) -> tuple[int, int, Format]:
    """Return (base, exponent, format) for a suffix, like quantitySuffixer.interpret."""
    if suffix in _DECIMAL_SUFFIXES:
        return 10, _DECIMAL_SUFFIXES[suffix], "DecimalSI"
    if suffix in _BINARY_SUFFIXES:
        return 2, 10 * _BINARY_SUFFIXES[suffix], "BinarySI"
    if len(suffix) > 1 and suffix[0] in "eE":
        rest = suffix[1:]
        digits = rest[1:] if rest[0] in "+-" else rest
        if digits and all(c in _DIGITS for c in digits):
            return 10, int(rest), "DecimalExponent"
    raise QuantityError(SUFFIX_ERROR)


def _parse(text: str) -> tuple[Decimal, Format]:
    positive, whole, fraction, suffix = _split(text)
    base, exponent, fmt = _interpret_suffix(suffix)
    digits = (whole or "0") + ("." + fraction if fraction else "")
    with localcontext() as ctx:
        ctx.prec = 200
        number = Decimal(digits)
        value = number * (Decimal(base) ** exponent)
        return (value if positive else -value), fmt


def validate_quantity(text: str) -> str:
    """Raise QuantityError unless `text` parses as a Kubernetes quantity; return it unchanged."""
    _parse(text)
    return text


def parse_quantity(text: str) -> Decimal:
    """The exact value of a quantity (`"1.5Gi"` -> `Decimal("1610612736")`)."""
    return _parse(text)[0]


def _round_away_from_zero(value: Decimal) -> int:
    with localcontext() as ctx:
        ctx.prec = 200
        rounded = value.to_integral_value(rounding=ROUND_CEILING if value >= 0 else ROUND_FLOOR)
    return int(rounded)


def _clamp_int64(value: int) -> int:
    return max(_INT64_MIN, min(_INT64_MAX, value))


def resource_value(resource_name: str, q: str) -> int:
    """Kueue's `resources.ResourceValue`: milli-units for cpu, whole units otherwise, rounded up."""
    value = parse_quantity(q)
    if resource_name == "cpu":
        value *= 1000
    return _clamp_int64(_round_away_from_zero(value))


def _decimal_canonical(mantissa: int, exponent: int, fmt: Format) -> str:
    # int64Amount.AsCanonicalBytes: strip factors of ten, then lower the exponent to a multiple of
    # three so the mantissa stays an integer.
    if mantissa == 0:
        return "0"
    while mantissa % 10 == 0:
        mantissa //= 10
        exponent += 1
    shift = exponent % 3
    mantissa *= 10**shift
    exponent -= shift
    if fmt == "DecimalExponent":
        return f"{mantissa}" + (f"e{exponent}" if exponent != 0 else "")
    if exponent > 18:
        mantissa *= 10 ** (exponent - 18)
        exponent = 18
    return f"{mantissa}{_DECIMAL_BY_EXPONENT[exponent]}"


def _to_mantissa(value: Decimal) -> tuple[int, int]:
    # Kubernetes keeps at most nano precision and rounds anything finer up (away from zero).
    with localcontext() as ctx:
        ctx.prec = 200
        scaled = value * Decimal(10) ** 9
        nanos = _round_away_from_zero(scaled)
    return nanos, -9


def _canonical(value: Decimal, fmt: Format) -> str:
    mantissa, exponent = _to_mantissa(value)
    if mantissa == 0:
        return "0"
    if fmt == "BinarySI":
        exact_int = value == value.to_integral_value()
        if -1024 < value < 1024 or not exact_int:
            return _decimal_canonical(mantissa, exponent, "DecimalSI")
        number = int(value)
        power = 0
        while number % 1024 == 0 and power < 6:
            number //= 1024
            power += 1
        return f"{number}{_BINARY_BY_POWER.get(power, '')}"
    return _decimal_canonical(mantissa, exponent, fmt)


def canonical_quantity(text: str) -> str:
    """What `resource.MustParse(text).String()` prints (`"0.5"` -> `"500m"`, `"2048Mi"` -> `"2Gi"`)."""
    value, fmt = _parse(text)
    return _canonical(value, fmt)


def format_resource(resource_name: str, value: int) -> str:
    """Kubernetes' canonical text of Kueue's `ResourceQuantity(resource_name, value)`."""
    if resource_name == "cpu":
        return _canonical(Decimal(value) / 1000, "DecimalSI")
    if resource_name in ("memory", "ephemeral-storage") or resource_name.startswith("hugepages-"):
        # newCanonicalQuantity: print BinarySI, re-parse, print again; a value that is not a
        # multiple of 1024 therefore ends up in DecimalSI (100000 -> "100k").
        text = _canonical(Decimal(value), "BinarySI")
        return canonical_quantity(text)
    return _canonical(Decimal(value), "DecimalSI")


def _coerce_quantity(value: Any) -> str:
    if isinstance(value, bool):
        raise k8s_type_error("string")
    if isinstance(value, int):
        value = str(value)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise k8s_error(invalid_body(str(value), FORMAT_ERROR))
        value = str(int(value)) if value.is_integer() and abs(value) < 1e16 else repr(value)
    elif not isinstance(value, str):
        raise k8s_type_error("string")
    try:
        return validate_quantity(value)
    except QuantityError as err:
        raise k8s_error(invalid_body(value, str(err))) from None


Quantity = Annotated[
    str,
    BeforeValidator(_coerce_quantity),
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer"}, {"type": "number"}, {"type": "string"}],
            "x-kubernetes-int-or-string": True,
            "pattern": r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$",
        }
    ),
]
"""A Kubernetes resource quantity, kept as written (YAML numbers become their text)."""
