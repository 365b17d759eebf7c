"""admitflow's gauges, served by one process: `admitflow exporter`, or `admitflow dev` in-process.

Counters and histograms are recorded by workflow code through the SDK's workflow metric meter: each
worker counts what it ran, so their sum over workers is right. A gauge set that way is not: a
worker that stops running a ClusterQueue (it died, its cache evicted the run, the next task went to
another worker) goes on exporting the last value it set, next to the value of the worker that runs
the queue now. So each ClusterQueue's gauges (the pure rule `admission.metrics.cluster_queue_gauges`
of its state) are written in the memo of the workflow that holds the queue, at most every
`queue_owner.MEMO_EVERY` (admitflow/memos.py), and read when Prometheus scrapes: the ClusterQueues
the catalog lists (its memo, one DescribeWorkflowExecution), then the memos of every ClusterQueue
home and cohort tree (one ListWorkflowExecutions per 1,000) and whether a worker polls their task
queue (one DescribeTaskQueue each). No workflow is queried. What is served is what the queues held
at most MEMO_EVERY ago, from one place, as Kueue serves them from its one leader; a queue whose
memo is not current (no worker serves it, its task keeps failing) is served as down. A ClusterQueue
deleted from the catalog is not read any more, so its series end.

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
from temporalio.client import Client
from temporalio.service import RPCError

from admitflow import ids, memos
from admitflow.admission.cluster_queue import ClusterQueueState
from admitflow.admission.metrics import METRICS, PREFIX, Observation, cluster_queue_gauges
from admitflow.client import AdmitflowClient, AdmitflowError

# A scrape's reads (the catalog, then every queue's memo) wait at most this long, so that a scrape
# answers within Prometheus' default scrape_timeout of 10 s.
READ_TIMEOUT = timedelta(seconds=8)
UP = PREFIX + "exporter_cluster_queue_up"
UP_HELP = (
    "1 when this scrape read the ClusterQueue's current gauges, 0 when its workflow has not written them, its "
    "workflow task keeps failing or no worker serves it (its other gauges are then absent)"
)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

log = structlog.get_logger("admitflow.gauges")


class PortUnavailable(AdmitflowError):
    """The port cannot be listened on (in use, not allowed): one line, exit status 1."""

    code = 1


class CatalogUnreadable(Exception):
    """The catalog did not answer: which ClusterQueues exist is unknown, so nothing is served."""


async def collect(client: Client) -> list[Observation]:
    """Every ClusterQueue's gauges as its workflow last wrote them, and whether each was read."""
    af = AdmitflowClient(client)
    try:
        state = await af.catalog_state()
    except (AdmitflowError, RPCError) as err:
        raise CatalogUnreadable(f"the catalog ({ids.CATALOG_ID}) cannot be read: {err}") from None
    queues = await af.queue_memos()
    trees = {wid: listed.memo for wid, listed in queues.items()}
    served = await af.workflows_served(listed.task_queue for listed in queues.values())
    out: list[Observation] = []
    for name in sorted(q.metadata.name for q in state.all("ClusterQueue")):
        answer = _gauges(name, queues, trees, served)
        out += answer or []
        out.append(up(name, answer is not None))
    return out


def up(cluster_queue: str, answered: bool) -> Observation:
    return Observation(kind="gauge", name=UP, value=float(answered), labels={"cluster_queue": cluster_queue})


def _gauges(name: str, queues: dict, trees: dict, served: dict[str, bool]) -> list[Observation] | None:
    """The queue's gauges as its memos hold them; None when they are not current: none written (its
    workflow has not written them yet, or its state is on its way between its home and its tree),
    its workflow task keeps failing, or no worker serves its task queue (what the memo holds is then
    what it last wrote)."""
    home = queues.get(ids.cluster_queue_id(name))
    if home is None:
        # Listed, but its workflow is not started yet (the catalog's view is on its way).
        return cluster_queue_gauges(ClusterQueueState(name=name))
    moved_to = home.memo.get(memos.MOVED_TO)
    holder = queues.get(moved_to) if moved_to else home
    held = memos.cluster_queue_held(name, home.memo, trees)
    if held is None or holder is None:
        why = "no gauges written"
    elif holder.failing:
        why = "its workflow task keeps failing"
    elif not served.get(holder.task_queue):
        why = f"no worker polls task queue {holder.task_queue}"
    else:
        return memos.gauges(held)
    log.warning("cluster_queue_not_current", cluster_queue=name, reason=why)
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
                observations = asyncio.run_coroutine_threadsafe(collect(client), loop).result(READ_TIMEOUT.total_seconds())
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
