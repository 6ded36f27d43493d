"""Objects a test creates on the API server, deleted when it ends (the ``kube_cleanup``
fixture of :mod:`kube_ccm.testing.pytest_plugin`, which re-exports :class:`Cleanup`).

A module of its own, without pytest: the conformance kit imports :class:`Cleanup`
while pytest loads it as a plugin, and importing the plugin module then would keep
pytest from rewriting it ("Module already imported so cannot be rewritten").
"""

from __future__ import annotations

from kube_ccm.runtime.client import ApiError, KubeClient

__all__ = ["Cleanup"]


class Cleanup:
    """Objects to delete when the test ends (API paths, e.g. ``/api/v1/nodes/n1``)."""

    def __init__(self) -> None:
        self.paths: list[str] = []

    def add(self, path: str) -> str:
        self.paths.append(path)
        return path

    async def run(self, client: KubeClient) -> None:
        for path in reversed(self.paths):
            try:
                await client.patch(path, {"metadata": {"finalizers": None}}, patch_type="merge")
                await client.delete(path)
            except ApiError as exc:
                if not exc.not_found:
                    raise
