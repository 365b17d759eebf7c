"""The `admitflow` command.

Errors are one line on stderr, never a traceback, with kubectl's exit codes: 2 for bad input (bad
flags or arguments, a manifest Kueue would refuse, an object that is not there: the line names what
was wrong, file, document and field for manifests, and nothing changed), 1 when the request could not
be carried out (a Temporal server that cannot be reached, an unknown Temporal namespace, permission
denied, a timeout, a workflow that cannot take the request now). "No resources found" goes to stderr
with status 0, as kubectl's does.

Two namespaces: `--namespace` is the Temporal namespace (the connection flags follow the temporal
CLI), `-n/--kueue-namespace` the Kueue namespace of workloads and LocalQueues (kubectl's `-n`).

Only what a command needs is imported, when it runs: the parser is built from light modules
(admitflow.kinds, admitflow.ids), so `admitflow --help` starts without the Temporal SDK, pydantic or
yaml (tests/unit/test_cli_start.py holds it to that).
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
from datetime import UTC, datetime, timedelta
from pathlib import Path

from admitflow import ids
from admitflow.worker import connection_flags
from admitflow.kinds import (
    NAMESPACED,
    PROVISIONING_REQUEST_CONDITIONS,
    UnknownKind,
    kind_of,
    qualified,
    short_names,
    split_kind,
)

# kubectl's exit codes: 1 when the request could not be carried out; this repository's 2 for bad
# input and usage (argparse's own status), which changes nothing.
EXIT_ERROR = 1
EXIT_BAD_INPUT = 2
EXIT_UNREACHABLE = EXIT_ERROR
# `get -w` asks for the workloads changed since its previous read, less this: visibility lags
# behind the workflows a little (more with Elasticsearch), and the client's clock is not the server's.
WATCH_SLACK = timedelta(seconds=10)

# Defaults shown in --help, kept equal to the modules that own them by tests/unit/test_cli_start.py
# (importing those modules would cost the start-up time this module saves).
DEFAULT_DB = Path(".admitflow/temporal.db")  # admitflow.devserver.DEFAULT_DB
SET_BY_HAND = "SetByHand"  # admitflow.simulation.autoscaler.SET_BY_HAND
OUTPUTS = ("table", "wide", "name", "json", "yaml")


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
    "task (to its first, when no task of its run completed). A new run replays its history up to that task and "
    "then gets again every signal received after it (its ClusterQueue's notices, verdicts, finish), so nothing "
    "it was told is lost. Prints whether the new run answers; exits 1 if its workflow task fails again. "
    "See docs/operations.md, A wedged workload."
)
RELEASE_DESCRIPTION = (
    "Give back, in its ClusterQueue, the quota (or the place in the queue) of a workload whose workflow task "
    "fails, or whose workflow no longer runs, so that other workloads get it now. The ClusterQueue records it as "
    "an event (admitflow describe clusterqueue) and tells the workload it was evicted (reason QuotaForceReleased): "
    "once its workflow runs again it queues afresh. Refused for a workload that answers unless --force. "
    "Safe to repeat: a workload that holds nothing prints unchanged."
)


UNGATE_DESCRIPTION = (
    "Remove admission gates from a workload: the gates its kueue.x-k8s.io/admission-gated-by annotation names "
    "(Kueue's AdmissionGatedBy). A gated workload takes no quota and no place in its queue; once its last gate "
    "is removed it enters its queue. Sent through the workload's update apply_admission_gate_removal, so a "
    "workload that is not gated, or a gate it does not have, is refused in one line and nothing changes. "
    "Re-applying the workload's manifest with fewer gates does the same; gates can never be added after "
    "creation. Prints the gates that remain."
)


EXPLAIN_DESCRIPTION = (
    "Why a workload is not admitted now, as one cause from a closed list tried in order (NotAnswering, Deleted, "
    "Finished, Inactive, Admitted, WaitingForChecks, AdmissionGated, Backoff, QueueMissing, WaitingForPodsReady, "
    "Inadmissible, NoQuota, Queued): which flavor lacks how much of what, which check it waits for and since "
    "when, how long its backoff still runs, which gates, its position; and an estimate of when it could be "
    "admitted, from the workloads ahead of it and the running workloads' maximum execution times (an estimate, "
    "not a promise: it says what it assumes). For a ClusterQueue: its waiting workloads (in its queue, holding "
    "quota without being admitted, or kept out of the queue: gated, in backoff, inactive) counted by cause, each "
    "exactly once, and the total. See docs/beyond-kueue.md, explain."
)
EXPLAINED_KINDS = ("Workload", "ClusterQueue")


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


class _VersionAction(argparse.Action):
    """argparse's `version` action, with the version read only when asked for (reading the
    installed package's metadata costs every other command start-up time)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"admitflow {_version()}")
        parser.exit()


NAMESPACES_EPILOG = """\
namespaces:
  --namespace NS             the Temporal namespace (as the temporal CLI; TEMPORAL_NAMESPACE, default
                             "default")
  -n, --kueue-namespace NS   the Kueue namespace of workloads and LocalQueues (as kubectl's -n); NS/NAME
                             says it too. A NAME alone is in namespace "default"; a list shows every
                             namespace (with a NAMESPACE column) unless -n is given; -A says so explicitly.

Run `admitflow COMMAND --help` for a command's flags; `admitflow completion bash|zsh` for shell completion.
"""

KUEUE_NAMESPACE_HELP = (
    "the Kueue namespace (kubectl's -n; NS/NAME says it too; default: default). Not --namespace, "
    "which is the Temporal namespace"
)
KUEUE_NAMESPACE_LIST_HELP = (
    "only objects in this Kueue namespace (kubectl's -n; default: every namespace). Not --namespace, "
    "which is the Temporal namespace"
)


def _kueue_namespace_flags(parser: argparse.ArgumentParser, listing: bool = False) -> None:
    """`-n/--kueue-namespace`, and for a list `-A/--all-namespaces` (its default, said explicitly)."""
    if not listing:
        parser.add_argument("-n", "--kueue-namespace", metavar="NAMESPACE", help=KUEUE_NAMESPACE_HELP)
        return
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("-n", "--kueue-namespace", metavar="NAMESPACE", help=KUEUE_NAMESPACE_LIST_HELP)
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="every Kueue namespace (the default for lists)")


def _parser() -> argparse.ArgumentParser:
    conn = argparse.ArgumentParser(add_help=False)
    g = connection_flags.add_arguments(conn)
    g.add_argument("--task-queue", help=f"engine task queue (default: ADMITFLOW_TASK_QUEUE or {ids.DEFAULT_TASK_QUEUE})")
    g.add_argument(
        "--request-timeout", metavar="DURATION",
        help="how long a workflow may take to answer a read or take a write, e.g. 30s or 2m (default 10s; "
        "apply waits until the catalog takes its objects)",
    )

    p = OneLineErrors(
        prog="admitflow",
        description="Kueue's two-stage workload admission as durable Temporal workflows.",
        epilog=NAMESPACES_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action=_VersionAction, help="print the installed version and exit")
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
    w.add_argument("--context", help="with the kubernetes backend: the kubeconfig context to use (kubectl's "
                   "--context; default: the kubeconfig's current-context)")
    for flag, default, what in WORKER_SETTINGS:
        w.add_argument(f"--{flag}", type=_at_least(WORKER_SETTING_MINIMUM.get(flag, 1)), metavar="N",
                       help=f"{what} (default: the SDK's, {default})")
    for parser in (w, dev):
        parser.add_argument(
            "--metrics-port", type=int, default=_env_int("ADMITFLOW_METRICS_PORT"),
            help="serve Prometheus metrics on this port at /metrics (ADMITFLOW_METRICS_PORT; default: none): "
            "admitflow_* counters and histograms with Kueue's names, and Temporal's; `dev` adds the gauges, "
            "which `admitflow exporter` serves for a deployment",
        )

    ex = sub.add_parser(
        "exporter", parents=[conn], help="serve admitflow's gauges (pending, reserving, admitted workloads, status "
        "per ClusterQueue) to Prometheus; run exactly one",
        description="Serve Kueue's per-ClusterQueue gauges under admitflow_ at /metrics: at each scrape it lists the "
        "catalog's ClusterQueues and asks each one's workflow for its current figures, so the values are current and "
        "a deleted ClusterQueue's series end. Workers serve the counters and histograms; one exporter serves the "
        "gauges (`admitflow dev` serves them itself). See docs/metrics.md.",
    )
    ex.add_argument(
        "--metrics-port", type=int, default=_env_int("ADMITFLOW_METRICS_PORT") or 9464,
        help="port of /metrics (ADMITFLOW_METRICS_PORT; default 9464)",
    )
    ex.add_argument("--log-level", default="INFO")

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

    a = sub.add_parser(
        "apply", parents=[conn], help="apply Kueue manifests (file, directory, or - for stdin)",
        description="Apply Kueue manifests as kubectl apply does: the catalog objects (ResourceFlavors, ClusterQueues, "
        "LocalQueues, AdmissionChecks, ...) all or nothing in one update of the catalog workflow, then each Workload "
        "submitted (its workflow started; one naming a WorkloadPriorityClass without a priority gets the class's value). "
        "Objects keep the namespace their manifest gives (default: default).",
    )
    a.add_argument("-f", "--filename", action="append", required=True, help="a file, a directory, or - for stdin (repeatable)")
    a.add_argument("--wait", action="store_true", help="then follow the workloads applied, printing each phase change, "
                   "until each is admitted, finished or waits for a person")
    a.add_argument(
        "--dry-run", nargs="?", const="client", default="none", choices=("none", "client", "server"),
        help="print what would happen, each line ending in (dry run), and change nothing. client: the manifests "
        "are checked here against the objects as they stand; server: the catalog workflow's validator answers "
        "(a read-only query: nothing reaches its history). Either way a Workload is checked as its submission "
        "would be",
    )

    g_ = sub.add_parser(
        "get", parents=[conn], help="list objects of a kind, or show one",
        description=f"KIND is one of: {', '.join(short_names())}; also KIND.GROUP (clusterqueues.kueue.x-k8s.io) "
        "and KIND/NAME (cq/gpu, workload/team-a/train); or pending-workloads CLUSTERQUEUE (Kueue's visibility API). "
        "A list of workloads or LocalQueues spans every Kueue namespace, with a NAMESPACE column, unless "
        "-n/--kueue-namespace names one (--namespace is the Temporal namespace). Lists of workloads come from "
        "Temporal's visibility store (search attributes), not from asking each workflow.",
    )
    g_.add_argument("kind", metavar="KIND[/NAME]")
    g_.add_argument("name", nargs="?", help="name, or namespace/name for localqueues and workloads")
    _kueue_namespace_flags(g_, listing=True)
    g_.add_argument(
        "-l", "--selector", metavar="SELECTOR",
        help="only objects whose labels match, in kubectl's syntax: a=b, a==b, a!=b, 'a in (b,c)', 'a notin (b)', a, !a "
        "(comma-separated: all must hold)",
    )
    g_.add_argument(
        "-o", "--output", choices=OUTPUTS, default="table",
        help="table (default); wide: more columns; name: kind.group/key lines (as kubectl -o name); json or yaml: "
        "the objects in full",
    )
    g_.add_argument("-w", "--watch", action="store_true", help="after the list, print each object again when it changes (Ctrl-C stops)")
    g_.add_argument("--localqueue", metavar="NAME", help="workloads: only those submitted to this LocalQueue (kueuectl's "
                    "list workloads --localqueue; with -n, of that namespace)")
    g_.add_argument("--phase", help="workloads: only those in this phase (Pending, QuotaReserved, Admitted, Backoff, "
                    "Inactive, Finished); a visibility query on AdmitflowPhase")
    g_.add_argument("--clusterqueue", help="workloads: only those of this ClusterQueue (AdmitflowClusterQueue)")
    g_.add_argument("--pending-check", help="workloads: only those whose check of this name is not Ready (AdmitflowPendingChecks)")
    g_.add_argument("--limit", type=int, default=1000, help="pending-workloads: at most this many (default 1000)")
    g_.add_argument("--offset", type=int, default=0, help="pending-workloads: skip this many from the head")

    d = sub.add_parser("describe", parents=[conn], help="show one object in detail, with events")
    d.add_argument("kind", metavar="KIND[/NAME]")
    d.add_argument("name", nargs="?", help="name, or namespace/name for localqueues and workloads")
    _kueue_namespace_flags(d)

    f = sub.add_parser("finish", parents=[conn], help="report a workload finished; its quota is released")
    f.add_argument("workload", help="namespace/name (or name, in -n's namespace or default)")
    _kueue_namespace_flags(f)
    f.add_argument("--failed", action="store_true", help="finished with failure (reason Failed)")
    f.add_argument("--message", default="", help="message of the Finished condition")

    pr = sub.add_parser(
        "pods-ready", parents=[conn], help="report whether an admitted workload's pods are ready (signal set_pods_ready)",
        description="Report a workload's pods ready (PodsReady=True) or not, as a runner or a job controller would. "
        "Under WaitForPodsReady an admitted workload that is not ready in time is evicted and requeued with a backoff.",
    )
    pr.add_argument("workload", help="namespace/name (or name, in -n's namespace or default)")
    _kueue_namespace_flags(pr)
    pr.add_argument("--not-ready", action="store_true", help="the pods are not ready (any more): WaitForStart or WaitForRecovery")
    pr.add_argument("--reason", help="Kueue's reason: Started or Recovered (ready), WaitForStart or WaitForRecovery (--not-ready)")

    v = sub.add_parser(
        "verdict", parents=[conn], help="set a workload's admission check state (through the workflow's update)",
        description="Send a check's verdict as its controller would, through the workload's update "
        "apply_admission_check_state, and print the workload's check states; a refused verdict changes nothing.",
        epilog=VERDICT_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    v.add_argument("workload", help="namespace/name (or name, in -n's namespace or default)")
    v.add_argument("check", help="the AdmissionCheck's name")
    v.add_argument("state", help="Pending, Ready, Retry or Rejected")
    _kueue_namespace_flags(v)
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
        act = sub.add_parser(name, parents=[conn], help=text)
        act.add_argument("workload", help="namespace/name (or name, in -n's namespace or default)")
        _kueue_namespace_flags(act)
    ac = sub.add_parser(
        "admissioncheck", parents=[conn], help="report an AdmissionCheck Active or not, as its controller would"
    )
    ac.add_argument("action", choices=["activate", "deactivate"])
    ac.add_argument("name")

    rm = sub.add_parser(
        "delete", parents=[conn], help="delete objects, by kind and name or as a file names them; a workload gives back its quota",
        description="Delete one object (KIND NAME, KIND/NAME), or with -f every object a manifest file names, in "
        "reverse order (workloads before the queues they use), one line each as kubectl prints them. An object "
        "that cannot be deleted (not found) gets an error line and the others are still deleted; the status is 1 "
        "if any was not.",
    )
    rm.add_argument("kind", nargs="?", metavar="KIND[/NAME]")
    rm.add_argument("name", nargs="?", help="name, or namespace/name for localqueues and workloads")
    _kueue_namespace_flags(rm)
    rm.add_argument("-f", "--filename", action="append", help="the objects a manifest file (directory, - for stdin) names")

    rs = sub.add_parser(
        "reset", parents=[conn], description=RESET_DESCRIPTION,
        help="reset a workload whose workflow task fails to its last completed one (its first, if none completed)",
    )
    rs.add_argument("kind", metavar="workload[/NAME]", help="workload")
    rs.add_argument("name", nargs="?", help="namespace/name (or name, in -n's namespace or default)")
    _kueue_namespace_flags(rs)
    rs.add_argument("--reason", default="", help="why, recorded with the reset in the workflow's history")

    rl = sub.add_parser(
        "release", parents=[conn], help="give a wedged workload's quota back in its ClusterQueue, without its workflow",
        description=RELEASE_DESCRIPTION,
    )
    rl.add_argument("kind", metavar="workload[/NAME]", help="workload")
    rl.add_argument("name", nargs="?", help="namespace/name (or name, in -n's namespace or default)")
    _kueue_namespace_flags(rl)
    rl.add_argument("--force", action="store_true", help="release it even though its workflow answers (it is evicted and queues again)")
    rl.add_argument("--clusterqueue", help="the ClusterQueue holding it (default: its AdmitflowClusterQueue search attribute)")

    ug = sub.add_parser(
        "ungate", parents=[conn], help="remove admission gates (kueue.x-k8s.io/admission-gated-by) from a workload",
        description=UNGATE_DESCRIPTION,
    )
    ug.add_argument("kind", metavar="workload[/NAME]", help="workload")
    ug.add_argument("rest", nargs="*", metavar="NAME GATE", help="namespace/name (unless given as workload/NAME), then the gates")
    _kueue_namespace_flags(ug)
    ug.add_argument("--all", action="store_true", help="remove every gate")

    xp = sub.add_parser(
        "explain", parents=[conn],
        help="why a workload is not admitted now, and when it could be; a ClusterQueue's waiting workloads by cause",
        description=EXPLAIN_DESCRIPTION,
    )
    xp.add_argument("kind", metavar="KIND[/NAME]", help="workload (wl) or clusterqueue (cq)")
    xp.add_argument("name", nargs="?", help="namespace/name of a workload (or name, in -n's namespace or default); a ClusterQueue's name")
    _kueue_namespace_flags(xp)
    xp.add_argument(
        "-o", "--output", choices=("table", "json", "yaml"), default="table",
        help="table (default): the cause and what says it, or a ClusterQueue's counts by cause; json or yaml: all of it",
    )

    pr = sub.add_parser(
        "provreq", help="the simulated cluster autoscaler's ProvisioningRequests: list them, set conditions by hand",
        description=PROVREQ_DESCRIPTION,
    )
    pr_sub = pr.add_subparsers(dest="provreq_command", required=True, metavar="ACTION")
    ls = pr_sub.add_parser(
        "list", parents=[conn], help="list ProvisioningRequests with their conditions, like kubectl get provreq",
        description=PROVREQ_DESCRIPTION,
    )
    _kueue_namespace_flags(ls, listing=True)
    ls.add_argument("-o", "--output", choices=OUTPUTS, default="table")
    sc = pr_sub.add_parser(
        "set-condition", parents=[conn], help="set a condition of a ProvisioningRequest by hand",
        description=PROVREQ_DESCRIPTION + " " + SET_CONDITION_DESCRIPTION,
    )
    sc.add_argument("request", metavar="NS/NAME", help="the ProvisioningRequest (NAME alone: in -n's namespace or default)")
    sc.add_argument("type", metavar="TYPE", help=", ".join(PROVISIONING_REQUEST_CONDITIONS))
    _kueue_namespace_flags(sc)
    sc.add_argument("--status", default="True", help="True (default), False or Unknown")
    sc.add_argument("--reason", help=f"CamelCase reason (default {SET_BY_HAND})")
    sc.add_argument("--message", default="", help="the condition's message")
    sc.add_argument(
        "--detail", action="append", default=[], metavar="KEY=VALUE",
        help="a status.provisioningClassDetails entry to add (repeatable)",
    )

    comp = sub.add_parser(
        "completion", help="print a shell completion script (bash or zsh)",
        description="Print a completion script for admitflow's commands, flags and kinds, generated from this parser. "
        "bash: source <(admitflow completion bash), or save it in /etc/bash_completion.d/admitflow. "
        "zsh: source <(admitflow completion zsh) in ~/.zshrc (it runs the same function through zsh's bashcompinit).",
    )
    comp.add_argument("shell", choices=("bash", "zsh"))
    return p


def _kind(name: str) -> str:
    try:
        return kind_of(name)
    except UnknownKind as err:
        raise CLIError(str(err)) from None


def _key(kind: str, name: str, namespace: str | None = None) -> str:
    """The object's key: namespace/name for namespaced kinds. `name` may carry its namespace
    (`team-a/train`); `namespace` is -n's; a name alone is in -n's namespace, else in `default`.
    A cluster-scoped kind ignores -n, as kubectl does."""
    if kind not in NAMESPACED:
        return name
    if "/" in name:
        ns, _ = ids.split_key(name)
        if namespace is not None and namespace != ns:
            raise CLIError(
                f'"{name}" is in namespace {ns}, but -n/--kueue-namespace says {namespace}: give the namespace once'
            )
        return name
    return f"{namespace or 'default'}/{name}"


def _target(args: argparse.Namespace, default_kind: str | None = None) -> tuple[str, str]:
    """The kind and key the positional arguments name: `KIND NAME`, `KIND/NAME`, with -n."""
    ref, inline = split_kind(args.kind)
    if inline is not None and args.name is not None:
        raise CLIError(
            f"there is no need to give a name as a separate argument when it is given as KIND/NAME ({args.kind})"
        )
    name = inline if inline is not None else args.name
    kind = _kind(ref)
    if default_kind is not None and kind != default_kind:
        raise CLIError(f"{args.command} takes workloads only: admitflow {args.command} workload NAMESPACE/NAME")
    if not name:
        raise CLIError(f"{args.command} needs a name: admitflow {args.command} {ref} NAME (or {ref}/NAME)")
    return kind, _key(kind, name, getattr(args, "kueue_namespace", None))


# `admitflow worker`'s settings of the SDK worker (docs/operations.md, "Worker settings"): flag, its
# default (the SDK's), what it bounds. Each flag maps to the Worker option of its name, but for the
# pollers, whose number sets the simple poller behaviour (worker.main.sdk_options). Each bounds each
# of the worker's two task queues (the engine's and its entities') on its own.
WORKER_SETTINGS = (
    ("max-cached-workflows", 1000, "workflow runs kept in memory between their workflow tasks, per task queue; a run not "
     "kept replays its whole history on its next task"),
    ("max-concurrent-workflow-tasks", 100, "workflow tasks run at once, per task queue"),
    ("max-concurrent-activities", 100, "activities (deliveries, enqueues, provisioning calls) run at once, per task queue"),
    ("workflow-task-pollers", 5, "workflow task polls open at once per task queue, at least 2 (a share of them on the worker's own sticky queue)"),
    ("activity-task-pollers", 5, "activity task polls open at once, per task queue"),
)
# The SDK refuses one workflow task poller while it caches workflows: the sticky queue needs its own.
WORKER_SETTING_MINIMUM = {"workflow-task-pollers": 2}


def _at_least(minimum: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise argparse.ArgumentTypeError(f'"{text}": must be a whole number of at least {minimum}')
        return value

    return parse


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    return int(value) if value else None


def _request_timeout(args: argparse.Namespace):
    """--request-timeout as a timedelta (None when not given): a Go duration or a number of seconds."""
    from datetime import timedelta

    text = getattr(args, "request_timeout", None)
    if text is None:
        return None
    if text.isdigit():
        value = timedelta(seconds=int(text))
    else:
        from admitflow.api.duration import parse_duration

        try:
            value = parse_duration(text)
        except ValueError as err:
            raise CLIError(f"--request-timeout: {err}") from None
    if value.total_seconds() <= 0:
        raise CLIError(f'--request-timeout "{text}": must be more than 0s')
    return value


async def _client(args: argparse.Namespace, runtime=None, check_namespace: bool = True):
    from admitflow.client import QUERY_TIMEOUT, AdmitflowClient
    from admitflow.codec import EncryptionConfigError, data_converter
    from admitflow.worker.connection import ConnectionConfigError, from_arguments

    timeout = _request_timeout(args)
    conn = from_arguments(args)
    try:
        target = conn.describe()
        data_converter()  # a bad encryption key is refused before connecting
    except (ConnectionConfigError, EncryptionConfigError) as err:
        raise CLIError(str(err)) from None
    args.target = target  # for the one-line errors of main()
    try:
        client = await conn.connect(runtime)
    except Exception as err:  # the SDK raises a plain RuntimeError on connection failure
        raise CLIError(f"cannot reach Temporal at {target}: {_connection_failure(err)}", EXIT_ERROR) from None
    if check_namespace:
        await _check_namespace(client, target)
    return AdmitflowClient(client, ids.task_queue(args.task_queue), query_timeout=timeout or QUERY_TIMEOUT)


def _connection_failure(err: BaseException) -> str:
    text = str(err)
    if "Connection refused" in text:
        return "connection refused; is the server running there? (--address, TEMPORAL_ADDRESS)"
    return _first_line(text)


async def _check_namespace(client, target: str) -> None:
    """A Temporal namespace that does not exist is an error here, not an empty list later (a
    workflow that is not found reads as no objects)."""
    from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
    from temporalio.service import RPCError, RPCStatusCode

    from admitflow.client import RPC_TIMEOUT

    try:
        await client.workflow_service.describe_namespace(
            DescribeNamespaceRequest(namespace=client.namespace), retry=True, timeout=RPC_TIMEOUT
        )
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise CLIError(_unknown_namespace(client.namespace, target), EXIT_ERROR) from None
        if err.status != RPCStatusCode.PERMISSION_DENIED:  # allowed to use it but not to describe it: carry on
            raise


def _unknown_namespace(namespace: str, target: str) -> str:
    return (
        f'Temporal namespace "{namespace}" not found at {target.split(" (")[0]}: check --namespace (TEMPORAL_NAMESPACE); '
        f"the Kueue namespace is -n/--kueue-namespace; admitflow setup --namespace {namespace} creates it"
    )


def _first_line(text: str, limit: int = 300) -> str:
    line = next((ln.strip() for ln in str(text).splitlines() if ln.strip()), "")
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _load(paths: Sequence[str]):
    from admitflow.api import ManifestError, load_manifests

    try:
        return load_manifests(paths, stdin=sys.stdin)
    except ManifestError as err:
        raise CLIError(str(err)) from None
    except OSError as err:
        raise CLIError(f"error: the path \"{err.filename}\" does not exist" if isinstance(err, FileNotFoundError) else str(err)) from None


def _print_outcomes(outcomes, dry_run: bool = False) -> None:
    """One line per object, as kubectl prints it (`kind.group/key action`, then ` (dry run)` when
    nothing was changed), with the outcome's message after a colon when it has one
    (`... terminating: <why>`)."""
    for o in outcomes:
        message = " ".join((getattr(o, "message", "") or "").split())
        line = f"{qualified(o.kind, o.key)} {o.action}" + (" (dry run)" if dry_run else "")
        print(line + (f": {message}" if message else ""))


async def cmd_apply(args: argparse.Namespace) -> None:
    dry_run = None if args.dry_run == "none" else args.dry_run
    if dry_run and args.wait:
        raise CLIError("--wait follows what was applied, and --dry-run applies nothing: give one of them")
    manifests = _load(args.filename)
    for m in manifests:
        for warning in m.warnings:
            print(f"Warning: {warning}", file=sys.stderr)
    client = await _client(args)
    outcomes = await client.apply(manifests, dry_run=dry_run, timeout=_request_timeout(args))
    _print_outcomes(outcomes, dry_run=dry_run is not None)
    keys = [o.key for o in outcomes if o.kind == "Workload"]
    if args.wait and keys:
        from admitflow.progress import follow

        settled = asyncio.Event()
        following = asyncio.ensure_future(follow(client, keys, settled.set))
        await settled.wait()
        following.cancel()


WORKLOAD_FILTERS = ("localqueue", "phase", "clusterqueue", "pending_check")


async def cmd_get(args: argparse.Namespace) -> None:
    ref, inline = split_kind(args.kind)
    if inline is not None and args.name is not None:
        raise CLIError(f"there is no need to give a name as a separate argument when it is given as KIND/NAME ({args.kind})")
    name = inline if inline is not None else args.name
    if ref in ("pending-workloads", "pendingworkloads"):
        await get_pending_workloads(args, name)
        return
    kind = _kind(ref)
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
    key = _key(kind, name, namespace) if name else None
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

    client = await _client(args)
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

    client = await _client(args)
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

    kind, key = _target(args)
    client = await _client(args)
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
    print(describe(obj, events, extra))


def workflow_url(namespace: str, workflow_id: str) -> str:
    """The workflow in the Temporal UI (ADMITFLOW_UI_URL, default the dev server's http://localhost:8233)."""
    from urllib.parse import quote

    base = os.environ.get("ADMITFLOW_UI_URL", "http://localhost:8233").rstrip("/")
    return f"{base}/namespaces/{quote(namespace, safe='')}/workflows/{quote(workflow_id, safe='')}"


def _workload_key(args: argparse.Namespace) -> str:
    return _key("Workload", args.workload, args.kueue_namespace)


async def cmd_finish(args: argparse.Namespace) -> None:
    key = _workload_key(args)
    client = await _client(args)
    await client.finish(key, succeeded=not args.failed, message=args.message)
    print(f"{qualified('Workload', key)} finished")


async def cmd_pods_ready(args: argparse.Namespace) -> None:
    from admitflow.admission import pods_ready

    key = _workload_key(args)
    try:
        pods_ready.parse({"ready": not args.not_ready, "reason": args.reason})  # refused before connecting
    except pods_ready.PodsReadyError as err:
        raise CLIError(str(err)) from None
    client = await _client(args)
    await client.pods_ready(key, ready=not args.not_ready, reason=args.reason)
    print(f"{qualified('Workload', key)} pods {'not ready' if args.not_ready else 'ready'}")


POD_SET_UPDATE_SHAPE = 'give an object such as {"name": "main", "nodeSelector": {"pool": "gpu"}}'


def pod_set_updates(values: Sequence[str]) -> list | None:
    """The `--pod-set-update` values as podSetUpdates, or a CLIError naming what is not one. What
    Kueue checks beyond their shape (the podSet, labels, tolerations) the workload's update checks."""
    from pydantic import ValidationError

    from admitflow.api import field_error as fe
    from admitflow.api.workload import PodSetUpdate

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
    from admitflow.printing import table

    delay = None
    if args.requeue_after is not None:
        try:
            delay = int(parse_duration(args.requeue_after).total_seconds())
        except ValueError as err:
            raise CLIError(f"--requeue-after: {err}") from None
    updates = pod_set_updates(args.pod_set_update)
    key = _workload_key(args)
    client = await _client(args)
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
    key = _workload_key(args)
    client = await _client(args)
    await (client.activate(key) if args.command == "activate" else client.deactivate(key))
    print(f"{qualified('Workload', key)} {args.command}d")


async def cmd_admissioncheck(args: argparse.Namespace) -> None:
    client = await _client(args)
    changed = await client.set_admission_check_active(args.name, active=args.action == "activate")
    state = "active" if args.action == "activate" else "inactive"
    print(f"{qualified('AdmissionCheck', args.name)} {state}" + ("" if changed else " (unchanged)"))


class Failed(CLIError):
    """Some of the work failed and each failure has had its line already: exit with `code`, silently."""

    def __init__(self, code: int = EXIT_ERROR) -> None:
        super().__init__("", code)


async def cmd_delete(args: argparse.Namespace) -> None:
    if args.filename:
        if args.kind is not None or args.name is not None:
            raise CLIError("give either KIND NAME or -f FILE, not both")
        await delete_files(args)
        return
    if args.kind is None:
        raise CLIError("give what to delete: admitflow delete KIND NAME, KIND/NAME, or -f FILE")
    kind, key = _target(args)
    client = await _client(args)
    _print_outcomes([await client.delete(kind, key)])


async def delete_files(args: argparse.Namespace) -> None:
    """kubectl delete -f: every object the files name, last first (workloads before the queues
    they use), one line each; an object that cannot be deleted gets an error line on stderr and
    the others are still deleted."""
    from admitflow.client import AdmitflowError

    manifests = _load(args.filename)
    client = await _client(args)
    failed = 0
    for m in reversed(manifests):
        try:
            outcome = await client.delete(m.obj.kind, m.obj.key)
        except AdmitflowError as err:
            failed += 1
            name = m.obj.metadata.name if m.obj.metadata is not None else m.obj.key
            print(f"error: {m.source}: document {m.index} ({m.obj.kind} {name}): {err}", file=sys.stderr, flush=True)
            continue
        _print_outcomes([outcome])
        sys.stdout.flush()
    if failed:
        raise Failed()


async def cmd_reset(args: argparse.Namespace) -> None:
    from admitflow.client import NotAnswering

    _, key = _target(args, default_kind="Workload")
    client = await _client(args)
    trouble, run_id, again = await client.reset(key, args.reason)
    _, to = trouble.reset_point()
    print(f"{qualified('Workload', key)} reset to {to}: new run {run_id}")
    if again is not None:
        raise NotAnswering(
            f'workloads "{key}" was reset, but {again.summary()}: the worker still has the fault; '
            "deploy a fix (or roll back), then reset again"
        )


async def cmd_release(args: argparse.Namespace) -> None:
    _, key = _target(args, default_kind="Workload")
    client = await _client(args)
    cq, outcome = await client.release(key, force=args.force, cluster_queue=args.clusterqueue)
    name = qualified("Workload", key)
    if outcome.released == "quota":
        usage = ",".join(f"{r}={q}" for r, q in outcome.usage.items())
        print(f"{name} quota released in ClusterQueue {cq} ({usage})")
    elif outcome.released == "place":
        print(f"{name} taken out of ClusterQueue {cq}'s queue")
    else:
        print(f"{name} holds nothing in ClusterQueue {cq} (unchanged)")


async def cmd_ungate(args: argparse.Namespace) -> None:
    _, inline = split_kind(args.kind)
    rest = list(args.rest)
    args.name = rest.pop(0) if inline is None and rest else None
    _, key = _target(args, default_kind="Workload")
    if rest and args.all:
        raise CLIError("give the gates to remove or --all, not both")
    if not rest and not args.all:
        raise CLIError(f"name the gates to remove, or --all: admitflow ungate workload {key} GATE [GATE ...]")
    client = await _client(args)
    left = await client.ungate(key, rest, all=args.all)
    removed = "every gate" if args.all else ", ".join(rest)
    after = f"still gated by {', '.join(left)}" if left else "no gates remain: it enters its queue"
    print(f"{qualified('Workload', key)} ungated ({removed} removed); {after}")


async def cmd_explain(args: argparse.Namespace) -> None:
    from admitflow.printing import cause_table, explanation_lines

    kind, key = _target(args)
    if kind not in EXPLAINED_KINDS:
        raise CLIError("explain takes a workload or a clusterqueue: admitflow explain workload NAMESPACE/NAME, "
                       "admitflow explain clusterqueue NAME")
    client = await _client(args)
    found = await (client.explanation(key) if kind == "Workload" else client.cluster_queue_explanation(key))
    doc = found.to_wire()
    if args.output == "json":
        print(json.dumps(doc, indent=2))
    elif args.output == "yaml":
        import yaml

        print(yaml.safe_dump(doc, sort_keys=False).rstrip())
    elif kind == "Workload":
        print("\n".join(explanation_lines(doc)))
    else:
        print(cause_table(doc))


async def cmd_provreq(args: argparse.Namespace) -> None:
    if args.provreq_command == "list":
        from admitflow.printing import no_resources, render

        client = await _client(args)
        namespace = args.kueue_namespace
        found = await client.provisioning_requests(namespace)
        objects = [r.to_wire() for r in found]
        if not objects and args.output not in ("json", "yaml"):
            print(no_resources(namespace), file=sys.stderr)
            return
        print(render("ProvisioningRequest", objects, args.output, single=False, namespaced=namespace is None))
        return
    from admitflow.messages import ProvisioningRequestCondition

    if args.type not in PROVISIONING_REQUEST_CONDITIONS:
        raise CLIError(f'unknown condition type "{args.type}": must be one of {", ".join(PROVISIONING_REQUEST_CONDITIONS)}')
    if args.status not in ("True", "False", "Unknown"):
        raise CLIError(f'--status "{args.status}": must be True, False or Unknown')
    details = {}
    for item in args.detail:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CLIError(f"--detail {item!r}: give KEY=VALUE")
        details[key] = value
    namespace, name = ids.split_key(_key("ProvisioningRequest", args.request, args.kueue_namespace))
    client = await _client(args)
    request = ProvisioningRequestCondition(
        namespace=namespace, name=name, type=args.type, status=args.status, reason=args.reason or SET_BY_HAND,
        message=args.message, details=details,
    )
    stored = await client.set_provisioning_request_condition(request)
    c = stored.condition(args.type)
    print(f"{qualified('ProvisioningRequest', f'{namespace}/{name}')} condition {c.type}={c.status} ({c.reason})")


async def cmd_completion(args: argparse.Namespace) -> None:
    print(completion_script(_parser(), args.shell, short_names()), end="")


async def cmd_worker(args: argparse.Namespace) -> None:
    from admitflow.worker.logging import configure
    from admitflow.worker.main import (
        build_worker,
        metrics_runtime,
        provisioning_backend,
        run_until_signalled,
        sdk_options,
        tune_collector,
    )

    configure(args.log_level)
    client = await _client(args, metrics_runtime(args.metrics_port))
    try:
        backend = provisioning_backend(args.provisioning_backend, client.client, args.kubeconfig, args.context)
    except Exception as err:
        raise CLIError(f"--provisioning-backend {args.provisioning_backend}: {err}") from None
    from admitflow import registration

    missing = await registration.missing_search_attributes(client.client)
    if missing:
        raise CLIError(
            f"search attributes {', '.join(missing)} are not registered in namespace {client.client.namespace}: "
            "run `admitflow setup` first"
        )
    settings = {
        flag.replace("-", "_"): getattr(args, flag.replace("-", "_"))
        for flag, _, _ in WORKER_SETTINGS
        if getattr(args, flag.replace("-", "_")) is not None
    }
    tune_collector()
    await run_until_signalled(build_worker(client.client, client.task_queue, provisioning=backend, **sdk_options(**settings)))


async def cmd_setup(args: argparse.Namespace) -> None:
    from admitflow import registration
    from admitflow.worker.connection import from_arguments

    conn = from_arguments(args)
    client = (await _client(args, check_namespace=False)).client  # it creates a namespace that is missing
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
    from admitflow.worker.main import build_worker, metrics_runtime, tune_collector

    from admitflow import controller as sdk
    from admitflow import gauges
    from admitflow.devserver import REPORTED_PROBLEMS, DevServer, DevServerError

    manifests = _load(args.filename) if args.filename else []
    try:
        controllers = [c for path in args.controller for c in sdk.load(path)]
    except Exception as err:
        raise CLIError(f"--controller: {err}") from None
    configure("WARNING")
    server = DevServer(port=args.port, ui_port=args.ui_port, db=args.db, dynamic_config=REPORTED_PROBLEMS)
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
        # One port serves everything: the SDK's metrics (the worker's counters and histograms) on a
        # loopback port of their own, read again with the gauges at each scrape of --metrics-port.
        sdk_port = gauges.loopback_port() if args.metrics_port is not None else None
        client = await _client(args, metrics_runtime(sdk_port))
        sdk_metrics = f"http://127.0.0.1:{sdk_port}/metrics" if sdk_port is not None else None
        tune_collector()
        async with (
            build_worker(client.client, client.task_queue),
            gauges.serving(client.client, args.metrics_port, also=sdk_metrics),
        ):
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


async def cmd_exporter(args: argparse.Namespace) -> None:
    from admitflow import gauges
    from admitflow.worker.logging import configure

    configure(args.log_level)
    client = await _client(args)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with gauges.serving(client.client, args.metrics_port):
        print(f"admitflow gauges on http://0.0.0.0:{args.metrics_port}/metrics (namespace {client.client.namespace}); "
              "Ctrl-C stops", flush=True)
        await stop.wait()


async def cmd_codec_server(args: argparse.Namespace) -> None:
    from admitflow.codec import EncryptionConfigError, data_converter, encryption_codec
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
    from admitflow.devserver import die_with_parent

    if not Path(path).is_file():
        raise CLIError(f"--runner: {path}: no such file")
    logs.mkdir(parents=True, exist_ok=True)
    with (logs / "runner.log").open("a") as log:
        return subprocess.Popen(
            [sys.executable, path, "--address", address, "--namespace", namespace, "--logs", str(logs / "runs")],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, preexec_fn=die_with_parent,
        )


# --- shell completion -------------------------------------------------------------------------------

# Flags whose value is a path: completed with file names.
PATH_FLAGS = ("-f", "--filename", "--controller", "--runner", "--db", "--tls-cert-path", "--tls-key-path", "--tls-ca-path")


def _commands(parser: argparse.ArgumentParser, prefix: str = "") -> dict[str, argparse.ArgumentParser]:
    """Every command and nested command ("provreq list") with its parser."""
    out: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out[f"{prefix}{name}"] = sub
                out.update(_commands(sub, f"{prefix}{name} "))
    return out


def _words(parser: argparse.ArgumentParser, kinds: Sequence[str]) -> list[str]:
    """What the first positional argument of a command may be: its subcommands, its choices, or a kind."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return list(action.choices)
        if not action.option_strings:
            if action.choices:
                return list(action.choices)
            return list(kinds) if action.dest == "kind" else []
    return []


def _explained(kinds: Sequence[str]) -> list[str]:
    """The kind names `explain` takes (workloads and ClusterQueues), of those completed."""
    from admitflow.kinds import KIND_NAMES

    return [k for k in kinds if any(k in KIND_NAMES[kind] for kind in EXPLAINED_KINDS)]


def completion_script(parser: argparse.ArgumentParser, shell: str, kinds: Sequence[str]) -> str:
    """A bash completion function generated from the parser: commands, their flags, the values of
    flags with choices (-o, --dry-run), kinds for KIND arguments and file names for files. zsh runs
    the same function through its bashcompinit."""
    commands = _commands(parser)
    value_flags: set[str] = set()
    flag_cases, choice_cases, word_cases = [], [], []
    for path, sub in commands.items():
        flags = [s for a in sub._actions for s in a.option_strings]
        flag_cases.append(f'        "{path}") words="{" ".join(sorted(flags))}" ;;')
        words = _words(sub, [*kinds, "pending-workloads"] if path == "get" else _explained(kinds) if path == "explain" else kinds)
        if words:
            word_cases.append(f'        "{path}") words="{" ".join(words)}" ;;')
        for a in sub._actions:
            if a.option_strings and a.nargs != 0:
                value_flags.update(a.option_strings)
                if a.choices:
                    pattern = "|".join(f"{path}:{s}" for s in a.option_strings)
                    choice_cases.append(f'        "{pattern.replace("|", chr(34) + "|" + chr(34))}") words="{" ".join(a.choices)}" ;;')
    top = [s for a in parser._actions for s in a.option_strings]
    nested = sorted({p.split(" ")[0] for p in commands if " " in p})
    script = f"""# admitflow completion for {shell}, generated by `admitflow completion {shell}` from its parser.
_admitflow() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="${{COMP_WORDS[COMP_CWORD-1]}}"
    local cmd="" positional=0 skip=0 i w words=""
    if [[ "$prev" == "=" && $COMP_CWORD -ge 2 ]]; then prev="${{COMP_WORDS[COMP_CWORD-2]}}"; fi
    for ((i = 1; i < COMP_CWORD; i++)); do
        w="${{COMP_WORDS[i]}}"
        if [[ "$w" == "=" ]]; then skip=1; continue; fi  # --flag=value: bash splits it at the =
        if ((skip)); then skip=0; continue; fi
        case "$w" in
            {"|".join(sorted(value_flags))}) skip=1; continue ;;
            -*) continue ;;
        esac
        if [[ -z "$cmd" ]]; then cmd="$w"
        elif [[ $positional -eq 0 && " {" ".join(nested)} " == *" $cmd "* ]]; then cmd="$cmd $w"
        else positional=$((positional + 1)); fi
    done
    case "$prev" in
        {"|".join(PATH_FLAGS)}) COMPREPLY=($(compgen -f -- "$cur")); return 0 ;;
    esac
    case "$cmd:$prev" in
{chr(10).join(choice_cases)}
    esac
    if [[ -n "$words" ]]; then COMPREPLY=($(compgen -W "$words" -- "$cur")); return 0; fi
    case "$prev" in
        {"|".join(sorted(value_flags - set(PATH_FLAGS)))}) return 0 ;;
    esac
    if [[ -z "$cmd" ]]; then
        if [[ "$cur" == -* ]]; then words="{" ".join(top)}"; else words="{" ".join(_words(parser, kinds))}"; fi
    elif [[ "$cur" == -* ]]; then
        case "$cmd" in
{chr(10).join(flag_cases)}
        esac
    elif [[ $positional -eq 0 ]]; then
        case "$cmd" in
{chr(10).join(word_cases)}
        esac
    fi
    COMPREPLY=($(compgen -W "$words" -- "$cur"))
}}
"""
    if shell == "zsh":
        return "autoload -U +X bashcompinit && bashcompinit\n" + script + "complete -o default -F _admitflow admitflow\n"
    return script + "complete -o default -F _admitflow admitflow\n"


# --- errors ---------------------------------------------------------------------------------------------


def _rpc_failure(err, target: str) -> tuple[str, int]:
    from temporalio.service import RPCStatusCode as S

    message = _first_line(err.message).rstrip(".") or err.status.name
    where = f"Temporal at {target}"
    if err.status == S.UNAVAILABLE:
        return f"cannot reach {where}: {message}; is the server running there? (--address, TEMPORAL_ADDRESS)", EXIT_ERROR
    if err.status in (S.PERMISSION_DENIED, S.UNAUTHENTICATED):
        return (
            f"permission denied by {where}: {message}; check the API key (--api-key, TEMPORAL_API_KEY) or client "
            "certificate, and what it may do in this namespace",
            EXIT_ERROR,
        )
    if err.status in (S.DEADLINE_EXCEEDED, S.CANCELLED):
        return f"{where} did not answer in time: {message}; try again, or allow more with --request-timeout", EXIT_ERROR
    if err.status == S.RESOURCE_EXHAUSTED:
        return f"{where} is limiting requests: {message}; try again in a moment", EXIT_ERROR
    if err.status == S.NOT_FOUND and message.lower().startswith("namespace"):
        namespace = target.split("(namespace ", 1)[-1].split(",")[0].rstrip(")")
        return _unknown_namespace(namespace, target), EXIT_ERROR
    return f"{where} refused the request ({err.status.name}): {message}", EXIT_ERROR


def explain(err: BaseException, args: argparse.Namespace) -> tuple[str, int]:
    """Any failure as one line (without `error: `) and its exit status. A type is looked up only
    where its module is already loaded: an error cannot come from a module that never ran, and
    importing one here would cost a bad argument the start-up time of the Temporal SDK."""
    if isinstance(err, CLIError):
        return str(err), err.code
    loaded = sys.modules
    target = getattr(args, "target", None) or "the Temporal server"
    client = loaded.get("admitflow.client")
    if client is not None and isinstance(err, client.NotAnswering):
        message = str(err)
        if not any(hint in message for hint in ("admitflow ", "worker", "--request-timeout")):
            # A workflow that did not answer in time: say what to look at.
            queue = ids.task_queue(getattr(args, "task_queue", None))
            message += f'; is a worker polling task queue "{queue}"? (admitflow worker); or allow more with --request-timeout'
        return message, err.code
    if client is not None and isinstance(err, client.AdmitflowError):
        return str(err), getattr(err, "code", EXIT_BAD_INPUT)
    codec = loaded.get("admitflow.codec")
    if codec is not None and isinstance(err, (codec.PayloadDecodeError, codec.EncryptionConfigError)):
        return str(err), getattr(err, "code", EXIT_BAD_INPUT)
    service = loaded.get("temporalio.service")
    if service is not None and isinstance(err, service.RPCError):
        return _rpc_failure(err, target)
    temporal = loaded.get("temporalio.client")
    if temporal is not None:
        if isinstance(err, temporal.WorkflowUpdateRPCTimeoutOrCancelledError):
            return (
                f"a workflow did not take the request in time (Temporal at {target}): is a worker polling its task "
                "queue? (admitflow worker); allow more with --request-timeout",
                EXIT_ERROR,
            )
        if isinstance(err, temporal.WorkflowQueryRejectedError):
            return f"a workflow that no longer runs refused the query (Temporal at {target})", EXIT_ERROR
        if isinstance(err, (temporal.WorkflowQueryFailedError, temporal.WorkflowUpdateFailedError)):
            cause = getattr(err, "cause", None) or err
            return f"a workflow refused the request: {_first_line(str(cause))}", EXIT_ERROR
    if isinstance(err, TimeoutError):
        return f"Temporal at {target} did not answer in time; try again, or allow more with --request-timeout", EXIT_ERROR
    if isinstance(err, OSError):
        return f"{err.strerror or err}" + (f": {err.filename}" if err.filename else ""), EXIT_ERROR
    return (
        f"unexpected {type(err).__name__}: {_first_line(str(err))} (a bug in admitflow: ADMITFLOW_DEBUG=1 "
        "prints where; please report it)",
        EXIT_ERROR,
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
    "ungate": cmd_ungate,
    "explain": cmd_explain,
    "provreq": cmd_provreq,
    "worker": cmd_worker,
    "setup": cmd_setup,
    "dev": cmd_dev,
    "codec-server": cmd_codec_server,
    "completion": cmd_completion,
    "exporter": cmd_exporter,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        asyncio.run(COMMANDS[args.command](args))
    except KeyboardInterrupt:
        return 130
    except Exception as err:
        message, code = explain(err, args)
        if message:
            print(f"error: {message}", file=sys.stderr)
        if os.environ.get("ADMITFLOW_DEBUG"):
            import traceback

            traceback.print_exc()
        return code
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
