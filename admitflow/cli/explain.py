"""`explain`: why a workload is not admitted now (named by its own name or by its Job's), or a
ClusterQueue's waiting workloads by cause."""

from __future__ import annotations

import argparse
import json

from admitflow.cli import names
from admitflow.cli.connection import connect
from admitflow.cli.errors import CLIError

# The kinds explain takes (and shell completion offers it).
EXPLAINED_KINDS = ("Workload", "ClusterQueue")


async def cmd_explain(args: argparse.Namespace) -> None:
    from admitflow.printing import cause_table, explanation_lines

    kind, key = names.target(args)
    if kind not in EXPLAINED_KINDS:
        raise CLIError("explain takes a workload or a clusterqueue: admitflow explain workload NAMESPACE/NAME, "
                       "admitflow explain clusterqueue NAME")
    client = await connect(args)
    if kind == "Workload":
        key = await workload_or_job(client, key)
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


async def workload_or_job(client, key: str) -> str:
    """The workload `key` names: a workload of that name, else the Workload of the stored Job of
    that name (`admitflow explain workload sample-job` explains the Job's Workload)."""
    if await client.workload(key, missing_ok=True) is not None:
        return key
    return await client.job_workload(key) or key
