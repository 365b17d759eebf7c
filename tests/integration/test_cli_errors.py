"""Every failure a user can cause or meet with `admitflow`, one table (issue 20, part 4): each is one
line on stderr that says what to do, with kubectl's exit codes (1 when the request could not be
carried out, this repository's 2 for bad input), never a traceback; "No resources found" goes to
stderr with status 0.

Each row runs the command as a user does, a separate process, against a real Temporal dev server:

- `served`: a namespace with an admitflow worker, the queues of test_cli.SETUP, and a workload
  `default/lost` whose workflow runs on a task queue nobody polls (its updates time out);
- `unserved`: a namespace where no worker runs, with the catalog workflow started (its queries and
  updates time out);
- `typo`: a Temporal namespace that does not exist;
- `denied`: a second dev server that refuses workflow updates (`frontend.enableUpdateWorkflowExecution`
  off): the PermissionDenied an authorizer gives;
- `nowhere`: an address where no server listens.
"""

from __future__ import annotations

import asyncio
import subprocess
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.client import Client

from admitflow import contract, ids
from admitflow.codec import DATA_CONVERTER
from admitflow.devserver import DevServer
from admitflow.messages import CatalogInput
from admitflow.worker.main import build_worker
from tests.conftest import free_port
from tests.cli_process import run_admitflow
from tests.integration.test_cli import SETUP, workload_yaml

pytestmark = pytest.mark.integration

SERVED, UNSERVED, TYPO, DENIED, NOWHERE = "served", "unserved", "typo", "denied", "nowhere"

ADDRESS_FLAGS = "is the server running there? (--address, TEMPORAL_ADDRESS)"
WORKER_OR_TIME = 'is a worker polling task queue "admitflow"? (admitflow worker); or allow more with --request-timeout'


@dataclass(frozen=True)
class Case:
    id: str
    where: str
    args: tuple[str, ...]
    code: int
    line: str  # {address} is the server's address
    stdin: str | None = None


TABLE = [
    # --- the server, the Temporal namespace, permissions, timeouts: status 1 ------------------------------
    Case("unreachable-server", NOWHERE, ("get", "clusterqueues"), 1,
         f"error: cannot reach Temporal at {{address}} (namespace default): connection refused; {ADDRESS_FLAGS}"),
    Case("unreachable-server-on-a-write", NOWHERE, ("finish", "default/one"), 1,
         f"error: cannot reach Temporal at {{address}} (namespace default): connection refused; {ADDRESS_FLAGS}"),
    Case("unknown-temporal-namespace", TYPO, ("get", "clusterqueues"), 1,
         'error: Temporal namespace "typo" not found at {address}: check --namespace (TEMPORAL_NAMESPACE); '
         "the Kueue namespace is -n/--kueue-namespace; admitflow setup --namespace typo creates it"),
    Case("unknown-temporal-namespace-on-a-list-of-workloads", TYPO, ("get", "workloads", "-n", "team-a"), 1,
         'error: Temporal namespace "typo" not found at {address}: check --namespace (TEMPORAL_NAMESPACE); '
         "the Kueue namespace is -n/--kueue-namespace; admitflow setup --namespace typo creates it"),
    Case("unknown-temporal-namespace-on-apply", TYPO, ("apply", "-f", "-"), 1,
         'error: Temporal namespace "typo" not found at {address}: check --namespace (TEMPORAL_NAMESPACE); '
         "the Kueue namespace is -n/--kueue-namespace; admitflow setup --namespace typo creates it", stdin=SETUP),
    Case("permission-denied", DENIED, ("admissioncheck", "activate", "approval"), 1,
         "error: permission denied by Temporal at {address} (namespace default): UpdateWorkflowExecution operation is "
         "disabled on this namespace; check the API key (--api-key, TEMPORAL_API_KEY) or client certificate, and what "
         "it may do in this namespace"),
    Case("a-list-before-a-worker-ran-the-catalog", UNSERVED, ("get", "clusterqueues"), 1,
         'error: the catalog (admitflow/catalog) has not written its objects yet: is a worker polling task queue '
         '"admitflow"? (admitflow worker)'),
    Case("a-query-times-out-without-a-worker", UNSERVED, ("apply", "-f", "-", "--dry-run=server", "--request-timeout", "2s"), 1,
         f'error: the catalog (admitflow/catalog) does not answer: the query timed out; {WORKER_OR_TIME}', stdin=SETUP),
    Case("apply-times-out-without-a-worker", UNSERVED, ("apply", "-f", "-", "--request-timeout", "2"), 1,
         'error: the catalog (admitflow/catalog) did not take the objects within 2s: is a worker polling task queue '
         '"admitflow"? (admitflow worker); they are applied once one does', stdin=SETUP),
    Case("an-update-times-out-without-a-worker", SERVED, ("verdict", "lost", "a", "Ready", "--request-timeout", "2s"), 1,
         f'error: workloads "default/lost": the verdict may not have been applied: it did not answer within 2s; {WORKER_OR_TIME}'),
    # --- objects and workflows that are not there: the repository's status 2 -------------------------------
    Case("missing-object", SERVED, ("get", "clusterqueue", "nope"), 2, 'error: clusterqueues "nope" not found'),
    Case("missing-workload", SERVED, ("describe", "workload", "nobody", "-n", "team-a"), 2,
         'error: workloads "team-a/nobody" not found'),
    Case("missing-object-to-delete", SERVED, ("delete", "lq/team-a/nope"), 2, 'error: localqueues "team-a/nope" not found'),
    Case("missing-workflow-to-reset", SERVED, ("reset", "workload", "nobody"), 2,
         'error: workloads "default/nobody" not found or already finished'),
    Case("missing-workflow-to-release", SERVED, ("release", "workload/default/nobody"), 2,
         'error: workloads "default/nobody": cannot tell which ClusterQueue holds it; give it with --clusterqueue'),
    Case("missing-cluster-queue-of-pending-workloads", SERVED, ("get", "pending-workloads/nope"), 2,
         'error: clusterqueues "nope" not found'),
    # --- bad flags and arguments: status 2, before connecting -------------------------------------------
    Case("no-command", NOWHERE, (), 2, "admitflow: error: the following arguments are required: COMMAND"),
    Case("an-unknown-flag", NOWHERE, ("get", "workloads", "--bogus"), 2, "admitflow: error: unrecognized arguments: --bogus"),
    Case("an-unknown-output", NOWHERE, ("get", "workloads", "-o", "xml"), 2,
         "admitflow get: error: argument -o/--output: invalid choice: 'xml' (choose from 'table', 'wide', 'name', 'json', 'yaml')"),
    Case("an-unknown-kind", NOWHERE, ("get", "widgets"), 2, 'error: the server doesn\'t have a resource type "widgets"'),
    Case("a-kind-in-another-group", NOWHERE, ("get", "clusterqueues.example.com"), 2,
         'error: the server doesn\'t have a resource type "clusterqueues.example.com"'),
    Case("a-name-given-twice", NOWHERE, ("describe", "cq/gpu", "gpu"), 2,
         "error: there is no need to give a name as a separate argument when it is given as KIND/NAME (cq/gpu)"),
    Case("namespaces-that-disagree", NOWHERE, ("finish", "team-a/train", "-n", "team-b"), 2,
         'error: "team-a/train" is in namespace team-a, but -n/--kueue-namespace says team-b: give the namespace once'),
    Case("n-and-all-namespaces", NOWHERE, ("get", "workloads", "-n", "team-a", "-A"), 2,
         "admitflow get: error: argument -A/--all-namespaces: not allowed with argument -n/--kueue-namespace"),
    Case("a-name-across-all-namespaces", NOWHERE, ("get", "workload", "train", "-A"), 2,
         "error: a resource cannot be retrieved by name across all namespaces: leave out -A"),
    Case("a-bad-label-selector", NOWHERE, ("get", "workloads", "-l", "tier in (gold"), 2,
         'error: label selector "tier in (gold": unbalanced "("'),
    Case("a-workload-filter-on-another-kind", NOWHERE, ("get", "clusterqueues", "--localqueue", "lq"), 2,
         "error: --localqueue, --phase, --clusterqueue and --pending-check filter the list of workloads: "
         "admitflow get workloads --phase Backoff"),
    Case("a-bad-request-timeout", NOWHERE, ("get", "clusterqueues", "--request-timeout", "soon"), 2,
         'error: --request-timeout: time: invalid duration "soon"'),
    # What a model bounds after parsing, the parser bounds (issue 52, item 7): refused before connecting.
    Case("an-attempt-of-zero", NOWHERE, ("verdict", "one", "budget", "Ready", "--attempt", "0"), 2,
         'admitflow verdict: error: argument --attempt: "0": must be a whole number from 1 to 2147483647'),
    Case("an-attempt-beyond-int32", NOWHERE, ("verdict", "one", "budget", "Ready", "--attempt", "2147483648"), 2,
         'admitflow verdict: error: argument --attempt: "2147483648": must be a whole number from 1 to 2147483647'),
    Case("a-requeue-after-beyond-int32", NOWHERE, ("verdict", "one", "budget", "Retry", "--requeue-after", "600000h"), 2,
         "error: --requeue-after 600000h: must be from 0s to 2147483647s (about 68 years)"),
    Case("a-negative-requeue-after", NOWHERE, ("verdict", "one", "budget", "Retry", "--requeue-after=-5s"), 2,
         "error: --requeue-after -5s: must be from 0s to 2147483647s (about 68 years)"),
    Case("a-negative-limit", NOWHERE, ("get", "pending-workloads", "cq", "--limit", "-1"), 2,
         'admitflow get: error: argument --limit: "-1": must be a whole number of at least 0'),
    Case("a-negative-offset", NOWHERE, ("get", "pending-workloads", "cq", "--offset", "-5"), 2,
         'admitflow get: error: argument --offset: "-5": must be a whole number of at least 0'),
    Case("a-port-out-of-range", NOWHERE, ("dev", "--ui-port", "99999"), 2,
         'admitflow dev: error: argument --ui-port: "99999": must be a port number from 1 to 65535'),
    Case("a-bad-dry-run", NOWHERE, ("apply", "-f", "-", "--dry-run=maybe"), 2,
         "admitflow apply: error: argument --dry-run: invalid choice: 'maybe' (choose from 'none', 'client', 'server')"),
    Case("delete-without-what", NOWHERE, ("delete",), 2, "error: give what to delete: admitflow delete KIND NAME, KIND/NAME, or -f FILE"),
    Case("delete-a-name-and-a-file", NOWHERE, ("delete", "cq", "gpu", "-f", "x.yaml"), 2, "error: give either KIND NAME or -f FILE, not both"),
    Case("reset-of-another-kind", NOWHERE, ("reset", "cq/gpu"), 2,
         "error: reset takes workloads only: admitflow reset workload NAMESPACE/NAME"),
    Case("completion-for-an-unknown-shell", NOWHERE, ("completion", "fish"), 2,
         "admitflow completion: error: argument shell: invalid choice: 'fish' (choose from 'bash', 'zsh')"),
    Case("a-tls-file-that-is-not-there", NOWHERE, ("get", "cq", "--tls-ca-path", "/nonexistent/ca.pem"), 2,
         "error: --tls-ca-path /nonexistent/ca.pem: cannot read: No such file or directory"),
    # --- nothing found is not an error: status 0, the line on stderr ----------------------------------
    Case("no-resources", SERVED, ("get", "admissionchecks"), 0, "No resources found."),
    Case("no-resources-in-a-namespace", SERVED, ("get", "workloads", "-n", "team-z"), 0, "No resources found in team-z namespace."),
    Case("no-resources-by-name", SERVED, ("get", "localqueues", "-l", "team=z", "-o", "name"), 0, "No resources found."),
]


@dataclass
class World:
    addresses: dict[str, tuple[str, str]]  # where -> (address, Temporal namespace)


@pytest_asyncio.fixture(scope="module")
async def engine(dev_server: DevServer) -> AsyncIterator[World]:
    """Named `engine` so that the dev server's namespace pool counts this module's tests (conftest)."""
    served, unserved = next(dev_server.pool), next(dev_server.pool)  # type: ignore[attr-defined]
    client = await Client.connect(dev_server.address, namespace=served, data_converter=DATA_CONVERTER)
    lonely = await Client.connect(dev_server.address, namespace=unserved, data_converter=DATA_CONVERTER)
    await lonely.start_workflow(contract.CATALOG_WORKFLOW, CatalogInput(), id=ids.CATALOG_ID, task_queue="admitflow")
    denied = DevServer(
        port=free_port(), db=None, headless=True,
        dynamic_config={"frontend.enableUpdateWorkflowExecution": "false"},
        log_file=Path(f"/tmp/admitflow-test-denied-{uuid.uuid4().hex[:8]}.log"),
    )
    await denied.start()
    try:
        async with build_worker(client, "admitflow"):
            world = World({
                SERVED: (dev_server.address, served),
                UNSERVED: (dev_server.address, unserved),
                TYPO: (dev_server.address, "typo"),
                DENIED: (denied.address, "default"),
                NOWHERE: (f"127.0.0.1:{free_port()}", "default"),
            })
            r = await admitflow(world, SERVED, "apply", "-f", "-", stdin=SETUP)
            assert r.returncode == 0, r.stderr
            # A workload whose workflow no worker runs: its updates wait, then time out.
            r = await admitflow(world, SERVED, "apply", "-f", "-", "--task-queue", "nobody", stdin=workload_yaml("lost", "1", 0))
            assert r.returncode == 0, r.stderr
            yield world
    finally:
        denied.stop()


async def admitflow(world: World, where: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    address, namespace = world.addresses[where]
    connection = ["--address", address, "--namespace", namespace] if args and args[0] != "completion" else []
    return await run_admitflow(*args, *connection, input=stdin)


@pytest_asyncio.fixture(scope="module")
async def outcomes(engine: World) -> dict[str, subprocess.CompletedProcess]:
    """Every row, a few processes at a time."""
    processes = asyncio.Semaphore(4)

    async def one(case: Case) -> subprocess.CompletedProcess:
        async with processes:
            return await admitflow(engine, case.where, *case.args, stdin=case.stdin)

    results = await asyncio.gather(*(one(c) for c in TABLE))
    return {c.id: r for c, r in zip(TABLE, results, strict=True)}


def test_the_table_covers_every_kind_of_failure():
    assert {c.where for c in TABLE} == {SERVED, UNSERVED, TYPO, DENIED, NOWHERE}
    assert {c.code for c in TABLE} == {0, 1, 2}
    assert len({c.id for c in TABLE}) == len(TABLE)


@pytest.mark.parametrize("case", TABLE, ids=[c.id for c in TABLE])
async def test_a_failure_is_one_line_on_stderr_with_kubectls_exit_code(case: Case, engine: World, outcomes):
    r = outcomes[case.id]
    address = engine.addresses[case.where][0]
    assert (r.returncode, r.stdout, r.stderr.splitlines()) == (case.code, "", [case.line.format(address=address)])
