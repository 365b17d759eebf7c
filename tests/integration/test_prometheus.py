"""The dashboard, the documented alerts and docs/metrics.md, in a real Prometheus (issue 52).

One scenario, on the dev server, in a Temporal namespace of its own: an engine worker on the
default task queue `admitflow` (the dashboard and the alerts name it) with its Prometheus endpoint,
admitflow's exporter, and Debian's Prometheus scraping the worker every second and the exporter
every 10 s (a scrape of it waits 4 s for a queue that does not answer, 8 s at most). In it:

- `checked` is reserved quota, its check says Retry (an eviction right after the reservation, so
  its series is born at 1), then Ready; its pods are reported ready, a junk verdict is sent to it
  (refused), and it finishes;
- `slow` is admitted again and again and never gets its pods ready: PodsReady timeouts (2 s), each
  followed by a 1 s backoff, until it is deactivated;
- `big` asks for more than the queue has: pending, inadmissible;
- ClusterQueue `wedged` fails every workflow task from a signal on (the interceptor of
  test_wedged_workload), as a bug in a handler would.

Then every query of docker/grafana/dashboards/*.json runs as Grafana sends it (the variables
substituted by tests/support/grafana.py, with the data source's scrape interval of 1 s) over the
scenario's time range, and every alert in docs/ (each ```promql block) at its end; and the scrape
is held against docs/metrics.md's table.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.client import Client

from admitflow import contract, gauges, ids
from admitflow.admission import metrics
from admitflow.client import AdmitflowClient
from admitflow.codec import DATA_CONVERTER
from admitflow.controller import Controller, ready, retry
from admitflow.devserver import DevServer
from admitflow.worker.main import build_worker, metrics_runtime
from tests.builders import (
    cluster_queue_manifest,
    configuration_manifest,
    flavor_manifest,
    local_queue_manifest,
    workload_manifest,
)
from tests.conftest import free_port
from tests.histories import audit
from tests.integration.test_admission import eventually, loaded
from tests.integration.test_wedged_workload import WEDGED, Wedge
from tests.support import grafana
from tests.support.prometheus import Job, Prometheus, QueryError, binary

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:coroutine '_WorkflowInstanceImpl._process_signal_job.<locals>.run_signal' was never awaited:RuntimeWarning"),
]

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = sorted((ROOT / "docker" / "grafana" / "dashboards").glob("*.json"))
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
METRICS_DOC = ROOT / "docs" / "metrics.md"
SCRAPE = "1s"  # the test Prometheus' scrape interval, which Grafana's data source would be told
MAX_DATA_POINTS = 1000  # a panel about 1000 pixels wide
CONTROLLER = "tests.prometheus"
WEDGED_QUEUE = ids.cluster_queue_id("wedged")
TIMEOUT_REASON = (("reason", "PodsReadyTimeout"), ("underlying_cause", "WaitForStart"))


@dataclass
class Scenario:
    prometheus: Prometheus
    start: float
    end: float
    evictions: dict[tuple[str, str], int]  # (reason, underlying_cause) -> count, from the workloads' statuses
    scrapes: dict[str, str] = field(default_factory=dict)  # endpoint -> its text at the end


def panels(node: list[dict]) -> list[dict]:
    out = []
    for panel in node:
        out.append(panel)
        out += panels(panel.get("panels", []))
    return out


def dashboard_queries() -> list[tuple[str, dict, dict, dict]]:
    """(id, dashboard, panel, target) for every target of every panel of every dashboard."""
    out = []
    for path in DASHBOARDS:
        board = json.loads(path.read_text())
        for panel in panels(board["panels"]):
            for target in panel.get("targets", []):
                out.append((f"{path.stem}: {panel['title']} {target.get('refId', '')}".strip(), board, panel, target))
    return out


def documented_alerts() -> list[tuple[str, str]]:
    """(where, expression) of every ```promql block of the README and docs/."""
    out = []
    for path in DOCS:
        for n, block in enumerate(re.findall(r"^```promql\n(.*?)^```", path.read_text(), re.S | re.M), 1):
            out.append((f"{path.relative_to(ROOT)} #{n}", block.strip()))
    return out


def grafana_query(board: dict, panel: dict, target: dict, scenario: Scenario, chosen: dict | None = None) -> grafana.Query:
    return grafana.substitute(
        target["expr"], board["templating"]["list"], chosen or {}, scenario.end - scenario.start, MAX_DATA_POINTS,
        SCRAPE, target.get("interval") or panel.get("interval"),
    )


def run(scenario: Scenario, query: grafana.Query) -> list[dict]:
    return scenario.prometheus.query_range(query.expr, scenario.start, scenario.end, query.step)


def finite(series: dict) -> list[float]:
    return [float(v) for _, v in series["values"] if math.isfinite(float(v))]


def last(series: dict) -> float:
    return float(series["values"][-1][1])


def target_of(title: str) -> tuple[dict, dict, dict]:
    """The dashboard, panel and first target of the panel of this title."""
    _, board, panel, target = next(q for q in dashboard_queries() if q[2]["title"] == title)
    return board, panel, target


# --- the scenario -------------------------------------------------------------------------------


async def check(request):
    name = request.workload.metadata.name
    return retry("not yet", after=1) if name == "checked" and request.attempt == 1 else ready("fine")


@pytest_asyncio.fixture(scope="module")
async def engine(dev_server: DevServer, tmp_path_factory) -> Scenario:
    """Named `engine` so that the dev server's namespace pool counts this module's tests (conftest)."""
    binary()  # skip (or fail, in CI) before anything starts
    namespace = next(dev_server.pool)  # type: ignore[attr-defined]
    sdk_port, exporter_port, prometheus_port = free_port(), free_port(), free_port()
    # Started first: it scrapes its targets only some seconds after it is ready.
    prometheus = Prometheus(tmp_path_factory.mktemp("prometheus"), [
        Job("admitflow-workers", [f"127.0.0.1:{sdk_port}"]),
        Job("admitflow-exporter", [f"127.0.0.1:{exporter_port}"], interval="10s"),
    ], prometheus_port)
    try:
        client = await Client.connect(
            dev_server.address, namespace=namespace, data_converter=DATA_CONVERTER, runtime=metrics_runtime(sdk_port, "127.0.0.1")
        )
        reader = await Client.connect(dev_server.address, namespace=namespace, data_converter=DATA_CONVERTER)
        af = AdmitflowClient(reader, ids.DEFAULT_TASK_QUEUE)
        async with (
            build_worker(client, ids.DEFAULT_TASK_QUEUE, interceptors=[Wedge()]),
            Controller(CONTROLLER, check=check).worker(client),
            gauges.serving(reader, exporter_port, host="127.0.0.1"),
        ):
            await _queues(af)
            await asyncio.to_thread(prometheus.wait_ready)
            # The worker's series at 0 must be in Prometheus before the events they are ahead of.
            await asyncio.to_thread(prometheus.wait_scraped, "admitflow-workers")
            start = time.time()
            yield await _scenario(prometheus, af, reader, namespace, start, {"worker": sdk_port, "exporter": exporter_port})
        result = await audit(client)
        assert not result.nondeterministic, result.summary()
    finally:
        WEDGED.difference_update({w for w in WEDGED if w[0] == namespace})
        prometheus.stop()


async def _queues(af: AdmitflowClient) -> None:
    budget = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck", "metadata": {"name": "budget"},
              "spec": {"controllerName": CONTROLLER}}
    config = configuration_manifest(timeout="2s", requeuingStrategy={"backoffBaseSeconds": 1, "backoffMaxSeconds": 1})
    await af.apply(loaded(config, budget, flavor_manifest(), cluster_queue_manifest(checks=[{"name": "budget"}]),
                          cluster_queue_manifest("wedged"), local_queue_manifest()))
    await af.set_admission_check_active("budget")


async def _scenario(prometheus: Prometheus, af: AdmitflowClient, client: Client, namespace: str, start: float,
                    ports: dict[str, int]) -> Scenario:
    # A bug in a ClusterQueue's signal handler: its workflow tasks fail from now on.
    WEDGED.add((namespace, WEDGED_QUEUE, ""))
    await client.get_workflow_handle(WEDGED_QUEUE).signal(contract.REPRIORITIZE, {})
    await af.apply(loaded(workload_manifest("checked"), workload_manifest("slow"), workload_manifest("big", cpu="8")))

    async def condition(key: str, type_: str) -> bool:
        c = (await af.workload(key)).status.condition(type_)
        return c is not None and c.status == "True"

    async def evictions(key: str) -> dict[tuple[str, str], int]:
        stats = (await af.workload(key)).status.scheduling_stats
        return {(e.reason, e.underlying_cause): e.count for e in (stats.evictions if stats else None) or ()}

    await eventually(lambda: condition("default/checked", "Admitted"), timeout=30)
    await af.pods_ready("default/checked")
    checked = client.get_workflow_handle(ids.workload_id("default/checked"))
    await checked.signal(contract.SET_ADMISSION_CHECK_STATE, {"name": "budget", "state": "Maybe"})

    async def timed_out_twice():
        return (await evictions("default/slow")).get(("PodsReadyTimeout", "WaitForStart"), 0) >= 2

    await eventually(timed_out_twice, timeout=40)
    await af.finish("default/checked")
    await af.deactivate("default/slow")
    await eventually(lambda: condition("default/checked", "Finished"), timeout=20)
    await eventually(lambda: _inactive(af, "default/slow"), timeout=20)
    # The last events are in; the scenario's range ends once every rate window of the panels
    # (4 s: Grafana's $__rate_interval for a 1 s scrape interval) has gone past them.
    last_event = time.time()

    counts: dict[tuple[str, str], int] = {}
    for key in ("default/checked", "default/slow", "default/big"):
        for cause, n in (await evictions(key)).items():
            counts[cause] = counts.get(cause, 0) + n

    # What Prometheus holds has caught up with what happened: the last eviction, the finish and
    # the wedged queue's failed tasks are in its samples, and the exporter's since the wedge.
    def caught_up() -> bool:
        now = time.time()
        evicted = prometheus.query("sum(admitflow_evicted_workloads_total)", now)
        finished = prometheus.query("sum(admitflow_finished_workloads_total)", now)
        pending = prometheus.query('admitflow_pending_workloads{cluster_queue="cq", status="inadmissible"}', now)
        failed = prometheus.query('temporal_workflow_task_execution_failed{workflow_type="ClusterQueueWorkflow"}', now)
        down = prometheus.query(f'{gauges.UP}{{cluster_queue="wedged"}} == 0', now)
        return (
            bool(evicted) and float(evicted[0]["value"][1]) == sum(counts.values())
            and bool(finished) and float(finished[0]["value"][1]) == 1
            and bool(pending) and float(pending[0]["value"][1]) == 1
            and bool(failed) and float(failed[0]["value"][1]) >= 2
            and bool(down)
        )

    async def settled():
        return await asyncio.to_thread(caught_up)

    await eventually(settled, timeout=40)
    _, rate_interval = grafana.intervals(60, MAX_DATA_POINTS, SCRAPE)
    await asyncio.sleep(max(0.0, last_event + rate_interval + 2 - time.time()))
    scrapes = {name: await asyncio.to_thread(_fetch, port) for name, port in ports.items()}
    return Scenario(prometheus, start, time.time(), counts, scrapes)


async def _inactive(af: AdmitflowClient, key: str) -> bool:
    report = await af.workload(key)
    return report.spec.active is False and report.status.condition("QuotaReserved").status == "False"


def _fetch(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=15) as resp:
        return resp.read().decode()


# --- the dashboard ------------------------------------------------------------------------------


def test_the_scenario_evicted_for_a_check_and_for_pods_ready_timeouts(engine: Scenario):
    assert engine.evictions.get(("AdmissionCheck", ""), 0) == 1
    assert engine.evictions.get(("PodsReadyTimeout", "WaitForStart"), 0) >= 2
    assert engine.prometheus.targets_up() == {"admitflow-workers": "up", "admitflow-exporter": "up"}


@pytest.mark.parametrize("where, board, panel, target", dashboard_queries(), ids=[q[0] for q in dashboard_queries()])
def test_every_dashboard_query_runs_in_prometheus_and_finds_its_series_and_labels(engine: Scenario, where, board, panel, target):
    """As Grafana sends it, with every ClusterQueue chosen and with one: Prometheus takes it,
    answers series with values, and each label its legend names is on one of them."""
    for chosen in ({}, {"cluster_queue": ["cq"]}):
        query = grafana_query(board, panel, target, engine, chosen)
        assert "$" not in query.expr, query.expr
        try:
            result = run(engine, query)
        except QueryError as err:
            pytest.fail(f"{where}: Prometheus refused {query.expr!r}: {err}")
        assert [s for s in result if finite(s)], f"{where}: no value in {query.expr!r} over the scenario"
        for label in re.findall(r"\{\{\s*(\w+)\s*\}\}", target.get("legendFormat", "")):
            assert any(label in s["metric"] for s in result), f"{where}: no series has {label}: {query.expr!r}"


def test_every_dashboard_variable_lists_the_scenarios_values(engine: Scenario):
    for path in DASHBOARDS:
        for variable in json.loads(path.read_text())["templating"]["list"]:
            if variable["type"] != "query":
                continue
            query = variable["query"]["query"] if isinstance(variable["query"], dict) else variable["query"]
            selector, label = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", query).groups()
            values = engine.prometheus.label_values(label, selector, engine.start, engine.end)
            assert set(values) == {"cq", "wedged"}, (path.name, variable["name"], values)


def test_the_wedged_workflows_panel_shows_a_wedged_cluster_queue(engine: Scenario):
    """ClusterQueues and cohort trees run on the entities' task queue (admitflow-entities): the
    panel counts their failed tasks too."""
    board, panel, target = target_of("Wedged workflows")
    result = run(engine, grafana_query(board, panel, target, engine))
    shown = {s["metric"].get("workflow_type"): last(s) for s in result}
    assert shown.get("ClusterQueueWorkflow", 0) >= 2, shown


def test_the_pods_ready_timeouts_panel_counts_every_timeout(engine: Scenario):
    """Over the last 5 minutes, which hold the whole scenario: every timeout, the first one too
    (and the other cause, at 0)."""
    board, panel, target = target_of("PodsReady timeouts")
    result = run(engine, grafana_query(board, panel, target, engine))
    shown = {(s["metric"]["cluster_queue"], s["metric"]["underlying_cause"]): last(s) for s in result}
    assert shown == {("cq", "WaitForStart"): engine.evictions[("PodsReadyTimeout", "WaitForStart")], ("cq", "WaitForRecovery"): 0}


def test_the_evictions_panel_shows_every_eviction_by_reason(engine: Scenario):
    """A rate per second: the area under each line, over the scenario, is that reason's number of
    evictions (within what Prometheus' extrapolation adds), the one that created its series too."""
    board, panel, target = target_of("Evictions per ClusterQueue by reason")
    query = grafana_query(board, panel, target, engine)
    area: dict[str, float] = {}
    for s in run(engine, query):
        area[s["metric"]["reason"]] = area.get(s["metric"]["reason"], 0) + sum(finite(s)) * query.step
    expected: dict[str, int] = {}
    for (reason, _), n in engine.evictions.items():
        expected[reason] = expected.get(reason, 0) + n
    assert set(expected) <= set(area), (area, expected)
    for reason, n in expected.items():
        assert 0.6 * n <= area[reason] <= 1.5 * n, (reason, area[reason], n, query.expr)
    assert all(v == 0 for r, v in area.items() if r not in expected), area


def test_counters_known_in_advance_exist_at_zero_before_their_first_event(engine: Scenario):
    """At the source: the PodsReady-timeout series of a workload's ClusterQueue is served at 0
    from its reservation on, seconds before its first timeout, so a plain increase() (not the
    dashboard's guard for new series) counts that first timeout too."""
    result = engine.prometheus.query(
        'sum(increase(admitflow_evicted_workloads_total{reason="PodsReadyTimeout"}[5m]))', engine.end
    )
    assert round(float(result[0]["value"][1])) == engine.evictions[("PodsReadyTimeout", "WaitForStart")], result


def test_scheduling_passes_take_milliseconds_in_the_histogram(engine: Scenario):
    """p99 of admission_attempt_duration_seconds, from its buckets: passes of a few milliseconds
    read as such (the SDK's millisecond buckets made them read 49.5 s)."""
    result = engine.prometheus.query(
        "histogram_quantile(0.99, sum by (le) (increase(admitflow_admission_attempt_duration_seconds_bucket[5m])))", engine.end
    )
    assert 0 < float(result[0]["value"][1]) < 1, result


# --- the alerts in the docs ---------------------------------------------------------------------


def test_the_docs_have_alerts():
    assert len(documented_alerts()) >= 2, documented_alerts()


@pytest.mark.parametrize("where, expr", documented_alerts(), ids=[a[0] for a in documented_alerts()])
def test_every_documented_alert_fires_in_the_scenario(engine: Scenario, where, expr):
    """Each alert's condition holds at the scenario's end: something is wedged."""
    try:
        firing = engine.prometheus.query(expr, engine.end)
    except QueryError as err:
        pytest.fail(f"{where}: Prometheus refused {expr!r}: {err}")
    assert firing, f"{where} does not fire: {expr}"


def test_the_wedged_workflow_alert_names_the_cluster_queue_workflow(engine: Scenario):
    (expr,) = [e for _, e in documented_alerts() if "temporal_workflow_task_execution_failed" in e]
    firing = engine.prometheus.query(expr, engine.end)
    assert "ClusterQueueWorkflow" in {s["metric"].get("workflow_type") for s in firing}, firing


def test_the_exporter_alert_names_the_wedged_cluster_queue(engine: Scenario):
    (expr,) = [e for _, e in documented_alerts() if gauges.UP in e]
    assert [s["metric"]["cluster_queue"] for s in engine.prometheus.query(expr, engine.end)] == ["wedged"]


# --- docs/metrics.md against the scrape -----------------------------------------------------------


def documented() -> tuple[dict[str, str], set[str]]:
    """docs/metrics.md's table (name -> kind, `gauge` for the exporter's) and its "Not served yet"
    list, each name with the prefix."""
    text = METRICS_DOC.read_text()
    table: dict[str, str] = {}
    for line in text.splitlines():
        if not line.startswith("| `admitflow_"):
            continue
        first, kind, _, what = [c.strip() for c in line.strip("|").split("|")][:4]
        kind = kind.split()[0]
        names = re.findall(r"`(admitflow_\w+\*?)`", first)
        for name in names:
            if name.endswith("*"):  # the LocalQueue variants, named in the last column
                for twin in re.findall(r"`(\w+)`", what):
                    if metrics.PREFIX + twin in table:
                        table[name[:-1] + twin] = table[metrics.PREFIX + twin]
            else:
                table[name] = kind
    missing = text.split("Not served yet:", 1)[1].split("\n\n", 1)[0]
    return table, {metrics.PREFIX + n for n in re.findall(r"`(\w+)`", missing)}


def families(text: str) -> dict[str, str]:
    """The admitflow_ families of a scrape: name -> TYPE."""
    return dict(re.findall(r"^# TYPE (admitflow_\w+) (\w+)$", text, re.M))


def test_docs_metrics_lists_exactly_what_is_served(engine: Scenario):
    """Every admitflow_ family the worker and the exporter serve is in docs/metrics.md's table,
    with its kind and from the process the docs say; every name of the table is served; nothing
    "not served yet" is."""
    table, not_served = documented()
    worker, exporter = families(engine.scrapes["worker"]), families(engine.scrapes["exporter"])
    assert set(worker) & set(exporter) == set(), "each family from one process"
    assert {n: k for n, k in table.items() if k != "gauge"} == worker
    assert {n: k for n, k in table.items() if k == "gauge"} == exporter
    assert not_served and not not_served & (set(worker) | set(exporter) | set(table))
    assert set(table) == {metrics.PREFIX + n for n in metrics.METRICS} | {gauges.UP}
