"""What `pip install admitflow` puts in site-packages: one top-level package, `admitflow`. The
repository keeps workflows/, activities/ and worker/ at the top; pyproject.toml installs them as
admitflow.workflows, admitflow.activities and admitflow.worker, so that a user's own worker.py or
workflows/ never collides with them."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
MAPPED = {"workflows": "admitflow.workflows", "activities": "admitflow.activities", "worker": "admitflow.worker"}
SOURCES = ("pyproject.toml", "README.md", "admitflow", *MAPPED)


def repository_packages() -> set[str]:
    """Every directory with an __init__.py under the installed trees, by its installed name."""
    out = set()
    for top in ("admitflow", *MAPPED):
        for init in (ROOT / top).rglob("__init__.py"):
            parts = init.parent.relative_to(ROOT).parts
            out.add(".".join((MAPPED.get(parts[0], parts[0]), *parts[1:])))
    return out


def test_pyproject_lists_every_package_under_its_installed_name():
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert set(tool["packages"]) == repository_packages()
    assert tool["package-dir"] == {name: directory for directory, name in MAPPED.items()}


def test_the_wheel_has_no_generic_top_level_name(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(ROOT / name, src / name)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(tmp_path / "dist"), str(src)],
        check=True, capture_output=True, timeout=300,
    )
    [wheel] = (tmp_path / "dist").glob("admitflow-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names if ".dist-info/" not in n} == {"admitflow"}
    for package in ("workflows/lifecycle.py", "activities/provisioning/kubernetes.py", "worker/main.py"):
        assert f"admitflow/{package}" in names


# --- every distribution pinned ---------------------------------------------------------------------

# The extras `make run` and `make test` install (the Makefile's EXTRAS); the image installs a subset.
INSTALLED_EXTRAS = ("devserver", "kubernetes", "test")


def constraints() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, sep, version = line.partition("==")
            assert sep and version, f"not pinned: {line}"
            pins[canonicalize_name(name)] = version
    return pins


def test_the_makefile_installs_these_extras_through_the_constraints():
    makefile = (ROOT / "Makefile").read_text()
    assert f"EXTRAS := {','.join(INSTALLED_EXTRAS)}\n" in makefile
    assert "pip install --quiet --disable-pip-version-check --constraint constraints.txt -e '.[$(EXTRAS)]'" in makefile


def test_the_constraints_agree_with_pyproject():
    """scripts/lock.py writes them; after a pin changes in pyproject.toml, run it again."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = constraints()
    for requirement in project["dependencies"] + [r for e in project["optional-dependencies"].values() for r in e]:
        name, _, version = requirement.partition("==")
        assert pins.get(canonicalize_name(name)) == version, f"{requirement}: constraints.txt has {pins.get(canonicalize_name(name))}"


def test_every_distribution_this_environment_needs_is_pinned_at_the_version_installed():
    """The closure of the core and the installed extras, as installed here (through the
    constraints, by `make test`): a dependency the constraints miss would install unpinned."""
    spec = importlib.util.spec_from_file_location("lock", ROOT / "scripts" / "lock.py")
    lock = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lock)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    needed = lock.closure(project["dependencies"] + [r for e in INSTALLED_EXTRAS for r in project["optional-dependencies"][e]])
    pins = constraints()
    assert {n: v for n, v in needed.items() if pins.get(n) != v} == {}
