"""kube-ccm's conformance kit (and the real control plane fixtures it uses)."""

pytest_plugins = ["kube_ccm.testing.conformance"]
