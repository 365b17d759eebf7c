# Two commands on a fresh machine with python3 and pip: `make run` and `make test`.
# Each bootstraps the virtualenv in .venv the first time: admitflow with the extras these commands
# use, every distribution pinned by constraints.txt (scripts/lock.py writes it from pyproject.toml).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: run test soak clean

EXTRAS := devserver,kubernetes,test

$(BIN)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check --constraint constraints.txt -e '.[$(EXTRAS)]'
	touch $@

# The main job: embedded Temporal dev server + UI on :8233, the worker, the sample budget check
# controller and the local runner, examples applied and submitted (the approval sample's workload
# waits for a person), Kueue's quick-start queues and Job as published (examples/kueue/), admitted
# workloads run as local processes (the Job's three pods too), every phase change shown; Ctrl-C
# stops it.
run: $(BIN)/.installed
	$(BIN)/admitflow dev -f examples/ -f examples/kueue/ -f examples/controllers/approval.yaml --controller examples/controllers/budget.py --runner examples/runners/local.py

# First mypy, strict on admitflow/admission (pyproject.toml's [tool.mypy]; a few seconds, under a
# second with its cache in .mypy_cache): a type error fails the build before any test runs. Then
# unit, workflow (time-skipping server) and integration (dev server) tests, in two processes: most
# of an integration test's time is spent waiting on the server, so two share the two cores well
# (730-790 s of tests in fresh-clone runs of 2026-12-03, under CI's 15 minutes with the install).
# Each test file stays in one process, with its fixtures; the slowest files go first, in the order
# tests/conftest.py gives them (SLOWEST_FILES).
test: $(BIN)/.installed
	$(BIN)/mypy && $(BIN)/pytest -q -n 2 --dist loadfile --no-loadscope-reorder

# The long chaos run (tests/chaos.py): 300 workloads, the engine worker killed 12 times and the
# Temporal server once; prints its counts and exits non-zero on any stuck, leaked, double-admitted
# workload, history that does not replay, real workflow task the stale-activation guard refused,
# reservation its workload heard of 15 s late or more, or query sent by anything but its observers.
# Not part of `make test`.
soak: $(BIN)/.installed
	$(BIN)/python -m tests.chaos

clean:
	rm -rf $(VENV) .admitflow .pytest_cache .mypy_cache
