"""The face of ``kube_ccm.testing``: what it exports resolves, and lazily."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kube_ccm import testing


def test_every_exported_name_resolves() -> None:
    for name in testing.__all__:
        assert getattr(testing, name) is not None, name
    assert set(testing.__all__) <= set(dir(testing))
    assert sorted(testing.__all__) == sorted(testing._EXPORTS)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="nothing_here"):
        getattr(testing, "nothing_here")  # noqa: B009


def test_importing_the_package_imports_no_module_of_it() -> None:
    code = (
        "import sys, kube_ccm.testing; "
        "print(sorted(m for m in sys.modules if m.startswith('kube_ccm.testing.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_internal_modules_are_not_exported() -> None:
    internal = {"moto", "helm", "image", "nodes", "cluster", "libvirtd", "binaries", "faults"}
    assert not internal & set(testing.__all__)


def test_the_runtime_holds_no_test_fakes() -> None:
    from kube_ccm.runtime import events  # noqa: PLC0415

    assert not hasattr(events, "FakeEventRecorder")
    assert testing.FakeEventRecorder.__module__ == "kube_ccm.testing.events"
