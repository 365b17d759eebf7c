"""The argparse tree of the `admitflow` command: every command, its flags and its help. Built from
light modules only (admitflow.kinds, admitflow.ids, the connection flags), so that `--help` and a
bad argument cost no import of the Temporal SDK, pydantic or yaml."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path

from admitflow import ids
from admitflow.cli.errors import OneLineErrors
from admitflow.kinds import PROVISIONING_REQUEST_CONDITIONS, short_names
from admitflow.worker import connection_flags


# Defaults shown in --help, kept equal to the modules that own them by tests/unit/test_cli_start.py
# (importing those modules would cost the start-up time this module saves).
DEFAULT_DB = Path(".admitflow/temporal.db")  # admitflow.devserver.DEFAULT_DB
SET_BY_HAND = "SetByHand"  # admitflow.simulation.autoscaler.SET_BY_HAND
INT32_MAX = 2**31 - 1  # admitflow.api.bounds.INT32_MAX: what Kueue holds in an int32 (verdicts' attempts)
KUBE_RUNNER_QUEUE = "kubernetes"  # admitflow.activities.jobs.kube_runner.DEFAULT_TASK_QUEUE
KUBE_RUNNER_RESYNC = 30  # admitflow.activities.jobs.kube_runner.RESYNC_SECONDS
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


def _at_least(minimum: int, maximum: int | None = None):
    """A whole number flag, refused at parse time (one line, status 2) outside its bounds: a value
    a model would refuse only after connecting must not get that far."""
    bounds = f"of at least {minimum}" if maximum is None else f"from {minimum} to {maximum}"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < minimum or (maximum is not None and value > maximum):
            raise argparse.ArgumentTypeError(f'"{text}": must be a whole number {bounds}')
        return value

    return parse


def _port(env: str | None = None):
    """A TCP port flag (1 to 65535); with `env`, the variable its default comes from, named when
    the bad value is the variable's."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = 0
        if not 0 < value < 65536:
            source = f" (from {env})" if env and os.environ.get(env) == text else ""
            raise argparse.ArgumentTypeError(f'"{text}"{source}: must be a port number from 1 to 65535')
        return value

    return parse


DRY_RUNS = ("none", "client", "server")


def _filename_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-f", "--filename", action="append", required=True, help="a file, a directory, or - for stdin (repeatable)")


def _deployment_name_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--deployment-name", default=os.environ.get("ADMITFLOW_DEPLOYMENT_NAME", "admitflow"),
        help="the engine's Temporal Worker Deployment (ADMITFLOW_DEPLOYMENT_NAME; default admitflow)",
    )


def _deployment_flags(parser: argparse.ArgumentParser) -> None:
    _deployment_name_flag(parser)
    parser.add_argument(
        "--build-id", default=os.environ.get("ADMITFLOW_BUILD_ID") or None,
        help="this build's id in the deployment (ADMITFLOW_BUILD_ID; default: the installed release); a build "
        "whose workflow code changed needs a new one",
    )


def build_parser() -> argparse.ArgumentParser:
    """The `admitflow` command's parser, with every command in the order `--help` lists them."""
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
    dev.add_argument("--port", type=_port(), default=7233, help="gRPC port of the dev server (default 7233)")
    dev.add_argument("--ui-port", type=_port(), default=8233, help="Web UI port (default 8233)")
    dev.add_argument("--db", type=Path, default=DEFAULT_DB, help=f"SQLite database file (default {DEFAULT_DB})")
    dev.add_argument(
        "--server-metrics-port", type=int, metavar="PORT",
        help="serve the Temporal dev server's own Prometheus metrics on this port at /metrics (default: none); "
        "its frontend's service_requests{operation=\"QueryWorkflow\"} counts the queries every client sent",
    )
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
        _deployment_flags(parser)
        parser.add_argument(
            "--metrics-port", type=_port("ADMITFLOW_METRICS_PORT"), default=os.environ.get("ADMITFLOW_METRICS_PORT") or None,
            help="serve Prometheus metrics on this port at /metrics (ADMITFLOW_METRICS_PORT; default: none): "
            "admitflow_* counters and histograms with Kueue's names, and Temporal's; `dev` adds the gauges, "
            "which `admitflow exporter` serves for a deployment",
        )

    kr = sub.add_parser(
        "kube-runner", parents=[conn], help="run a Kubernetes cluster's batch/v1 Jobs as Kueue's job controller does, "
        "with their Workloads in admitflow",
        description="Watch every batch/v1 Job of a cluster and do what Kueue's job reconciler does: submit the Workload "
        "of each Job with the kueue.x-k8s.io/queue-name label (suspending first a Job created unsuspended: there is no "
        "webhook), resume it with its flavors' node labels and tolerations and its checks' podSetUpdates once admitted, "
        "report its pods ready and its end from its status, suspend it and restore its pod template when evicted, "
        "delete the Workload of a deleted Job and make a deleted Workload again. A Temporal worker serving the runner "
        "contract on its own task queue; run one per cluster. Never beside a Kueue that manages the same Jobs: see "
        "docs/runners.md, The Kubernetes runner.",
    )
    kr.add_argument("--kubeconfig", help="kubeconfig file (default: KUBECONFIG, ~/.kube/config, or the pod's service account)")
    kr.add_argument("--context", help="the kubeconfig context to use (kubectl's --context; default: its current-context)")
    kr.add_argument(
        "--runner-queue", default=KUBE_RUNNER_QUEUE, metavar="QUEUE",
        help=f"the runner's task queue, which the Workloads it makes name in admitflow.io/runner and in the label "
        f"admitflow.io/kube-runner: one per cluster, a label value (default {KUBE_RUNNER_QUEUE})",
    )
    kr.add_argument(
        "--managed-namespaces", metavar="SELECTOR",
        help="only the Jobs of the namespaces whose labels match, in kubectl's syntax (Kueue's "
        "managedJobsNamespaceSelector; default: every namespace but kube-system and kueue-system); beside Kueue, "
        "give each its own namespaces, e.g. admitflow.io/managed=true here and the opposite to Kueue",
    )
    kr.add_argument(
        "--resync-seconds", type=_at_least(1), default=KUBE_RUNNER_RESYNC, metavar="N",
        help=f"how often it lists its Workloads, to find a Job deleted while it was down and a Workload deleted while "
        f"it waited (default {KUBE_RUNNER_RESYNC})",
    )
    kr.add_argument("--log-level", default="INFO")

    ex = sub.add_parser(
        "exporter", parents=[conn], help="serve admitflow's gauges (pending, reserving, admitted workloads, status "
        "per ClusterQueue) to Prometheus; run exactly one",
        description="Serve Kueue's per-ClusterQueue gauges under admitflow_ at /metrics: at each scrape it lists the "
        "catalog's ClusterQueues and reads the figures each queue's workflow wrote in its memo (at most 10 s old), "
        "querying no workflow; a deleted ClusterQueue's series end. Workers serve the counters and histograms; one "
        "exporter serves the gauges (`admitflow dev` serves them itself). See docs/metrics.md.",
    )
    ex.add_argument(
        "--metrics-port", type=_port("ADMITFLOW_METRICS_PORT"), default=os.environ.get("ADMITFLOW_METRICS_PORT") or "9464",
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
    cs.add_argument("--port", type=_port(), default=8081, help="port (default 8081)")
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
        "submitted (its workflow started; one naming a WorkloadPriorityClass without a priority gets the class's value), "
        "then each batch/v1 Job kept with the Workload Kueue's job framework makes from it (docs/jobs.md; a Job with "
        "only generateName is refused, as kubectl refuses it: use create). "
        "Objects keep the namespace their manifest gives (default: default).",
    )
    _filename_flag(a)
    a.add_argument("--wait", action="store_true", help="then follow the workloads applied, printing each phase change, "
                   "until each is admitted, finished or waits for a person")
    a.add_argument(
        "--dry-run", nargs="?", const="client", default="none", choices=DRY_RUNS,
        help="print what would happen, each line ending in (dry run), and change nothing. client: the manifests "
        "are checked here against the objects as they stand (the catalog's memo); server: the catalog workflow's "
        "own code answers (a read-only query, a person's one-off look: nothing reaches its history). Either way a Workload is checked as its submission "
        "would be",
    )

    cr = sub.add_parser(
        "create", parents=[conn], help="create objects from manifests (file, directory, or - for stdin), as kubectl create",
        description="Create the objects of the manifests as kubectl create does: every one is new, so one that exists "
        "already is refused (AlreadyExists) and nothing is created. A batch/v1 Job may give metadata.generateName "
        "instead of a name (which apply refuses): it gets the prefix's first 58 characters and 5 random ones. Each Job "
        "is kept with the Workload Kueue's job framework makes from it (docs/jobs.md); a Job without the label "
        "kueue.x-k8s.io/queue-name is refused, as Kueue would leave it alone.",
    )
    _filename_flag(cr)
    cr.add_argument("--dry-run", nargs="?", const="client", default="none", choices=DRY_RUNS,
                    help="print what would be created, each line ending in (dry run), and change nothing")

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
    g_.add_argument("--limit", type=_at_least(0), default=1000, help="pending-workloads: at most this many (default 1000)")
    g_.add_argument("--offset", type=_at_least(0), default=0, help="pending-workloads: skip this many from the head")

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
    v.add_argument("--attempt", type=_at_least(1, INT32_MAX), help="the attempt (retryCount + 1) this verdict is about")
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
    xp.add_argument("name", nargs="?", help="namespace/name of a workload, or of a Job whose Workload it is (or name, in -n's namespace or default); a ClusterQueue's name")
    _kueue_namespace_flags(xp)
    xp.add_argument(
        "-o", "--output", choices=("table", "json", "yaml"), default="table",
        help="table (default): the cause and what says it, or a ClusterQueue's counts by cause; json or yaml: all of it",
    )

    dp = sub.add_parser(
        "deployment", help="the engine's Worker Deployment: its builds, which one is current, what still runs on each",
        description="Each build of the engine worker is a version of a Temporal Worker Deployment, and every workflow "
        "runs on the build that started it until it continues as new onto the current one (docs/operations.md, "
        "Upgrade safely).",
    )
    dp_sub = dp.add_subparsers(dest="deployment_command", required=True, metavar="ACTION")
    dd = dp_sub.add_parser("describe", parents=[conn], help="the deployment's builds, its current one, and the runs pinned to each")
    _deployment_name_flag(dd)
    ds = dp_sub.add_parser(
        "set-current", parents=[conn], help="make a build current: new workflows start on it, running ones move at continue-as-new",
        description="Make BUILD the deployment's current version, once its workers poll, then signal version_changed to "
        "every run pinned to another build, so that each continues as new onto BUILD as soon as it can (a workload "
        "whose runner runs it stays until its run ends). The old build's workers must run until `admitflow deployment "
        "describe` shows it drained.",
    )
    ds.add_argument("build_id", metavar="BUILD", help="the build id its workers poll with (--build-id of admitflow worker)")
    _deployment_name_flag(ds)

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
