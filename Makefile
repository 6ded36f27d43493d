# The two commands of the README are `make run` and `make test`; everything
# else here is what they need on a fresh machine. CI (.ci/run) calls `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: all setup binaries run test lint fmt unit integration clean

all: test

# Virtualenv with kube-ccm (editable) and its dev tools; redone when pyproject changes.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

# Build (first time, several minutes) or reuse (seconds) kube-apiserver and etcd.
binaries: $(STAMP)
	$(PY) -m kube_ccm.testing.controlplane build

# The main job on its embedded default: kube-ccm with the simulated cloud against a
# real local control plane, initialising simulated nodes (kube-ccm sandbox).
run: binaries
	$(VENV)/bin/kube-ccm sandbox --nodes $${NODES:-20} --kill $${KILL:-1} --duration $${DURATION:-10}

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy
	$(VENV)/bin/hadolint Dockerfile

fmt: $(STAMP)
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

unit: $(STAMP)
	$(PY) -m pytest tests/unit

integration: binaries
	$(PY) -m pytest tests/integration

# Everything: lint, type-check, unit and integration tests on the real control plane.
test: binaries lint
	$(PY) -m pytest tests

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
