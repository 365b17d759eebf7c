"""Emit a workload's counters and histograms (`admitflow.admission.metrics`) through the workflow's
metric meter, which records nothing while a history is replayed (so each event counts once, and the
sum over workers is right) and exports through the worker's Prometheus endpoint
(`admitflow worker --metrics-port`). A counter added 0 (a series set up ahead of its events) is
added once per worker process.

Gauges are not emitted here: a worker keeps exporting the last value it set, after the workflow has
moved to another worker. The ClusterQueue workflow answers its gauges to a query instead, and
admitflow's one exporter serves them (admitflow/gauges.py)."""

from __future__ import annotations

from collections.abc import Iterable

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from admitflow.admission.metrics import METRICS, PREFIX, Observation


# The counter series this process has recorded: a series, once there, stays on the worker's
# endpoint, so adding 0 to it again (the observations that set series up ahead of their events)
# would be a call into the SDK's core for nothing. With the sandbox each run has its own set, and
# only repeats those calls.
_RECORDED: set[tuple] = set()


def emit(observations: Iterable[Observation]) -> None:
    meter = None
    for o in observations:
        if o.kind == "counter":
            if workflow.unsafe.is_replaying():
                continue  # the meter records nothing now: the series may not be there yet
            info = workflow.info()
            key = (info.namespace, info.task_queue, info.workflow_type, o.name, tuple(sorted(o.labels.items())))
            if o.value == 0 and key in _RECORDED:
                continue
            _RECORDED.add(key)
        meter = meter or workflow.metric_meter()
        description = METRICS[o.name.removeprefix(PREFIX)][1]
        if o.kind == "counter":
            meter.create_counter(o.name, description).add(int(o.value), o.labels)
        elif o.kind == "histogram":
            meter.create_histogram_float(o.name, description, "seconds").record(o.value, o.labels)
