"""The objects a command's positional arguments name: `KIND NAME`, `KIND/NAME`, `NS/NAME`, with
-n/--kueue-namespace, as kubectl reads them."""

from __future__ import annotations

import argparse

from admitflow import ids, kinds
from admitflow.cli.errors import CLIError
from admitflow.kinds import NAMESPACED, split_kind


def kind_of(name: str) -> str:
    """The kind a name given on the command line stands for (`cq`, `workloads`, `clusterqueues.kueue.x-k8s.io`)."""
    try:
        return kinds.kind_of(name)
    except kinds.UnknownKind as err:
        raise CLIError(str(err)) from None


def key(kind: str, name: str, namespace: str | None = None) -> str:
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


def target(args: argparse.Namespace, default_kind: str | None = None) -> tuple[str, str]:
    """The kind and key the positional arguments name: `KIND NAME`, `KIND/NAME`, with -n."""
    ref, inline = split_kind(args.kind)
    if inline is not None and args.name is not None:
        raise CLIError(
            f"there is no need to give a name as a separate argument when it is given as KIND/NAME ({args.kind})"
        )
    name = inline if inline is not None else args.name
    kind = kind_of(ref)
    if default_kind is not None and kind != default_kind:
        raise CLIError(f"{args.command} takes workloads only: admitflow {args.command} workload NAMESPACE/NAME")
    if not name:
        raise CLIError(f"{args.command} needs a name: admitflow {args.command} {ref} NAME (or {ref}/NAME)")
    return kind, key(kind, name, getattr(args, "kueue_namespace", None))


def workload_key(args: argparse.Namespace) -> str:
    """The key of the workload a command's `workload` argument names, with -n."""
    return key("Workload", args.workload, args.kueue_namespace)
