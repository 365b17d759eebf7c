"""admitflow's gauges, served by one process: `admitflow exporter`, or `admitflow dev` in-process.

Counters and histograms are recorded by workflow code through the SDK's workflow metric meter: each
worker counts what it ran, so their sum over workers is right. A gauge set that way is not: a
worker that stops running a ClusterQueue (it died, its cache evicted the run, the next task went to
another worker) goes on exporting the last value it set, next to the value of the worker that runs
the queue now. So the gauges are read when Prometheus scrapes: the ClusterQueues the catalog lists
(one query), then each ClusterQueue workflow's query `gauges`, which answers the pure rule
`admission.metrics.cluster_queue_gauges` of its current state. What is served is what the queues
hold at that moment, from one place, as Kueue serves them from its one leader. A ClusterQueue
deleted from the catalog is not asked any more, so its series end.

Prometheus' text format over the standard library's HTTP server: nothing to install.
"""

from __future__ import annotations

import asyncio
import math
import socket
import threading
import urllib.request
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import structlog
from temporalio.client import Client, WorkflowQueryFailedError, WorkflowQueryRejectedError
from temporalio.service import RPCError, RPCStatusCode

from admitflow import contract, ids
from admitflow.admission.cluster_queue import ClusterQueueState
from admitflow.admission.metrics import METRICS, PREFIX, Gauges, Observation, cluster_queue_gauges
from admitflow.client import AdmitflowClient, AdmitflowError
from admitflow.messages import ClusterQueueRef

# Each of a scrape's two rounds (the catalog, then every queue at once) waits at most this long, so
# a scrape answers within Prometheus' default scrape_timeout of 10 s even when a queue does not.
QUERY_TIMEOUT = timedelta(seconds=4)
CONCURRENT_QUERIES = 16
# A query the engine's worker refused ("ask again": a worker died or the server restarted a
# moment ago) is asked again this many times.
STALE_RETRIES = 2
UP = PREFIX + "exporter_cluster_queue_up"
UP_HELP = (
    "1 when this scrape read the ClusterQueue's gauges, 0 when its workflow did not answer "
    "(its other gauges are then absent)"
)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

log = structlog.get_logger("admitflow.gauges")


class PortUnavailable(AdmitflowError):
    """The port cannot be listened on (in use, not allowed): one line, exit status 1."""

    code = 1


class CatalogUnreadable(Exception):
    """The catalog did not answer: which ClusterQueues exist is unknown, so nothing is served."""


async def collect(client: Client) -> list[Observation]:
    """Every ClusterQueue's gauges as they stand now, and whether each queue answered."""
    try:
        queues = await AdmitflowClient(client, query_timeout=QUERY_TIMEOUT).catalog_objects("ClusterQueue")
    except (AdmitflowError, RPCError) as err:
        raise CatalogUnreadable(f"the catalog ({ids.CATALOG_ID}) does not answer: {err}") from None
    gate = asyncio.Semaphore(CONCURRENT_QUERIES)

    async def one(name: str) -> list[Observation] | None:
        async with gate:
            return await _gauges(client, name)

    names = sorted(q.metadata.name for q in queues)
    out: list[Observation] = []
    for name, answer in zip(names, await asyncio.gather(*(one(n) for n in names)), strict=True):
        out += answer or []
        out.append(up(name, answer is not None))
    return out


def up(cluster_queue: str, answered: bool) -> Observation:
    return Observation(kind="gauge", name=UP, value=float(answered), labels={"cluster_queue": cluster_queue})


async def _gauges(client: Client, name: str) -> list[Observation] | None:
    """The queue's answer; None when it did not answer (its task fails, no worker runs it)."""
    handle = client.get_workflow_handle(ids.cluster_queue_id(name))
    for attempt in range(STALE_RETRIES + 1):
        try:
            answer = await handle.query(contract.CLUSTER_QUEUE_GAUGES, result_type=Gauges, rpc_timeout=QUERY_TIMEOUT)
            if answer.moved_to:
                # Its cohort tree holds its state (admitflow/admission/cohort_tree.py).
                answer = await client.get_workflow_handle(answer.moved_to).query(
                    contract.CLUSTER_QUEUE_GAUGES, ClusterQueueRef(name=name), result_type=Gauges, rpc_timeout=QUERY_TIMEOUT
                )
                if answer.moved_to:  # on its way home: asked again at the next scrape
                    return None
            return answer.observations
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                # Listed, but its workflow is not started yet (the catalog's view is on its way).
                return cluster_queue_gauges(ClusterQueueState(name=name))
            reason = err.message
        except WorkflowQueryFailedError as err:
            if str(err) in contract.REFUSED_QUERIES and attempt < STALE_RETRIES:
                await asyncio.sleep(0.3)
                continue
            reason = str(err)
        except WorkflowQueryRejectedError as err:
            reason = str(err)
        log.warning("cluster_queue_not_answering", cluster_queue=name, reason=next(iter((reason or "").splitlines()), ""))
        return None
    return None


def exposition(observations: Sequence[Observation]) -> str:
    """Prometheus' text format: one family per name, HELP and TYPE first, labels sorted."""
    families: dict[str, list[Observation]] = {}
    for o in observations:
        families.setdefault(o.name, []).append(o)
    lines = []
    for name, samples in families.items():
        description = UP_HELP if name == UP else METRICS[name.removeprefix(PREFIX)][1]
        lines += [f"# HELP {name} {_escape(description, quote=False)}", f"# TYPE {name} {samples[0].kind}"]
        for o in samples:
            labels = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(o.labels.items()))
            lines.append(f"{name}{{{labels}}} {_number(o.value)}" if labels else f"{name} {_number(o.value)}")
    return "".join(line + "\n" for line in lines)


def _escape(text: str, quote: bool = True) -> str:
    text = text.replace("\\", "\\\\").replace("\n", "\\n")
    return text.replace('"', '\\"') if quote else text


def _number(value: float) -> str:
    if math.isfinite(value) and value == int(value):
        return str(int(value))
    return repr(value) if math.isfinite(value) else ("NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf"))


def server(
    client: Client, port: int, host: str = "0.0.0.0", also: str | None = None,
    loop: asyncio.AbstractEventLoop | None = None,
) -> ThreadingHTTPServer:
    """The HTTP server, bound and ready for `serve_forever()` in a thread of its own: `GET /metrics`
    collects on `loop` (the client's) and answers the gauges, after the text of the endpoint `also`
    when given (`admitflow dev`: the SDK's metrics, so that one port serves everything). 503 with
    one line when the catalog does not answer, so Prometheus marks the target down."""
    loop = loop or asyncio.get_running_loop()

    class Handler(BaseHTTPRequestHandler):
        server_version = "admitflow-exporter"

        def log_message(self, format: str, *args) -> None:  # noqa: A002 - the stdlib's name
            pass

        def _reply(self, status: int, body: str, content_type: str = "text/plain; charset=utf-8") -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            if self.path.split("?", 1)[0].rstrip("/") != "/metrics":
                self._reply(404, "not found: GET /metrics\n")
                return
            try:
                observations = asyncio.run_coroutine_threadsafe(collect(client), loop).result(3 * QUERY_TIMEOUT.total_seconds())
            except CatalogUnreadable as err:
                self._reply(503, f"{err}\n")
                return
            except Exception as err:  # the loop is stopping, or a scrape took too long
                self._reply(503, f"gauges not collected: {type(err).__name__}: {err}\n")
                return
            self._reply(200, _fetch(also) + exposition(observations), CONTENT_TYPE)

    httpd = ThreadingHTTPServer((host, port), Handler)
    httpd.daemon_threads = True
    return httpd


def _fetch(url: str | None) -> str:
    if url is None:
        return ""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.read().decode("utf-8", "replace")
    except Exception as err:
        log.warning("sdk_metrics_unreadable", url=url, error=str(err))
        return ""


@asynccontextmanager
async def serving(
    client: Client, port: int | None, host: str = "0.0.0.0", also: str | None = None,
) -> AsyncIterator[ThreadingHTTPServer | None]:
    """Serve the gauges on `port` while the block runs (nothing without a port)."""
    if port is None:
        yield None
        return
    try:
        httpd = server(client, port, host, also)
    except OSError as err:
        raise PortUnavailable(f"cannot listen on port {port} for the gauges: {err.strerror or err}") from None
    thread = threading.Thread(target=httpd.serve_forever, name="admitflow-gauges", daemon=True)
    thread.start()
    try:
        yield httpd
    finally:
        await asyncio.to_thread(httpd.shutdown)
        httpd.server_close()


def loopback_port() -> int:
    """A free port on this machine's loopback interface (`admitflow dev` serves the SDK's metrics
    there and again, with the gauges, on --metrics-port)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
