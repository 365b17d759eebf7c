"""What every part of the client shares: its connection to Temporal (the client, the engine's task
queue, how long a read waits for a workflow), the one-line errors, the timeouts, a query asked again
when the engine's worker refused it and an update sent again when the server rejected it unread."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from temporalio.client import (
    Client,
    WorkflowExecutionDescription,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from admitflow import contract, ids, kinds

T = TypeVar("T")
# How long a read waits for one workflow to answer a query. A workflow whose task fails never
# answers: Temporal holds the query for the task's next attempt, and retries it with a backoff of up
# to ten minutes. Every other call to Temporal gets RPC_TIMEOUT.
QUERY_TIMEOUT = timedelta(seconds=10)
RPC_TIMEOUT = timedelta(seconds=10)
# How often a query the engine's worker refused ("ask again": a worker died or the server restarted
# a moment ago) is asked again, a second apart.
STALE_RETRIES = 5
# An update the server rejected unread (`contract.UNPROCESSED_UPDATE`) changed nothing: it is sent
# again, this many times in all.
UNPROCESSED_ATTEMPTS = 3


class AdmitflowError(Exception):
    """A refusal to show the user as one line (the CLI exits 2 with it)."""


class NotAnswering(AdmitflowError):
    """The request was fine, but a workflow cannot take it now (the CLI exits 1 with it)."""

    code = 1


def kind_of(name: str) -> str:
    """admitflow.kinds.kind_of, refusing with the client's error."""
    try:
        return kinds.kind_of(name)
    except kinds.UnknownKind as err:
        raise AdmitflowError(str(err)) from None


@dataclass
class Connection:
    """A Temporal client, the task queue of the engine's workflows, and how long a read waits for
    one workflow to answer a query."""

    client: Client
    task_queue: str = ids.DEFAULT_TASK_QUEUE
    query_timeout: timedelta = QUERY_TIMEOUT

    async def _ask(self, handle: WorkflowHandle, query: str, arg: Any, result_type: type[T]) -> T:
        """A query's answer, asked again (up to STALE_RETRIES times, a second apart) when the
        engine's worker refused it (a worker died a moment ago, or the query came with events of no
        workflow task yet, as after a server restart): the run then replays with its next workflow
        task. Any other failure is raised as it comes."""
        args = () if arg is None else (arg,)
        for attempt in range(STALE_RETRIES + 1):
            try:
                return await handle.query(query, *args, result_type=result_type, rpc_timeout=self.query_timeout)
            except WorkflowQueryFailedError as err:
                if str(err) not in contract.REFUSED_QUERIES or attempt == STALE_RETRIES:
                    raise
            await asyncio.sleep(1)
        raise AssertionError("unreachable")


def _unanswered_query(err: RPCError, what: str) -> Exception:
    """A query to one of the engine's workflows that timed out or was refused because its workflow
    task fails, as one line; any other RPC error as it is. A timeout reads the same whether the
    client's deadline came first ("Timeout expired") or the server's ("query timed out before a
    worker could process it"): which one does is a race."""
    if err.status in (RPCStatusCode.CANCELLED, RPCStatusCode.DEADLINE_EXCEEDED):
        return NotAnswering(f"{what} does not answer: the query timed out")
    if err.status == RPCStatusCode.FAILED_PRECONDITION:
        return NotAnswering(f"{what} does not answer: {_first_line(err.message)}")
    return err


def _first_line(text: str, limit: int = 300) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


async def _described(handle: WorkflowHandle) -> WorkflowExecutionDescription | None:
    """The workflow's description, or None when no workflow of that ID exists."""
    try:
        return await handle.describe(rpc_timeout=RPC_TIMEOUT)
    except RPCError as err:
        if err.status != RPCStatusCode.NOT_FOUND:
            raise
        return None


async def _taken(send: Callable[[], Awaitable[T]]) -> T:
    """What `send()`, an update, returns, sent again when the server rejected it unread."""
    for _ in range(UNPROCESSED_ATTEMPTS - 1):
        try:
            return await send()
        except WorkflowUpdateFailedError as err:
            if not unprocessed_update(err):
                raise
    return await send()


def unprocessed_update(err: WorkflowUpdateFailedError) -> bool:
    """Whether the server rejected the update because no worker took it from its workflow task
    (`contract.UNPROCESSED_UPDATE`): nothing of it was applied."""
    return isinstance(err.cause, ApplicationError) and err.cause.type == contract.UNPROCESSED_UPDATE


def _cause(err: WorkflowUpdateFailedError) -> str:
    cause = err.cause
    return cause.message if isinstance(cause, ApplicationError) else str(cause or err)
