"""A real Prometheus for tests: Debian's `prometheus` package (2.42 on bookworm), started on a free
loopback port with a data directory of its own, scraping the targets a test gives it, and asked
through its HTTP API as Grafana asks it.

Where `prometheus` is not installed the test is skipped with that reason, except under CI=true,
where it fails: `.ci/run` installs the package, so in CI a missing binary is a broken setup, not a
reason to skip.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

INSTALL = "apt-get install prometheus (Debian's package; .ci/run installs it)"


def binary() -> str:
    """The `prometheus` on PATH; else the test skips, or fails under CI=true."""
    found = shutil.which("prometheus")
    if found:
        return found
    reason = f"no prometheus on PATH: {INSTALL}"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}; CI must run this test, not skip it")
    pytest.skip(reason)


@dataclass(frozen=True)
class Job:
    name: str
    targets: list[str]  # host:port
    interval: str = "1s"
    timeout: str | None = None


class QueryError(AssertionError):
    """Prometheus refused a query (a parse error, a bad parameter): its own message."""


class Prometheus:
    def __init__(self, directory: Path, jobs: list[Job], port: int) -> None:
        self.url = f"http://127.0.0.1:{port}"
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [
                {"job_name": j.name, "scrape_interval": j.interval, "scrape_timeout": j.timeout or j.interval,
                 "static_configs": [{"targets": j.targets}]}
                for j in jobs
            ],
        }
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.log = directory / "prometheus.log"
        self.process = subprocess.Popen(
            [
                binary(), f"--config.file={directory / 'prometheus.yml'}", f"--storage.tsdb.path={directory / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=subprocess.DEVNULL, stderr=self.log.open("w"),
        )

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"prometheus exited with {self.process.returncode}: {self.log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"prometheus not ready within {timeout}s: {self.log.read_text()[-2000:]}")

    def wait_scraped(self, *jobs: str, timeout: float = 30.0) -> None:
        """Until each of these jobs has been scraped once: Prometheus starts scraping a few seconds
        after it is ready (it applies new targets at most every 5 s), and each target at an offset
        within its interval."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            up = self._get("/api/v1/query", query="up == 1")["result"]
            if {s["metric"]["job"] for s in up} >= set(jobs):
                return
            time.sleep(0.2)
        raise AssertionError(f"not every job of {jobs} was scraped within {timeout}s: {self.targets_up()}")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)

    def _get(self, path: str, **params) -> dict:
        url = f"{self.url}{path}?{urllib.parse.urlencode(params, doseq=True)}"
        try:
            with urllib.request.urlopen(url, timeout=30) as resp:
                body = json.load(resp)
        except urllib.error.HTTPError as err:
            body = json.loads(err.read() or b"{}")
            raise QueryError(f"{body.get('errorType')}: {body.get('error')} ({params})") from None
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str, at: float) -> list[dict]:
        """An instant query: [{"metric": {...}, "value": [t, "v"]}]."""
        data = self._get("/api/v1/query", query=expr, time=at)
        assert data["resultType"] == "vector", data
        return data["result"]

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict]:
        """A range query, start and end aligned to the step as Grafana aligns them:
        [{"metric": {...}, "values": [[t, "v"], ...]}]."""
        start, end = start // step * step, end // step * step
        data = self._get("/api/v1/query_range", query=expr, start=start, end=end, step=step)
        assert data["resultType"] == "matrix", data
        return data["result"]

    def label_values(self, label: str, match: str, start: float, end: float) -> list[str]:
        """Grafana's label_values(metric, label) variable query."""
        return self._get(f"/api/v1/label/{label}/values", **{"match[]": match, "start": start, "end": end})

    def targets_up(self) -> dict[str, str]:
        """Each scrape pool's health, as /targets shows it."""
        data = self._get("/api/v1/targets")
        return {t["scrapePool"]: t["health"] for t in data["activeTargets"]}
