"""What a person does to one workload: `activate`, `deactivate`, `ungate`, and for a wedged one
`reset` and `release` (docs/operations.md, A wedged workload)."""

from __future__ import annotations

import argparse

from admitflow.cli import names
from admitflow.cli.connection import connect
from admitflow.cli.errors import CLIError
from admitflow.kinds import qualified, split_kind


async def cmd_activate(args: argparse.Namespace) -> None:
    key = names.workload_key(args)
    client = await connect(args)
    await (client.activate(key) if args.command == "activate" else client.deactivate(key))
    print(f"{qualified('Workload', key)} {args.command}d")


async def cmd_ungate(args: argparse.Namespace) -> None:
    _, inline = split_kind(args.kind)
    rest = list(args.rest)
    args.name = rest.pop(0) if inline is None and rest else None
    _, key = names.target(args, default_kind="Workload")
    if rest and args.all:
        raise CLIError("give the gates to remove or --all, not both")
    if not rest and not args.all:
        raise CLIError(f"name the gates to remove, or --all: admitflow ungate workload {key} GATE [GATE ...]")
    client = await connect(args)
    left = await client.ungate(key, rest, all=args.all)
    removed = "every gate" if args.all else ", ".join(rest)
    after = f"still gated by {', '.join(left)}" if left else "no gates remain: it enters its queue"
    print(f"{qualified('Workload', key)} ungated ({removed} removed); {after}")


async def cmd_reset(args: argparse.Namespace) -> None:
    from admitflow.client import NotAnswering

    _, key = names.target(args, default_kind="Workload")
    client = await connect(args)
    trouble, run_id, again = await client.reset(key, args.reason)
    _, to = trouble.reset_point()
    print(f"{qualified('Workload', key)} reset to {to}: new run {run_id}")
    if again is not None:
        raise NotAnswering(
            f'workloads "{key}" was reset, but {again.summary()}: the worker still has the fault; '
            "deploy a fix (or roll back), then reset again"
        )


async def cmd_release(args: argparse.Namespace) -> None:
    _, key = names.target(args, default_kind="Workload")
    client = await connect(args)
    cq, outcome = await client.release(key, force=args.force, cluster_queue=args.clusterqueue)
    name = qualified("Workload", key)
    if outcome.released == "quota":
        usage = ",".join(f"{r}={q}" for r, q in outcome.usage.items())
        print(f"{name} quota released in ClusterQueue {cq} ({usage})")
    elif outcome.released == "place":
        print(f"{name} taken out of ClusterQueue {cq}'s queue")
    else:
        print(f"{name} holds nothing in ClusterQueue {cq} (unchanged)")
