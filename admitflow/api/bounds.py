"""The integer widths of Kueue's Go types, so every number a manifest or message carries is
refused at parse time when Kueue could not hold it.

Kueue declares its counts and seconds `int32` (`requeueAfterSeconds`, `retryCount`, `count`,
`priority`, `maximumExecutionTimeSeconds`, the backoff settings, ...) and Kubernetes its
generations and `tolerationSeconds` `int64`. Python integers have no such limit, and an absurd
value that passes validation overflows later, inside a workflow (`timedelta`/`datetime`), where
nothing can refuse it any more. Models bound such fields with
`Field(ge=..., le=INT32_MAX)`; messages outside `admitflow.api` (verdicts) import the same constants.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator

from .field_error import invalid_body, k8s_error

INT32_MAX = 2**31 - 1
"""Largest Go int32: 2147483647 (seconds: about 68 years)."""

INT32_MIN = -(2**31)
"""Smallest Go int32: -2147483648."""

INT64_MAX = 2**63 - 1
"""Largest Go int64."""

INT64_MIN = -(2**63)
"""Smallest Go int64."""

FACTOR_MAX = 100.0
"""Largest growth factor of admitflow's AdmissionCheck retry backoff: already past any sane
`maxDelaySeconds` after a few retries; bounding it keeps the delay a finite number."""

NEGATIVE_MESSAGE = "must be greater than or equal to 0"
"""apimachinery's ValidateNonnegativeField, as the apiserver says it."""


def _non_negative(value: int | None, maximum: int) -> int | None:
    if value is not None and value < 0:
        raise k8s_error(invalid_body(value, NEGATIVE_MESSAGE))
    if value is not None and value > maximum:
        raise k8s_error(invalid_body(value, f"must be less than or equal to {maximum}"))
    return value


def non_negative_int32(value: int | None) -> int | None:
    """A count or a number of seconds held in a Go int32 that may not be negative: refused, in the
    apiserver's words, below 0 or above INT32_MAX."""
    return _non_negative(value, INT32_MAX)


def non_negative_int64(value: int | None) -> int | None:
    """`non_negative_int32` for a Go int64."""
    return _non_negative(value, INT64_MAX)


NonNegativeInt32 = Annotated[int, AfterValidator(non_negative_int32)]
"""An int32 field the apiserver checks with ValidateNonnegativeField (a Job's parallelism...)."""

NonNegativeInt64 = Annotated[int, AfterValidator(non_negative_int64)]
"""An int64 field the apiserver checks with ValidateNonnegativeField (activeDeadlineSeconds)."""
