"""What a workload's runner or an AdmissionCheck's controller reports, sent by hand: `finish`,
`pods-ready`, `verdict`, `admissioncheck`."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

from admitflow.cli import names
from admitflow.cli.connection import connect
from admitflow.cli.errors import CLIError
from admitflow.kinds import qualified


async def cmd_finish(args: argparse.Namespace) -> None:
    key = names.workload_key(args)
    client = await connect(args)
    await client.finish(key, succeeded=not args.failed, message=args.message)
    print(f"{qualified('Workload', key)} finished")


async def cmd_pods_ready(args: argparse.Namespace) -> None:
    from admitflow.admission import pods_ready

    key = names.workload_key(args)
    try:
        pods_ready.parse({"ready": not args.not_ready, "reason": args.reason})  # refused before connecting
    except pods_ready.PodsReadyError as err:
        raise CLIError(str(err)) from None
    client = await connect(args)
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
    from admitflow.api.bounds import INT32_MAX
    from admitflow.api.duration import parse_duration
    from admitflow.printing import table

    delay = None
    if args.requeue_after is not None:
        try:
            delay = int(parse_duration(args.requeue_after).total_seconds())
        except ValueError as err:
            raise CLIError(f"--requeue-after: {err}") from None
        if not 0 <= delay <= INT32_MAX:
            raise CLIError(f"--requeue-after {args.requeue_after}: must be from 0s to {INT32_MAX}s (about 68 years)")
    updates = pod_set_updates(args.pod_set_update)
    key = names.workload_key(args)
    # Built before connecting; what the model bounds, the parser and the lines above bound already.
    verdict = Verdict(
        name=args.check,
        state=args.state,
        message=args.message,
        requeue_after_seconds=delay,
        pod_set_updates=updates,
        attempt=args.attempt,
    )
    client = await connect(args)
    status = await client.verdict(key, verdict)
    rows = [[c.name, c.state, str(c.retry_count or 0), c.message] for c in status.admission_checks or ()]
    print(table(["CHECK", "STATE", "RETRIES", "MESSAGE"], rows))


async def cmd_admissioncheck(args: argparse.Namespace) -> None:
    client = await connect(args)
    changed = await client.set_admission_check_active(args.name, active=args.action == "activate")
    state = "active" if args.action == "activate" else "inactive"
    print(f"{qualified('AdmissionCheck', args.name)} {state}" + ("" if changed else " (unchanged)"))
