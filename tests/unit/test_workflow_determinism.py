"""Workflow code calls nothing nondeterministic: no clock, no randomness, no environment, no I/O.

The engine worker runs workflow code outside the SDK's sandbox (worker/main.py, workflow_runner), so
nothing refuses `datetime.datetime.now()` or `open` at run time. This test reads every module
workflow code imports, transitively, and refuses what the SDK's own list of restricted members names
(`SandboxRestrictions.default.invalid_module_members`), wherever it is reached through an import, and
the builtins that list restricts (`open`, `input`, `breakpoint`) wherever they are named.
Replaying recorded histories (tests/replay) checks what the code does; this checks what it may call.
"""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.worker.workflow_sandbox import SandboxRestrictions
from temporalio.worker.workflow_sandbox._restrictions import RestrictionContext

from admitflow.worker.main import WORKFLOWS

RESTRICTED = SandboxRestrictions.default.invalid_module_members
_BUILTINS = RESTRICTED.children["__builtins__"]
RESTRICTED_BUILTINS = frozenset(_BUILTINS.use | _BUILTINS.access | _BUILTINS.children.keys())
# Restricted members that modules of workflow code use outside it, each with why no workflow reaches
# it nondeterministically.
ALLOWED = {
    ("admitflow.admission.metrics", "time.perf_counter"):
        "pass_clock times a scheduling pass for a metric only: the meter records nothing while a history replays",
    ("admitflow.codec", "os.urandom"): "the payload codec's encryption nonces: the codec runs on payloads, outside workflow code",
    ("admitflow.codec", "os.environ"): "data_converter() reads the keys when a process builds its converter",
    ("admitflow.ids", "os.environ"): "task_queue(): the default of --task-queue, for the CLI and the worker",
    ("admitflow.ids", "os.environ.get"): "task_queue(): the default of --task-queue, for the CLI and the worker",
}


def _restricted(path: tuple[str, ...]) -> bool:
    context = RestrictionContext()
    context.is_runtime = True
    return RESTRICTED.access_matcher(context, *path, include_use=True) is not None


def _module_file(name: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(name)
    except ModuleNotFoundError:  # a name inside a module (`admitflow.admission.catalog.QueueResolution`)
        return None
    return Path(spec.origin) if spec is not None and spec.origin and spec.origin.endswith(".py") else None


def _imports(tree: ast.Module, module: str) -> dict[str, tuple[str, ...]]:
    """Each name a module binds by import, and the dotted path it stands for."""
    package = module.rsplit(".", 1)[0]
    names: dict[str, tuple[str, ...]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    names[a.asname] = tuple(a.name.split("."))
                else:
                    top = a.name.split(".")[0]
                    names[top] = (top,)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, *([base] if base else [])])
            for a in node.names:
                names[a.asname or a.name] = (*base.split("."), a.name)
    return names


def workflow_modules() -> dict[str, Path]:
    """admitflow's modules that workflow code imports, transitively, from the workflows' own."""
    found: dict[str, Path] = {}
    todo = sorted({cls.__module__ for cls in WORKFLOWS})
    while todo:
        name = todo.pop()
        if name in found:
            continue
        path = _module_file(name)
        if path is None:
            continue
        found[name] = path
        tree = ast.parse(path.read_text())
        for dotted in _imports(tree, name).values():
            for n in range(len(dotted), 0, -1):  # `from admitflow.admission import lifecycle`: the module is a child
                candidate = ".".join(dotted[:n])
                if candidate.startswith("admitflow") and candidate not in found and _module_file(candidate) is not None:
                    todo.append(candidate)
                    break
    return found


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def _own_nodes(scope: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a scope, and the scopes inside it, but not what those scopes hold."""
    todo = list(ast.iter_child_nodes(scope))
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, _SCOPES):
            todo.extend(ast.iter_child_nodes(node))


def _bound_in(scope: ast.AST) -> set[str]:
    """The names a scope binds itself: its arguments, assignments, imports, definitions."""
    bound: set[str] = set()
    if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        a = scope.args
        bound |= {x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs, *filter(None, (a.vararg, a.kwarg)))}
    for node in _own_nodes(scope):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
        elif isinstance(node, ast.alias):
            bound.add(node.asname or node.name.split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return bound


def _builtin_uses(scope: ast.AST, outer: frozenset[str]) -> set[tuple[int, str]]:
    """Each line that names a restricted builtin (`open`) where neither `scope` nor an enclosing
    scope (`outer`) binds that name: an argument called `input` is not the builtin."""
    visible = outer | _bound_in(scope)
    found: set[tuple[int, str]] = set()
    for node in _own_nodes(scope):
        if isinstance(node, _SCOPES):
            found |= _builtin_uses(node, visible)
        elif isinstance(node, ast.Name) and node.id in RESTRICTED_BUILTINS and node.id not in visible:
            found.add((node.lineno, node.id))
    return found


def restricted_uses(path: Path, module: str) -> list[str]:
    """Each use of a restricted member in `path`, as `line: dotted.path`."""
    tree = ast.parse(path.read_text())
    names = _imports(tree, module)
    found = [f"{line}: builtins.{name}" for line, name in _builtin_uses(tree, frozenset(names))]
    for node in ast.walk(tree):
        chain: list[str] = []
        n: ast.AST = node
        while isinstance(n, ast.Attribute):
            chain.append(n.attr)
            n = n.value
        if not isinstance(n, ast.Name) or n.id not in names:
            continue
        full = (*names[n.id], *reversed(chain))
        if _restricted(full):
            found.append(f"{node.lineno}: {'.'.join(full)}")
    return sorted(set(found))


def test_the_workflow_modules_are_found_with_what_they_import():
    modules = workflow_modules()
    for expected in ("admitflow.workflows.lifecycle", "admitflow.workflows.cohort_tree", "admitflow.admission.lifecycle",
                     "admitflow.admission.scheduler", "admitflow.api.workload"):
        assert expected in modules
    assert not [m for m in modules if m == "admitflow.client" or m.startswith("admitflow.client.")], "the client is not workflow code"


@pytest.mark.parametrize(("module", "path"), sorted(workflow_modules().items()), ids=lambda v: v if isinstance(v, str) else "")
def test_workflow_code_calls_nothing_the_sandbox_restricts(module, path):
    found = [use for use in restricted_uses(path, module) if (module, use.split(": ", 1)[1]) not in ALLOWED]
    assert found == []


@pytest.mark.parametrize(
    ("source", "found"),
    [
        pytest.param("import datetime\ndatetime.datetime.now()\n", ["2: datetime.datetime.now"], id="a-module-attribute-chain"),
        pytest.param("from datetime import datetime as dt\ndt.now()\n", ["2: datetime.datetime.now"], id="an-alias"),
        pytest.param("import time\ntime.time()\n", ["2: time.time"], id="the-clock"),
        pytest.param("from random import random\nrandom()\n", ["2: random.random"], id="randomness"),
        pytest.param("import os\nos.environ.get('X')\n", ["2: os.environ", "2: os.environ.get"], id="the-environment"),
        pytest.param("with open('f') as f:\n    f.read()\n", ["1: builtins.open"], id="a-restricted-builtin"),
        pytest.param("x = input\n", ["1: builtins.input"], id="a-restricted-builtin-named"),
        pytest.param("def run(input):\n    return input.workload\n", [], id="an-argument-of-a-builtins-name"),
        pytest.param("def run(x):\n    input = x\n    return input\n", [], id="a-local-of-a-builtins-name"),
        pytest.param("def f(input):\n    pass\ndef g():\n    return input()\n", ["4: builtins.input"], id="the-builtin-beside-an-argument"),
        pytest.param("from datetime import timedelta\ntimedelta(seconds=1)\n", [], id="what-is-deterministic"),
    ],
)
def test_the_check_finds_what_the_sandbox_would_refuse(tmp_path, source, found):
    path = tmp_path / "probe.py"
    path.write_text(source)
    assert restricted_uses(path, "probe") == found
