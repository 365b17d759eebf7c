"""The commands that run admitflow's processes: `dev` (a Temporal dev server with a worker),
`worker`, `kube-runner`, `exporter`, `codec-server`; and `setup`, which readies a Temporal
namespace for them."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

from admitflow.cli.connection import connect
from admitflow.cli.errors import EXIT_ERROR, EXIT_UNREACHABLE, CLIError
from admitflow.cli.manifests import followed, print_outcomes, read_manifests
from admitflow.cli.parser import WORKER_SETTINGS


async def cmd_worker(args: argparse.Namespace) -> None:
    from admitflow.worker.logging import configure
    from admitflow.worker.main import (
        build_worker,
        metrics_runtime,
        provisioning_backend,
        run_until_signalled,
        sdk_options,
        tune_collector,
    )

    configure(args.log_level)
    version = _deployment_version(args)
    client = await connect(args, metrics_runtime(args.metrics_port))
    try:
        backend = provisioning_backend(args.provisioning_backend, client.client, args.kubeconfig, args.context)
    except Exception as err:
        raise CLIError(f"--provisioning-backend {args.provisioning_backend}: {err}") from None
    from admitflow import registration

    missing = await registration.missing_search_attributes(client.client)
    if missing:
        raise CLIError(
            f"search attributes {', '.join(missing)} are not registered in namespace {client.client.namespace}: "
            "run `admitflow setup` first"
        )
    settings = {
        flag.replace("-", "_"): getattr(args, flag.replace("-", "_"))
        for flag, _, _ in WORKER_SETTINGS
        if getattr(args, flag.replace("-", "_")) is not None
    }
    tune_collector()
    worker = build_worker(client.client, client.task_queue, provisioning=backend, deployment=version, **sdk_options(**settings))
    import structlog

    from admitflow import versioning

    async def first_build_current() -> None:
        # A deployment's first build makes itself current; later ones are made current by whoever
        # rolls them out (`admitflow deployment set-current`), once they run.
        if await versioning.set_current_if_none(client.client, version):
            structlog.get_logger("admitflow.worker").info("deployment_current", version=version.to_canonical_string())

    await run_until_signalled(worker, started=first_build_current)


async def cmd_kube_runner(args: argparse.Namespace) -> None:
    import importlib.util

    from admitflow.worker.logging import configure

    if importlib.util.find_spec("kubernetes") is None:
        raise CLIError("kube-runner needs the Kubernetes client: pip install 'admitflow[kubernetes]'")
    from temporalio.exceptions import ApplicationError

    from admitflow import registration
    from admitflow.activities.jobs.kube_runner import KubeRunner, check_task_queue, namespace_selector
    from admitflow.activities.jobs.kubernetes import KubernetesJobs
    from admitflow.activities.kubernetes_api import KubernetesApiError, KubernetesCredentialsError
    from admitflow.worker.main import run_until_signalled

    configure(args.log_level)
    try:
        check_task_queue(args.runner_queue)
    except ValueError as err:
        raise CLIError(f"--runner-queue {err}") from None
    options = {"resync_seconds": args.resync_seconds}
    if args.managed_namespaces is not None:
        try:
            options["managed_namespaces"] = namespace_selector(args.managed_namespaces)
        except ValueError as err:
            raise CLIError(f"--managed-namespaces: {err}") from None
    try:
        jobs = KubernetesJobs.from_config(args.kubeconfig, args.context)
    except KubernetesCredentialsError as err:
        raise CLIError(str(err)) from None
    try:
        client = await connect(args)
    except BaseException:
        await jobs.close()
        raise
    runner = KubeRunner(client, jobs, args.runner_queue, **options)
    missing = await registration.missing_search_attributes(client.client)
    if missing:
        await jobs.close()
        raise CLIError(
            f"search attributes {', '.join(missing)} are not registered in namespace {client.client.namespace}: "
            "run `admitflow setup` first"
        )
    try:
        await run_until_signalled(runner)
    except (KubernetesApiError, ApplicationError, TimeoutError) as err:
        raise CLIError(f"kube-runner: {err}", EXIT_ERROR) from None


async def cmd_setup(args: argparse.Namespace) -> None:
    from admitflow import registration
    from admitflow.worker.connection import from_arguments

    conn = from_arguments(args)
    client = (await connect(args, check_namespace=False)).client  # it creates a namespace that is missing
    if await registration.ensure_namespace(client):
        print(f"namespace {client.namespace} created")
        # A new namespace takes a moment to reach every frontend cache.
        for _ in range(50):
            try:
                await registration.missing_search_attributes(client)
                break
            except Exception:
                await asyncio.sleep(0.2)
    added = await registration.ensure_search_attributes(client)
    for name in added:
        print(f"search attribute {name} registered")
    print(f"{conn.target} is ready for admitflow")


async def cmd_dev(args: argparse.Namespace) -> None:
    from admitflow.progress import follow
    from admitflow.worker.logging import configure
    from admitflow.worker.main import build_worker, metrics_runtime, tune_collector

    from admitflow import controller as sdk
    from admitflow import gauges
    from admitflow.devserver import REPORTED_PROBLEMS, DevServer, DevServerError

    from admitflow import versioning

    manifests = read_manifests(args.filename) if args.filename else []
    version = _deployment_version(args)
    try:
        controllers = [c for path in args.controller for c in sdk.load(path)]
    except Exception as err:
        raise CLIError(f"--controller: {err}") from None
    configure("WARNING")
    server = DevServer(
        port=args.port, ui_port=args.ui_port, db=args.db, dynamic_config=REPORTED_PROBLEMS, metrics_port=args.server_metrics_port,
    )
    print(f"Starting the Temporal dev server on {server.address} (database {args.db}) ...", flush=True)
    try:
        await server.start()
    except DevServerError as err:
        raise CLIError(str(err), EXIT_UNREACHABLE) from None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    runners: list[subprocess.Popen] = []
    # The dev server is ours and plaintext: Temporal settings exported for another server (TLS,
    # an API key, a profile) must reach neither our client nor the runner we start.
    for name in [n for n in os.environ if n.startswith("TEMPORAL_")]:
        del os.environ[name]
    try:
        args.address = server.address
        # One port serves everything: the SDK's metrics (the worker's counters and histograms) on a
        # loopback port of their own, read again with the gauges at each scrape of --metrics-port.
        sdk_port = gauges.loopback_port() if args.metrics_port is not None else None
        client = await connect(args, metrics_runtime(sdk_port, host="127.0.0.1"))
        sdk_metrics = f"http://127.0.0.1:{sdk_port}/metrics" if sdk_port is not None else None
        tune_collector()
        async with (
            build_worker(client.client, client.task_queue, deployment=version),
            gauges.serving(client.client, args.metrics_port, also=sdk_metrics),
        ):
            # The dev server is this build's alone: it is current, and a run pinned to a build of an
            # earlier `make run` moves to it at its next continue-as-new.
            await versioning.set_current(client.client, version)
            print(
                f"Temporal Web UI: {server.ui_url}   worker on task queue '{client.task_queue}', "
                f"build {version.build_id} of deployment {version.deployment_name}", flush=True,
            )
            running = [asyncio.ensure_future(c.run(client.client)) for c in controllers]
            for c in controllers:
                print(f"Check controller {c.name} serving its task queue", flush=True)
            for path in args.runner:
                runner = _start_runner(path, server.address, client.client.namespace, args.db.parent)
                runners.append(runner)
                print(
                    f"Runner {path} (pid {runner.pid}, log {args.db.parent / 'runner.log'}); "
                    f"`kill -9 {runner.pid}` makes the workloads it runs time out and requeue",
                    flush=True,
                )
            if manifests:
                outcomes = await client.apply(manifests)
                print_outcomes(outcomes)
                # Followed until Ctrl-C, so that what a person does later (a verdict) shows here too.
                settled = asyncio.Event()
                keys = await followed(client, outcomes)
                running.append(asyncio.ensure_future(follow(client, keys, settled.set)))
                await asyncio.wait(
                    {asyncio.ensure_future(settled.wait()), asyncio.ensure_future(stop.wait())},
                    return_when=asyncio.FIRST_COMPLETED,
                )
            if not stop.is_set():
                print(f"Everything is running. Open {server.ui_url} to read each workload's history. Ctrl-C stops.", flush=True)
                await stop.wait()
            print("Stopping ...", flush=True)
            for task in running:
                task.cancel()
    finally:
        for runner in runners:
            runner.terminate()
        for runner in runners:
            try:
                runner.wait(10)
            except subprocess.TimeoutExpired:
                runner.kill()
        server.stop()


async def cmd_exporter(args: argparse.Namespace) -> None:
    from admitflow import gauges
    from admitflow.worker.logging import configure

    configure(args.log_level)
    client = await connect(args)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with gauges.serving(client.client, args.metrics_port):
        print(f"admitflow gauges on http://0.0.0.0:{args.metrics_port}/metrics (namespace {client.client.namespace}); "
              "Ctrl-C stops", flush=True)
        await stop.wait()


async def cmd_codec_server(args: argparse.Namespace) -> None:
    from admitflow.codec import EncryptionConfigError, data_converter, encryption_codec
    from admitflow.codec_server import DEFAULT_ORIGINS, server

    try:
        codec = data_converter().payload_codec
        keys = encryption_codec()
    except EncryptionConfigError as err:
        raise CLIError(str(err)) from None
    try:
        httpd = server(codec, args.ip, args.port, args.allow_origin or DEFAULT_ORIGINS)
    except OSError as err:
        raise CLIError(f"cannot listen on {args.ip}:{args.port}: {err.strerror or err}", EXIT_UNREACHABLE) from None
    if keys is None:
        print("warning: no ADMITFLOW_ENCRYPTION_KEY: only compressed payloads will be decoded", file=sys.stderr)
    print(f"codec server on http://{args.ip}:{httpd.server_address[1]} (POST /decode, /encode); Ctrl-C stops", flush=True)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, httpd.shutdown)
    try:
        await asyncio.to_thread(httpd.serve_forever)
    finally:
        httpd.server_close()


def _start_runner(path: str, address: str, namespace: str, logs: Path) -> subprocess.Popen:
    """A runner program in its own process (so that it can be killed on its own), on the dev server.
    It goes when `admitflow dev` does, however that ends (its commands go with it)."""
    from admitflow.devserver import die_with_parent

    if not Path(path).is_file():
        raise CLIError(f"--runner: {path}: no such file")
    logs.mkdir(parents=True, exist_ok=True)
    with (logs / "runner.log").open("a") as log:
        return subprocess.Popen(
            [sys.executable, path, "--address", address, "--namespace", namespace, "--logs", str(logs / "runs")],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, preexec_fn=die_with_parent,
        )


def _deployment_version(args: argparse.Namespace):
    """The build this worker runs as (--deployment-name, --build-id), or a one-line error (exit 2)."""
    from admitflow import versioning

    try:
        return versioning.deployment_version(args.deployment_name, args.build_id)
    except versioning.VersioningError as err:
        raise CLIError(str(err)) from None
