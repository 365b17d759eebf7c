"""Connection settings: Temporal's variables and config file, the `temporal` CLI's flag names,
flags over variables, and one line naming the flag or variable when a certificate is unusable."""

from __future__ import annotations

import argparse

import pytest
from temporalio.service import TLSConfig

from admitflow.cli.parser import build_parser
from tests.pki import CA
from admitflow.worker.connection import Connection, ConnectionConfigError, add_arguments, from_arguments


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca = CA(d)
    other = CA(d / "other", "another CA")
    return {
        "ca": ca,
        "client": ca.issue("worker", client=True),
        "other_client": other.issue("stranger", client=True),
        "expired": ca.issue("expired", client=True, starts_in_days=-3, valid_days=1),
        "dir": d,
    }


def env(**values: str) -> dict[str, str]:
    """An environment with only these variables and no config file."""
    return {"TEMPORAL_CONFIG_FILE": "/nonexistent/temporal.toml", **values}


def test_defaults_without_any_setting():
    assert Connection().connect_args(env()) == {"target_host": "localhost:7233", "namespace": "default"}


def test_temporal_variables_apply_and_flags_win_over_them(pki):
    variables = env(
        TEMPORAL_ADDRESS="from-env:7233", TEMPORAL_NAMESPACE="env-ns", TEMPORAL_API_KEY="env-key",
        TEMPORAL_TLS_SERVER_NAME="env.example",
    )
    assert Connection().connect_args(variables)["target_host"] == "from-env:7233"
    args = Connection(address="flag:7233", namespace="flag-ns", api_key="flag-key", tls_server_name="flag.example").connect_args(variables)
    assert (args["target_host"], args["namespace"], args["api_key"]) == ("flag:7233", "flag-ns", "flag-key")
    assert args["tls"].domain == "flag.example"


def test_an_api_key_alone_means_tls_with_the_system_roots():
    args = Connection(api_key="secret").connect_args(env())
    assert args["api_key"] == "secret"
    assert args["tls"] is True


def test_temporal_tls_false_turns_tls_off_even_with_an_api_key():
    args = Connection().connect_args(env(TEMPORAL_API_KEY="k", TEMPORAL_TLS="false"))
    assert args["tls"] is False


def test_the_tls_flag_alone_means_tls_with_the_system_roots():
    tls = Connection(tls=True).connect_args(env())["tls"]
    assert isinstance(tls, TLSConfig)
    assert (tls.client_cert, tls.server_root_ca_cert) == (None, None)


def test_mtls_from_flags_reads_the_files(pki):
    c = pki["client"]
    conn = Connection(tls_cert_path=str(c.cert), tls_key_path=str(c.key), tls_ca_path=str(pki["ca"].cert_path),
                      tls_server_name="frontend.test")
    tls = conn.connect_args(env())["tls"]
    assert tls.client_cert == c.cert.read_bytes()
    assert tls.client_private_key == c.key.read_bytes()
    assert tls.server_root_ca_cert == pki["ca"].cert_path.read_bytes()
    assert tls.domain == "frontend.test"
    assert conn.describe(env()) == "localhost:7233 (namespace default, mTLS)"


def test_mtls_from_temporal_variables_paths_and_data(pki):
    c = pki["client"]
    variables = env(
        TEMPORAL_TLS_CLIENT_CERT_PATH=str(c.cert), TEMPORAL_TLS_CLIENT_KEY_DATA=c.key.read_text(),
        TEMPORAL_TLS_SERVER_CA_CERT_PATH=str(pki["ca"].cert_path),
    )
    tls = Connection().connect_args(variables)["tls"]
    assert (tls.client_cert, tls.client_private_key) == (c.cert.read_bytes(), c.key.read_bytes())


def test_a_flag_replaces_the_variable_for_the_same_file(pki):
    c, o = pki["client"], pki["other_client"]
    variables = env(TEMPORAL_TLS_CLIENT_CERT_PATH=str(o.cert), TEMPORAL_TLS_CLIENT_KEY_PATH=str(o.key))
    tls = Connection(tls_cert_path=str(c.cert), tls_key_path=str(c.key)).connect_args(variables)["tls"]
    assert tls.client_cert == c.cert.read_bytes()


def test_a_profile_in_temporals_config_file(pki, tmp_path):
    c = pki["client"]
    config = tmp_path / "temporal.toml"
    config.write_text(
        f'[profile.prod]\naddress = "prod.example:7233"\nnamespace = "prod"\n'
        f'[profile.prod.tls]\nclient_cert_path = "{c.cert}"\nclient_key_path = "{c.key}"\n'
    )
    args = Connection(profile="prod").connect_args({"TEMPORAL_CONFIG_FILE": str(config)})
    assert (args["target_host"], args["namespace"]) == ("prod.example:7233", "prod")
    assert args["tls"].client_cert == c.cert.read_bytes()


@pytest.mark.parametrize(
    ("make", "message"),
    [
        pytest.param(
            lambda p: (Connection(tls_cert_path="/nonexistent/worker.crt", tls_key_path=str(p["client"].key)), env()),
            "--tls-cert-path /nonexistent/worker.crt: cannot read: No such file or directory",
            id="a missing certificate file names the flag",
        ),
        pytest.param(
            lambda p: (Connection(), env(TEMPORAL_TLS_CLIENT_CERT_PATH=str(p["client"].cert),
                                         TEMPORAL_TLS_CLIENT_KEY_PATH="/nonexistent/worker.key")),
            "TEMPORAL_TLS_CLIENT_KEY_PATH=/nonexistent/worker.key: cannot read: No such file or directory",
            id="a missing key file names the variable",
        ),
        pytest.param(
            lambda p: (Connection(tls_key_path=str(p["client"].key)), env()),
            "--tls-key-path {client_key} is set but no client certificate: mTLS needs both "
            "(--tls-cert-path or TEMPORAL_TLS_CLIENT_CERT_PATH)",
            id="a key without a certificate",
        ),
        pytest.param(
            lambda p: (Connection(tls_cert_path=str(p["client"].cert)), env()),
            "--tls-cert-path {client_cert} is set but no client key: mTLS needs both "
            "(--tls-key-path or TEMPORAL_TLS_CLIENT_KEY_PATH)",
            id="a certificate without a key",
        ),
        pytest.param(
            lambda p: (Connection(tls_cert_path=str(p["client"].key), tls_key_path=str(p["client"].key)), env()),
            "--tls-cert-path {client_key}: not a PEM client certificate (-----BEGIN CERTIFICATE-----)",
            id="a key given as the certificate",
        ),
        pytest.param(
            lambda p: (Connection(tls_cert_path=str(p["client"].cert), tls_key_path=str(p["client"].cert)), env()),
            "--tls-key-path {client_cert}: not a PEM private key (-----BEGIN PRIVATE KEY-----)",
            id="a certificate given as the key",
        ),
        pytest.param(
            lambda p: (Connection(tls_cert_path=str(p["client"].cert), tls_key_path=str(p["other_client"].key)), env()),
            "--tls-key-path {other_key} is not the private key of the certificate in --tls-cert-path {client_cert}",
            id="a key of another certificate",
        ),
        pytest.param(
            lambda p: (Connection(tls_cert_path=str(p["expired"].cert), tls_key_path=str(p["expired"].key)), env()),
            "--tls-cert-path {expired_cert}: the client certificate expired on {expired_on}",
            id="an expired certificate",
        ),
        pytest.param(
            lambda p: (Connection(tls_ca_path=str(p["client"].key)), env()),
            "--tls-ca-path {client_key}: not a PEM CA certificate (-----BEGIN CERTIFICATE-----)",
            id="a CA file that is not a certificate",
        ),
        pytest.param(
            lambda p: (Connection(), env(TEMPORAL_TLS_CLIENT_CERT_PATH="/a", TEMPORAL_TLS_CLIENT_CERT_DATA="b")),
            "Temporal client configuration: Invalid configuration: Cannot specify both TEMPORAL_TLS_CLIENT_CERT_PATH "
            "and TEMPORAL_TLS_CLIENT_CERT_DATA",
            id="a path and data for the same file",
        ),
        pytest.param(
            lambda p: (Connection(profile="nope"), env()),
            "Temporal client configuration: Profile 'nope' not found",
            id="an unknown profile",
        ),
        pytest.param(
            lambda p: (Connection(), env(TEMPORAL_TLS_DISABLE_HOST_VERIFICATION="true")),
            "TEMPORAL_TLS_DISABLE_HOST_VERIFICATION is not supported by the Temporal Python SDK: give the server's "
            "CA with --tls-ca-path and the name in its certificate with --tls-server-name",
            id="host verification cannot be switched off",
        ),
    ],
)
def test_unusable_settings_are_one_line_naming_their_source(pki, make, message):
    conn, variables = make(pki)
    with pytest.raises(ConnectionConfigError) as err:
        conn.connect_args(variables)
    from cryptography import x509

    expired = x509.load_pem_x509_certificate(pki["expired"].cert.read_bytes())
    assert str(err.value) == message.format(
        client_cert=pki["client"].cert, client_key=pki["client"].key, other_key=pki["other_client"].key,
        expired_cert=pki["expired"].cert, expired_on=f"{expired.not_valid_after_utc:%Y-%m-%d}",
    )


async def test_connect_refuses_a_bad_encryption_key_before_any_network_traffic():
    from admitflow.codec import EncryptionConfigError

    with pytest.raises(EncryptionConfigError, match="ADMITFLOW_ENCRYPTION_KEY must be base64 of 32 bytes"):
        await Connection(address="127.0.0.1:1").connect(environ=env(ADMITFLOW_ENCRYPTION_KEY="AAAA"))


def test_the_same_flags_for_standalone_programs_and_the_admitflow_command(pki):
    flags = ["--address", "a:1", "--namespace", "ns", "--api-key", "k", "--tls", "--tls-cert-path", "c",
             "--tls-key-path", "k", "--tls-ca-path", "ca", "--tls-server-name", "sn", "--profile", "p"]
    program = argparse.ArgumentParser()
    add_arguments(program)
    expected = Connection(address="a:1", namespace="ns", profile="p", api_key="k", tls=True, tls_cert_path="c",
                          tls_key_path="k", tls_ca_path="ca", tls_server_name="sn")
    assert from_arguments(program.parse_args(flags)) == expected
    assert from_arguments(build_parser().parse_args(["get", "workloads", *flags])) == expected
    assert from_arguments(build_parser().parse_args(["worker", *flags])) == expected
    assert from_arguments(program.parse_args([])) == Connection()


def test_version_prints_the_installed_version_and_exits_0(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as done:
        build_parser().parse_args(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out == f"admitflow {version('admitflow')}\n"
