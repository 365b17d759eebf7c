"""`admitflow deployment describe | set-current`: the engine's Worker Deployment (admitflow.versioning)."""

from __future__ import annotations

import argparse

from admitflow.cli.connection import connect
from admitflow.cli.errors import CLIError


async def cmd_deployment(args: argparse.Namespace) -> None:
    from admitflow import versioning

    client = (await connect(args)).client
    if args.deployment_command == "describe":
        found = await versioning.describe(client, args.deployment_name)
        if found is None:
            raise CLIError(f'deployment "{args.deployment_name}" not found: no versioned worker of it has polled yet')
        print(f"Deployment {found.name}: current build {found.current or '(none)'}")
        rows = [("BUILD", "STATUS", "PINNED RUNS")] + [(v.build_id, v.status, str(v.pinned)) for v in found.versions]
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        for r in rows:
            print("   ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip())
        return
    try:
        version = versioning.deployment_version(args.deployment_name, args.build_id)
        woken = await versioning.set_current(client, version)
    except versioning.VersioningError as err:
        raise CLIError(str(err)) from None
    print(f"build {version.build_id} of deployment {version.deployment_name} is current; "
          f"{woken} run(s) pinned to other builds told to move at their next continue-as-new")
