"""How every admitflow process reaches Temporal: Temporal's standard client configuration
(`temporalio.envconfig`: TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, TEMPORAL_TLS_*,
profiles in the TOML config file), overridden by `--address` and `--namespace`."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from temporalio.client import Client
from temporalio.envconfig import ClientConfigProfile
from temporalio.runtime import Runtime

from admitflow.codec import DATA_CONVERTER

DEFAULT_ADDRESS = "localhost:7233"
DEFAULT_NAMESPACE = "default"


@dataclass(frozen=True)
class Connection:
    address: str | None = None
    namespace: str | None = None
    profile: str | None = None

    def connect_args(self) -> dict[str, Any]:
        args: dict[str, Any] = dict(ClientConfigProfile.load(self.profile).to_client_connect_config())
        if self.address:
            args["target_host"] = self.address
        if self.namespace:
            args["namespace"] = self.namespace
        args.setdefault("target_host", DEFAULT_ADDRESS)
        args.setdefault("namespace", DEFAULT_NAMESPACE)
        return args

    @property
    def target(self) -> str:
        a = self.connect_args()
        return f"{a['target_host']} (namespace {a['namespace']})"

    async def connect(self, runtime: Runtime | None = None) -> Client:
        kwargs: dict[str, Any] = {"data_converter": DATA_CONVERTER}
        if runtime is not None:
            kwargs["runtime"] = runtime
        return await Client.connect(**self.connect_args(), **kwargs)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The connection flags of a standalone program (a check controller, a runner)."""
    parser.add_argument("--address", help="Temporal frontend host:port (default: TEMPORAL_ADDRESS or localhost:7233)")
    parser.add_argument("--namespace", help="Temporal namespace (default: TEMPORAL_NAMESPACE or default)")
    parser.add_argument("--profile", help="profile in Temporal's TOML client config file (TEMPORAL_PROFILE)")


def from_arguments(args: argparse.Namespace) -> Connection:
    return Connection(address=args.address, namespace=args.namespace, profile=args.profile)
