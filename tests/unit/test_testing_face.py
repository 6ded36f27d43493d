"""The face of ``kube_ccm.testing``: what it exports resolves, and lazily."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from kube_ccm import testbed, testing

FACE = {
    # docs/providers.md, section 5: a name leaves or joins the face only with it.
    "Cleanup",
    "ControlPlane",
    "ControlPlaneError",
    "ControlPlaneOptions",
    "DaemonProcess",
    "FakeApiServer",
    "FakeEventRecorder",
    "FakeInformerUser",
    "FakeLabelingProvider",
    "FakeProvider",
    "MockTransport",
    "RecordedRequest",
    "UNINITIALIZED_TAINT",
    "World",
    "controller_world",
    "create_node",
    "eventually",
    "find_node",
    "guarded",
    "json_response",
    "make_cloud",
    "node_manifest",
    "node_object",
    "service_manifest",
    "service_object",
    "set_node_ready",
    "taint_keys",
    "text_response",
}


def test_the_face_is_what_docs_providers_md_lists() -> None:
    assert set(testing.__all__) == FACE
    assert len(testing.__all__) == len(FACE)  # no name in two modules


def test_every_exported_name_resolves_to_its_defining_module() -> None:
    for name in testing.__all__:
        value = getattr(testing, name)
        assert value is not None, name
        module = getattr(value, "__module__", None)
        if module is not None:  # a constant has none
            assert name in vars(importlib.import_module(module)), name
    assert set(testing.__all__) <= set(dir(testing))


def test_the_bed_is_not_in_the_face() -> None:
    bed = {p.stem for p in Path(testbed.__file__).parent.glob("*.py")} - {"__init__"}
    assert bed, "kube_ccm.testbed has modules"
    face = {p.stem for p in Path(testing.__file__).parent.glob("*.py")}
    assert not bed & face


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
