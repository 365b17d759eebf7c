"""Write an admission check controller in a few lines: a Temporal worker on the controller's task queue.

    from admitflow.controller import CheckRequest, Controller, ready, retry

    controller = Controller("example.com/quota-office", parameters=MyParameters)

    @controller.check
    async def check(request: CheckRequest[MyParameters]) -> Verdict:
        return ready() if request.parameters.open else retry("office closed", after=3600)

    controller.main()   # or: await controller.run(client)

The engine asks by running activity `admission_check` on the task queue named by the AdmissionCheck's
`controllerName`, once per attempt while the workload holds quota; the function's verdict is the
first answer (`pending()` means "I will send one later", with `send`). While it runs, the controller
marks the AdmissionChecks that name it `Active`, or `Active=False` reason `BadParametersRef` when
their parameters do not parse into its model. docs/controllers.md has the tutorial and the contract
for other Temporal SDKs.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Generic, TypeVar

import structlog
from pydantic import BaseModel, ValidationError
from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from admitflow import contract, ids
from admitflow.wire import first_error
from admitflow.admission import workload as wl
from admitflow.admission.checks import CheckRequest as CheckInput
from admitflow.admission.checks import Verdict, attempt_of
from admitflow.api import AdmissionCheck, Workload
from admitflow.api.check_parameters import API_GROUP, AdmissionCheckParameters
from admitflow.api.workload import PodSetUpdate
from admitflow.client import AdmitflowClient

__all__ = ["CheckRequest", "Controller", "Verdict", "pending", "ready", "rejected", "retry"]

P = TypeVar("P", bound=BaseModel)

ACTIVE = ("Active", "The admission check is active")
# The Workload itself in a workload's report (which adds check attempts, and in a query's, events).
WORKLOAD_FIELDS = set(Workload.model_fields)
# A background function that failed or returned is started again after this.
RESTART_AFTER = timedelta(seconds=5)
BAD_PARAMETERS = "BadParametersRef"


def ready(message: str = "", pod_set_updates: list[PodSetUpdate | dict] | None = None) -> Verdict:
    """Admit, as far as this check goes; `pod_set_updates` are merged into the pods when admitted."""
    updates = [PodSetUpdate.model_validate(u) if isinstance(u, dict) else u for u in pod_set_updates or ()]
    return Verdict(name="", state="Ready", message=message, pod_set_updates=updates or None)


def pending(message: str = "") -> Verdict:
    """Not decided yet: the controller sends the verdict later with `Controller.send`."""
    return Verdict(name="", state="Pending", message=message)


def retry(message: str = "", after: timedelta | float | None = None) -> Verdict:
    """Give the quota back and try again after `after` (seconds or a timedelta); without it the
    AdmissionCheck's retryStrategy decides, else the workload is requeued at once."""
    seconds = after.total_seconds() if isinstance(after, timedelta) else after
    # Rounded up: a retry must never come before the moment the controller named.
    delay = None if seconds is None else math.ceil(seconds)
    return Verdict(name="", state="Retry", message=message, requeue_after_seconds=delay)


def rejected(message: str = "") -> Verdict:
    """Deactivate the workload."""
    return Verdict(name="", state="Rejected", message=message)


@dataclass(frozen=True)
class CheckRequest(Generic[P]):
    """One question: may `workload` pass `admission_check` in this attempt?"""

    workload: Workload
    admission_check: str
    parameters: P | None
    attempt: int
    workflow_id: str

    @property
    def key(self) -> str:
        """The workload as `namespace/name`."""
        return f"{self.workload.metadata.namespace}/{self.workload.metadata.name}"


CheckFunction = Callable[[CheckRequest[Any]], Awaitable[Verdict]]


class Controller(Generic[P]):
    """An admission check controller: `name` is its `controllerName`, which is also the Temporal
    task queue it serves. `parameters` is the pydantic model of the `spec` of its
    AdmissionCheckParameters objects (None: it takes no parameters)."""

    def __init__(self, name: str, parameters: type[P] | None = None, check: CheckFunction | None = None) -> None:
        self.name = name
        self.parameters_model = parameters
        self._check = check
        self._background: list[Callable[[], Awaitable[None]]] = []
        self.client: Client | None = None

    @property
    def log(self) -> Any:
        """structlog bound to this controller (looked up on use, so that logging configured after
        the controller was created applies)."""
        return structlog.get_logger("admitflow.controller").bind(controller=self.name)

    def check(self, fn: CheckFunction) -> CheckFunction:
        """Decorator: the function that answers each check request."""
        self._check = fn
        return fn

    def background(self, fn: Callable[[], Awaitable[None]]) -> Callable[[], Awaitable[None]]:
        """Decorator: a coroutine function that `run` runs beside the worker (a watch loop that sends
        verdicts later, say); it is cancelled when the controller stops. If it raises, or returns,
        it is logged and started again after `RESTART_AFTER`."""
        self._background.append(fn)
        return fn

    async def _keep_running(self, fn: Callable[[], Awaitable[None]]) -> None:
        name = getattr(fn, "__name__", repr(fn))
        while True:
            try:
                await fn()
                self.log.warning("background_returned", function=name)
            except Exception as err:
                self.log.exception("background_failed", function=name, error=str(err))
            await asyncio.sleep(RESTART_AFTER.total_seconds())

    # --- serving --------------------------------------------------------------------------------

    @activity.defn(name=contract.ADMISSION_CHECK)
    async def admission_check(self, request: CheckInput) -> dict:
        """The contract's activity. A non-retryable error (bad parameters, or one the function
        raises) reaches the workload as a failed answer: it is recorded (a Warning event) and this
        controller is asked again after a backoff (5 s, doubling, at most 5 minutes); the workload
        is never evicted for it. Any other error is retried."""
        if self._check is None:
            raise ApplicationError(f"controller {self.name} has no check function", non_retryable=True)
        try:
            parameters = self.parse_parameters(request.parameters)
        except ValueError as err:
            raise ApplicationError(str(err), type=BAD_PARAMETERS, non_retryable=True) from None
        req = CheckRequest(
            workload=Workload.model_validate(request.workload),
            admission_check=request.admission_check,
            parameters=parameters,
            attempt=request.attempt,
            workflow_id=request.workflow_id,
        )
        verdict = await self._check(req)
        return _addressed(verdict, request.admission_check, request.attempt).to_wire()

    def parse_parameters(self, spec: dict[str, Any] | None) -> P | None:
        """The check's parameters in this controller's model; ValueError with a one-line reason."""
        if self.parameters_model is None:
            return None
        if spec is None:
            raise ValueError("missing parameters reference")
        try:
            return self.parameters_model.model_validate(spec)
        except ValidationError as err:
            raise ValueError(f"invalid parameters: spec.{first_error(err, 'spec')}") from None

    def worker(self, client: Client, **options: Any) -> Worker:
        """A worker serving this controller's task queue (the client must use admitflow's data
        converter, as `admitflow.worker.connection.Connection.connect` gives)."""
        self.client = client
        return Worker(client, task_queue=self.name, activities=[self.admission_check], **options)

    async def run(self, client: Client, activation_interval: timedelta = timedelta(seconds=3)) -> None:
        """Serve until cancelled, keeping the `Active` condition of its AdmissionChecks current."""
        async with self.worker(client):
            self.log.info("controller_started")
            tasks = [asyncio.ensure_future(self._keep_running(fn)) for fn in self._background]
            try:
                while True:
                    try:
                        await self.activate_checks()
                    except Exception as err:  # the engine may not be up yet; try again next round
                        self.log.warning("activation_failed", error=str(err))
                    await asyncio.sleep(activation_interval.total_seconds())
            finally:
                for t in tasks:
                    t.cancel()

    def main(self, argv: list[str] | None = None) -> None:
        """Run as a program: `python my_controller.py [--address host:port] [--namespace ns]`, plus
        the TLS and API-key flags of `admitflow.worker.connection.add_arguments` (docs/security.md)."""
        from admitflow.worker import connection
        from admitflow.worker.logging import configure

        p = argparse.ArgumentParser(description=f"admission check controller {self.name}")
        connection.add_arguments(p)
        args = p.parse_args(argv)
        configure("INFO")

        async def serve() -> None:
            client = await connection.connect_or_exit(args)
            task = asyncio.ensure_future(self.run(client))
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, task.cancel)
            try:
                await task
            except asyncio.CancelledError:
                pass

        asyncio.run(serve())
        # The Temporal SDK's native runtime can abort the interpreter while it finalizes
        # (sdk-python#300, `PyGILState_Release`); the controller has stopped, so leave without that.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

    # --- talking to the engine ------------------------------------------------------------------

    @property
    def admitflow(self) -> AdmitflowClient:
        if self.client is None:
            raise RuntimeError("the controller is not connected: call run() or worker() first")
        return AdmitflowClient(self.client)

    async def activate_checks(self) -> dict[str, tuple[bool, str, str]]:
        """Set `Active` on every AdmissionCheck naming this controller, or `Active=False`
        `BadParametersRef` with the reason its parameters cannot be used (as Kueue's AdmissionCheck controllers do). Written
        only where it changes. Returns what each check should say, by name."""
        wanted: dict[str, tuple[bool, str, str]] = {}
        for ac, _, problem in await self._checks():
            want = (False, BAD_PARAMETERS, problem) if problem else (True, *ACTIVE)
            wanted[ac.key] = want
            have = next(((c.status == "True", c.reason, c.message) for c in ac.status.conditions if c.type == "Active"), None)
            if have != want:
                await self.admitflow.set_admission_check_active(ac.key, *want)
                self.log.info("admission_check_condition", check=ac.key, active=want[0], reason=want[1], message=want[2])
        return wanted

    async def check_parameters(self) -> dict[str, P | None]:
        """The AdmissionChecks naming this controller whose parameters are usable, with them."""
        return {ac.key: params for ac, params, problem in await self._checks() if not problem}

    async def _checks(self) -> list[tuple[AdmissionCheck, P | None, str]]:
        """Each AdmissionCheck naming this controller, its parameters, and what is wrong with them,
        from one read of the catalog's memo (no query)."""
        catalog = await self.admitflow.catalog_state()
        out = []
        for ac in sorted(catalog.all("AdmissionCheck"), key=lambda o: o.key):
            if ac.spec.controller_name != self.name:
                continue
            params, problem = None, ""
            ref = ac.spec.parameters
            if self.parameters_model is None:
                pass
            elif ref is None:
                problem = "missing parameters reference"
            elif (ref.api_group, ref.kind) != (API_GROUP, AdmissionCheckParameters.__name__):
                problem = f'wrong kind "{ref.kind}", expecting "AdmissionCheckParameters": bad parameters reference'
            elif (found := catalog.get("AdmissionCheckParameters", ref.name)) is None:
                problem = f'admissioncheckparameters.{API_GROUP} "{ref.name}" not found'
            else:
                try:
                    params = self.parse_parameters(found.spec)
                except ValueError as err:
                    problem = str(err)
            out.append((ac, params, problem))
        return out

    async def outstanding(self) -> list[CheckRequest[P]]:
        """The requests still waiting for this controller's verdict: every workload holding quota
        whose check of this controller is Pending, as the engine asked (or is asking) about it. A
        controller that answers `pending()` calls this when it starts, to pick up what it owed before
        a restart: the engine does not ask again about an attempt that was answered."""
        params = await self.check_parameters()
        if not params:
            return []
        found = []
        # Visibility narrows it to the workloads holding quota with one of these checks not Ready,
        # and its rows bring each one's memo: no workflow is queried.
        for report in await self.admitflow.workloads(phase="QuotaReserved", pending_check=sorted(params), finished=False):
            status = report.status
            if not wl.holds_quota(status):
                continue
            for state in status.admission_checks or ():
                if state.state == "Pending" and state.name in params:
                    found.append(
                        CheckRequest(
                            workload=Workload.model_validate(report.model_dump(include=WORKLOAD_FIELDS)),
                            admission_check=state.name,
                            parameters=params[state.name],
                            attempt=report.check_attempts.get(state.name) or attempt_of(state),
                            workflow_id=ids.workload_id(report.key),
                        )
                    )
        return found

    async def send(self, to: CheckRequest[Any] | str, verdict: Verdict, check: str | None = None) -> None:
        """Send a verdict later: to the workload of a request (name and attempt filled in), or to a
        workload by `namespace/name` for `check` (default: the verdict's own name). Sent as the
        signal `set_admission_check_state`; a verdict the workload cannot use is recorded there."""
        if isinstance(to, CheckRequest):
            verdict = _addressed(verdict, to.admission_check, to.attempt)
            workflow_id = to.workflow_id
        else:
            verdict = verdict.model_copy(update={"name": check or verdict.name})
            workflow_id = ids.workload_id(to)
        if not verdict.name:
            raise ValueError("a verdict sent by workload key needs the check's name")
        await self.admitflow.client.get_workflow_handle(workflow_id).signal(contract.SET_ADMISSION_CHECK_STATE, verdict)


def _addressed(verdict: Verdict, name: str, attempt: int) -> Verdict:
    return verdict.model_copy(update={"name": verdict.name or name, "attempt": verdict.attempt or attempt})


def current_attempt(workload: Workload, check: str) -> int | None:
    """The attempt a workload's check is at, or None if it has no such check. A `workload` query's
    report says it (`checkAttempts`); a bare Workload only has `retryCount + 1`, which is behind
    once the workload was evicted by something other than this check's Retry."""
    state = next((c for c in workload.status.admission_checks or () if c.name == check), None)
    if state is None:
        return None
    return (getattr(workload, "check_attempts", None) or {}).get(check) or attempt_of(state)


def load(path: str) -> list[Controller[Any]]:
    """The controllers a Python file defines at module level (for `admitflow dev --controller`)."""
    import importlib.util
    import sys
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(f"admitflow_controller_{Path(path).stem}", path)
    if spec is None or spec.loader is None or not Path(path).is_file():
        raise ValueError(f"{path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # so that pydantic can resolve the module's annotations
    spec.loader.exec_module(module)
    found = [v for v in vars(module).values() if isinstance(v, Controller)]
    if not found:
        raise ValueError(f"{path}: defines no admitflow.controller.Controller at module level")
    return found
