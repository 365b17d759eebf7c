"""What Grafana sends to Prometheus for a dashboard's query: its variables substituted and its step
chosen as Grafana's Prometheus data source does (Grafana 10 to 12), so that a test can run the
query Grafana would run.

- `$var`, `${var}` and `[[var]]` of a dashboard variable: "All" is the variable's `allValue`
  as written (`.*`); otherwise each value is escaped for a regular expression inside a PromQL
  string, and several become `(a|b)`.
- The step: the time range divided by the panel's data points, rounded to Grafana's ladder of
  round intervals (1s, 2s, 5s, 10s, 15s, 20s, 30s, 1m, ...), and at least the panel's min interval
  (else the data source's scrape interval, `timeInterval`). `$__interval` is that step.
- `$__rate_interval` is max(`$__interval` + scrape interval, 4 x scrape interval), the scrape
  interval being the query's min step if it has one, else the data source's; written as Go writes
  a duration (1m0s); `$__rate_interval_ms` in milliseconds. `$__range`, `$__range_s`, `$__range_ms`
  are the time range.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Grafana's round intervals, in seconds: a computed interval goes to the nearest one (the cut
# between two is their midpoint).
LADDER = (
    0.001, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 20, 30, 60, 120, 300, 600, 900, 1200, 1800,
    3600, 7200, 10800, 21600, 43200, 86400, 604800, 2592000, 31536000,
)
REGEX_SPECIAL = re.compile(r"[$^*+?.()|\\\[\]{}]")
UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


def seconds(text: str) -> float:
    """A Grafana interval ("15s", "1m", "500ms", or a bare number of seconds) in seconds."""
    text = text.strip().strip("<>")
    if re.fullmatch(r"\d+", text):
        return float(text)
    total, pos = 0.0, 0
    for m in re.finditer(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)", text):
        assert m.start() == pos, f"not an interval: {text!r}"
        total += float(m[1]) * UNITS[m[2]]
        pos = m.end()
    assert pos == len(text) and pos, f"not an interval: {text!r}"
    return total


def round_interval(value: float) -> float:
    for low, high in zip(LADDER, LADDER[1:]):
        if value <= (low + high) / 2:
            return low
    return LADDER[-1]


def go_duration(value: float) -> str:
    """Go's time.Duration.String(): 500ms, 4s, 1m0s, 1h0m0s."""
    if value < 1:
        return f"{value * 1000:g}ms"
    hours, rest = divmod(value, 3600)
    minutes, secs = divmod(rest, 60)
    out = f"{secs:g}s"
    if hours or minutes:
        out = f"{int(minutes)}m" + out
    if hours:
        out = f"{int(hours)}h" + out
    return out


def kbn_interval(value: float) -> str:
    """How Grafana writes `$__interval`: the largest whole unit (1s, 2m, 1h)."""
    for unit, size in (("y", 31536000), ("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if value >= size:
            return f"{int(value // size)}{unit}"
    return f"{max(1, int(value * 1000))}ms"


def regex_escape(value: str) -> str:
    """A value inside a PromQL regex matcher's string: each regex character gets a backslash, which
    the PromQL string writes as two."""
    return REGEX_SPECIAL.sub(lambda m: "\\\\" + m[0], value)


@dataclass(frozen=True)
class Query:
    """One query as Grafana sends it: the expression with nothing left to substitute, and its step."""

    expr: str
    step: float
    rate_interval: float


def intervals(range_s: float, max_data_points: int, scrape: str, min_interval: str | None = None) -> tuple[float, float]:
    """(`$__interval`, `$__rate_interval`) in seconds for a range of `range_s` seconds drawn in
    `max_data_points` points, from a data source whose scrape interval is `scrape`, with the
    panel's or query's min interval if it has one."""
    low = seconds(min_interval or scrape)
    computed = range_s / max_data_points
    interval = round_interval(low if computed < low else computed)
    return interval, max(interval + low, 4 * low)


def substitute(
    expr: str,
    variables: list[dict],
    chosen: dict[str, list[str]],
    range_s: float,
    max_data_points: int,
    scrape: str,
    min_interval: str | None = None,
) -> Query:
    """`expr` with the dashboard's `variables` (its templating list) set to `chosen` (name ->
    values; ["$__all"] for All) and Grafana's own variables, as the Prometheus data source sends it."""
    interval, rate = intervals(range_s, max_data_points, scrape, min_interval)
    builtins = {
        "__rate_interval_ms": str(int(rate * 1000)),
        "__rate_interval": go_duration(rate),
        "__interval_ms": str(int(interval * 1000)),
        "__interval": kbn_interval(interval),
        "__range_ms": str(int(range_s * 1000)),
        "__range_s": str(round(range_s)),
        "__range": f"{round(range_s)}s",
    }
    values: dict[str, str] = {}
    for variable in variables:
        picked = chosen.get(variable["name"], ["$__all"])
        if picked == ["$__all"] and variable.get("allValue"):
            values[variable["name"]] = variable["allValue"]
            continue
        assert picked != ["$__all"], f"${variable['name']}: All without an allValue is not modelled here"
        escaped = [regex_escape(v) for v in picked]
        values[variable["name"]] = escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"

    def replace(m: re.Match) -> str:
        name = m["a"] or m["b"] or m["c"]
        if name.isdigit():  # a regex group of label_replace, not a variable
            return m[0]
        if name in builtins:
            return builtins[name]
        assert name in values, f"${name} is no variable of the dashboard"
        return values[name]

    # A name runs as far as word characters go: $__rate_interval_ms is not $__rate_interval.
    out = re.sub(r"\$\{(?P<a>\w+)\}|\[\[(?P<b>\w+)\]\]|\$(?P<c>\w+)", replace, expr)
    return Query(out, interval, rate)
