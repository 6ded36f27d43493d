"""Testing a cloud provider with kube-ccm: the public face of ``kube_ccm.testing``.

What provider authors use, importable from here::

    from kube_ccm.testing import World, controller_world, node_object, eventually

Public (stable, documented in ``docs/providers.md``):

- unit tests without processes: :class:`World` and :func:`controller_world` (our
  controllers over an in-memory API server and your provider), :class:`FakeApiServer`
  (that API server, a client transport), :class:`MockTransport` (a transport that
  answers with a function), :class:`FakeEventRecorder` (events, remembered) and
  :class:`FakeProvider` (a scriptable provider: per-capability answers, recorded
  calls, injected errors and delays; :class:`FakeLabelingProvider` and
  :class:`FakeInformerUser` add the mix-ins);
- objects: :func:`node_object`, :func:`service_object` (typed ``Node``/``Service``,
  for unit tests), :func:`node_manifest`, :func:`service_manifest`,
  :func:`create_node`, :func:`find_node`, :func:`set_node_ready`, :func:`taint_keys`
  and :data:`UNINITIALIZED_TAINT` (dicts and helpers for a real API server);
- integration tests: :class:`ControlPlane` and :class:`ControlPlaneOptions` (a real
  kube-apiserver and etcd), :class:`DaemonProcess` (``kube-ccm run`` as a
  subprocess), :func:`eventually` (wait for convergence), :class:`Cleanup`;
- the modules :mod:`kube_ccm.testing.conformance` (the conformance kit, a pytest
  plugin) and :mod:`kube_ccm.testing.pytest_plugin` (the control-plane fixtures),
  named in ``pytest_plugins`` rather than imported from here.

Internal (kube-ccm's own test bed; no compatibility promised, not exported):
``binaries``, ``pki``, ``gobuild/``, ``gobuild-helm/`` and ``helm`` (building and
finding the Go binaries), ``image`` (the shipped image), ``nodes`` and ``_nodehost``
(real kubelets), ``cluster`` (the chart on a real cluster), ``echo`` (a TCP/UDP echo
backend and its probes), ``libvirtd``, ``moto``
and ``aws_fixtures`` (the libvirt and aws providers' test beds), ``faults`` (the
fault suite) and ``rbac`` (our chart's least-privilege check). They stay at their
paths (``python -m kube_ccm.testing.controlplane`` and friends keep working): the
face is this list, not a directory.

The names resolve on first use, so importing one module of the package (``python -m
kube_ccm.testing.image``, or pytest loading the conformance plugin) does not import
the others.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kube_ccm.testing.cleanup import Cleanup
    from kube_ccm.testing.controlplane import ControlPlane, ControlPlaneError, ControlPlaneOptions
    from kube_ccm.testing.daemon import DaemonProcess
    from kube_ccm.testing.events import FakeEventRecorder
    from kube_ccm.testing.fakeapi import FakeApiServer, RecordedRequest
    from kube_ccm.testing.fakeprovider import (
        FakeInformerUser,
        FakeLabelingProvider,
        FakeProvider,
    )
    from kube_ccm.testing.manifests import (
        UNINITIALIZED_TAINT,
        create_node,
        find_node,
        node_manifest,
        service_manifest,
        set_node_ready,
        taint_keys,
    )
    from kube_ccm.testing.transport import MockTransport, json_response, text_response
    from kube_ccm.testing.waiting import eventually
    from kube_ccm.testing.world import (
        World,
        controller_world,
        guarded,
        make_cloud,
        node_object,
        service_object,
    )

# Each public name and the module that defines it.
_EXPORTS: dict[str, str] = {
    "Cleanup": "cleanup",
    "ControlPlane": "controlplane",
    "ControlPlaneError": "controlplane",
    "ControlPlaneOptions": "controlplane",
    "DaemonProcess": "daemon",
    "FakeApiServer": "fakeapi",
    "FakeEventRecorder": "events",
    "FakeInformerUser": "fakeprovider",
    "FakeLabelingProvider": "fakeprovider",
    "FakeProvider": "fakeprovider",
    "MockTransport": "transport",
    "RecordedRequest": "fakeapi",
    "UNINITIALIZED_TAINT": "manifests",
    "World": "world",
    "controller_world": "world",
    "create_node": "manifests",
    "eventually": "waiting",
    "find_node": "manifests",
    "guarded": "world",
    "json_response": "transport",
    "make_cloud": "world",
    "node_manifest": "manifests",
    "node_object": "world",
    "service_manifest": "manifests",
    "service_object": "world",
    "set_node_ready": "manifests",
    "taint_keys": "manifests",
    "text_response": "transport",
}

__all__ = [
    "UNINITIALIZED_TAINT",
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
]


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
