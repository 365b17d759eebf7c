"""`apply`, `create` and `delete`: kubectl's verbs on manifests (`-f`), and for delete on a named
object; and how manifests are read and their outcomes printed, which `dev -f` shares."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

from admitflow.cli import names
from admitflow.cli.connection import connect, request_timeout
from admitflow.cli.errors import CLIError, Failed
from admitflow.kinds import qualified


def read_manifests(paths: Sequence[str]):
    """The manifests in these files, directories or - (stdin), or a CLIError naming what is wrong."""
    from admitflow.api import ManifestError, load_manifests

    try:
        return load_manifests(paths, stdin=sys.stdin)
    except ManifestError as err:
        raise CLIError(str(err)) from None
    except OSError as err:
        raise CLIError(f"error: the path \"{err.filename}\" does not exist" if isinstance(err, FileNotFoundError) else str(err)) from None


def print_outcomes(outcomes, dry_run: bool = False) -> None:
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
    manifests = read_manifests(args.filename)
    for m in manifests:
        for warning in m.warnings:
            print(f"Warning: {warning}", file=sys.stderr)
    client = await connect(args)
    outcomes = await client.apply(manifests, dry_run=dry_run, timeout=request_timeout(args))
    print_outcomes(outcomes, dry_run=dry_run is not None)
    keys = await followed(client, outcomes) if args.wait else []
    if args.wait and keys:
        from admitflow.progress import follow

        settled = asyncio.Event()
        following = asyncio.ensure_future(follow(client, keys, settled.set))
        await settled.wait()
        following.cancel()


async def followed(client, outcomes) -> list[str]:
    """The workloads an apply's outcomes lead to: each Workload, and each Job's Workload."""
    keys = []
    for o in outcomes:
        key = o.key if o.kind == "Workload" else await client.job_workload(o.key) if o.kind == "Job" else None
        if key is not None:
            keys.append(key)
    return keys


async def cmd_create(args: argparse.Namespace) -> None:
    dry_run = None if args.dry_run == "none" else args.dry_run
    manifests = read_manifests(args.filename)
    for m in manifests:
        for warning in m.warnings:
            print(f"Warning: {warning}", file=sys.stderr)
    client = await connect(args)
    print_outcomes(await client.create(manifests, dry_run=dry_run, timeout=request_timeout(args)), dry_run=dry_run is not None)


async def cmd_delete(args: argparse.Namespace) -> None:
    if args.filename:
        if args.kind is not None or args.name is not None:
            raise CLIError("give either KIND NAME or -f FILE, not both")
        await delete_files(args)
        return
    if args.kind is None:
        raise CLIError("give what to delete: admitflow delete KIND NAME, KIND/NAME, or -f FILE")
    kind, key = names.target(args)
    client = await connect(args)
    print_outcomes([await client.delete(kind, key)])


async def delete_files(args: argparse.Namespace) -> None:
    """kubectl delete -f: every object the files name, last first (workloads before the queues
    they use), one line each; an object that cannot be deleted gets an error line on stderr and
    the others are still deleted."""
    from admitflow.client import AdmitflowError

    manifests = read_manifests(args.filename)
    client = await connect(args)
    failed = 0
    for m in reversed(manifests):
        try:
            outcome = await client.delete(m.obj.kind, m.obj.key)
        except AdmitflowError as err:
            failed += 1
            name = m.obj.metadata.name if m.obj.metadata is not None else m.obj.key
            print(f"error: {m.source}: document {m.index} ({m.obj.kind} {name}): {err}", file=sys.stderr, flush=True)
            continue
        print_outcomes([outcome])
        sys.stdout.flush()
    if failed:
        raise Failed()
