"""The `admitflow` command.

Bad input exits 2 with one line naming what was wrong (file, document and field for manifests) and
changes nothing; a Temporal server that cannot be reached, or a workflow that cannot take the request
now (a workload whose workflow task fails), exits 1 with one line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import yaml
from pydantic import ValidationError

from admitflow import ids, registration
from admitflow.api import ManifestError, load_manifests
from admitflow.api import field_error as fe
from admitflow.api.workload import PodSetUpdate
from admitflow.admission.workload import PHASES
from admitflow.codec import EncryptionConfigError, PayloadDecodeError, data_converter, encryption_codec
from admitflow.client import (
    KIND_NAMES,
    NAMESPACED,
    AdmitflowClient,
    AdmitflowError,
    NotAnswering,
    UnansweredWorkload,
    kind_of,
)
from admitflow.api.provisioning_request import CONDITION_TYPES as PROVREQ_CONDITIONS
from admitflow.devserver import DEFAULT_DB, DevServer, DevServerError, die_with_parent
from admitflow.messages import ProvisioningRequestCondition
from admitflow.printing import (
    COLUMNS,
    age,
    column_widths,
    columns,
    controller_lines,
    describe,
    provisioning_rows,
    render,
    table,
    table_row,
    trouble_lines,
    warnings,
    watch_rows,
    workload_status,
)
from admitflow.simulation.autoscaler import SET_BY_HAND

EXIT_BAD_INPUT = 2
EXIT_UNREACHABLE = 1

# The Temporal server marks a workflow whose task has failed this many times in a row with the
# search attribute TemporalReportedProblems (off by default), so the UI can list wedged workloads:
# `TemporalReportedProblems IS NOT NULL` (docs/ui.md).
DEV_DYNAMIC_CONFIG = {"system.numConsecutiveWorkflowTaskProblemsToTriggerSearchAttribute": "3"}


VERDICT_EPILOG = """\
--pod-set-update takes one podSetUpdate of the check's status, as a JSON object with Kueue's field
names: "name" (the podSet, required), "labels", "annotations", "nodeSelector" (string maps) and
"tolerations" (a list of core/v1 tolerations, at most 8). Give it once for each podSet that gets
updates. The pods get them when the workload is admitted. For example:

  admitflow verdict team-a/release approval Ready --message "approved by alice" \\
    --pod-set-update '{"name": "main", "nodeSelector": {"pool": "gpu"}, "labels": {"approved-by": "alice"},
                       "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]}'
"""


PROVREQ_DESCRIPTION = (
    "Drives the simulated cluster autoscaler (the `simulated` ProvisioningRequest backend, workflow "
    "admitflow/autoscaler; docs/simulated-autoscaler.md). With the kubernetes backend the requests live in "
    "the cluster: use kubectl get provreq and kubectl patch --subresource=status instead."
)
SET_CONDITION_DESCRIPTION = (
    "As Kueue's integration tests flip conditions by hand. Provisioned, Failed, BookingExpired or "
    "CapacityRevoked set to True take the request out of the simulator's hands (it holds no capacity "
    "any more, unless its booking was consumed); other conditions are written and the simulator carries on. "
    "A refused change (unknown request, condition type or status) changes nothing."
)


RESET_DESCRIPTION = (
    "For a workload whose workflow task keeps failing (an exception in workflow code, a nondeterminism error), "
    "once the worker no longer has the fault: Temporal's reset of its workflow to its last completed workflow "
    "task. A new run replays its history up to that task and then gets again every signal received after it "
    "(its ClusterQueue's notices, verdicts, finish), so nothing it was told is lost. Prints whether the new run "
    "answers; exits 1 if its workflow task fails again. See docs/operations.md, A wedged workload."
)
RELEASE_DESCRIPTION = (
    "Give back, in its ClusterQueue, the quota (or the place in the queue) of a workload whose workflow task "
    "fails, or whose workflow no longer runs, so that other workloads get it now. The ClusterQueue records it as "
    "an event (admitflow describe clusterqueue) and tells the workload it was evicted (reason QuotaForceReleased): "
    "once its workflow runs again it queues afresh. Refused for a workload that answers unless --force. "
    "Safe to repeat: a workload that holds nothing prints unchanged."
)


class CLIError(Exception):
    def __init__(self, message: str, code: int = EXIT_BAD_INPUT) -> None:
        super().__init__(message)
        self.code = code


class OneLineErrors(argparse.ArgumentParser):
    """Bad arguments get one line and exit status 2, like every other refusal (`--help` shows usage)."""

    def error(self, message: str):
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message}\n")


def _version() -> str:
    """The installed package's version (the one in pyproject.toml)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("admitflow")
    except PackageNotFoundError:
        return "unknown (not installed)"


def _parser() -> argparse.ArgumentParser:
    from admitflow.worker import connection

    conn = argparse.ArgumentParser(add_help=False)
    g = connection.add_arguments(conn)
    g.add_argument("--task-queue", help=f"engine task queue (default: ADMITFLOW_TASK_QUEUE or {ids.DEFAULT_TASK_QUEUE})")

    p = OneLineErrors(
        prog="admitflow",
        description="Kueue's two-stage workload admission as durable Temporal workflows.",
    )
    p.add_argument("--version", action="version", version=f"admitflow {_version()}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    dev = sub.add_parser(
        "dev", parents=[conn], help="embedded Temporal dev server with its Web UI, plus the worker",
        description="Start the Temporal dev server (UI included) and an admitflow worker; optionally apply "
        "manifests and follow their workloads: each phase change, and for a workload that waits for a check "
        "nobody serves, the command that answers in its controller's place. Runs until Ctrl-C.",
    )
    dev.add_argument("--port", type=int, default=7233, help="gRPC port of the dev server (default 7233)")
    dev.add_argument("--ui-port", type=int, default=8233, help="Web UI port (default 8233)")
    dev.add_argument("--db", type=Path, default=DEFAULT_DB, help=f"SQLite database file (default {DEFAULT_DB})")
    dev.add_argument("-f", "--filename", action="append", default=[], help="manifests to apply once started")
    dev.add_argument(
        "--controller", action="append", default=[], metavar="FILE",
        help="a Python file defining check controllers (admitflow.controller.Controller) to run beside the worker",
    )
    dev.add_argument(
        "--runner", action="append", default=[], metavar="FILE",
        help="a runner program (such as examples/runners/local.py) to start as its own process, connected to "
        "the dev server; its output goes to a log file beside the database",
    )

    w = sub.add_parser("worker", parents=[conn], help="run the engine worker against a Temporal server")
    w.add_argument("--log-level", default="INFO")
    w.add_argument(
        "--provisioning-backend", choices=("simulated", "kubernetes"),
        default=os.environ.get("ADMITFLOW_PROVISIONING_BACKEND", "simulated"),
        help="where the built-in ProvisioningRequest check creates its requests: the simulated cluster "
        "autoscaler (default), or a Kubernetes cluster's autoscaling.x-k8s.io/v1 API "
        "(ADMITFLOW_PROVISIONING_BACKEND)",
    )
    w.add_argument("--kubeconfig", help="with the kubernetes backend: kubeconfig file (default: KUBECONFIG, "
                   "~/.kube/config, or the pod's service account)")
    for parser in (w, dev):
        parser.add_argument(
            "--metrics-port", type=int, default=_env_int("ADMITFLOW_METRICS_PORT"),
            help="serve Prometheus metrics (admitflow_* with Kueue's names, and Temporal's) on this port at "
            "/metrics (ADMITFLOW_METRICS_PORT; default: none)",
        )

    sub.add_parser(
        "setup", parents=[conn], help="register the namespace and admitflow's search attributes (idempotent)",
        description="Create the Temporal namespace if it is missing and register the search attributes "
        "admitflow keeps current, through the operator service. Safe to run again.",
    )

    cs = sub.add_parser(
        "codec-server", help="serve Temporal's remote codec endpoints, so the Web UI and CLI show encrypted payloads",
        description="Decode (decrypt, decompress) and encode payloads for the Temporal Web UI and the temporal CLI "
        "with the keys in ADMITFLOW_ENCRYPTION_KEY and ADMITFLOW_DECRYPTION_KEYS: POST /decode and /encode, "
        "JSON {\"payloads\": [...]}. Point the UI at it (its codec server setting, or start-dev's --ui-codec-endpoint) "
        "or run temporal ... --codec-endpoint http://127.0.0.1:PORT. Anyone who can reach it reads every payload. "
        "See docs/security.md.",
    )
    cs.add_argument("--port", type=int, default=8081, help="port (default 8081)")
    cs.add_argument("--ip", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    cs.add_argument(
        "--allow-origin", action="append", metavar="URL",
        help="a Web UI origin allowed to call it from the browser (repeatable; default "
        "http://localhost:8233 and http://127.0.0.1:8233; * for any)",
    )

    a = sub.add_parser("apply", parents=[conn], help="apply Kueue manifests (file, directory, or - for stdin)")
    a.add_argument("-f", "--filename", action="append", required=True)
    a.add_argument("--wait", action="store_true", help="then follow the workloads applied, printing each phase change, "
                   "until each is admitted, finished or waits for a person")

    kinds = ", ".join(sorted(n for names in KIND_NAMES.values() for n in names[:2]))
    g_ = sub.add_parser(
        "get", parents=[conn], help="show objects",
        description=f"KIND is one of: {kinds}; or pending-workloads CLUSTERQUEUE (Kueue's visibility API)",
    )
    g_.add_argument("kind")
    g_.add_argument("name", nargs="?", help="name, or namespace/name for localqueues and workloads")
    g_.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table")
    g_.add_argument("--limit", type=int, default=1000, help="pending-workloads: at most this many (default 1000)")
    g_.add_argument("--offset", type=int, default=0, help="pending-workloads: skip this many from the head")
    g_.add_argument("-w", "--watch", action="store_true", help="after the list, print each object again when it changes (Ctrl-C stops)")
    g_.add_argument("--phase", help="workloads: only those in this phase (Pending, QuotaReserved, Admitted, Backoff, "
                    "Inactive, Finished); a visibility query on AdmitflowPhase")
    g_.add_argument("--clusterqueue", help="workloads: only those of this ClusterQueue (AdmitflowClusterQueue)")
    g_.add_argument("--pending-check", help="workloads: only those whose check of this name is not Ready (AdmitflowPendingChecks)")

    d = sub.add_parser("describe", parents=[conn], help="show one object in detail, with events")
    d.add_argument("kind")
    d.add_argument("name")

    f = sub.add_parser("finish", parents=[conn], help="report a workload finished; its quota is released")
    f.add_argument("workload", help="namespace/name (or name in namespace default)")
    f.add_argument("--failed", action="store_true", help="finished with failure (reason Failed)")
    f.add_argument("--message", default="", help="message of the Finished condition")

    pr = sub.add_parser(
        "pods-ready", parents=[conn], help="report whether an admitted workload's pods are ready (signal set_pods_ready)",
        description="Report a workload's pods ready (PodsReady=True) or not, as a runner or a job controller would. "
        "Under WaitForPodsReady an admitted workload that is not ready in time is evicted and requeued with a backoff.",
    )
    pr.add_argument("workload", help="namespace/name (or name in namespace default)")
    pr.add_argument("--not-ready", action="store_true", help="the pods are not ready (any more): WaitForStart or WaitForRecovery")
    pr.add_argument("--reason", help="Kueue's reason: Started or Recovered (ready), WaitForStart or WaitForRecovery (--not-ready)")

    v = sub.add_parser(
        "verdict", parents=[conn], help="set a workload's admission check state (through the workflow's update)",
        description="Send a check's verdict as its controller would, through the workload's update "
        "apply_admission_check_state, and print the workload's check states; a refused verdict changes nothing.",
        epilog=VERDICT_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    v.add_argument("workload", help="namespace/name (or name in namespace default)")
    v.add_argument("check", help="the AdmissionCheck's name")
    v.add_argument("state", help="Pending, Ready, Retry or Rejected")
    v.add_argument("--message", default="", help="the check's message")
    v.add_argument("--requeue-after", help="with Retry: the least wait before the retry, e.g. 90s or 5m")
    v.add_argument("--attempt", type=int, help="the attempt (retryCount + 1) this verdict is about")
    v.add_argument(
        "--pod-set-update", action="append", default=[], metavar="JSON",
        help="a podSetUpdate as a JSON object in Kueue's shape, one per podSet (repeatable; see below)",
    )
    for name, text in (
        ("activate", "activate a deactivated workload; it goes back to its queue"),
        ("deactivate", "deactivate a workload; it gives back its quota or its place in the queue"),
    ):
        sub.add_parser(name, parents=[conn], help=text).add_argument("workload", help="namespace/name")
    ac = sub.add_parser(
        "admissioncheck", parents=[conn], help="report an AdmissionCheck Active or not, as its controller would"
    )
    ac.add_argument("action", choices=["activate", "deactivate"])
    ac.add_argument("name")

    rm = sub.add_parser("delete", parents=[conn], help="delete an object; a workload gives back its quota")
    rm.add_argument("kind")
    rm.add_argument("name")

    rs = sub.add_parser(
        "reset", parents=[conn], help="reset a workload whose workflow task fails to its last completed workflow task",
        description=RESET_DESCRIPTION,
    )
    rs.add_argument("kind", help="workload")
    rs.add_argument("name", help="namespace/name (or name in namespace default)")
    rs.add_argument("--reason", default="", help="why, recorded with the reset in the workflow's history")

    rl = sub.add_parser(
        "release", parents=[conn], help="give a wedged workload's quota back in its ClusterQueue, without its workflow",
        description=RELEASE_DESCRIPTION,
    )
    rl.add_argument("kind", help="workload")
    rl.add_argument("name", help="namespace/name (or name in namespace default)")
    rl.add_argument("--force", action="store_true", help="release it even though its workflow answers (it is evicted and queues again)")
    rl.add_argument("--clusterqueue", help="the ClusterQueue holding it (default: its AdmitflowClusterQueue search attribute)")

    pr = sub.add_parser(
        "provreq", help="the simulated cluster autoscaler's ProvisioningRequests: list them, set conditions by hand",
        description=PROVREQ_DESCRIPTION,
    )
    pr_sub = pr.add_subparsers(dest="provreq_command", required=True, metavar="ACTION")
    ls = pr_sub.add_parser(
        "list", parents=[conn], help="list ProvisioningRequests with their conditions, like kubectl get provreq",
        description=PROVREQ_DESCRIPTION,
    )
    scope = ls.add_mutually_exclusive_group()
    scope.add_argument(
        "-n", dest="in_namespace", metavar="NAMESPACE",
        help="only requests in this namespace (the requests' namespace; --namespace is Temporal's)",
    )
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace (the default)")
    ls.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table")
    sc = pr_sub.add_parser(
        "set-condition", parents=[conn], help="set a condition of a ProvisioningRequest by hand",
        description=PROVREQ_DESCRIPTION + " " + SET_CONDITION_DESCRIPTION,
    )
    sc.add_argument("request", metavar="NS/NAME", help="the ProvisioningRequest (NAME alone: namespace default)")
    sc.add_argument("type", metavar="TYPE", help=", ".join(PROVREQ_CONDITIONS))
    sc.add_argument("--status", default="True", help="True (default), False or Unknown")
    sc.add_argument("--reason", help=f"CamelCase reason (default {SET_BY_HAND})")
    sc.add_argument("--message", default="", help="the condition's message")
    sc.add_argument(
        "--detail", action="append", default=[], metavar="KEY=VALUE",
        help="a status.provisioningClassDetails entry to add (repeatable)",
    )
    return p


def _key(kind: str, name: str) -> str:
    if kind in NAMESPACED:
        ns, n = ids.split_key(name)
        return f"{ns}/{n}"
    return name


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    return int(value) if value else None


async def _client(args: argparse.Namespace, runtime=None):
    from admitflow.worker.connection import ConnectionConfigError, from_arguments

    conn = from_arguments(args)
    try:
        target = conn.describe()
        data_converter()  # a bad encryption key is refused before connecting
    except (ConnectionConfigError, EncryptionConfigError) as err:
        raise CLIError(str(err)) from None
    try:
        client = await conn.connect(runtime)
    except Exception as err:  # the SDK raises a plain RuntimeError on connection failure
        reason = "connection refused" if "Connection refused" in str(err) else str(err).splitlines()[0]
        raise CLIError(f"cannot reach Temporal at {target}: {reason}", EXIT_UNREACHABLE) from None
    return AdmitflowClient(client, ids.task_queue(args.task_queue))


def _load(paths: Sequence[str]):
    try:
        return load_manifests(paths, stdin=sys.stdin)
    except ManifestError as err:
        raise CLIError(str(err)) from None
    except OSError as err:
        raise CLIError(f"error: the path \"{err.filename}\" does not exist" if isinstance(err, FileNotFoundError) else str(err)) from None


def _print_outcomes(outcomes) -> None:
    """One line per object, as kubectl prints it (`kind.group/key action`), with the outcome's
    message after a colon when it has one (`... terminating: <why>`)."""
    for o in outcomes:
        group = "admitflow.io" if o.kind in ("AdmissionCheckParameters", "SimulatedNodeGroup") else "kueue.x-k8s.io"
        message = " ".join((getattr(o, "message", "") or "").split())
        print(f"{o.kind.lower()}.{group}/{o.key} {o.action}" + (f": {message}" if message else ""))


async def cmd_apply(args: argparse.Namespace) -> None:
    manifests = _load(args.filename)
    for m in manifests:
        for warning in m.warnings:
            print(f"Warning: {warning}", file=sys.stderr)
    client = await _client(args)
    outcomes = await client.apply(manifests)
    _print_outcomes(outcomes)
    keys = [o.key for o in outcomes if o.kind == "Workload"]
    if args.wait and keys:
        from admitflow.progress import follow

        settled = asyncio.Event()
        following = asyncio.ensure_future(follow(client, keys, settled.set))
        await settled.wait()
        following.cancel()


async def cmd_get(args: argparse.Namespace) -> None:
    if args.kind in ("pending-workloads", "pendingworkloads"):
        await get_pending_workloads(args)
        return
    kind = kind_of(args.kind)
    filters = {"phase": args.phase, "cluster_queue": args.clusterqueue, "pending_check": args.pending_check}
    filters = {k: v for k, v in filters.items() if v is not None}
    if filters and (kind != "Workload" or args.name):
        raise CLIError("--phase, --clusterqueue and --pending-check filter the list of workloads: admitflow get workloads --phase Backoff")
    if "phase" in filters and filters["phase"] not in PHASES:
        raise CLIError(f'--phase "{filters["phase"]}": must be one of {", ".join(PHASES)}')
    if args.watch and args.output != "table":
        raise CLIError("-w/--watch prints table rows: leave out -o")
    client = await _client(args)
    key = _key(kind, args.name) if args.name else None
    objects = await client.get(kind, key, **filters)
    for line in warnings(kind, objects):
        print(line, file=sys.stderr, flush=True)
    print(render(kind, objects, args.output, single=key is not None), flush=True)
    if args.watch:
        await watch(client, kind, key, filters, objects)


async def watch(client, kind: str, key: str | None, filters: dict, objects: list, interval: float = 1.0) -> None:
    """kubectl's -w: a line for each object that appears or changes, until Ctrl-C. The columns are
    those of the first list; a workload that stops answering later gets its STATUS after its row."""
    headers, _ = columns(kind, objects)
    base = COLUMNS[kind][1]

    def row(o: dict) -> list[str]:
        cells = base(o)
        if kind != "Workload":
            return cells
        if len(headers) > len(cells):  # the STATUS column
            return [*cells, workload_status(o)]
        trouble = (o.get("workflow") or {}).get("status")
        return [*cells, trouble] if trouble else cells

    widths = column_widths(headers, [row(o)[: len(headers)] for o in objects]) if objects else None
    shown: dict[str, list[str]] = {}
    watch_rows(kind, objects, shown, row)
    warned: set[str] = set()
    while True:
        await asyncio.sleep(interval)
        try:
            objects = await client.get(kind, key, **filters)
        except AdmitflowError:
            objects = []  # deleted meanwhile: nothing to show
        for line in warnings(kind, objects):
            if line not in warned:
                warned.add(line)
                print(line, file=sys.stderr, flush=True)
        rows = watch_rows(kind, objects, shown, row)
        if rows and widths is None:  # the list was empty: the first rows bring the header
            headers, _ = columns(kind, objects)
            widths = column_widths(headers, [r[: len(headers)] for r in rows])
            print(table_row(headers, widths), flush=True)
        for r in rows:
            print(table_row(r[: len(headers)], widths) + "".join(f"   {c}" for c in r[len(headers) :]), flush=True)


async def get_pending_workloads(args: argparse.Namespace) -> None:
    """Kueue's visibility API: the pending workloads of a ClusterQueue, in the order it admits them."""
    if not args.name:
        raise CLIError("pending-workloads needs a ClusterQueue name: admitflow get pending-workloads CLUSTERQUEUE")
    client = await _client(args)
    rows = await client.pending_workloads(args.name, limit=args.limit, offset=args.offset)
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
        print(json.dumps(doc, indent=2) if args.output == "json" else yaml.safe_dump(doc, sort_keys=False).rstrip())
        return
    if not rows:
        print("No pending workloads.")
        return
    table_rows = [
        [str(r.position_in_cluster_queue), r.namespace, r.name, r.local_queue_name, str(r.priority), age(r.queued_since.isoformat())]
        for r in rows
    ]
    print(table(["POSITION", "NAMESPACE", "NAME", "LOCALQUEUE", "PRIORITY", "WAITING"], table_rows))


async def cmd_describe(args: argparse.Namespace) -> None:
    kind = kind_of(args.kind)
    client = await _client(args)
    key = _key(kind, args.name)
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
    print(describe(obj, events, extra))


def workflow_url(namespace: str, workflow_id: str) -> str:
    """The workflow in the Temporal UI (ADMITFLOW_UI_URL, default the dev server's http://localhost:8233)."""
    from urllib.parse import quote

    base = os.environ.get("ADMITFLOW_UI_URL", "http://localhost:8233").rstrip("/")
    return f"{base}/namespaces/{quote(namespace, safe='')}/workflows/{quote(workflow_id, safe='')}"


async def cmd_finish(args: argparse.Namespace) -> None:
    client = await _client(args)
    key = _key("Workload", args.workload)
    await client.finish(key, succeeded=not args.failed, message=args.message)
    print(f"workload.kueue.x-k8s.io/{key} finished")


async def cmd_pods_ready(args: argparse.Namespace) -> None:
    from admitflow.admission import pods_ready

    key = _key("Workload", args.workload)
    try:
        pods_ready.parse({"ready": not args.not_ready, "reason": args.reason})  # refused before connecting
    except pods_ready.PodsReadyError as err:
        raise CLIError(str(err)) from None
    client = await _client(args)
    await client.pods_ready(key, ready=not args.not_ready, reason=args.reason)
    print(f"workload.kueue.x-k8s.io/{key} pods {'not ready' if args.not_ready else 'ready'}")


POD_SET_UPDATE_SHAPE = 'give an object such as {"name": "main", "nodeSelector": {"pool": "gpu"}}'


def pod_set_updates(values: Sequence[str]) -> list[PodSetUpdate] | None:
    """The `--pod-set-update` values as podSetUpdates, or a CLIError naming what is not one. What
    Kueue checks beyond their shape (the podSet, labels, tolerations) the workload's update checks."""
    updates = []
    for value in values:
        try:
            obj = json.loads(value)
        except json.JSONDecodeError as err:
            raise CLIError(f"--pod-set-update {value!r}: not JSON ({err.msg} at column {err.colno}); {POD_SET_UPDATE_SHAPE}") from None
        if not isinstance(obj, dict):
            raise CLIError(f"--pod-set-update {value!r}: not a JSON object; {POD_SET_UPDATE_SHAPE}")
        try:
            updates.append(PodSetUpdate.model_validate(obj))
        except ValidationError as err:
            raise CLIError(f"--pod-set-update {value!r}: {fe.from_pydantic(err.errors()[0], PodSetUpdate)}") from None
    return updates or None


async def cmd_verdict(args: argparse.Namespace) -> None:
    from admitflow.admission.checks import Verdict
    from admitflow.api.duration import parse_duration

    delay = None
    if args.requeue_after is not None:
        try:
            delay = int(parse_duration(args.requeue_after).total_seconds())
        except ValueError as err:
            raise CLIError(f"--requeue-after: {err}") from None
    updates = pod_set_updates(args.pod_set_update)
    client = await _client(args)
    key = _key("Workload", args.workload)
    verdict = Verdict(
        name=args.check,
        state=args.state,
        message=args.message,
        requeue_after_seconds=delay,
        pod_set_updates=updates,
        attempt=args.attempt,
    )
    status = await client.verdict(key, verdict)
    rows = [[c.name, c.state, str(c.retry_count or 0), c.message] for c in status.admission_checks or ()]
    print(table(["CHECK", "STATE", "RETRIES", "MESSAGE"], rows))


async def cmd_activate(args: argparse.Namespace) -> None:
    client = await _client(args)
    key = _key("Workload", args.workload)
    await (client.activate(key) if args.command == "activate" else client.deactivate(key))
    print(f"workload.kueue.x-k8s.io/{key} {args.command}d")


async def cmd_admissioncheck(args: argparse.Namespace) -> None:
    client = await _client(args)
    changed = await client.set_admission_check_active(args.name, active=args.action == "activate")
    state = "active" if args.action == "activate" else "inactive"
    print(f"admissioncheck.kueue.x-k8s.io/{args.name} {state}" + ("" if changed else " (unchanged)"))


async def cmd_delete(args: argparse.Namespace) -> None:
    kind = kind_of(args.kind)
    client = await _client(args)
    _print_outcomes([await client.delete(kind, _key(kind, args.name))])


def _workload_only(args: argparse.Namespace) -> str:
    if kind_of(args.kind) != "Workload":
        raise CLIError(f"{args.command} takes workloads only: admitflow {args.command} workload NAMESPACE/NAME")
    return _key("Workload", args.name)


async def cmd_reset(args: argparse.Namespace) -> None:
    key = _workload_only(args)
    client = await _client(args)
    trouble, run_id, again = await client.reset(key, args.reason)
    print(f"workload.kueue.x-k8s.io/{key} reset to its last completed workflow task (event {trouble.last_good_task}): new run {run_id}")
    if again is not None:
        raise NotAnswering(
            f'workloads "{key}" was reset, but {again.summary()}: the worker still has the fault; '
            "deploy a fix (or roll back), then reset again"
        )


async def cmd_release(args: argparse.Namespace) -> None:
    key = _workload_only(args)
    client = await _client(args)
    cq, outcome = await client.release(key, force=args.force, cluster_queue=args.clusterqueue)
    name = f"workload.kueue.x-k8s.io/{key}"
    if outcome.released == "quota":
        usage = ",".join(f"{r}={q}" for r, q in outcome.usage.items())
        print(f"{name} quota released in ClusterQueue {cq} ({usage})")
    elif outcome.released == "place":
        print(f"{name} taken out of ClusterQueue {cq}'s queue")
    else:
        print(f"{name} holds nothing in ClusterQueue {cq} (unchanged)")


async def cmd_provreq(args: argparse.Namespace) -> None:
    if args.provreq_command == "list":
        client = await _client(args)
        found = await client.provisioning_requests(args.in_namespace)
        objects = [r.to_wire() for r in found]
        if not objects and args.output == "table" and args.in_namespace:
            print(f"No resources found in {args.in_namespace} namespace.")
            return
        print(render("ProvisioningRequest", objects, args.output, single=False))
        return
    if args.type not in PROVREQ_CONDITIONS:
        raise CLIError(f'unknown condition type "{args.type}": must be one of {", ".join(PROVREQ_CONDITIONS)}')
    if args.status not in ("True", "False", "Unknown"):
        raise CLIError(f'--status "{args.status}": must be True, False or Unknown')
    details = {}
    for item in args.detail:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CLIError(f"--detail {item!r}: give KEY=VALUE")
        details[key] = value
    namespace, name = ids.split_key(args.request)
    client = await _client(args)
    request = ProvisioningRequestCondition(
        namespace=namespace, name=name, type=args.type, status=args.status, reason=args.reason or SET_BY_HAND,
        message=args.message, details=details,
    )
    stored = await client.set_provisioning_request_condition(request)
    c = stored.condition(args.type)
    print(f"provisioningrequest.autoscaling.x-k8s.io/{namespace}/{name} condition {c.type}={c.status} ({c.reason})")


async def cmd_worker(args: argparse.Namespace) -> None:
    from admitflow.worker.logging import configure
    from admitflow.worker.main import build_worker, metrics_runtime, provisioning_backend, run_until_signalled

    configure(args.log_level)
    client = await _client(args, metrics_runtime(args.metrics_port))
    try:
        backend = provisioning_backend(args.provisioning_backend, client.client, args.kubeconfig)
    except Exception as err:
        raise CLIError(f"--provisioning-backend {args.provisioning_backend}: {err}") from None
    missing = await registration.missing_search_attributes(client.client)
    if missing:
        raise CLIError(
            f"search attributes {', '.join(missing)} are not registered in namespace {client.client.namespace}: "
            "run `admitflow setup` first"
        )
    await run_until_signalled(build_worker(client.client, client.task_queue, provisioning=backend))


async def cmd_setup(args: argparse.Namespace) -> None:
    from admitflow.worker.connection import from_arguments

    conn = from_arguments(args)
    client = (await _client(args)).client
    if await registration.ensure_namespace(client):
        print(f"namespace {client.namespace} created")
        # A new namespace takes a moment to reach every frontend cache.
        for _ in range(50):
            try:
                await registration.missing_search_attributes(client)
                break
            except Exception:
                await asyncio.sleep(0.2)
    added = await registration.ensure_search_attributes(client)
    for name in added:
        print(f"search attribute {name} registered")
    print(f"{conn.target} is ready for admitflow")


async def cmd_dev(args: argparse.Namespace) -> None:
    from admitflow.progress import follow
    from admitflow.worker.logging import configure
    from admitflow.worker.main import build_worker, metrics_runtime

    from admitflow import controller as sdk

    manifests = _load(args.filename) if args.filename else []
    try:
        controllers = [c for path in args.controller for c in sdk.load(path)]
    except Exception as err:
        raise CLIError(f"--controller: {err}") from None
    configure("WARNING")
    server = DevServer(port=args.port, ui_port=args.ui_port, db=args.db, dynamic_config=DEV_DYNAMIC_CONFIG)
    print(f"Starting the Temporal dev server on {server.address} (database {args.db}) ...", flush=True)
    try:
        await server.start()
    except DevServerError as err:
        raise CLIError(str(err), EXIT_UNREACHABLE) from None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    runners: list[subprocess.Popen] = []
    # The dev server is ours and plaintext: Temporal settings exported for another server (TLS,
    # an API key, a profile) must reach neither our client nor the runner we start.
    for name in [n for n in os.environ if n.startswith("TEMPORAL_")]:
        del os.environ[name]
    try:
        args.address = server.address
        client = await _client(args, metrics_runtime(args.metrics_port))
        async with build_worker(client.client, client.task_queue):
            print(f"Temporal Web UI: {server.ui_url}   worker on task queue '{client.task_queue}'", flush=True)
            running = [asyncio.ensure_future(c.run(client.client)) for c in controllers]
            for c in controllers:
                print(f"Check controller {c.name} serving its task queue", flush=True)
            for path in args.runner:
                runner = _start_runner(path, server.address, client.client.namespace, args.db.parent)
                runners.append(runner)
                print(
                    f"Runner {path} (pid {runner.pid}, log {args.db.parent / 'runner.log'}); "
                    f"`kill -9 {runner.pid}` makes the workloads it runs time out and requeue",
                    flush=True,
                )
            if manifests:
                outcomes = await client.apply(manifests)
                _print_outcomes(outcomes)
                # Followed until Ctrl-C, so that what a person does later (a verdict) shows here too.
                settled = asyncio.Event()
                keys = [o.key for o in outcomes if o.kind == "Workload"]
                running.append(asyncio.ensure_future(follow(client, keys, settled.set)))
                await asyncio.wait(
                    {asyncio.ensure_future(settled.wait()), asyncio.ensure_future(stop.wait())},
                    return_when=asyncio.FIRST_COMPLETED,
                )
            if not stop.is_set():
                print(f"Everything is running. Open {server.ui_url} to read each workload's history. Ctrl-C stops.", flush=True)
                await stop.wait()
            print("Stopping ...", flush=True)
            for task in running:
                task.cancel()
    finally:
        for runner in runners:
            runner.terminate()
        for runner in runners:
            try:
                runner.wait(10)
            except subprocess.TimeoutExpired:
                runner.kill()
        server.stop()


async def cmd_codec_server(args: argparse.Namespace) -> None:
    from admitflow.codec_server import DEFAULT_ORIGINS, server

    try:
        codec = data_converter().payload_codec
        keys = encryption_codec()
    except EncryptionConfigError as err:
        raise CLIError(str(err)) from None
    try:
        httpd = server(codec, args.ip, args.port, args.allow_origin or DEFAULT_ORIGINS)
    except OSError as err:
        raise CLIError(f"cannot listen on {args.ip}:{args.port}: {err.strerror or err}", EXIT_UNREACHABLE) from None
    if keys is None:
        print("warning: no ADMITFLOW_ENCRYPTION_KEY: only compressed payloads will be decoded", file=sys.stderr)
    print(f"codec server on http://{args.ip}:{httpd.server_address[1]} (POST /decode, /encode); Ctrl-C stops", flush=True)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, httpd.shutdown)
    try:
        await asyncio.to_thread(httpd.serve_forever)
    finally:
        httpd.server_close()


def _start_runner(path: str, address: str, namespace: str, logs: Path) -> subprocess.Popen:
    """A runner program in its own process (so that it can be killed on its own), on the dev server.
    It goes when `admitflow dev` does, however that ends (its commands go with it)."""
    if not Path(path).is_file():
        raise CLIError(f"--runner: {path}: no such file")
    logs.mkdir(parents=True, exist_ok=True)
    with (logs / "runner.log").open("a") as log:
        return subprocess.Popen(
            [sys.executable, path, "--address", address, "--namespace", namespace, "--logs", str(logs / "runs")],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, preexec_fn=die_with_parent,
        )


COMMANDS = {
    "apply": cmd_apply,
    "get": cmd_get,
    "describe": cmd_describe,
    "finish": cmd_finish,
    "verdict": cmd_verdict,
    "pods-ready": cmd_pods_ready,
    "activate": cmd_activate,
    "deactivate": cmd_activate,
    "admissioncheck": cmd_admissioncheck,
    "delete": cmd_delete,
    "reset": cmd_reset,
    "release": cmd_release,
    "provreq": cmd_provreq,
    "worker": cmd_worker,
    "setup": cmd_setup,
    "dev": cmd_dev,
    "codec-server": cmd_codec_server,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        asyncio.run(COMMANDS[args.command](args))
    except (CLIError, AdmitflowError, PayloadDecodeError) as err:
        code = getattr(err, "code", EXIT_BAD_INPUT)
        print(f"error: {err}", file=sys.stderr)
        return code
    except KeyboardInterrupt:
        return 130
    return 0


def entrypoint() -> None:
    """The console script. The Temporal SDK's native runtime can abort the interpreter while it
    finalizes a short-lived process (sdk-python#300, `PyGILState_Release`); all work is done and
    flushed by now, so leave without finalizing."""
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    entrypoint()
