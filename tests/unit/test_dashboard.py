"""docker/grafana's dashboard queries only what the engine serves, from what Prometheus scrapes.

- Every query of the dashboard (each panel's targets, in rows or not, and the template variable)
  names metrics, and each is a series the engine serves: `admitflow_` + a name of
  `admission.metrics.METRICS` (a histogram as its `_bucket`, `_sum` and `_count`), the exporter's
  `admitflow_exporter_cluster_queue_up`, or the SDK's `temporal_workflow_task_execution_failed`
  (docs/metrics.md). The metric names are read from the PromQL by `metric_names`, table-tested here,
  and a made-up name is reported, so the check cannot pass by finding nothing.
- It has a panel for each topic of docs/operations.md's "What to watch", on the provisioned data
  source, filtered by the `cluster_queue` variable.
- The provisioning points at the compose file's Prometheus, and docker/prometheus/prometheus.yml
  scrapes the workers (every replica) and the exporter on the port compose.yaml gives them.
Nothing here starts Prometheus or Grafana: tests/integration/test_prometheus.py runs every query in
Debian's Prometheus, sent as Grafana's data source sends it (tests/support/grafana.py, whose rules
are table-tested here); Grafana itself has not run (no Docker engine on the machine this was
written on, docs/operations.md).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from admitflow import gauges
from admitflow.admission.metrics import METRICS, PREFIX
from tests.support import grafana

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
DASHBOARD = DOCKER / "grafana" / "dashboards" / "admitflow.json"
DATASOURCES = DOCKER / "grafana" / "provisioning" / "datasources" / "prometheus.yaml"
PROVIDERS = DOCKER / "grafana" / "provisioning" / "dashboards" / "admitflow.yaml"
PROMETHEUS = DOCKER / "prometheus" / "prometheus.yml"
COMPOSE = DOCKER / "compose.yaml"

# The Temporal SDK's counter of failed workflow tasks, on every worker's endpoint (a wedged workflow).
WEDGED = "temporal_workflow_task_execution_failed"
HISTOGRAM_SERIES = ("_bucket", "_sum", "_count")
# Kueue's scheduler metrics, labelled by result only.
WITHOUT_CLUSTER_QUEUE = {PREFIX + "admission_attempts_total", PREFIX + "admission_attempt_duration_seconds_bucket"}

# PromQL's functions and aggregation operators (Prometheus 3.5), and its keywords.
FUNCTIONS = {
    "abs", "absent", "absent_over_time", "acos", "acosh", "asin", "asinh", "atan", "atanh", "avg_over_time",
    "ceil", "changes", "clamp", "clamp_max", "clamp_min", "cos", "cosh", "count_over_time", "day_of_month",
    "day_of_week", "day_of_year", "days_in_month", "deg", "delta", "deriv", "double_exponential_smoothing",
    "end", "exp", "floor", "histogram_avg", "histogram_count", "histogram_fraction", "histogram_quantile",
    "histogram_stddev", "histogram_stdvar", "histogram_sum", "holt_winters", "hour", "idelta", "increase",
    "info", "irate", "label_join", "label_replace", "last_over_time", "ln", "log10", "log2", "mad_over_time",
    "max_over_time", "min_over_time", "minute", "month", "pi", "predict_linear", "present_over_time",
    "quantile_over_time", "rad", "rate", "resets", "round", "scalar", "sgn", "sin", "sinh", "sort",
    "sort_by_label", "sort_by_label_desc", "sort_desc", "sqrt", "start", "stddev_over_time",
    "stdvar_over_time", "sum_over_time", "tan", "tanh", "time", "timestamp", "vector", "year",
}
AGGREGATIONS = {
    "avg", "bottomk", "count", "count_values", "group", "limit_ratio", "limitk", "max", "min", "quantile",
    "stddev", "stdvar", "sum", "topk",
}
KEYWORDS = {"and", "atan2", "bool", "by", "group_left", "group_right", "ignoring", "inf", "nan", "offset", "on", "or", "unless", "without"}

STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
MATCHERS = re.compile(r"\{[^{}]*\}")  # label names and values; strings are gone by then
RANGE = re.compile(r"\[[^\[\]]*\]")  # [5m], [1h:5m], [$__rate_interval]
GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", re.I)
# Grafana's variable query: label_values(label) or label_values(selector, label).
LABEL_VALUES = re.compile(r"^\s*label_values\(\s*(?:(.*?)\s*,\s*)?[a-zA-Z_]\w*\s*\)\s*$", re.S)
# An identifier that is not part of a number (5m, 0.95, 1e3) or a Grafana variable ($x).
IDENTIFIER = re.compile(r"(?<![\w:.$])([a-zA-Z_:][\w:]*)(\s*\()?")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression (or a Grafana `label_values` query) selects."""
    for opening, closing in ("()", "{}", "[]"):
        assert expr.count(opening) == expr.count(closing), f"unbalanced {opening}{closing}: {expr}"
    if m := LABEL_VALUES.match(expr):
        expr = m[1] or ""
    bare = GROUPING.sub(" ", RANGE.sub(" ", MATCHERS.sub(" ", STRING.sub('""', expr))))
    names = set()
    for name, call in IDENTIFIER.findall(bare):
        if call:
            assert name in FUNCTIONS | AGGREGATIONS, f"{name}(...) is no PromQL function: {expr}"
        elif name.lower() not in KEYWORDS:
            names.add(name)
    # A selector with no name before its braces, {__name__="x"}, would hide a metric: none is allowed.
    assert not re.search(r"(^|[^\w:\s])\s*\{", STRING.sub('""', expr)), f"a selector without a metric name: {expr}"
    return names


def served() -> dict[str, str]:
    """Every series the engine serves -> the metric it belongs to (docs/metrics.md)."""
    out = {gauges.UP: gauges.UP, WEDGED: WEDGED}
    for name, (kind, _) in METRICS.items():
        full = PREFIX + name
        out |= {full + s: full for s in HISTOGRAM_SERIES} if kind == "histogram" else {full: full}
    return out


def unserved(expr: str) -> set[str]:
    return metric_names(expr) - served().keys()


def load_dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def panels(node) -> list[dict]:
    """Every panel, rows' nested panels included, in order."""
    out = []
    for panel in node:
        out.append(panel)
        out += panels(panel.get("panels", []))
    return out


def queries(dashboard: dict) -> list[tuple[str, str]]:
    """(where, query) for each target of each panel and each query variable."""
    out = [(f"panel {p['title']!r}", t["expr"]) for p in panels(dashboard["panels"]) for t in p.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]
            out.append((f"variable ${variable['name']}", query["query"] if isinstance(query, dict) else query))
    return out


@pytest.fixture(scope="module")
def dashboard() -> dict:
    return load_dashboard()


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


# --- the extractor --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "expr, names",
    [
        ("admitflow_exporter_cluster_queue_up", {"admitflow_exporter_cluster_queue_up"}),
        ('sum by (cluster_queue, reason) (rate(admitflow_evicted_workloads_total{cluster_queue=~"$cluster_queue"}[5m]))',
         {"admitflow_evicted_workloads_total"}),
        ("sum(rate(admitflow_admitted_workloads_total[$__rate_interval])) by (cluster_queue)", {"admitflow_admitted_workloads_total"}),
        ('histogram_quantile(0.95, sum by (le) (rate(admitflow_requeue_delay_seconds_bucket{reason="Preempted"}[5m])))',
         {"admitflow_requeue_delay_seconds_bucket"}),
        ("rate(a_sum[5m]) / on (cluster_queue) group_left (reason) rate(b_count[5m] offset 1h) > bool 1e3",
         {"a_sum", "b_count"}),
        ('label_replace(up_total, "dst", "$1", "src_total", "(.*)") or vector(0)', {"up_total"}),
        ("count_values('rate', x) unless y and z or inf", {"x", "y", "z"}),
        ("label_values(admitflow_exporter_cluster_queue_up, cluster_queue)", {"admitflow_exporter_cluster_queue_up"}),
        ('label_values(admitflow_pending_workloads{status="active"}, cluster_queue)', {"admitflow_pending_workloads"}),
        ("label_values(cluster_queue)", set()),
        ("max_over_time(admitflow_pending_workloads[1h:5m])", {"admitflow_pending_workloads"}),
    ],
)
def test_metric_names_are_read_from_promql(expr, names):
    assert metric_names(expr) == names


def test_a_metric_the_engine_does_not_serve_is_reported():
    """The check is not vacuous: a made-up name, a histogram's bare name (it is served as its
    _bucket, _sum and _count only) and a counter's _count are each reported."""
    assert unserved('sum by (cluster_queue) (rate(admitflow_nope_total{cluster_queue=~"$cluster_queue"}[5m]))') == {"admitflow_nope_total"}
    assert unserved("rate(admitflow_admission_wait_time_seconds[5m])") == {"admitflow_admission_wait_time_seconds"}
    assert unserved("rate(admitflow_admitted_workloads_total_count[5m])") == {"admitflow_admitted_workloads_total_count"}
    assert unserved("rate(admitflow_admission_wait_time_seconds_count[5m]) + admitflow_pending_workloads") == set()


def test_a_selector_without_a_name_or_an_unknown_function_is_refused():
    with pytest.raises(AssertionError, match="without a metric name"):
        metric_names('sum(rate({__name__="admitflow_nope_total"}[5m]))')
    with pytest.raises(AssertionError, match="no PromQL function"):
        metric_names("sum(ratee(admitflow_admitted_workloads_total[5m]))")


# --- the dashboard --------------------------------------------------------------------------------


def test_every_query_names_only_metrics_the_engine_serves(dashboard):
    not_served = [
        f"{where} queries {name}, which the engine does not serve (admission.metrics.METRICS, gauges.UP, {WEDGED})"
        for where, expr in queries(dashboard)
        for name in sorted(unserved(expr))
    ]
    assert not_served == []


def test_every_query_names_a_metric(dashboard):
    assert len(queries(dashboard)) >= 15
    assert [where for where, expr in queries(dashboard) if not metric_names(expr)] == []


def test_what_each_panel_shows(dashboard):
    """A panel for each topic, and the series it reads (its title names the topic)."""
    shown = {
        p["title"]: set().union(*(metric_names(t["expr"]) for t in p["targets"]))
        for p in panels(dashboard["panels"])
        if p.get("targets")
    }
    expected = {
        "Admissions per ClusterQueue": {"admitflow_admitted_workloads_total", "admitflow_quota_reserved_workloads_total"},
        "Evictions per ClusterQueue by reason": {"admitflow_evicted_workloads_total"},
        "Pending workloads by cause": {"admitflow_pending_workloads", "admitflow_unadmitted_workloads"},
        "Admission wait": {"admitflow_admission_wait_time_seconds_bucket"},
        "Admission checks wait": {"admitflow_admission_checks_wait_time_seconds_bucket"},
        "Check latency per check": {"admitflow_admission_check_wait_time_seconds_bucket"},
        "Check verdicts by state": {"admitflow_admission_check_verdicts_total"},
        "Check retries": {"admitflow_admission_check_retries_total"},
        "PodsReady timeouts": {"admitflow_evicted_workloads_total"},
        "Admitted until PodsReady": {"admitflow_admitted_until_ready_wait_time_seconds_bucket"},
        "Backoff delays": {"admitflow_requeue_delay_seconds" + s for s in HISTOGRAM_SERIES},
        "Exporter: ClusterQueues answering": {gauges.UP},
        "Wedged workflows": {WEDGED},
        "Scheduling passes": WITHOUT_CLUSTER_QUEUE,
    }
    assert {title: shown.get(title) for title in expected} == expected
    timeouts = next(p for p in panels(dashboard["panels"]) if p["title"] == "PodsReady timeouts")
    assert all('reason="PodsReadyTimeout"' in t["expr"] for t in timeouts["targets"])


def counter_reads(expr: str, name: str) -> list[tuple[str, str, str]]:
    """(function, selector, window) of each rate(...) or increase(...) of the counter `name`."""
    return re.findall(rf"\b(rate|increase)\(({name}(?:\{{[^}}]*\}})?)\[([^\]]+)\]\)", expr)


@pytest.mark.parametrize(
    "expr, reads",
    [
        ('sum by (r) ((x_total{a="b"} unless x_total{a="b"} offset $__rate_interval) / ($__rate_interval_ms / 1000) '
         'or rate(x_total{a="b"}[$__rate_interval]))', [("rate", 'x_total{a="b"}', "$__rate_interval")]),
        ("sum by (r) ((x_total unless x_total offset 5m) or increase(x_total[5m]))", [("increase", "x_total", "5m")]),
        ("rate(x_total_count[5m])", []),
    ],
)
def test_counter_reads_are_found(expr, reads):
    assert counter_reads(expr, "x_total") == reads


def test_counters_and_histograms_are_summed_across_workers_and_new_series_count(dashboard):
    """Each worker counts what it ran: a rate is summed (docs/metrics.md), a quantile is taken of
    the summed buckets, `le` kept. And a series that was not there one window ago counts from its
    first sample (docs/metrics.md, Reading the counters): every rate(X[$__rate_interval]) comes
    with `(X unless X offset $__rate_interval) / ($__rate_interval_ms / 1000)`, every
    increase(X[W]) with `(X unless X offset W)`, and X is read nowhere else."""
    for where, expr in queries(dashboard):
        for name in metric_names(expr) & served().keys():
            if not (name.endswith("_total") or name.endswith(HISTOGRAM_SERIES) or name == WEDGED):
                continue
            reads = counter_reads(expr, name)
            assert reads, f"{where} reads {name} without rate or increase: {expr}"
            for fn, selector, window in reads:
                new = f"({selector} unless {selector} offset {window})"
                if fn == "rate":
                    assert window == "$__rate_interval", f"{where}: {expr}"
                    new += " / ($__rate_interval_ms / 1000)"
                assert f"{new} or {fn}({selector}[{window}])" in expr, f"{where}: new series left out: {expr}"
                assert re.search(rf"sum by \([^)]*\) \({re.escape(new)}", expr), f"{where}: not summed: {expr}"
            assert len(re.findall(rf"\b{name}\b", expr)) == 3 * len(reads), f"{where} reads {name} elsewhere: {expr}"
            if name.endswith("_bucket"):
                assert re.search(rf"histogram_quantile\([\d.]+, sum by \([^)]*\ble\) \(\({name}\b", expr), f"{where}: {expr}"


def test_it_has_a_cluster_queue_variable_that_every_admitflow_query_uses(dashboard):
    (variable,) = [v for v in dashboard["templating"]["list"] if v["name"] == "cluster_queue"]
    assert (variable["includeAll"], variable["multi"], variable["allValue"]) == (True, True, ".*")
    for where, expr in queries(dashboard):
        names = metric_names(expr) - WITHOUT_CLUSTER_QUEUE
        if where.startswith("panel") and any(n.startswith(PREFIX) for n in names):
            assert 'cluster_queue=~"$cluster_queue"' in expr, f"{where} ignores the ClusterQueue chosen: {expr}"


def test_every_panel_reads_the_provisioned_data_source(dashboard):
    (datasource,) = yaml.safe_load(DATASOURCES.read_text())["datasources"]
    expected = {"type": datasource["type"], "uid": datasource["uid"]}
    for variable in dashboard["templating"]["list"]:
        assert variable["datasource"] == expected, f"variable ${variable['name']}"
    for panel in panels(dashboard["panels"]):
        if panel["type"] != "row":
            assert panel["datasource"] == expected, panel["title"]
            assert all(t["datasource"] == expected for t in panel["targets"]), panel["title"]
    assert (dashboard["title"], dashboard["uid"]) == ("admitflow admission", "admitflow-admission")
    ids = [p["id"] for p in panels(dashboard["panels"])]
    assert len(ids) == len(set(ids))


def test_the_panels_tile_the_grid_without_overlapping(dashboard):
    taken: dict[tuple[int, int], str] = {}
    for panel in panels(dashboard["panels"]):
        box = panel["gridPos"]
        assert box["x"] >= 0 and box["x"] + box["w"] <= 24, panel["title"]
        for cell in ((x, y) for x in range(box["x"], box["x"] + box["w"]) for y in range(box["y"], box["y"] + box["h"])):
            assert cell not in taken, f"{panel['title']!r} overlaps {taken[cell]!r}"
            taken[cell] = panel["title"]


# --- Grafana's substitution (tests/support/grafana.py, which test_prometheus.py sends queries with) ---


VARIABLES = [{"name": "cluster_queue", "type": "query", "multi": True, "includeAll": True, "allValue": ".*"}]


@pytest.mark.parametrize(
    "range_s, points, scrape, min_interval, want",
    [
        pytest.param(30, 1000, "1s", None, (1, 4), id="a-short-range-steps-by-the-scrape-interval-and-rates-over-four"),
        pytest.param(6 * 3600, 1000, "15s", None, (20, 60), id="six-hours-step-20s-and-rate-over-a-minute"),
        pytest.param(7 * 86400, 1000, "15s", None, (600, 615), id="a-week-steps-10m-and-rates-over-a-step-and-a-scrape"),
        pytest.param(3600, 1000, "15s", "1m", (60, 240), id="a-min-interval-is-the-least-step-and-the-scrape-interval"),
    ],
)
def test_grafana_chooses_the_step_and_the_rate_interval(range_s, points, scrape, min_interval, want):
    assert grafana.intervals(range_s, points, scrape, min_interval) == want


@pytest.mark.parametrize(
    "chosen, want",
    [
        pytest.param({}, '{cluster_queue=~".*"}', id="all-is-the-all-value-as-written"),
        pytest.param({"cluster_queue": ["cq"]}, '{cluster_queue=~"cq"}', id="one-value-as-it-is"),
        pytest.param({"cluster_queue": ["cq", "gpu"]}, '{cluster_queue=~"(cq|gpu)"}', id="several-values-are-alternatives"),
        pytest.param({"cluster_queue": ["team.a"]}, '{cluster_queue=~"team\\\\.a"}', id="a-regex-character-is-escaped-in-the-string"),
    ],
)
def test_grafana_substitutes_a_multi_value_variable_for_a_regex_matcher(chosen, want):
    for written in ("$cluster_queue", "${cluster_queue}", "[[cluster_queue]]"):
        query = grafana.substitute(f'x{{cluster_queue=~"{written}"}}', VARIABLES, chosen, 60, 1000, "15s")
        assert query.expr == "x" + want


def test_grafana_substitutes_its_own_variables():
    expr = 'rate(x[$__rate_interval]) / ($__rate_interval_ms / 1000) + $__interval_ms + y[$__interval] + z[$__range] + label_replace(v, "a", "$1", "b", "(.*)")'
    query = grafana.substitute(expr, VARIABLES, {}, 7 * 86400, 1000, "15s")
    assert query.expr == 'rate(x[10m15s]) / (615000 / 1000) + 600000 + y[10m] + z[604800s] + label_replace(v, "a", "$1", "b", "(.*)")'
    assert (query.step, query.rate_interval) == (600, 615)


@pytest.mark.parametrize("value, want", [(0.5, "500ms"), (1.5, "1.5s"), (4, "4s"), (60, "1m0s"), (615, "10m15s"), (3600, "1h0m0s")])
def test_a_rate_interval_is_written_as_go_writes_a_duration(value, want):
    assert grafana.go_duration(value) == want


# --- provisioning, scraping, compose --------------------------------------------------------------


def mounts(service: dict) -> dict[str, Path]:
    """The service's bind mounts of docker/: container path -> the file or folder here."""
    out = {}
    for volume in service.get("volumes", []):
        source, target, *_ = volume.split(":")
        if source.startswith("."):
            out[target] = (DOCKER / source).resolve()
    return out


def published_or_exposed(service: dict) -> set[int]:
    ports = {int(str(p).rsplit(":", 1)[-1]) for p in service.get("ports", [])}
    return ports | {int(p) for p in service.get("expose", [])}


def test_the_data_source_is_the_compose_files_prometheus(compose):
    (datasource,) = yaml.safe_load(DATASOURCES.read_text())["datasources"]
    assert (datasource["type"], datasource["access"], datasource["isDefault"]) == ("prometheus", "proxy", True)
    host, port = re.fullmatch(r"http://([\w-]+):(\d+)", datasource["url"]).groups()
    assert host == "prometheus" and host in compose["services"]
    assert int(port) in published_or_exposed(compose["services"]["prometheus"])
    # Grafana's $__rate_interval is 4 scrape intervals at least: the one it is told is Prometheus'.
    assert datasource["jsonData"]["timeInterval"] == yaml.safe_load(PROMETHEUS.read_text())["global"]["scrape_interval"]


def test_grafana_loads_the_provisioning_and_the_dashboard_from_docker_grafana(compose):
    grafana = mounts(compose["services"]["grafana"])
    assert grafana["/etc/grafana/provisioning/datasources"] == DATASOURCES.parent
    assert grafana["/etc/grafana/provisioning/dashboards"] == PROVIDERS.parent
    (provider,) = yaml.safe_load(PROVIDERS.read_text())["providers"]
    assert provider["type"] == "file"
    assert grafana[provider["options"]["path"]] == DASHBOARD.parent
    home = compose["services"]["grafana"]["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home == f"{provider['options']['path']}/{DASHBOARD.name}"


def test_prometheus_scrapes_every_worker_and_the_exporter_where_compose_serves_them(compose):
    config = yaml.safe_load(PROMETHEUS.read_text())
    prometheus = compose["services"]["prometheus"]
    assert mounts(prometheus)["/etc/prometheus/prometheus.yml"] == PROMETHEUS
    assert "--config.file=/etc/prometheus/prometheus.yml" in prometheus["command"]
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    worker, exporter = compose["services"]["admitflow-worker"], compose["services"]["admitflow-exporter"]

    # The workers: the service name's A records, one target per replica.
    (discovery,) = jobs["admitflow-workers"]["dns_sd_configs"]
    port = int(worker["environment"]["ADMITFLOW_METRICS_PORT"])
    assert (discovery["names"], discovery["type"], discovery["port"]) == (["admitflow-worker"], "A", port)
    assert port in published_or_exposed(worker)

    # The exporter: one target, labelled with the namespace it reads.
    (static,) = jobs["admitflow-exporter"]["static_configs"]
    port = int(exporter["environment"]["ADMITFLOW_METRICS_PORT"])
    assert static["targets"] == [f"admitflow-exporter:{port}"] and port in published_or_exposed(exporter)
    assert static["labels"]["temporal_namespace"] == exporter["environment"]["TEMPORAL_NAMESPACE"]
    assert "namespace" not in static["labels"], "it would rename the LocalQueue gauges' own namespace label"

    # The Temporal server's own metrics.
    (static,) = jobs["temporal"]["static_configs"]
    endpoint = compose["services"]["temporal"]["environment"]["PROMETHEUS_ENDPOINT"]
    assert static["targets"] == [f"temporal:{endpoint.rsplit(':', 1)[1]}"]
    # The exporter answers within about 8 s (docs/metrics.md): the timeout leaves it that.
    assert config["global"]["scrape_timeout"] == "10s"
