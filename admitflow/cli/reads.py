"""`get` (with -w, and Kueue's pending-workloads) and `describe`: the reads."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from datetime import UTC, datetime, timedelta

from admitflow import ids
from admitflow.cli import names
from admitflow.cli.connection import connect
from admitflow.cli.errors import CLIError
from admitflow.kinds import NAMESPACED, split_kind


# `get -w` asks for the workloads changed since its previous read, less this: visibility lags
# behind the workflows a little (more with Elasticsearch), and the client's clock is not the server's.
WATCH_SLACK = timedelta(seconds=10)


WORKLOAD_FILTERS = ("localqueue", "phase", "clusterqueue", "pending_check")


async def cmd_get(args: argparse.Namespace) -> None:
    ref, inline = split_kind(args.kind)
    if inline is not None and args.name is not None:
        raise CLIError(f"there is no need to give a name as a separate argument when it is given as KIND/NAME ({args.kind})")
    name = inline if inline is not None else args.name
    if ref in ("pending-workloads", "pendingworkloads"):
        await get_pending_workloads(args, name)
        return
    kind = names.kind_of(ref)
    given = {f: getattr(args, f) for f in WORKLOAD_FILTERS if getattr(args, f) is not None}
    if given and (kind != "Workload" or name):
        raise CLIError(
            "--localqueue, --phase, --clusterqueue and --pending-check filter the list of workloads: "
            "admitflow get workloads --phase Backoff"
        )
    if "phase" in given:
        from admitflow.admission.workload import PHASES

        if given["phase"] not in PHASES:
            raise CLIError(f'--phase "{given["phase"]}": must be one of {", ".join(PHASES)}')
    if name and args.all_namespaces:
        raise CLIError("a resource cannot be retrieved by name across all namespaces: leave out -A")
    if name and args.selector is not None:
        raise CLIError("a name cannot be given when a selector (-l) is: leave out one of them")
    if args.selector:
        from admitflow.visibility import SelectorError, parse_selector

        try:
            parse_selector(args.selector)
        except SelectorError as err:
            raise CLIError(str(err)) from None
    if args.watch and args.output != "table":
        raise CLIError("-w/--watch prints table rows: leave out -o")
    from admitflow.printing import no_resources, render, warnings

    namespace = args.kueue_namespace if kind in NAMESPACED else None
    key = names.key(kind, name, namespace) if name else None
    filters = {
        "local_queue": given.get("localqueue"),
        "phase": given.get("phase"),
        "cluster_queue": given.get("clusterqueue"),
        "pending_check": given.get("pending_check"),
    }
    # A list of workloads for a table (or names) comes from visibility alone; json and yaml ask
    # each workflow for the whole object.
    full = args.output in ("json", "yaml")

    async def read(since: datetime | None = None) -> list:
        """The objects; for a list of workloads with `since`, only those changed since then."""
        if key is not None:
            return await client.get(kind, key, full=full)
        changed = {"updated_since": since} if since is not None and kind == "Workload" else {}
        return await client.get(kind, namespace=namespace, label_selector=args.selector or None, full=full, **filters, **changed)

    client = await connect(args)
    objects = await read()
    for line in warnings(kind, objects):
        print(line, file=sys.stderr, flush=True)
    # One namespace (-n, or one object): no NAMESPACE column, as kubectl without -A.
    namespaced = namespace is None and key is None
    if objects or args.output in ("json", "yaml"):
        print(render(kind, objects, args.output, single=key is not None, namespaced=namespaced), flush=True)
    else:
        print(no_resources(namespace), file=sys.stderr, flush=True)
    if args.watch:
        await watch(kind, read, objects, namespaced)


async def watch(kind: str, read, objects: list, namespaced: bool = True, interval: float = 1.0) -> None:
    """kubectl's -w: a line for each object that appears or changes, until Ctrl-C. The columns are
    those of the first list; a workload that stops answering later gets its STATUS after its row.
    `read(since)` lists the objects again: a list of workloads asks visibility only for those whose
    AdmitflowUpdated is at most WATCH_SLACK older than the previous read (visibility lags behind
    the workflows, and clocks differ), so a round costs what changed, not the whole list."""
    from admitflow.client import AdmitflowError
    from admitflow.printing import column_widths, columns, table_row, warnings, watch_rows, workload_status

    headers, _ = columns(kind, objects, namespaced=namespaced)
    _, base = columns(kind, [], namespaced=namespaced)

    def row(o: dict) -> list[str]:
        cells = base(o)
        if kind != "Workload":
            return cells
        if len(headers) > len(cells):  # the STATUS column
            return [*cells, workload_status(o)]
        trouble = (o.get("workflow") or {}).get("status")
        return [*cells, trouble] if trouble else cells

    widths = column_widths(headers, [row(o)[: len(headers)] for o in objects]) if objects else None
    age = headers.index("AGE") if "AGE" in headers else None
    shown: dict[str, list[str]] = {}
    watch_rows(kind, objects, shown, row, age)
    warned: set[str] = set()
    since = datetime.now(UTC)
    while True:
        await asyncio.sleep(interval)
        began = datetime.now(UTC)
        try:
            objects = await read(since - WATCH_SLACK)
            since = began
        except AdmitflowError:
            objects = []  # deleted meanwhile: nothing to show
        for line in warnings(kind, objects):
            if line not in warned:
                warned.add(line)
                print(line, file=sys.stderr, flush=True)
        rows = watch_rows(kind, objects, shown, row, age)
        if rows and widths is None:  # the list was empty: the first rows bring the header
            headers, _ = columns(kind, objects, namespaced=namespaced)
            widths = column_widths(headers, [r[: len(headers)] for r in rows])
            print(table_row(headers, widths), flush=True)
        for r in rows:
            print(table_row(r[: len(headers)], widths) + "".join(f"   {c}" for c in r[len(headers) :]), flush=True)


async def get_pending_workloads(args: argparse.Namespace, cluster_queue: str | None) -> None:
    """Kueue's visibility API: the pending workloads of a ClusterQueue, in the order it admits them."""
    if not cluster_queue:
        raise CLIError("pending-workloads needs a ClusterQueue name: admitflow get pending-workloads CLUSTERQUEUE")
    if args.output not in ("table", "json", "yaml"):
        raise CLIError(f"pending-workloads prints a table, json or yaml, not {args.output}")
    from admitflow.printing import age, table

    client = await connect(args)
    rows = await client.pending_workloads(cluster_queue, limit=args.limit, offset=args.offset)
    ns = args.kueue_namespace
    rows = [r for r in rows if ns is None or r.namespace == ns]
    if args.output != "table":
        items = [
            {
                "metadata": {"name": r.name, "namespace": r.namespace},
                "priority": r.priority,
                "localQueueName": r.local_queue_name,
                "positionInClusterQueue": r.position_in_cluster_queue,
                "positionInLocalQueue": r.position_in_local_queue,
                "queuedSince": r.queued_since.strftime("%Y-%m-%dT%H:%M:%SZ"),
            }
            for r in rows
        ]
        doc = {"kind": "PendingWorkloadsSummary", "apiVersion": "visibility.kueue.x-k8s.io/v1beta1", "items": items}
        if args.output == "json":
            print(json.dumps(doc, indent=2))
        else:
            import yaml

            print(yaml.safe_dump(doc, sort_keys=False).rstrip())
        return
    if not rows:
        print("No pending workloads.", file=sys.stderr)
        return
    table_rows = [
        [str(r.position_in_cluster_queue), r.namespace, r.name, r.local_queue_name, str(r.priority), age(r.queued_since.isoformat())]
        for r in rows
    ]
    print(table(["POSITION", "NAMESPACE", "NAME", "LOCALQUEUE", "PRIORITY", "WAITING"], table_rows))


async def cmd_describe(args: argparse.Namespace) -> None:
    from admitflow.client import UnansweredWorkload
    from admitflow.printing import age, controller_lines, describe, provisioning_rows, table, trouble_lines

    kind, key = names.target(args)
    client = await connect(args)
    report = await client.workload(key) if kind == "Workload" else None
    (obj,) = [report.to_wire()] if report is not None else await client.get(kind, key)
    events = obj.pop("events", [])
    extra = []
    if report is not None:
        extra.append(f"Workflow:     {workflow_url(client.client.namespace, ids.workload_id(key))}")
        if isinstance(report, UnansweredWorkload):
            obj.pop("status", None)  # only its workflow can tell it
            extra.extend(trouble_lines(key, obj.pop("workflow")))
            events = None
        from admitflow.admission import admission_gates

        gates = admission_gates.gates(report)
        if gates and not isinstance(report, UnansweredWorkload):
            extra.append(f"Admission Gates: {', '.join(gates)} (admitflow ungate workload {key} GATE removes one)")
        pending = await client.position(report)
        if pending is not None:
            extra.append(
                f"Position:     {pending.position_in_cluster_queue} in ClusterQueue, "
                f"{pending.position_in_local_queue} in LocalQueue {pending.local_queue_name}"
            )
        verdicts = obj.pop("verdicts", [])
        if verdicts:
            extra.append("Verdicts:")
            rows = [[v["check"], v["state"], v["outcome"], age(v.get("time")), v.get("detail", "")] for v in verdicts]
            extra.extend("  " + line for line in table(["Check", "State", "Outcome", "Age", "Detail"], rows).splitlines())
        attempts = obj.pop("provisioningRequests", [])
        if attempts:
            extra.append("Provisioning Requests:")
            extra.extend("  " + line for line in table(["Check", "Attempt", "Name", "Conditions"], provisioning_rows(attempts)).splitlines())
        calls = await client.controller_calls(report) or await client.inactive_checks(report)
        if calls:
            extra.append("Admission Check Controllers:")
            extra.extend(controller_lines(key, calls))
    elif kind == "ClusterQueue":
        found = await client.cluster_queue_report(key)
        events = [e.to_wire() for e in found.events] if found is not None else []
    elif kind == "Job":
        extra.extend(await job_lines(client, key, obj))
    print(describe(obj, events, extra))


async def job_lines(client, key: str, job: dict) -> list[str]:
    """What `describe job` shows beside the Job: its pods' counts, as kubectl's Pods Statuses line,
    and its Workload with the Workload's phase."""
    from admitflow.printing import workload_status

    status = job.get("status") or {}
    lines = [
        f"Pods Statuses:  {status.get('active', 0)} Active ({status.get('ready', 0)} Ready) / "
        f"{status.get('succeeded', 0)} Succeeded / {status.get('failed', 0)} Failed",
        f"Job Workflow:   {workflow_url(client.client.namespace, ids.job_id(key))}",
    ]
    workload = await client.job_workload(key)
    if workload is not None:
        report = await client.workload(workload, missing_ok=True)
        phase = workload_status(report.to_wire()) if report is not None else "not submitted"
        lines.append(f"Workload:       {workload} ({phase}; admitflow describe workload {workload})")
    return lines


def workflow_url(namespace: str, workflow_id: str) -> str:
    """The workflow in the Temporal UI (ADMITFLOW_UI_URL, default the dev server's http://localhost:8233)."""
    from urllib.parse import quote

    base = os.environ.get("ADMITFLOW_UI_URL", "http://localhost:8233").rstrip("/")
    return f"{base}/namespaces/{quote(namespace, safe='')}/workflows/{quote(workflow_id, safe='')}"
