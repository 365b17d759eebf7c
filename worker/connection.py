"""How every admitflow process reaches Temporal: Temporal's standard client configuration
(`temporalio.envconfig`: TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, TEMPORAL_TLS_*,
profiles in the TOML config file), overridden by flags named as the `temporal` CLI names them
(`--address`, `--namespace`, `--api-key`, `--tls`, `--tls-cert-path`, `--tls-key-path`,
`--tls-ca-path`, `--tls-server-name`). Payloads go through `admitflow.codec.data_converter()`,
which encrypts them when ADMITFLOW_ENCRYPTION_KEY is set.

As in Temporal's configuration, any TLS setting or an API key turns TLS on (an API key alone: TLS
with the system's root certificates, as Temporal Cloud needs); `TEMPORAL_TLS=false` turns it off.
Certificates and keys are read and checked before connecting, so a wrong path or a key that is
not the certificate's is one line naming the flag or variable it came from (ConnectionConfigError).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.envconfig import ClientConfigProfile, ClientConfigTLS
from temporalio.runtime import Runtime

from admitflow.codec import EncryptionConfigError, data_converter

from admitflow.worker import connection_flags
from admitflow.worker.connection_flags import DEFAULT_ADDRESS, DEFAULT_NAMESPACE

# The flags themselves live apart, so that building a parser imports nothing heavy.
add_arguments = connection_flags.add_arguments

# (field of ClientConfigTLS, flag, environment variables that can set it)
_TLS_SOURCES = {
    "client_cert": ("--tls-cert-path", "TEMPORAL_TLS_CLIENT_CERT_PATH", "TEMPORAL_TLS_CLIENT_CERT_DATA"),
    "client_private_key": ("--tls-key-path", "TEMPORAL_TLS_CLIENT_KEY_PATH", "TEMPORAL_TLS_CLIENT_KEY_DATA"),
    "server_root_ca_cert": ("--tls-ca-path", "TEMPORAL_TLS_SERVER_CA_CERT_PATH", "TEMPORAL_TLS_SERVER_CA_CERT_DATA"),
}


class ConnectionConfigError(ValueError):
    """The connection settings cannot be used; the message is one line naming where they came from."""


@dataclass(frozen=True)
class Connection:
    address: str | None = None
    namespace: str | None = None
    profile: str | None = None
    api_key: str | None = None
    tls: bool | None = None
    tls_cert_path: str | None = None
    tls_key_path: str | None = None
    tls_ca_path: str | None = None
    tls_server_name: str | None = None

    def client_profile(self, environ: Mapping[str, str] | None = None) -> ClientConfigProfile:
        """Temporal's client configuration for this process with the flags applied and every
        certificate and key read and checked."""
        env = os.environ if environ is None else environ
        try:
            prof = ClientConfigProfile.load(self.profile, override_env_vars=dict(env))
        except Exception as err:  # the bridge's ConfigError: a bad TOML file, an unknown profile, PATH and DATA both set
            raise ConnectionConfigError(f"Temporal client configuration: {_first_line(err)}") from None
        if _truthy(env.get("TEMPORAL_TLS_DISABLE_HOST_VERIFICATION")):
            raise ConnectionConfigError(
                "TEMPORAL_TLS_DISABLE_HOST_VERIFICATION is not supported by the Temporal Python SDK: give the server's "
                "CA with --tls-ca-path and the name in its certificate with --tls-server-name"
            )
        flags = {
            "client_cert": self.tls_cert_path,
            "client_private_key": self.tls_key_path,
            "server_root_ca_cert": self.tls_ca_path,
        }
        tls = prof.tls
        if self.tls or self.tls_server_name or any(flags.values()):
            tls = tls or ClientConfigTLS()
            changes: dict[str, Any] = {f: Path(v) for f, v in flags.items() if v}
            if self.tls:
                changes["disabled"] = False
            if self.tls_server_name:
                changes["server_name"] = self.tls_server_name
            tls = dataclasses.replace(tls, **changes)
        if tls is not None and not tls.disabled:
            tls = self._checked_tls(tls, env)
        return dataclasses.replace(prof, tls=tls, api_key=self.api_key or prof.api_key)

    def connect_args(self, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
        args: dict[str, Any] = dict(self.client_profile(environ).to_client_connect_config())
        if self.address:
            args["target_host"] = self.address
        if self.namespace:
            args["namespace"] = self.namespace
        args.setdefault("target_host", DEFAULT_ADDRESS)
        args.setdefault("namespace", DEFAULT_NAMESPACE)
        return args

    def describe(self, environ: Mapping[str, str] | None = None) -> str:
        """`host:port (namespace ns, mTLS)`, for messages; ConnectionConfigError if unusable."""
        a = self.connect_args(environ)
        tls = a.get("tls")
        security = []
        if tls:
            security.append("mTLS" if getattr(tls, "client_cert", None) else "TLS")
        if a.get("api_key"):
            security.append("API key")
        return f"{a['target_host']} (namespace {a['namespace']}{''.join(', ' + s for s in security)})"

    @property
    def target(self) -> str:
        return self.describe()

    async def connect(self, runtime: Runtime | None = None, environ: Mapping[str, str] | None = None) -> Client:
        """A client with admitflow's data converter. ConnectionConfigError (or the codec's
        EncryptionConfigError) before any network traffic if the settings are unusable."""
        args = self.connect_args(environ)
        kwargs: dict[str, Any] = {"data_converter": data_converter(environ)}
        if runtime is not None:
            kwargs["runtime"] = runtime
        return await Client.connect(**args, **kwargs)

    def _checked_tls(self, tls: ClientConfigTLS, env: Mapping[str, str]) -> ClientConfigTLS:
        origin = {f: self._origin(f, getattr(tls, f), env) for f in _TLS_SOURCES}
        data = {f: _read(getattr(tls, f), origin[f]) for f in _TLS_SOURCES}
        cert, key, ca = data["client_cert"], data["client_private_key"], data["server_root_ca_cert"]
        if (cert is None) != (key is None):
            have, missing = ("client_cert", "client_private_key") if key is None else ("client_private_key", "client_cert")
            raise ConnectionConfigError(
                f"{origin[have]} is set but no {'client key' if key is None else 'client certificate'}: mTLS needs both "
                f"({_TLS_SOURCES[missing][0]} or {_TLS_SOURCES[missing][1]})"
            )
        if ca is not None:
            _certificates(ca, origin["server_root_ca_cert"], "CA certificate")
        if cert is not None and key is not None:
            _check_pair(cert, key, origin["client_cert"], origin["client_private_key"])
        return dataclasses.replace(
            tls, client_cert=cert, client_private_key=key, server_root_ca_cert=ca,
        )

    def _origin(self, field: str, source: object, env: Mapping[str, str]) -> str:
        flag, path_var, data_var = _TLS_SOURCES[field]
        flag_value = {"client_cert": self.tls_cert_path, "client_private_key": self.tls_key_path,
                      "server_root_ca_cert": self.tls_ca_path}[field]
        where = f"{flag} {flag_value}" if flag_value else None
        if where is None and env.get(path_var):
            where = f"{path_var}={env[path_var]}"
        if where is None and env.get(data_var):
            where = data_var
        if where is None:
            where = f"the client config file's tls {field}" + (f" {source}" if isinstance(source, Path) else "")
        return where


def _read(source: object, origin: str) -> bytes | None:
    if source is None:
        return None
    if isinstance(source, Path):
        try:
            return source.read_bytes()
        except OSError as err:
            raise ConnectionConfigError(f"{origin}: cannot read: {err.strerror or err}") from None
    return source.encode() if isinstance(source, str) else bytes(source)  # type: ignore[arg-type]


def _certificates(data: bytes, origin: str, what: str):
    from cryptography import x509

    try:
        certs = x509.load_pem_x509_certificates(data)
    except ValueError:
        raise ConnectionConfigError(f"{origin}: not a PEM {what} (-----BEGIN CERTIFICATE-----)") from None
    return certs


def _check_pair(cert_data: bytes, key_data: bytes, cert_origin: str, key_origin: str) -> None:
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization

    leaf = _certificates(cert_data, cert_origin, "client certificate")[0]
    try:
        key = serialization.load_pem_private_key(key_data, password=None)
    except TypeError:
        raise ConnectionConfigError(f"{key_origin}: the private key is encrypted; give it unencrypted") from None
    except (ValueError, UnsupportedAlgorithm):
        raise ConnectionConfigError(f"{key_origin}: not a PEM private key (-----BEGIN PRIVATE KEY-----)") from None
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    der = serialization.Encoding.DER
    if leaf.public_key().public_bytes(der, spki) != key.public_key().public_bytes(der, spki):
        raise ConnectionConfigError(f"{key_origin} is not the private key of the certificate in {cert_origin}")
    now = datetime.now(UTC)
    if leaf.not_valid_after_utc < now:
        raise ConnectionConfigError(f"{cert_origin}: the client certificate expired on {leaf.not_valid_after_utc:%Y-%m-%d}")
    if leaf.not_valid_before_utc > now:
        raise ConnectionConfigError(
            f"{cert_origin}: the client certificate is not valid before {leaf.not_valid_before_utc:%Y-%m-%d %H:%M} UTC"
        )


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def from_arguments(args: argparse.Namespace) -> Connection:
    return Connection(**{f.name: getattr(args, f.name, None) for f in dataclasses.fields(Connection)})


async def connect_or_exit(args: argparse.Namespace, runtime: Runtime | None = None) -> Client:
    """For standalone programs (check controllers, runners): the client, or leave with one line on
    stderr: status 2 for unusable settings, 1 for a server that cannot be reached."""
    conn = from_arguments(args)
    try:
        target = conn.describe()
        data_converter()
    except (ConnectionConfigError, EncryptionConfigError) as err:
        _leave(f"error: {err}", 2)
    try:
        return await conn.connect(runtime)
    except Exception as err:  # the SDK raises a plain RuntimeError on connection failure
        _leave(f"error: cannot reach Temporal at {target}: {_first_line(err)}", 1)


def _leave(message: str, code: int):
    print(message, file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # the SDK's native runtime can abort a finalizing interpreter (sdk-python#300)
