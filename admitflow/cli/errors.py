"""How a failure of the `admitflow` command reads: one line on stderr (`error: ...`), never a
traceback, and kubectl's exit codes."""

from __future__ import annotations

import argparse
import sys

from admitflow import ids


# kubectl's exit codes: 1 when the request could not be carried out; this repository's 2 for bad
# input and usage (argparse's own status), which changes nothing.
EXIT_ERROR = 1
EXIT_BAD_INPUT = 2
EXIT_UNREACHABLE = EXIT_ERROR


class CLIError(Exception):
    def __init__(self, message: str, code: int = EXIT_BAD_INPUT) -> None:
        super().__init__(message)
        self.code = code


class OneLineErrors(argparse.ArgumentParser):
    """Bad arguments get one line and exit status 2, like every other refusal (`--help` shows usage)."""

    def error(self, message: str):
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message}\n")


class Failed(CLIError):
    """Some of the work failed and each failure has had its line already: exit with `code`, silently."""

    def __init__(self, code: int = EXIT_ERROR) -> None:
        super().__init__("", code)


def unknown_namespace(namespace: str, target: str) -> str:
    """The line for a Temporal namespace that the server at `target` does not have."""
    return (
        f'Temporal namespace "{namespace}" not found at {target.split(" (")[0]}: check --namespace (TEMPORAL_NAMESPACE); '
        f"the Kueue namespace is -n/--kueue-namespace; admitflow setup --namespace {namespace} creates it"
    )


def first_line(text: str, limit: int = 300) -> str:
    """The first line of a message that is not blank, cut to `limit` characters."""
    line = next((ln.strip() for ln in str(text).splitlines() if ln.strip()), "")
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _rpc_failure(err, target: str) -> tuple[str, int]:
    from temporalio.service import RPCStatusCode as S

    message = first_line(err.message).rstrip(".") or err.status.name
    where = f"Temporal at {target}"
    if err.status == S.UNAVAILABLE:
        return f"cannot reach {where}: {message}; is the server running there? (--address, TEMPORAL_ADDRESS)", EXIT_ERROR
    if err.status in (S.PERMISSION_DENIED, S.UNAUTHENTICATED):
        return (
            f"permission denied by {where}: {message}; check the API key (--api-key, TEMPORAL_API_KEY) or client "
            "certificate, and what it may do in this namespace",
            EXIT_ERROR,
        )
    if err.status in (S.DEADLINE_EXCEEDED, S.CANCELLED):
        return f"{where} did not answer in time: {message}; try again, or allow more with --request-timeout", EXIT_ERROR
    if err.status == S.RESOURCE_EXHAUSTED:
        return f"{where} is limiting requests: {message}; try again in a moment", EXIT_ERROR
    if err.status == S.NOT_FOUND and message.lower().startswith("namespace"):
        namespace = target.split("(namespace ", 1)[-1].split(",")[0].rstrip(")")
        return unknown_namespace(namespace, target), EXIT_ERROR
    return f"{where} refused the request ({err.status.name}): {message}", EXIT_ERROR


def explain(err: BaseException, args: argparse.Namespace) -> tuple[str, int]:
    """Any failure as one line (without `error: `) and its exit status. A type is looked up only
    where its module is already loaded: an error cannot come from a module that never ran, and
    importing one here would cost a bad argument the start-up time of the Temporal SDK."""
    if isinstance(err, CLIError):
        return str(err), err.code
    loaded = sys.modules
    target = getattr(args, "target", None) or "the Temporal server"
    client = loaded.get("admitflow.client")
    if client is not None and isinstance(err, client.NotAnswering):
        message = str(err)
        if not any(hint in message for hint in ("admitflow ", "worker", "--request-timeout")):
            # A workflow that did not answer in time: say what to look at.
            queue = ids.task_queue(getattr(args, "task_queue", None))
            message += f'; is a worker polling task queue "{queue}"? (admitflow worker); or allow more with --request-timeout'
        return message, err.code
    if client is not None and isinstance(err, client.AdmitflowError):
        return str(err), getattr(err, "code", EXIT_BAD_INPUT)
    codec = loaded.get("admitflow.codec")
    if codec is not None and isinstance(err, (codec.PayloadDecodeError, codec.EncryptionConfigError)):
        return str(err), getattr(err, "code", EXIT_BAD_INPUT)
    service = loaded.get("temporalio.service")
    if service is not None and isinstance(err, service.RPCError):
        return _rpc_failure(err, target)
    temporal = loaded.get("temporalio.client")
    if temporal is not None:
        if isinstance(err, temporal.WorkflowUpdateRPCTimeoutOrCancelledError):
            return (
                f"a workflow did not take the request in time (Temporal at {target}): is a worker polling its task "
                "queue? (admitflow worker); allow more with --request-timeout",
                EXIT_ERROR,
            )
        if isinstance(err, temporal.WorkflowQueryRejectedError):
            return f"a workflow that no longer runs refused the query (Temporal at {target})", EXIT_ERROR
        if isinstance(err, (temporal.WorkflowQueryFailedError, temporal.WorkflowUpdateFailedError)):
            cause = getattr(err, "cause", None) or err
            return f"a workflow refused the request: {first_line(str(cause))}", EXIT_ERROR
    if isinstance(err, TimeoutError):
        return f"Temporal at {target} did not answer in time; try again, or allow more with --request-timeout", EXIT_ERROR
    if isinstance(err, OSError):
        return f"{err.strerror or err}" + (f": {err.filename}" if err.filename else ""), EXIT_ERROR
    return (
        f"unexpected {type(err).__name__}: {first_line(str(err))} (a bug in admitflow: ADMITFLOW_DEBUG=1 "
        "prints where; please report it)",
        EXIT_ERROR,
    )
