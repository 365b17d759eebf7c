"""The worker image's health check: exit 0 while `admitflow worker` serves Prometheus metrics on
ADMITFLOW_METRICS_PORT and the Temporal SDK reports pollers on the engine's task queue
(ADMITFLOW_TASK_QUEUE, default `admitflow`); exit 1 with one line saying why otherwise.

The metrics are served by the SDK's core runtime, so an answer alone says only that the process
lives; the pollers say that its worker was started on the task queue and is still polling (a
worker shutting down has none). Standard library only: it runs in the image with `python`.
"""

from __future__ import annotations

import os
import re
import sys
import urllib.request

POLLERS = re.compile(r"^temporal_num_pollers\{(?P<labels>[^}]*)\} (?P<value>\S+)$", re.MULTILINE)


def pollers(metrics: str, task_queue: str) -> float:
    """Pollers in flight on `task_queue`, over every poller type (workflow, sticky, activity)."""
    label = f'task_queue="{task_queue}"'
    return sum(float(m["value"]) for m in POLLERS.finditer(metrics) if label in m["labels"].split(","))


def check(environ: dict[str, str] | os._Environ = os.environ, host: str = "127.0.0.1") -> tuple[bool, str]:
    port = environ.get("ADMITFLOW_METRICS_PORT")
    if not port:
        return False, "ADMITFLOW_METRICS_PORT is not set: the worker serves no metrics to check"
    task_queue = environ.get("ADMITFLOW_TASK_QUEUE") or "admitflow"
    url = f"http://{host}:{port}/metrics"
    try:
        with urllib.request.urlopen(url, timeout=3) as response:
            metrics = response.read().decode("utf-8", "replace")
    except Exception as err:  # refused, timed out, HTTP error: all mean unhealthy
        return False, f"no metrics at {url}: {err}"
    n = pollers(metrics, task_queue)
    if n <= 0:
        return False, f"no pollers on task queue {task_queue} in {url}"
    return True, f"{n:g} pollers on task queue {task_queue}"


if __name__ == "__main__":
    ok, why = check()
    print(why)
    sys.exit(0 if ok else 1)
