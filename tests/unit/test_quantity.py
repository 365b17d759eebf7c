"""Kubernetes quantities: exact parsing, Kueue's integer view, and Kueue's canonical text."""

from decimal import Decimal

import pytest
from pydantic import ValidationError

from admitflow.api import (
    KueueModel,
    Quantity,
    QuantityError,
    canonical_quantity,
    format_resource,
    parse_quantity,
    resource_value,
    validate_quantity,
)

FORMAT_ERROR = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        pytest.param("500m", Decimal("0.5"), id="milli-suffix-is-a-thousandth"),
        pytest.param("2Gi", Decimal(2 * 1024**3), id="binary-suffix-is-a-power-of-1024"),
        pytest.param("1.5", Decimal("1.5"), id="plain-decimal"),
        pytest.param("9", Decimal(9), id="plain-integer"),
        pytest.param("1e3", Decimal(1000), id="decimal-exponent"),
        pytest.param("1E", Decimal(10**18), id="capital-e-alone-is-exa"),
        pytest.param("1.5Gi", Decimal(1610612736), id="fraction-with-binary-suffix-is-exact"),
        pytest.param("100k", Decimal(100000), id="kilo"),
        pytest.param("12Mi", Decimal(12 * 1024**2), id="mebi"),
        pytest.param("3n", Decimal("0.000000003"), id="nano-is-kept-exactly"),
        pytest.param("-2", Decimal(-2), id="negative"),
        pytest.param("+4k", Decimal(4000), id="explicit-plus-sign"),
        pytest.param(".5", Decimal("0.5"), id="leading-dot"),
        pytest.param("1.", Decimal(1), id="trailing-dot-as-kubernetes-allows"),
        pytest.param("2e-3", Decimal("0.002"), id="negative-exponent"),
        pytest.param("0", Decimal(0), id="zero"),
    ],
)
def test_parse_quantity_is_exact(text, value):
    assert parse_quantity(text) == value


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("lots", FORMAT_ERROR, id="words-do-not-match-the-grammar"),
        pytest.param("", FORMAT_ERROR, id="empty-text-does-not-match-the-grammar"),
        pytest.param("1.2.3", FORMAT_ERROR, id="two-dots-do-not-match-the-grammar"),
        pytest.param("1KI", FORMAT_ERROR, id="capital-i-is-not-a-suffix-letter"),
        pytest.param("1kk", "unable to parse quantity's suffix", id="doubled-suffix-is-unknown"),
        pytest.param("1e", "unable to parse quantity's suffix", id="exponent-without-digits-is-unknown"),
    ],
)
def test_invalid_quantities_get_the_apimachinery_message(text, message):
    with pytest.raises(QuantityError) as err:
        validate_quantity(text)
    assert str(err.value) == message


@pytest.mark.parametrize(
    ("resource", "text", "value"),
    [
        pytest.param("cpu", "500m", 500, id="cpu-is-counted-in-millicores"),
        pytest.param("cpu", "4", 4000, id="whole-cpus-become-millicores"),
        pytest.param("cpu", "1.5m", 2, id="cpu-below-a-millicore-rounds-up"),
        pytest.param("cpu", "-1.5m", -2, id="negative-cpu-rounds-away-from-zero"),
        pytest.param("memory", "36Gi", 38654705664, id="memory-is-counted-in-bytes"),
        pytest.param("memory", "1.5", 2, id="fractional-bytes-round-up"),
        pytest.param("memory", "500m", 1, id="milli-bytes-round-up-to-one"),
        pytest.param("nvidia.com/gpu", "2", 2, id="extended-resources-are-whole-units"),
        pytest.param("pods", "1k", 1000, id="decimal-suffix-on-a-count"),
        pytest.param("memory", "100E", 2**63 - 1, id="values-beyond-int64-saturate"),
    ],
)
def test_resource_value_is_what_kueue_computes(resource, text, value):
    assert resource_value(resource, text) == value


@pytest.mark.parametrize(
    ("resource", "value", "text"),
    [
        pytest.param("cpu", 4000, "4", id="whole-cpus-print-without-suffix"),
        pytest.param("cpu", 500, "500m", id="part-of-a-cpu-prints-in-milli"),
        pytest.param("cpu", 1500, "1500m", id="mixed-cpu-stays-in-milli"),
        pytest.param("cpu", 2500000, "2500", id="many-cpus-print-as-an-integer"),
        pytest.param("cpu", 0, "0", id="zero-cpu"),
        pytest.param("memory", 38654705664, "36Gi", id="memory-multiple-of-gibibytes"),
        pytest.param("memory", 1500, "1500", id="memory-not-a-multiple-of-1024-prints-plain"),
        pytest.param("memory", 1000, "1k", id="memory-below-1024-prints-decimal-si"),
        pytest.param("memory", 100000, "100k", id="memory-reparsed-as-decimal-si-like-newCanonicalQuantity"),
        pytest.param("memory", 128000, "125Ki", id="memory-multiple-of-kibibytes"),
        pytest.param("ephemeral-storage", 2 * 1024**4, "2Ti", id="ephemeral-storage-is-binary"),
        pytest.param("hugepages-2Mi", 4 * 1024**2, "4Mi", id="hugepages-are-binary"),
        pytest.param("pods", 3, "3", id="counts-print-plain"),
        pytest.param("pods", 2000, "2k", id="counts-use-decimal-si"),
        pytest.param("nvidia.com/gpu", 8, "8", id="extended-resource"),
        pytest.param("pods", -3000, "-3k", id="negative-values-keep-their-sign"),
    ],
)
def test_format_resource_prints_kueues_canonical_quantity(resource, value, text):
    assert format_resource(resource, value) == text


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        pytest.param("0.5", "500m", id="half-becomes-milli"),
        pytest.param("2048Mi", "2Gi", id="binary-is-reduced"),
        pytest.param("1.5Gi", "1536Mi", id="fractional-binary-is-reduced-to-an-integer"),
        pytest.param("1000", "1k", id="decimal-thousands-use-k"),
        pytest.param("1e3", "1e3", id="exponent-form-is-kept"),
        pytest.param("1500e-3", "1500e-3", id="exponent-form-keeps-a-multiple-of-three"),
        pytest.param("0.0000000001", "1n", id="below-nano-rounds-up"),
        pytest.param("-1", "-1", id="negative"),
    ],
)
def test_canonical_quantity_matches_kubernetes_string(text, canonical):
    assert canonical_quantity(text) == canonical


class _Holder(KueueModel):
    value: Quantity


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        pytest.param("36Gi", "36Gi", id="text-is-kept-as-written"),
        pytest.param(9, "9", id="yaml-int-becomes-its-text"),
        pytest.param(1.5, "1.5", id="yaml-float-becomes-its-text"),
        pytest.param(2.0, "2", id="integral-float-drops-the-point"),
        pytest.param("0.50", "0.50", id="trailing-zeros-are-not-normalised"),
    ],
)
def test_quantity_type_keeps_the_users_text(given, kept):
    assert _Holder(value=given).value == kept


@pytest.mark.parametrize(
    "given",
    [
        pytest.param(True, id="booleans-are-not-quantities"),
        pytest.param("ten", id="words-are-not-quantities"),
        pytest.param(float("nan"), id="nan-is-not-a-quantity"),
        pytest.param(["1"], id="lists-are-not-quantities"),
    ],
)
def test_quantity_type_refuses_non_quantities(given):
    with pytest.raises(ValidationError):
        _Holder(value=given)
