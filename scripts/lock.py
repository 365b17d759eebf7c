"""Print constraints.txt: every distribution admitflow and its extras need, pinned to the version
installed in this environment, starting from pyproject.toml's own pins.

    .venv/bin/pip install -e '.[devserver,kubernetes,test,bench]'   # after changing a pin
    .venv/bin/python scripts/lock.py > constraints.txt

`make run`, `make test` and docker/Dockerfile install with `--constraint constraints.txt`, so what
they install is exactly this list. tests/unit/test_packaging.py checks that it agrees with
pyproject.toml and that nothing installed in the test environment is missing from it.
"""

from __future__ import annotations

import tomllib
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]


def requirements() -> list[str]:
    """pyproject.toml's pins: the core and every extra."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]


def closure(requirements: list[str]) -> dict[str, str]:
    """name -> installed version of the requirements and everything they require (no extras)."""
    seen: dict[str, str] = {}
    todo = [Requirement(r) for r in requirements]
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name in seen or (req.marker is not None and not req.marker.evaluate({"extra": ""})):
            continue
        try:
            dist = distribution(req.name)
        except PackageNotFoundError:
            raise SystemExit(f"{req.name} is not installed here: pip install -e '.[devserver,kubernetes,test,bench]' first") from None
        seen[name] = dist.version
        todo += [Requirement(r) for r in dist.requires or []]
    return seen


def main() -> None:
    print("# Every distribution admitflow and its extras install, pinned: written by scripts/lock.py")
    print("# from pyproject.toml and the environment it ran in. Do not edit by hand.")
    for name, version in sorted(closure(requirements()).items()):
        print(f"{name}=={version}")


if __name__ == "__main__":
    main()
