"""The `admitflow` command, run by tests as a process of its own without paying its imports each time.

A small server process imports the CLI once, then forks one child per call: the child gets the
call's arguments, working directory, environment, stdin, stdout and stderr, runs the console
script's `entrypoint`, and leaves with the command's exit code, as the installed script would. A
server has no thread and handles one call at a time, so a fork never copies a lock another thread
held; calls made at once go to servers of their own. Importing admitflow costs 0.5-1.5 s of CPU on
these machines and a forked call a few milliseconds; the CLI tests make hundreds of calls, which
were most of their time. The console script itself stays covered by the tests that start it by its
path (`admitflow dev`, `worker`, `setup`, `get -w`, the tutorial's commands)."""

from __future__ import annotations

import asyncio
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ADMITFLOW = str(Path(sys.executable).parent / "admitflow")

_SERVER = r"""
import json, os, sys, traceback
import admitflow.cli, admitflow.client
requests, replies = os.fdopen(0, "r"), 1
for line in requests:
    call = json.loads(line)
    pid = os.fork()
    if pid == 0:
        os.chdir(call["cwd"])
        os.environ.clear()
        os.environ.update(call["env"])
        for fd, path, flags in ((0, call["stdin"], os.O_RDONLY), (1, call["stdout"], os.O_WRONLY), (2, call["stderr"], os.O_WRONLY)):
            opened = os.open(path, flags)
            os.dup2(opened, fd)
            os.close(opened)
        sys.stdin, sys.stdout, sys.stderr = open(0, "r"), open(1, "w"), open(2, "w")
        sys.argv = call["argv"]
        code = 1
        try:
            admitflow.cli.entrypoint()  # leaves by os._exit with the command's exit code
        except SystemExit as exit:  # argparse's (--help, a usage error), as the interpreter ends it
            if exit.code is None or isinstance(exit.code, int):
                code = exit.code or 0
            else:
                print(exit.code, file=sys.stderr)
        except BaseException:  # as the interpreter ends an uncaught exception: its traceback, status 1
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    os.write(replies, (json.dumps(os.waitstatus_to_exitcode(status)) + "\n").encode())
"""

class _Server:
    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", _SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )

    def call(self, argv: list[str], paths: dict[str, str], timeout: float) -> int | None:
        """The call's exit code; None when it took longer than `timeout` (the server is killed then)."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps({"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ), **paths}) + "\n")
        self.process.stdin.flush()
        reply: list[str] = []
        reader = threading.Thread(target=lambda: reply.append(self.process.stdout.readline()), daemon=True)
        reader.start()
        reader.join(timeout)
        if reply and reply[0]:
            return json.loads(reply[0])
        self.process.kill()  # and the call's process with it
        self.process.wait()
        return None


# Idle servers; one call at a time each, so a test may run a few calls at once.
_idle: queue.SimpleQueue[_Server] = queue.SimpleQueue()


def admitflow(*args: str, input: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    """As `subprocess.run([ADMITFLOW, *args], input=input, capture_output=True, text=True, timeout=timeout)`."""
    argv = [ADMITFLOW, *args]
    with tempfile.TemporaryDirectory(prefix="admitflow-cli-") as tmp:
        paths = {name: os.path.join(tmp, name) for name in ("stdin", "stdout", "stderr")}
        Path(paths["stdin"]).write_text(input or "")
        Path(paths["stdout"]).touch()
        Path(paths["stderr"]).touch()
        try:
            server = _idle.get_nowait()
        except queue.Empty:
            server = _Server()
        code = server.call(argv, paths, timeout)
        if code is None:
            raise subprocess.TimeoutExpired(argv, timeout)
        _idle.put(server)
        return subprocess.CompletedProcess(argv, code, Path(paths["stdout"]).read_text(), Path(paths["stderr"]).read_text())


async def run_admitflow(*args: str, input: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return await asyncio.to_thread(admitflow, *args, input=input, timeout=timeout)
