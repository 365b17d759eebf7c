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
