"""Testing a cloud provider with kube-ccm: the public face of ``kube_ccm.testing``.

What provider authors use, importable from here or from the module that defines it
(both stay)::

    from kube_ccm.testing import World, controller_world, node_object, eventually

The face is the ``__all__`` of the modules imported below, each name written there
once; ``docs/providers.md`` (section 5) says what each is for. Besides, two pytest
plugins, named in ``pytest_plugins`` rather than imported: :mod:`.conformance` (the
conformance kit) and :mod:`.pytest_plugin` (the control-plane fixtures).

``binaries``, ``pki``, ``_lifecycle`` and the ``gobuild/`` wrapper module are the real
control plane's machinery, internal. kube-ccm's own test bed (real nodes, the image,
the chart cluster, the fault suite) is :mod:`kube_ccm.testbed`.

The names resolve on first use, so importing one module of the package (``python -m
kube_ccm.testing.controlplane``, or pytest loading the conformance plugin) does not
import the others.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what type checkers see; at run time, __getattr__ below
    __all__: list[str]
    from kube_ccm.testing.cleanup import *  # noqa: F403
    from kube_ccm.testing.controlplane import *  # noqa: F403
    from kube_ccm.testing.daemon import *  # noqa: F403
    from kube_ccm.testing.events import *  # noqa: F403
    from kube_ccm.testing.fakeapi import *  # noqa: F403
    from kube_ccm.testing.fakeprovider import *  # noqa: F403
    from kube_ccm.testing.manifests import *  # noqa: F403
    from kube_ccm.testing.transport import *  # noqa: F403
    from kube_ccm.testing.waiting import *  # noqa: F403
    from kube_ccm.testing.world import *  # noqa: F403

# The modules of the face, lightest first: a name is looked up in them in this order.
_FACE = (
    "waiting",
    "cleanup",
    "events",
    "transport",
    "manifests",
    "fakeapi",
    "fakeprovider",
    "world",
    "daemon",
    "controlplane",
)


def _module(name: str) -> ModuleType:
    return importlib.import_module(f"{__name__}.{name}")


def _names() -> list[str]:
    return sorted(n for module in _FACE for n in _module(module).__all__)


def __getattr__(name: str) -> object:
    if name == "__all__":
        return _names()
    for module in _FACE:
        defining = _module(module)
        if name in defining.__all__:
            value = getattr(defining, name)
            globals()[name] = value
            return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_names()))
