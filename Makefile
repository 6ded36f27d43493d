# The two commands of the README are `make run` and `make test`; everything
# else here is what they need on a fresh machine. CI (.ci/run) calls `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: all setup binaries node-binaries sysdeps image run test lint fmt unit integration clean \
	e2e-build e2e-loadbalancer

all: test

# Virtualenv with kube-ccm (editable) and its dev tools, and the out-of-tree digitalocean
# provider (editable, with pydo) so that its entry point is installed as a user's would
# be; redone when either pyproject changes.
DO_PROVIDER := providers-out-of-tree/digitalocean
$(STAMP): pyproject.toml $(DO_PROVIDER)/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,aws]'
	$(PY) -m pip install --quiet -e $(DO_PROVIDER)
	touch $(STAMP)

setup: $(STAMP)

# Debian packages the tests need, installed when missing (as root, or with sudo):
# - the libvirt provider's bindings (the `libvirt` extra) build against libvirt-dev
#   and pkg-config; its tests start libvirtd (libvirt-daemon) serving libvirt's
#   test driver;
# - the test bed's real nodes (kube_ccm/testbed/nodes.py) run each kubelet on its own
#   containerd (with runc) and need the CNI plugins (containernetworking-plugins,
#   which brings iptables); nftables' `nft` deletes the empty tables iptables-nft
#   leaves behind once the kubelets' chains are removed;
# - the image (kube_ccm/testbed/image.py) is built from the Dockerfile with buildah, on
#   a base assembled with debootstrap when python:3.11-slim-bookworm cannot be pulled.
# Each group is checked by what it provides, so a machine that has them is left alone.
LIBVIRT_DEBS := libvirt-dev pkg-config libvirt-daemon libvirt-clients
NODE_DEBS    := containerd runc containernetworking-plugins nftables
IMAGE_DEBS   := buildah debootstrap
LIBVIRT_STAMP := $(VENV)/.libvirt

sysdeps:
	@missing=""; \
	if ! { pkg-config --exists libvirt 2>/dev/null && test -x /usr/sbin/libvirtd; }; then \
	    missing="$(LIBVIRT_DEBS)"; fi; \
	if ! { command -v containerd && command -v runc && command -v nft \
	       && test -x /usr/lib/cni/bridge; } >/dev/null 2>&1; then \
	    missing="$$missing $(NODE_DEBS)"; fi; \
	if ! { command -v buildah && command -v debootstrap; } >/dev/null 2>&1; then \
	    missing="$$missing $(IMAGE_DEBS)"; fi; \
	if [ -z "$$missing" ]; then :; \
	elif [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	        --no-install-recommends $$missing >/dev/null; \
	elif command -v sudo >/dev/null 2>&1; then \
	    sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	        --no-install-recommends $$missing >/dev/null; \
	else \
	    echo "install Debian's$$missing (as root) for the libvirt provider, the real nodes and the image" >&2; exit 1; \
	fi

$(LIBVIRT_STAMP): $(STAMP) | sysdeps
	$(PY) -m pip install --quiet -e '.[libvirt]'
	touch $(LIBVIRT_STAMP)

# Build (first time, several minutes) or reuse (seconds) kube-apiserver and etcd.
binaries: $(STAMP)
	$(PY) -m kube_ccm.testing.controlplane build

# The same plus kubelet, kube-controller-manager and kube-scheduler, which the tests'
# real nodes run (first time about a minute and a half more; `make run` needs none).
node-binaries: $(STAMP)
	$(PY) -m kube_ccm.testing.controlplane build --nodes

# The image, built from the Dockerfile with buildah (on a stand-in base from Debian's
# packages when python:3.11-slim-bookworm cannot be pulled), cached by its inputs and
# exported for `ctr images import`; EXTRAS=libvirt for the libvirt provider's variant.
image: $(STAMP) sysdeps
	$(PY) -m kube_ccm.testbed.image build --extras "$${EXTRAS:-}"

# Kubernetes' own e2e LoadBalancer specs (test/e2e/network of the pinned version) against
# kube-ccm on two real nodes, installed from its image and chart (docs/e2e.md):
# upstream's pass/fail per spec, the JUnit file in _artifacts/e2e/<provider>, the table
# in docs/e2e.md. PROVIDER=servicelb (default) or ippool; FOCUS=quick for the CI short
# form, or any ginkgo focus. The first run builds e2e.test, agnhost, kubectl and CoreDNS
# from the Go module proxy (cached by their inputs).
e2e-build: node-binaries sysdeps
	$(PY) -m kube_ccm.testbed.e2e build

e2e-loadbalancer: node-binaries sysdeps
	$(PY) -m kube_ccm.testbed.e2e run --provider "$${PROVIDER:-servicelb}" \
	    --focus "$${FOCUS:-}" $${FOCUS:+--no-docs}

# The main job on its embedded default: kube-ccm with the simulated cloud against a
# real local control plane, initialising simulated nodes (kube-ccm sandbox).
run: binaries
	$(VENV)/bin/kube-ccm sandbox --nodes $${NODES:-20} --kill $${KILL:-1} --duration $${DURATION:-10}

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy
	cd $(DO_PROVIDER) && $(abspath $(PY)) -m mypy
	$(VENV)/bin/hadolint Dockerfile

fmt: $(STAMP)
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

unit: $(STAMP) $(LIBVIRT_STAMP)
	$(PY) -m pytest tests/unit

integration: node-binaries sysdeps $(LIBVIRT_STAMP)
	$(PY) -m pytest tests/integration

# Everything: lint, type-check, unit and integration tests on the real control plane.
# --durations: the slowest tests in every CI log, to watch what the suite costs.
test: node-binaries sysdeps lint $(LIBVIRT_STAMP)
	$(PY) -m pytest tests $(DO_PROVIDER)/tests --durations=25

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
