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

The command is a package: `parser` holds the argparse tree and every help text, `errors` the one-line
errors and exit codes, `connection` the Temporal client from the connection flags, `names` the
objects that positional arguments name; each other module holds a group of commands, and COMMANDS
below says which function runs each command.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Sequence

from admitflow.cli import completion, deployment, errors, explain, manifests, provreq, reads, reports, servers, workloads
from admitflow.cli.parser import build_parser

COMMANDS = {
    "apply": manifests.cmd_apply,
    "create": manifests.cmd_create,
    "get": reads.cmd_get,
    "describe": reads.cmd_describe,
    "finish": reports.cmd_finish,
    "verdict": reports.cmd_verdict,
    "pods-ready": reports.cmd_pods_ready,
    "activate": workloads.cmd_activate,
    "deactivate": workloads.cmd_activate,
    "admissioncheck": reports.cmd_admissioncheck,
    "delete": manifests.cmd_delete,
    "reset": workloads.cmd_reset,
    "release": workloads.cmd_release,
    "ungate": workloads.cmd_ungate,
    "explain": explain.cmd_explain,
    "provreq": provreq.cmd_provreq,
    "deployment": deployment.cmd_deployment,
    "worker": servers.cmd_worker,
    "kube-runner": servers.cmd_kube_runner,
    "setup": servers.cmd_setup,
    "dev": servers.cmd_dev,
    "codec-server": servers.cmd_codec_server,
    "completion": completion.cmd_completion,
    "exporter": servers.cmd_exporter,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        asyncio.run(COMMANDS[args.command](args))
    except KeyboardInterrupt:
        return 130
    except Exception as err:
        message, code = errors.explain(err, args)
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
