"""The `admitflow` command as users run it: a separate process talking to the dev server."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest

from admitflow import ids
from admitflow import search_attributes as sa
from admitflow.devserver import port_free
from tests.cli_process import ADMITFLOW, run_admitflow
from tests.conftest import free_port
from tests.integration.test_admission import eventually
from tests.workflows.test_lifecycle import until_active

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]

SETUP = textwrap.dedent(
    """\
    apiVersion: kueue.x-k8s.io/v1beta2
    kind: ResourceFlavor
    metadata: {name: default}
    ---
    apiVersion: kueue.x-k8s.io/v1beta2
    kind: ClusterQueue
    metadata: {name: cq}
    spec:
      namespaceSelector: {}
      resourceGroups:
      - coveredResources: [cpu]
        flavors:
        - name: default
          resources: [{name: cpu, nominalQuota: 4}]
    ---
    apiVersion: kueue.x-k8s.io/v1beta2
    kind: LocalQueue
    metadata: {name: lq, namespace: default}
    spec: {clusterQueue: cq}
    """
)


def workload_yaml(
    name: str, cpu: str, priority: int = 0, queue: str = "lq", annotations: dict[str, str] | None = None,
    limit: int | None = None,
) -> str:
    """A Workload in namespace default as YAML: one pod asking for `cpu`; `limit` is its
    maximumExecutionTimeSeconds."""
    lines = ["apiVersion: kueue.x-k8s.io/v1beta2", "kind: Workload", "metadata:", f"  name: {name}", "  namespace: default"]
    if annotations:
        lines += ["  annotations:", *(f"    {k}: {json.dumps(v)}" for k, v in annotations.items())]
    lines += ["spec:", f"  queueName: {queue}", f"  priority: {priority}"]
    if limit is not None:
        lines.append(f"  maximumExecutionTimeSeconds: {limit}")
    lines += [
        "  podSets:",
        "  - name: main",
        "    count: 1",
        "    template:",
        "      spec:",
        f'        containers: [{{name: c, image: busybox, resources: {{requests: {{cpu: "{cpu}"}}}}}}]',
    ]
    return "\n".join(lines) + "\n"


async def run(engine, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return await run_admitflow(*args, "--address", engine.address, "--namespace", engine.namespace, input=stdin)


async def until(engine, predicate, *args: str, timeout: float = 20.0) -> subprocess.CompletedProcess:
    deadline = time.monotonic() + timeout
    while True:
        r = await run(engine, *args)
        if predicate(r):
            return r
        if time.monotonic() > deadline:
            raise AssertionError(f"admitflow {' '.join(args)} never satisfied the check: {r.stdout}{r.stderr}")
        await asyncio.sleep(0.3)


async def test_a_bad_manifest_exits_2_with_one_line_and_applies_nothing(engine, tmp_path):
    good = tmp_path / "a-good.yaml"
    good.write_text(SETUP)
    bad = tmp_path / "b-bad.yaml"
    bad.write_text(workload_yaml("w", "1", 0).replace("count: 1", "count: -1"))
    r = await run(engine, "apply", "-f", str(tmp_path))
    assert r.returncode == 2
    assert r.stdout == ""
    assert r.stderr.splitlines() == [
        f"error: {bad}: document 1 (Workload w): spec.podSets[0].count: Invalid value: -1: "
        "spec.podSets[0].count in body should be greater than or equal to 0"
    ]
    r = await run(engine, "get", "clusterqueues")
    assert (r.returncode, r.stdout, r.stderr.strip()) == (0, "", "No resources found.")


async def test_apply_get_describe_finish_delete(engine, tmp_path):
    r = await run(engine, "apply", "-f", "-", stdin=SETUP)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "resourceflavor.kueue.x-k8s.io/default created",
        "clusterqueue.kueue.x-k8s.io/cq created",
        "localqueue.kueue.x-k8s.io/default/lq created",
    ]
    for name in ("one", "two"):
        r = await run(engine, "apply", "-f", "-", stdin=workload_yaml(name, "2", 1))
        assert r.stdout.strip() == f"workload.kueue.x-k8s.io/default/{name} created", r.stderr

    def full(r):
        status = json.loads(r.stdout).get("status", {})
        return status.get("admittedWorkloads") == 2

    r = await until(engine, full, "get", "clusterqueue", "cq", "-o", "json")
    cq = json.loads(r.stdout)
    assert cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] == "4"
    assert cq["status"]["flavorsUsage"] == [{"name": "default", "resources": [{"name": "cpu", "total": "4", "borrowed": "0"}]}]

    r = await run(engine, "get", "workloads")
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["NAMESPACE", "NAME", "QUEUE", "RESERVED", "IN", "ADMITTED", "FINISHED", "AGE"]
    assert sorted(line.split()[1:5] for line in lines[1:]) == [["one", "lq", "cq", "True"], ["two", "lq", "cq", "True"]]

    r = await run(engine, "describe", "workload", "default/one")
    assert r.returncode == 0, r.stderr
    assert "Quota reserved in ClusterQueue cq, wait time since queued was" in r.stdout
    assert "Admitted by ClusterQueue cq" in r.stdout
    assert f"Workflow:     http://localhost:8233/namespaces/{engine.namespace}/workflows/workload%2Fdefault%2Fone" in r.stdout

    r = await run(engine, "pods-ready", "default/one")
    assert (r.returncode, r.stdout.strip()) == (0, "workload.kueue.x-k8s.io/default/one pods ready")
    r = await until(engine, lambda r: '"Started"' in r.stdout, "get", "workload", "one", "-o", "json")
    ready = next(c for c in json.loads(r.stdout)["status"]["conditions"] if c["type"] == "PodsReady")
    assert (ready["status"], ready["reason"]) == ("True", "Started")
    r = await run(engine, "pods-ready", "default/one", "--not-ready", "--reason", "Started")
    assert (r.returncode, r.stderr.strip()) == (
        2, "error: invalid pods-ready report: reason 'Started' with ready=false: use WaitForStart or WaitForRecovery"
    )
    r = await run(engine, "pods-ready", "default/nobody")
    assert (r.returncode, r.stderr.strip()) == (2, 'error: workloads "default/nobody" not found or already finished')

    r = await run(engine, "finish", "default/one", "--message", "done")
    assert (r.returncode, r.stdout.strip()) == (0, "workload.kueue.x-k8s.io/default/one finished")
    r = await until(engine, lambda r: '"Finished"' in r.stdout, "get", "workload", "one", "-o", "json")
    finished = next(c for c in json.loads(r.stdout)["status"]["conditions"] if c["type"] == "Finished")
    assert (finished["reason"], finished["message"]) == ("Succeeded", "done")

    r = await run(engine, "delete", "workload", "default/two")
    assert (r.returncode, r.stdout.strip()) == (0, "workload.kueue.x-k8s.io/default/two deleted")
    await until(engine, lambda r: r.returncode == 2 and 'workloads "default/two" not found' in r.stderr, "get", "workload", "two")

    r = await run(engine, "delete", "localqueue", "default/nope")
    assert (r.returncode, r.stderr.strip()) == (2, 'error: localqueues "default/nope" not found')
    r = await run(engine, "get", "widgets")
    assert (r.returncode, r.stderr.strip()) == (2, 'error: the server doesn\'t have a resource type "widgets"')


def _main_job_args() -> list[str]:
    """The arguments `make run` gives `admitflow dev`, read from the Makefile so they cannot drift."""
    line = next(ln for ln in (ROOT / "Makefile").read_text().splitlines() if "admitflow dev " in ln)
    return line.split("admitflow dev ", 1)[1].split()


def _start_main_job(db: Path, port: int, ui_port: int) -> subprocess.Popen:
    return subprocess.Popen(
        [ADMITFLOW, "dev", "--port", str(port), "--ui-port", str(ui_port), "--db", str(db), *_main_job_args()],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def _read_until(proc: subprocess.Popen, marker: str, timeout: float = 90.0) -> list[str]:
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line.rstrip())
        if marker in line:
            return lines
    proc.kill()
    raise AssertionError(f"never saw {marker!r}; output: {lines}")


def test_the_main_job_admits_the_examples_and_a_second_run_reuses_the_database(tmp_path):
    db = tmp_path / "temporal.db"
    port, ui_port = free_port(), free_port()
    address = ["--address", f"localhost:{port}"]

    def admitflow(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([ADMITFLOW, *args, *address], capture_output=True, text=True, timeout=30, cwd=ROOT)

    proc = _start_main_job(db, port, ui_port)
    try:
        lines = seen = _read_until(proc, "6 of 7 workloads admitted; 1 waits for you (see above).")
        assert "workload.kueue.x-k8s.io/team-b/sweep created" in lines
        # Kueue's quick-start Job, as published: kept with its Workload, which the local runner runs.
        assert "job.batch/default/sample-job created" in lines
        # The ProvisioningRequest sample: the node group comes online late, so the first attempts
        # fail, the workload backs off, and a later attempt is provisioned.
        pretrain = [ln.split(None, 1)[1] for ln in lines if ln.startswith("  team-a/pretrain ")]
        assert pretrain[-1].startswith("Admitted") and any(p.startswith("Backoff") for p in pretrain), pretrain
        assert "Check controller admitflow.io/budget serving its task queue" in lines
        assert any(ln.startswith("Runner examples/runners/local.py (pid ") for ln in lines)
        # The approval sample: nobody serves its check, so the main job says what a person runs instead.
        told = lines.index("  team-a/release waits for you:")
        assert lines[told : told + 3] == [
            "  team-a/release waits for you:",
            "    approval: not Active, so the ClusterQueue admits nothing new until admitflow.io/approval marks it Active",
            '    approval: nobody is serving task queue "admitflow.io/approval"; '
            "mark it Active with admitflow admissioncheck activate approval",
        ]
        seen = seen + _read_until(proc, "Ctrl-C stops")
        described = admitflow("get", "workload", "team-b/sweep", "-o", "json")
        [budget] = json.loads(described.stdout)["status"]["admissionChecks"]
        # 12.5 cpu-hours used (examples/controllers/consumption.json) + 6 trials x 1 cpu x 1 h, of 50.
        assert (budget["name"], budget["state"], budget["message"]) == ("budget", "Ready", "18.5 of 50 cpu-hours this week")
        with urllib.request.urlopen(f"http://localhost:{ui_port}/", timeout=5) as resp:
            assert resp.status == 200

        assert admitflow("admissioncheck", "activate", "approval").returncode == 0
        lines = _read_until(proc, "send the verdict with admitflow verdict team-a/release approval Ready|Retry|Rejected")
        seen = seen + lines
        assert "  team-a/release                   QuotaReserved: Quota reserved in ClusterQueue reviewed" in lines
        approved = admitflow("verdict", "team-a/release", "approval", "Ready", "--message", "approved by the test")
        assert approved.returncode == 0, approved.stderr
        lines = _read_until(proc, "All 7 workloads admitted.")
        assert "  team-a/release                   Admitted: The workload is admitted" in lines
        # The local runner runs what is admitted: train-small's command (20 s) ends, and it finishes.
        finished = "  team-a/train-small               Finished: command succeeded"
        if finished not in seen + lines:
            _read_until(proc, finished)
        output = (tmp_path / "runs" / "team-a_train-small-1.log").read_text()
        assert output.startswith('train-small: [{"name": "main", "count": 1'), output
        assert '"nodeSelector": {"instance-type": "on-demand"}' in output, "the flavor's node labels reach the pods"
        described = json.loads(admitflow("get", "workload", "team-a/pretrain", "-o", "json").stdout)
        created = [e["message"] for e in described["events"] if e["reason"] == "ProvisioningRequestCreated"]
        assert created[:2] == ['Created ProvisioningRequest: "pretrain-capacity-1"', 'Created ProvisioningRequest: "pretrain-capacity-2"']
        [capacity] = described["status"]["admissionChecks"]
        assert capacity["state"] == "Ready" and capacity["retryCount"] == len(created) - 1 >= 1
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0

    proc = _start_main_job(db, port, ui_port)
    try:
        lines = _read_until(proc, "All 7 workloads admitted.")
        assert "workload.kueue.x-k8s.io/team-b/sweep unchanged" in lines
        assert "job.batch/default/sample-job unchanged" in lines, "its fixed name: no second Job"
        assert "clusterqueue.kueue.x-k8s.io/research unchanged" in lines
        runner = int(next(ln for ln in lines if ln.startswith("Runner ")).split("(pid ", 1)[1].split(",", 1)[0])
    finally:
        proc.kill()  # no Ctrl-C this time: what it started must not outlive it
        proc.wait(30)
    # The runner is told at once (SIGTERM); an activity it was running when the server went too
    # keeps its shutdown waiting while the SDK retries the activity's completion against the dead
    # server, about 16 s (seen once, 2026-12-02: a command started 9 ms before the kill).
    deadline = time.monotonic() + 40
    while (_alive(runner) or not port_free("127.0.0.1", port)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive(runner), "the runner went with admitflow dev"
    assert port_free("127.0.0.1", port), "the dev server went with admitflow dev"


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, dead and not yet reaped, does not count)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


# What `admitflow setup` prints for a namespace without admitflow's search attributes, in order.
REGISTERED = [f"search attribute {key.name} registered" for key in sa.ALL]


async def test_setup_registers_namespace_and_search_attributes_once(dev_server):
    namespace = f"setup-{os.getpid()}"
    cmd = [ADMITFLOW, "setup", "--address", dev_server.address, "--namespace", namespace]
    first = await asyncio.to_thread(subprocess.run, cmd, capture_output=True, text=True, timeout=60)
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines() == [
        f"namespace {namespace} created",
        *REGISTERED,
        f"{dev_server.address} (namespace {namespace}) is ready for admitflow",
    ]
    again = await asyncio.to_thread(subprocess.run, cmd, capture_output=True, text=True, timeout=60)
    assert again.stdout.splitlines() == [f"{dev_server.address} (namespace {namespace}) is ready for admitflow"]


async def test_the_worker_refuses_a_namespace_without_search_attributes(dev_server):
    from temporalio.client import Client

    from admitflow import registration

    namespace = f"bare-{os.getpid()}"
    await registration.ensure_namespace(await Client.connect(dev_server.address, namespace=namespace))
    cmd = [ADMITFLOW, "worker", "--address", dev_server.address, "--namespace", namespace]
    for _ in range(50):  # the new namespace reaches the frontend's cache within moments
        r = await asyncio.to_thread(subprocess.run, cmd, capture_output=True, text=True, timeout=60)
        if "not registered" in r.stderr:
            break
        await asyncio.sleep(0.2)
    assert r.returncode == 2
    assert r.stderr.strip() == (
        f"error: search attributes {', '.join(key.name for key in sa.ALL)} are not registered in namespace "
        f"{namespace}: run `admitflow setup` first"
    )


async def test_pending_workloads_and_a_workloads_position(engine):
    r = await run(engine, "apply", "-f", "-", stdin=SETUP)
    assert r.returncode == 0, r.stderr
    for name, priority in (("holder", 9), ("second", 5), ("third", 1)):
        r = await run(engine, "apply", "-f", "-", stdin=workload_yaml(name, "4", priority))
        assert r.returncode == 0, r.stderr
        if name == "holder":
            await until(engine, lambda r: '"Admitted"' in r.stdout and '"True"' in r.stdout, "get", "workload", "holder", "-o", "json")

    r = await until(engine, lambda r: len(r.stdout.splitlines()) == 3, "get", "pending-workloads", "cq")
    header, *rows = r.stdout.splitlines()
    assert header.split() == ["POSITION", "NAMESPACE", "NAME", "LOCALQUEUE", "PRIORITY", "WAITING"]
    assert [row.split()[:5] for row in rows] == [["0", "default", "second", "lq", "5"], ["1", "default", "third", "lq", "1"]]

    r = await run(engine, "get", "pending-workloads", "cq", "-o", "json", "--offset", "1")
    (item,) = json.loads(r.stdout)["items"]
    assert (item["metadata"]["name"], item["positionInClusterQueue"], item["positionInLocalQueue"]) == ("third", 1, 1)

    r = await run(engine, "describe", "workload", "third")
    assert "Position:     1 in ClusterQueue, 1 in LocalQueue lq" in r.stdout

    r = await run(engine, "get", "pending-workloads", "nope")
    assert (r.returncode, r.stderr.strip()) == (2, 'error: clusterqueues "nope" not found')

    # `get workloads` filters are visibility queries on the search attributes.
    def names(r):
        return sorted(line.split()[1] for line in r.stdout.splitlines()[1:])

    await until(engine, lambda r: names(r) == ["holder"], "get", "workloads", "--phase", "Admitted")
    await until(engine, lambda r: names(r) == ["second", "third"], "get", "workloads", "--phase", "Pending", "--clusterqueue", "cq")
    r = await run(engine, "get", "workloads", "--clusterqueue", "elsewhere")
    assert (r.returncode, names(r)) == (0, [])


async def test_verdict_deactivate_and_activate_from_the_command_line(engine):
    from tests.integration.test_admission_checks import setup

    await setup(engine.admitflow, "approval")
    await run(engine, "apply", "-f", "-", stdin=workload_yaml("job", "1", 0))
    await until(engine, lambda r: r.stdout.splitlines()[1:] and r.stdout.splitlines()[1].split()[3:5] == ["cq", "False"], "get", "workloads")
    bad = await run(engine, "verdict", "job", "approval", "Maybe")
    assert (bad.returncode, bad.stderr.strip().splitlines()) == (
        2, ['error: unknown state "Maybe" for check "approval": must be one of Pending, Ready, Retry, Rejected']
    )
    ok = await run(engine, "verdict", "job", "approval", "Ready", "--message", "looks fine")
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.split("\n")[1].split() == ["approval", "Ready", "0", "looks", "fine"]
    await until(engine, lambda r: r.stdout.splitlines()[1].split()[3:5] == ["cq", "True"], "get", "workloads")
    described = (await run(engine, "describe", "wl", "job")).stdout
    verdicts = described.split("Verdicts:")[1].split("Events:")[0].splitlines()
    assert [line.split()[:3] for line in verdicts[2:]] == [["approval", "Ready", "applied"]]
    off = await run(engine, "deactivate", "job")
    assert off.stdout.strip() == "workload.kueue.x-k8s.io/default/job deactivated"
    await until(engine, lambda r: "Inactive" in r.stdout or "Deactivated" in r.stdout, "describe", "wl", "job")
    on = await run(engine, "activate", "job")
    assert on.stdout.strip() == "workload.kueue.x-k8s.io/default/job activated"
    await until(engine, lambda r: "Reactivated" in r.stdout, "describe", "wl", "job")


APPROVAL = [str(ROOT / "examples" / "cluster.yaml"), str(ROOT / "examples" / "controllers" / "approval.yaml")]


def _conditions(r: subprocess.CompletedProcess) -> dict[str, str]:
    return {c["type"]: c["status"] for c in json.loads(r.stdout)["status"]["conditions"]}


async def test_the_approval_example_waits_for_a_human_verdict_and_its_pod_set_updates(engine):
    applied = await run(engine, "apply", *(arg for path in APPROVAL for arg in ("-f", path)))
    assert applied.returncode == 0, applied.stderr
    assert "workload.kueue.x-k8s.io/team-a/release created" in applied.stdout.splitlines()
    inactive = "approval: not Active, so the ClusterQueue admits nothing new until admitflow.io/approval marks it Active"
    described = await until(engine, lambda r: inactive in r.stdout, "describe", "workload", "team-a/release")
    assert (
        '  approval: nobody is serving task queue "admitflow.io/approval"; '
        "mark it Active with admitflow admissioncheck activate approval"
    ) in described.stdout.splitlines()
    on = await run(engine, "admissioncheck", "activate", "approval")
    assert on.stdout.strip() == "admissioncheck.kueue.x-k8s.io/approval active"
    await until(
        engine, lambda r: _conditions(r).get("QuotaReserved") == "True", "get", "workload", "team-a/release", "-o", "json"
    )

    marker = 'approval: nobody is serving task queue "admitflow.io/approval"'
    described = await until(engine, lambda r: marker in r.stdout, "describe", "workload", "team-a/release")
    section = described.stdout.split("Admission Check Controllers:\n")[1].split("Events:")[0].splitlines()
    assert section == [
        "  approval: asked admitflow.io/approval (attempt 1 of the activity, not picked up yet)",
        '  approval: nobody is serving task queue "admitflow.io/approval"; '
        "send the verdict with admitflow verdict team-a/release approval Ready|Retry|Rejected",
    ]

    ok = await run(
        engine, "verdict", "team-a/release", "approval", "Ready", "--message", "approved by alice", "--pod-set-update",
        '{"name": "main", "nodeSelector": {"pool": "gpu"}, "labels": {"approved-by": "alice"}, '
        '"tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]}',
    )
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.splitlines()[1].split() == ["approval", "Ready", "0", "approved", "by", "alice"]
    r = await until(engine, lambda r: _conditions(r).get("Admitted") == "True", "get", "workload", "team-a/release", "-o", "json")
    [check] = json.loads(r.stdout)["status"]["admissionChecks"]
    assert check["podSetUpdates"] == [
        {
            "name": "main",
            "labels": {"approved-by": "alice"},
            "nodeSelector": {"pool": "gpu"},
            "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
        }
    ]
    [info] = (await engine.admitflow.workload("team-a/release")).pod_sets_info
    assert info.node_selector == {"instance-type": "on-demand", "pool": "gpu"}
    assert info.labels["approved-by"] == "alice"
    assert [t.to_wire() for t in info.tolerations] == [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert "Admission Check Controllers:" not in (await run(engine, "describe", "workload", "team-a/release")).stdout


@pytest.mark.parametrize(
    ("updates", "error"),
    [
        pytest.param(
            ["main:nodeSelector.pool=gpu"],
            "--pod-set-update 'main:nodeSelector.pool=gpu': not JSON (Expecting value at column 1); "
            'give an object such as {"name": "main", "nodeSelector": {"pool": "gpu"}}',
            id="a-short-form-is-not-json",
        ),
        pytest.param(
            ['{"name": "main", "nodeselector": {"pool": "gpu"}}'],
            "--pod-set-update '{\"name\": \"main\", \"nodeselector\": {\"pool\": \"gpu\"}}': "
            'nodeselector: unknown field "nodeselector"',
            id="a-misspelled-field",
        ),
        pytest.param(
            ['{"name": "main", "tolerations": [{"operator": "Equal", "value": "x"}]}'],
            "podSetUpdates[0].tolerations: Invalid value: \"array\": "
            "operator must be Exists when 'key' is empty, which means 'match all values and all keys'",
            id="a-toleration-kueue-refuses",
        ),
        pytest.param(
            ['{"name": "driver", "labels": {"a": "b"}}'],
            'podSetUpdates: unknown podSet "driver" (the workload has: main)',
            id="a-podset-the-workload-does-not-have",
        ),
        pytest.param(
            ['{"name": "main", "nodeSelector": {"pool": "gpu"}}', '{"name": "main", "labels": {"a": "b"}}'],
            'podSetUpdates[1].name: Duplicate value: "main": one podSetUpdate per podSet',
            id="two-updates-of-one-podset",
        ),
    ],
)
async def test_a_bad_pod_set_update_exits_2_with_one_line_and_changes_nothing(engine, updates, error):
    from tests.integration.test_admission_checks import setup

    await setup(engine.admitflow, "approval")
    await run(engine, "apply", "-f", "-", stdin=workload_yaml("job", "1", 0))
    await until(engine, lambda r: _conditions(r).get("QuotaReserved") == "True", "get", "workload", "job", "-o", "json")
    before = (await engine.admitflow.workload("default/job")).status.admission_checks

    bad = await run(engine, "verdict", "job", "approval", "Ready", *(a for u in updates for a in ("--pod-set-update", u)))
    assert (bad.returncode, bad.stdout, bad.stderr.splitlines()) == (2, "", [f"error: {error}"])

    report = await engine.admitflow.workload("default/job")
    assert report.status.admission_checks == before
    assert report.verdicts == []
    assert not report.status.has_condition("Admitted")


async def test_apply_wait_follows_and_get_watch_prints_changes(engine):
    r = await run(engine, "apply", "-f", "-", stdin=SETUP)
    assert r.returncode == 0, r.stderr
    watcher = subprocess.Popen(
        [ADMITFLOW, "get", "workloads", "-w", "--address", engine.address, "--namespace", engine.namespace],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        # Its first list, before the workload exists (a loaded machine starts it late); said on
        # stderr, which this test reads with stdout.
        first = await asyncio.wait_for(asyncio.to_thread(watcher.stdout.readline), 30)
        assert first.strip() == "No resources found."
        r = await run(engine, "apply", "--wait", "-f", "-", stdin=workload_yaml("waited", "2", 1))
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        assert lines[0] == "workload.kueue.x-k8s.io/default/waited created"
        assert "  default/waited                   Admitted: The workload is admitted" in lines
        assert lines[-1] == "All 1 workloads admitted."
        seen: list[tuple[str, str, str]] = []  # name, admitted, finished, read at the header's columns
        header = await asyncio.wait_for(asyncio.to_thread(watcher.stdout.readline), 30)
        admitted, finished, end = header.index("ADMITTED"), header.index("FINISHED"), header.index("AGE")

        def read_until(column: int) -> None:
            """Rows until the workload's shows True in `column` (1 admitted, 2 finished)."""
            for line in watcher.stdout:
                row = (line.split()[1], line[admitted:finished].strip(), line[finished:end].strip())
                seen.append(row)
                if row[0] == "waited" and row[column] == "True":
                    return

        # The watch prints the admitted workload before it is finished: a state that lasts until the
        # finish below, so the test waits for that row rather than racing the watch's next read.
        await asyncio.wait_for(asyncio.to_thread(read_until, 1), 30)
        assert seen[-1] == ("waited", "True", ""), seen
        await run(engine, "finish", "default/waited")
        await asyncio.wait_for(asyncio.to_thread(read_until, 2), 30)
        assert seen[-1][::2] == ("waited", "True"), seen
    finally:
        watcher.terminate()
        watcher.wait(10)


# --- kubectl's habits: Kueue namespaces, selectors, -o, kind forms, dry runs, delete -f -------------------

TEAMS = textwrap.dedent(
    """\
    apiVersion: kueue.x-k8s.io/v1beta2
    kind: LocalQueue
    metadata: {name: lq, namespace: team-a}
    spec: {clusterQueue: cq}
    ---
    apiVersion: kueue.x-k8s.io/v1beta2
    kind: LocalQueue
    metadata: {name: lq, namespace: team-b}
    spec: {clusterQueue: cq}
    ---
    apiVersion: kueue.x-k8s.io/v1beta2
    kind: LocalQueue
    metadata: {name: other, namespace: team-b}
    spec: {clusterQueue: cq}
    """
)


def labelled(name: str, namespace: str, labels: dict[str, str], queue: str = "lq") -> str:
    return json.dumps(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {
                "queueName": queue,
                "podSets": [
                    {"name": "main", "count": 1, "template": {"spec": {"containers": [
                        {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "100m"}}}
                    ]}}}
                ],
            },
        }
    )


def listed(r: subprocess.CompletedProcess) -> list[str]:
    """The keys `-o name` printed: namespace/name."""
    return [line.split("/", 1)[1] for line in r.stdout.splitlines()]


async def test_kueue_namespaces_label_selectors_and_local_queues(engine):
    r = await run(engine, "apply", "-f", "-", stdin=SETUP + "---\n" + TEAMS)
    assert r.returncode == 0, r.stderr
    workloads = [
        labelled("train", "team-a", {"team": "a", "tier": "gold"}),
        labelled("eval", "team-a", {"team": "a"}),
        labelled("train", "team-b", {"team": "b", "tier": "silver"}, queue="other"),
        labelled("other", "default", {}),
    ]
    r = await run(engine, "apply", "-f", "-", stdin="\n---\n".join(workloads))
    assert r.returncode == 0, r.stderr
    everyone = ["default/other", "team-a/eval", "team-a/train", "team-b/train"]
    await until(engine, lambda r: listed(r) == everyone, "get", "workloads", "-o", "name")

    # A list spans every Kueue namespace, with a NAMESPACE column; -A says so; -n narrows it and
    # the column goes, as with kubectl.
    r = await run(engine, "get", "workloads")
    assert r.stdout.splitlines()[0].split()[:2] == ["NAMESPACE", "NAME"]
    assert [line.split()[:2] for line in r.stdout.splitlines()[1:]] == [k.split("/") for k in everyone]
    assert listed(await run(engine, "get", "workloads", "-A", "-o", "name")) == everyone
    r = await run(engine, "get", "workloads", "-n", "team-a")
    assert r.stdout.splitlines()[0].split()[:2] == ["NAME", "QUEUE"]
    assert [line.split()[0] for line in r.stdout.splitlines()[1:]] == ["eval", "train"]
    assert listed(await run(engine, "get", "workloads", "--kueue-namespace", "team-b", "-o", "name")) == ["team-b/train"]
    r = await run(engine, "get", "localqueues", "-n", "team-b")
    assert [line.split()[:2] for line in r.stdout.splitlines()] == [["NAME", "CLUSTERQUEUE"], ["lq", "cq"], ["other", "cq"]]
    r = await run(engine, "get", "workloads", "-n", "team-z")
    assert (r.returncode, r.stdout, r.stderr.strip()) == (0, "", "No resources found in team-z namespace.")

    # -n NS NAME is NS/NAME; both, disagreeing, is an error.
    by_flag = json.loads((await run(engine, "get", "workload", "train", "-n", "team-a", "-o", "json")).stdout)
    by_key = json.loads((await run(engine, "get", "workload", "team-a/train", "-o", "json")).stdout)
    assert by_flag["metadata"] == by_key["metadata"] and by_key["metadata"]["labels"] == {"team": "a", "tier": "gold"}
    r = await run(engine, "get", "workload", "team-a/train", "-n", "team-b")
    assert (r.returncode, r.stdout, r.stderr.splitlines()) == (
        2, "", ['error: "team-a/train" is in namespace team-a, but -n/--kueue-namespace says team-b: give the namespace once']
    )

    # kubectl's label selectors, and kueuectl's --localqueue.
    for selector, expected in [
        ("team=a", ["team-a/eval", "team-a/train"]),
        ("team==b", ["team-b/train"]),
        ("team!=a", ["default/other", "team-b/train"]),
        ("tier in (gold,silver)", ["team-a/train", "team-b/train"]),
        ("tier notin (gold)", ["default/other", "team-a/eval", "team-b/train"]),
        ("tier", ["team-a/train", "team-b/train"]),
        ("!tier", ["default/other", "team-a/eval"]),
        ("team=a,tier", ["team-a/train"]),
    ]:
        r = await run(engine, "get", "workloads", "-l", selector, "-o", "name")
        assert (r.returncode, listed(r)) == (0, expected), f"-l {selector!r}: {r.stderr}"
    assert listed(await run(engine, "get", "workloads", "-l", "team=a", "-n", "team-b", "-o", "name")) == []
    r = await run(engine, "get", "workloads", "--localqueue", "lq", "-o", "name")
    assert listed(r) == ["default/other", "team-a/eval", "team-a/train"]
    assert listed(await run(engine, "get", "workloads", "--localqueue", "lq", "-n", "team-a", "-o", "name")) == ["team-a/eval", "team-a/train"]
    assert listed(await run(engine, "get", "workloads", "--localqueue", "other", "-o", "name")) == ["team-b/train"]

    # Every command that names a workload takes -n.
    r = await run(engine, "finish", "train", "-n", "team-b")
    assert (r.returncode, r.stdout.strip()) == (0, "workload.kueue.x-k8s.io/team-b/train finished"), r.stderr
    await until(engine, lambda r: listed(r) == ["team-b/train"], "get", "workloads", "--phase", "Finished", "-o", "name")
    r = await run(engine, "describe", "workload", "eval", "--kueue-namespace", "team-a")
    assert "Namespace:    team-a" in r.stdout.splitlines(), r.stderr


async def test_output_wide_and_name_and_kind_forms(engine):
    r = await run(engine, "apply", "-f", "-", stdin=SETUP)
    assert r.returncode == 0, r.stderr
    await run(engine, "apply", "-f", "-", stdin=workload_yaml("one", "1", 3))
    await until(engine, lambda r: _conditions(r).get("Admitted") == "True", "get", "workload", "one", "-o", "json")
    await until(engine, lambda r: "Admitted" in r.stdout, "get", "workloads", "-o", "wide")

    r = await run(engine, "get", "workloads", "-o", "wide")
    header, row = r.stdout.splitlines()
    assert header.split("   ") == ["NAMESPACE", "NAME", "QUEUE", "RESERVED IN", "ADMITTED", "FINISHED", "AGE", "PRIORITY", "PENDING CHECKS", "STATUS"]
    assert row.split()[:5] + row.split()[-3:] == ["default", "one", "lq", "cq", "True", "3", "<none>", "Admitted"]
    r = await run(engine, "get", "clusterqueues", "-o", "wide")
    header, row = r.stdout.splitlines()
    assert header.split("   ")[-3:] == ["FLAVORS", "ADMISSION CHECKS", "AGE"]
    assert row.split()[-3:-1] == ["default", "<none>"]

    # -o name: kind.group/key lines that admitflow takes back.
    r = await run(engine, "get", "workloads", "-o", "name")
    assert r.stdout.splitlines() == ["workload.kueue.x-k8s.io/default/one"]
    r = await run(engine, "get", "rf", "-o", "name")
    assert r.stdout.splitlines() == ["resourceflavor.kueue.x-k8s.io/default"]

    # kind/name and kind.group forms name the same object.
    for form in (["cq", "cq"], ["cq/cq"], ["clusterqueue.kueue.x-k8s.io", "cq"], ["clusterqueues.v1beta2.kueue.x-k8s.io/cq"]):
        r = await run(engine, "get", *form, "-o", "json")
        assert (r.returncode, json.loads(r.stdout or "{}").get("metadata", {}).get("name")) == (0, "cq"), (form, r.stderr)
    r = await run(engine, "get", "workloads.kueue.x-k8s.io", "-o", "name")
    assert r.stdout.splitlines() == ["workload.kueue.x-k8s.io/default/one"]
    r = await run(engine, "describe", "workload.kueue.x-k8s.io/default/one")
    assert r.returncode == 0 and "Name:         one" in r.stdout, r.stderr
    r = await run(engine, "get", "cq/cq", "cq")
    assert (r.returncode, r.stderr.strip()) == (
        2, "error: there is no need to give a name as a separate argument when it is given as KIND/NAME (cq/cq)"
    )
    r = await run(engine, "finish", "one")
    assert r.returncode == 0, r.stderr
    await until(engine, lambda r: _conditions(r).get("Finished") == "True", "get", "workload", "one", "-o", "json")
    r = await run(engine, "delete", "localqueue.kueue.x-k8s.io/default/lq")
    assert (r.returncode, r.stdout.strip()) == (0, "localqueue.kueue.x-k8s.io/default/lq deleted"), r.stderr


async def _catalog_quiet(engine) -> int:
    """The catalog's history length once it has nothing in flight (no activity, no workflow task):
    nothing more is written to it until a message comes."""
    handle = engine.client.get_workflow_handle(ids.CATALOG_ID)

    async def quiet():
        desc = await handle.describe()
        raw = desc.raw_description
        return not raw.pending_activities and not raw.HasField("pending_workflow_task") and desc.history_length

    return await eventually(quiet)


async def _workflow_exists(engine, workflow_id: str) -> bool:
    from temporalio.service import RPCError, RPCStatusCode

    try:
        await engine.client.get_workflow_handle(workflow_id).describe()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return False
        raise
    return True


async def test_apply_dry_run_client_and_server_change_nothing(engine):
    created = [
        "resourceflavor.kueue.x-k8s.io/default created (dry run)",
        "clusterqueue.kueue.x-k8s.io/cq created (dry run)",
        "localqueue.kueue.x-k8s.io/default/lq created (dry run)",
    ]
    for mode in ("client", "server"):
        r = await run(engine, "apply", f"--dry-run={mode}", "-f", "-", stdin=SETUP)
        assert (r.returncode, r.stdout.splitlines()) == (0, created), r.stderr
    assert not await _workflow_exists(engine, ids.CATALOG_ID), "a dry run started the catalog"

    r = await run(engine, "apply", "-f", "-", stdin=SETUP)
    assert r.returncode == 0, r.stderr
    await until_active(engine)  # its status, stored below, is final once it has its view
    before = await _catalog_quiet(engine)
    stored = (await run(engine, "get", "clusterqueue", "cq", "-o", "json")).stdout
    changed = SETUP.replace("nominalQuota: 4", "nominalQuota: 8") + textwrap.dedent(
        """\
        ---
        apiVersion: kueue.x-k8s.io/v1beta2
        kind: ResourceFlavor
        metadata: {name: spot}
        ---
        """
    ) + workload_yaml("planned", "1", 0)
    for mode in ("server", "client"):
        r = await run(engine, "apply", "--dry-run", mode, "-f", "-", stdin=changed)
        assert (r.returncode, r.stdout.splitlines()) == (0, [
            "resourceflavor.kueue.x-k8s.io/default unchanged (dry run)",
            "clusterqueue.kueue.x-k8s.io/cq configured (dry run)",
            "localqueue.kueue.x-k8s.io/default/lq unchanged (dry run)",
            "resourceflavor.kueue.x-k8s.io/spot created (dry run)",
            "workload.kueue.x-k8s.io/default/planned created (dry run)",
        ]), (mode, r.stderr)

        # What the apply update would refuse, the dry run refuses, with the file and document.
        moved = SETUP.replace("spec: {clusterQueue: cq}", "spec: {clusterQueue: elsewhere}")
        r = await run(engine, "apply", f"--dry-run={mode}", "-f", "-", stdin=moved)
        assert (r.returncode, r.stdout, r.stderr.splitlines()) == (2, "", [
            'error: <stdin>: document 3 (LocalQueue lq): LocalQueue "default/lq" is invalid: spec.clusterQueue: '
            'Invalid value: "elsewhere": field is immutable'
        ]), mode

    # Nothing reached the catalog's history (a query writes nothing), nor started a workload.
    assert await _catalog_quiet(engine) == before
    assert (await run(engine, "get", "clusterqueue", "cq", "-o", "json")).stdout == stored
    assert not await _workflow_exists(engine, ids.workload_id("default/planned"))

    # A workload's dry run refuses what its submission would: a new spec for a running workload.
    await run(engine, "apply", "-f", "-", stdin=workload_yaml("planned", "1", 0))
    r = await run(engine, "apply", "--dry-run=server", "-f", "-", stdin=workload_yaml("planned", "2", 0))
    assert (r.returncode, r.stderr.splitlines()) == (2, [
        "error: <stdin>: document 1 (Workload planned): spec: Forbidden: the spec of a submitted workload is immutable but "
        "for its priority; delete it and apply again"
    ])
    r = await run(engine, "apply", "--dry-run=server", "--wait", "-f", "-", stdin=SETUP)
    assert (r.returncode, r.stderr.strip()) == (2, "error: --wait follows what was applied, and --dry-run applies nothing: give one of them")


async def test_delete_f_deletes_every_object_of_a_file_last_first(engine, tmp_path):
    path = tmp_path / "all.yaml"
    path.write_text(SETUP + "---\n" + workload_yaml("one", "1", 0))
    r = await run(engine, "apply", "-f", str(path))
    assert r.returncode == 0, r.stderr
    await until(engine, lambda r: r.returncode == 0, "get", "workload", "one")

    r = await run(engine, "delete", "-f", str(path))
    assert (r.returncode, r.stdout.splitlines(), r.stderr) == (0, [
        "workload.kueue.x-k8s.io/default/one deleted",
        "localqueue.kueue.x-k8s.io/default/lq deleted",
        "clusterqueue.kueue.x-k8s.io/cq deleted",
        "resourceflavor.kueue.x-k8s.io/default deleted",
    ], "")

    # One object missing: its error line, the others deleted all the same, and status 1.
    await run(engine, "apply", "-f", str(path))
    await until(engine, lambda r: r.returncode == 0, "get", "workload", "one")
    r = await run(engine, "delete", "cq/cq")
    assert r.stdout.strip() == "clusterqueue.kueue.x-k8s.io/cq deleted", r.stderr
    r = await run(engine, "delete", "-f", str(path))
    assert (r.returncode, r.stdout.splitlines(), r.stderr.splitlines()) == (1, [
        "workload.kueue.x-k8s.io/default/one deleted",
        "localqueue.kueue.x-k8s.io/default/lq deleted",
        "resourceflavor.kueue.x-k8s.io/default deleted",
    ], [f'error: {path}: document 2 (ClusterQueue cq): clusterqueues "cq" not found'])
    r = await run(engine, "get", "localqueues")
    assert (r.returncode, r.stdout, r.stderr.strip()) == (0, "", "No resources found.")
