"""`provreq list` and `provreq set-condition`: the simulated cluster autoscaler's ProvisioningRequests."""

from __future__ import annotations

import argparse
import sys

from admitflow import ids
from admitflow.cli import names
from admitflow.cli.connection import connect
from admitflow.cli.errors import CLIError
from admitflow.cli.parser import SET_BY_HAND
from admitflow.kinds import PROVISIONING_REQUEST_CONDITIONS, qualified


async def cmd_provreq(args: argparse.Namespace) -> None:
    if args.provreq_command == "list":
        from admitflow.printing import no_resources, render

        client = await connect(args)
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
    namespace, name = ids.split_key(names.key("ProvisioningRequest", args.request, args.kueue_namespace))
    client = await connect(args)
    request = ProvisioningRequestCondition(
        namespace=namespace, name=name, type=args.type, status=args.status, reason=args.reason or SET_BY_HAND,
        message=args.message, details=details,
    )
    stored = await client.set_provisioning_request_condition(request)
    c = stored.condition(args.type)
    print(f"{qualified('ProvisioningRequest', f'{namespace}/{name}')} condition {c.type}={c.status} ({c.reason})")
