"""The connection flags every admitflow program takes, named as the `temporal` CLI names them. Kept
apart from admitflow.worker.connection (which uses them) so that building a parser loads nothing
but argparse: `admitflow --help` starts without the Temporal SDK."""

from __future__ import annotations

import argparse

DEFAULT_ADDRESS = "localhost:7233"
DEFAULT_NAMESPACE = "default"

GROUP_TITLE = "connection (Temporal's client configuration; flags win over TEMPORAL_* variables)"


def add_arguments(parser: argparse.ArgumentParser) -> argparse._ArgumentGroup:
    """The connection flags, as one argument group: used by the `admitflow` command and by every
    standalone program (check controllers, runners). Returns the group, so a program can add its own."""
    g = parser.add_argument_group(GROUP_TITLE)
    g.add_argument("--address", help=f"Temporal frontend host:port (TEMPORAL_ADDRESS; default {DEFAULT_ADDRESS})")
    g.add_argument("--namespace", help=f"Temporal namespace (TEMPORAL_NAMESPACE; default {DEFAULT_NAMESPACE})")
    g.add_argument("--profile", help="profile in Temporal's TOML client config file (TEMPORAL_PROFILE)")
    g.add_argument(
        "--api-key", help="API key, e.g. for Temporal Cloud; turns TLS on (TEMPORAL_API_KEY, which keeps it out of ps)"
    )
    g.add_argument(
        "--tls", action="store_true", default=None,
        help="connect with TLS; implied by an API key or any --tls-* setting (TEMPORAL_TLS)",
    )
    g.add_argument("--tls-cert-path", metavar="PATH", help="client certificate (PEM) for mTLS (TEMPORAL_TLS_CLIENT_CERT_PATH)")
    g.add_argument("--tls-key-path", metavar="PATH", help="its private key (PEM) (TEMPORAL_TLS_CLIENT_KEY_PATH)")
    g.add_argument(
        "--tls-ca-path", metavar="PATH",
        help="CA certificate(s) (PEM) the server's certificate must chain to; default: the system's roots "
        "(TEMPORAL_TLS_SERVER_CA_CERT_PATH)",
    )
    g.add_argument(
        "--tls-server-name", metavar="NAME",
        help="name to expect in the server's certificate (and send as SNI) instead of the address's host "
        "(TEMPORAL_TLS_SERVER_NAME)",
    )
    return g
