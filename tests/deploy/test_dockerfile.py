"""docker/Dockerfile, read rather than built (no Docker engine is needed): hadolint when it is
installed, then what the image must be: a pinned slim Python base, dependencies from the pinned
list that pyproject.toml's pins produce, a non-root user, `admitflow worker` as its entrypoint and
a health check that asks the worker itself (docker/healthcheck.py, tested here against a stand-in
metrics endpoint and in test_deployment.py against a real worker)."""

from __future__ import annotations

import fnmatch
import http.server
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from packaging.specifiers import SpecifierSet

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "docker" / "Dockerfile"


def load_script(path: Path):
    """A script of docker/ as a module (docker/ is no package, and `docker` is the Docker SDK's name)."""
    spec = importlib.util.spec_from_file_location(f"admitflow_docker_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


healthcheck = load_script(ROOT / "docker" / "healthcheck.py")
check, pollers = healthcheck.check, healthcheck.pollers


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    current = ""
    for line in text.splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            current += line.rstrip()[:-1] + " "
            continue
        current += line
        keyword, _, args = current.strip().partition(" ")
        out.append((keyword.upper(), " ".join(args.split())))
        current = ""
    return out


@pytest.fixture(scope="module")
def dockerfile() -> list[tuple[str, str]]:
    return instructions(DOCKERFILE.read_text())


def final_stage(steps: list[tuple[str, str]]) -> list[tuple[str, str]]:
    starts = [i for i, (k, _) in enumerate(steps) if k == "FROM"]
    return steps[starts[-1] :]


def build_args(steps: list[tuple[str, str]]) -> dict[str, str]:
    return dict(a.split("=", 1) for k, a in steps if k == "ARG" and "=" in a)


def base_image(steps: list[tuple[str, str]]) -> str:
    image = next(a for k, a in final_stage(steps) if k == "FROM").split()[0]
    return re.sub(r"\$\{(\w+)\}", lambda m: build_args(steps)[m[1]], image)


def test_hadolint_finds_nothing():
    hadolint = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))
    if hadolint is None:
        pytest.skip("hadolint is not installed: no `hadolint` on PATH or beside this interpreter")
    r = subprocess.run([hadolint, str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_base_image_is_a_pinned_slim_python_that_pyproject_allows(dockerfile):
    image = base_image(dockerfile)
    m = re.fullmatch(r"python:(\d+\.\d+\.\d+)-slim-\w+(@sha256:[0-9a-f]{64})?", image)
    assert m, f"{image}: not python:X.Y.Z-slim-<debian release>"
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert m[1] in SpecifierSet(requires)
    # Both stages build on the same base, so the venv copied across finds its interpreter.
    assert {a.split()[0] for k, a in dockerfile if k == "FROM"} == {"${PYTHON_IMAGE}"}


def test_the_image_runs_as_a_user_that_is_not_root(dockerfile):
    users = [a for k, a in final_stage(dockerfile) if k == "USER"]
    assert users, "no USER in the final stage: the image would run as root"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) != 0 and gid.isdigit() and int(gid) != 0
    created = " ".join(a for k, a in final_stage(dockerfile) if k == "RUN")
    assert f"--uid {uid}" in created and f"--gid {gid}" in created
    compose = yaml.safe_load((ROOT / "docker" / "compose.yaml").read_text())
    assert compose["x-admitflow"]["user"] == users[-1]


def test_the_entrypoint_is_admitflow_worker(dockerfile):
    (entrypoint,) = [a for k, a in final_stage(dockerfile) if k == "ENTRYPOINT"]
    assert json.loads(entrypoint) == ["admitflow", "worker"]
    assert not [a for k, a in final_stage(dockerfile) if k == "CMD"]


def test_the_health_check_runs_the_worker_check_on_the_exposed_metrics_port(dockerfile):
    stage = final_stage(dockerfile)
    (health,) = [a for k, a in stage if k == "HEALTHCHECK"]
    options, _, command = health.partition(" CMD ")
    assert json.loads(command) == ["python", "/opt/admitflow/healthcheck.py"]
    assert re.search(r"--interval=\d+s", options) and re.search(r"--retries=\d+", options)
    assert ("COPY", "docker/healthcheck.py /opt/admitflow/healthcheck.py") in stage
    env = " ".join(a for k, a in stage if k == "ENV")
    port = re.search(r"ADMITFLOW_METRICS_PORT=(\d+)", env)[1]
    assert ("EXPOSE", port) in stage


def test_dependencies_come_from_the_pinned_list(dockerfile):
    """The image installs admitflow and its kubernetes extra through the repository's constraints
    (tests/unit/test_packaging.py checks that they pin every distribution that installs)."""
    installs = [a for k, a in dockerfile if k == "RUN" and "pip install" in a]
    assert len(installs) == 1
    assert "pip install --constraint /tmp/constraints.txt '.[kubernetes]'" in installs[0]
    assert ("COPY", "constraints.txt /tmp/constraints.txt") in dockerfile


def dockerignored(path: str) -> bool:
    """Whether .dockerignore keeps `path` out of the build context (its last matching rule wins)."""
    ignored = False
    for rule in (ROOT / ".dockerignore").read_text().splitlines():
        rule = rule.strip()
        if not rule or rule.startswith("#"):
            continue
        negate, pattern = rule.startswith("!"), rule.lstrip("!")
        candidates = [path] + [str(p) for p in Path(path).parents if str(p) != "."]
        if any(fnmatch.fnmatch(c, pattern) or fnmatch.fnmatch(c, pattern.replace("**/", "")) for c in candidates):
            ignored = not negate
    return ignored


def test_everything_the_dockerfile_copies_exists_and_is_in_the_build_context(dockerfile):
    for keyword, args in dockerfile:
        if keyword != "COPY" or args.startswith("--from"):
            continue
        *sources, _destination = args.split()
        for source in sources:
            assert (ROOT / source).exists(), source
            assert not dockerignored(source.rstrip("/")), f"{source} is excluded by .dockerignore"
    for kept_out in (".venv", ".git", "tests", ".admitflow", "docker/compose.yaml", "workflows/__pycache__"):
        assert dockerignored(kept_out), kept_out


# --- docker/healthcheck.py against a stand-in metrics endpoint ------------------------------------

METRICS = """\
# HELP temporal_num_pollers Current number of concurrent pollers
temporal_num_pollers{namespace="default",poller_type="workflow_task",service_name="temporal-core-sdk",task_queue="admitflow"} 1
temporal_num_pollers{namespace="default",poller_type="activity_task",service_name="temporal-core-sdk",task_queue="admitflow"} 5
temporal_num_pollers{namespace="default",poller_type="activity_task",service_name="temporal-core-sdk",task_queue="admitflow-2"} 3
temporal_worker_start{namespace="default",service_name="temporal-core-sdk",task_queue="admitflow"} 1
"""


@pytest.fixture
def metrics_endpoint() -> Iterator[tuple[int, list[str]]]:
    body = [METRICS]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            data = body[0].encode()
            self.send_response(200 if self.path == "/metrics" else 404)
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1], body
    server.shutdown()


def test_pollers_count_only_the_task_queue_asked_about():
    assert pollers(METRICS, "admitflow") == 6
    assert pollers(METRICS, "admitflow-2") == 3
    assert pollers(METRICS, "admitflo") == 0


def test_the_health_check_passes_while_the_worker_polls_its_task_queue(metrics_endpoint):
    port, _ = metrics_endpoint
    assert check({"ADMITFLOW_METRICS_PORT": str(port)}) == (True, "6 pollers on task queue admitflow")
    assert check({"ADMITFLOW_METRICS_PORT": str(port), "ADMITFLOW_TASK_QUEUE": "admitflow-2"})[0]


def test_the_health_check_fails_without_pollers_on_its_task_queue(metrics_endpoint):
    port, body = metrics_endpoint
    ok, why = check({"ADMITFLOW_METRICS_PORT": str(port), "ADMITFLOW_TASK_QUEUE": "elsewhere"})
    assert (ok, why) == (False, f"no pollers on task queue elsewhere in http://127.0.0.1:{port}/metrics")
    body[0] = METRICS.replace("} 1\n", "} 0\n").replace("} 5\n", "} 0\n")
    assert not check({"ADMITFLOW_METRICS_PORT": str(port)})[0]


def test_the_health_check_fails_without_a_metrics_endpoint():
    assert check({}) == (False, "ADMITFLOW_METRICS_PORT is not set: the worker serves no metrics to check")
    with __import__("socket").socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: refused
        ok, why = check({"ADMITFLOW_METRICS_PORT": str(port)})
    assert not ok and why.startswith(f"no metrics at http://127.0.0.1:{port}/metrics:")
