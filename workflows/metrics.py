"""Emit a workload's counters and histograms (`admitflow.admission.metrics`) through the workflow's
metric meter, which records nothing while a history is replayed (so each event counts once, and the
sum over workers is right) and exports through the worker's Prometheus endpoint
(`admitflow worker --metrics-port`).

Gauges are not emitted here: a worker keeps exporting the last value it set, after the workflow has
moved to another worker. The ClusterQueue workflow answers its gauges to a query instead, and
admitflow's one exporter serves them (admitflow/gauges.py)."""

from __future__ import annotations

from collections.abc import Iterable

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from admitflow.admission.metrics import METRICS, PREFIX, Observation


def emit(observations: Iterable[Observation]) -> None:
    meter = None
    for o in observations:
        meter = meter or workflow.metric_meter()
        description = METRICS[o.name.removeprefix(PREFIX)][1]
        if o.kind == "counter":
            meter.create_counter(o.name, description).add(int(o.value), o.labels)
        elif o.kind == "histogram":
            meter.create_histogram_float(o.name, description, "seconds").record(o.value, o.labels)
