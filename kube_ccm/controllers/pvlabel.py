"""Persistent-volume labels (``persistent-volume-label-controller``).

Upstream removed its PV-label controller (it relied on alpha initializers) and
moved the job to an admission webhook. Ours labels PersistentVolumes after
creation, driven by the provider's :class:`~kube_ccm.cloudprovider.PVLabeler`:

* a PV the provider does not claim (``get_labels_for_volume`` returns nothing)
  is never touched;
* labels the provider returns are added, but a label the PV already has is
  never overwritten (what a user or provisioner set wins);
* node affinity follows the labels, as upstream built it: one ``In``
  requirement per label (a ``__``-joined zone value becomes its sorted set of
  zones), appended to every required node-selector term (one term is created
  when there is none), and skipped entirely when a term already mentions one of
  those keys. The API server may refuse to change ``spec.nodeAffinity`` of an
  existing PV; then the labels are still written and a Warning event
  ``FailedToAddNodeAffinity`` says so once (the webhook, at creation, can set both).

Off by default (like upstream's webhook gate): enable it with
``--controllers=*,persistent-volume-label-controller`` (alias ``pvl``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from kube_ccm.api import wellknown as wk
from kube_ccm.api.helpers import zones_from_label_value
from kube_ccm.api.objects import PersistentVolume, to_dict
from kube_ccm.cloudprovider import CloudProvider, PVLabeler
from kube_ccm.controllers._base import ControllerBase
from kube_ccm.runtime.client import ApiError, KubeClient
from kube_ccm.runtime.events import EventRecorder, ObjectReference
from kube_ccm.runtime.informer import Informer
from kube_ccm.runtime.metrics import Metrics
from kube_ccm.runtime.ratelimit import default_controller_rate_limiter
from kube_ccm.runtime.resources import PERSISTENT_VOLUMES
from kube_ccm.runtime.workqueue import run_workers

log = logging.getLogger(__name__)

_ZONE_KEYS = frozenset({wk.LABEL_ZONE, wk.LABEL_ZONE_BETA})


def affinity_requirements(labels: Mapping[str, str]) -> list[dict[str, Any]]:
    """One ``In`` requirement per label; zone values split on ``__`` into a sorted set."""
    requirements = []
    for key, value in sorted(labels.items()):
        values = sorted(zones_from_label_value(value)) if key in _ZONE_KEYS else [value]
        requirements.append({"key": key, "operator": "In", "values": values})
    return requirements


def node_affinity_with(pv: PersistentVolume, labels: Mapping[str, str]) -> dict[str, Any] | None:
    """The PV's ``spec.nodeAffinity`` with the labels' requirements added, or ``None``
    when nothing is to change (no labels, or a term already uses one of the keys)."""
    if not labels:
        return None
    requirements = affinity_requirements(labels)
    keys = {r["key"] for r in requirements}
    current = pv.spec.node_affinity.required if pv.spec.node_affinity else None
    terms: list[dict[str, Any]] = (
        [to_dict(t) for t in current.node_selector_terms] if current else []
    )
    for term in terms:
        existing = term.get("matchExpressions", []) + term.get("matchFields", [])
        if any(r.get("key") in keys for r in existing):
            return None
    if not terms:
        terms = [{}]
    for term in terms:
        term["matchExpressions"] = [*term.get("matchExpressions", []), *requirements]
    return {"required": {"nodeSelectorTerms": terms}}


def labels_to_add(pv: PersistentVolume, labels: Mapping[str, str]) -> dict[str, str]:
    """The provider's labels the PV does not have yet (existing keys are never overwritten)."""
    return {k: v for k, v in labels.items() if k not in pv.metadata.labels}


class PersistentVolumeLabelController(ControllerBase):
    name = wk.CONTROLLER_PV_LABEL

    def __init__(
        self,
        *,
        client: KubeClient,
        volumes: Informer[PersistentVolume],
        cloud: CloudProvider,
        recorder: EventRecorder,
        metrics: Metrics,
        workers: int = 5,
    ) -> None:
        if not isinstance(cloud, PVLabeler):
            raise ValueError("the cloud provider does not label persistent volumes (PVLabeler)")
        super().__init__(client=client, recorder=recorder)
        self._labeler: PVLabeler = cloud
        self._volumes = volumes
        self.workers = workers
        self.queue = self._new_queue(wk.QUEUE_PV_LABELS, default_controller_rate_limiter(), metrics)
        volumes.add_handler(on_add=lambda pv: self.queue.add(pv.metadata.name))

    async def run(self) -> None:
        await self._volumes.wait_synced()
        await self._serve(run_workers(self.queue, self.sync, self.workers))

    async def sync(self, name: str) -> None:
        pv = self._volumes.get(name)
        if pv is None or pv.metadata.deletion_timestamp is not None:
            return
        labels = await self._labeler.get_labels_for_volume(pv)
        if not labels:
            return  # not this cloud's volume
        added = labels_to_add(pv, labels)
        affinity = node_affinity_with(pv, labels)
        if not added and affinity is None:
            return
        patch: dict[str, Any] = {}
        if added:
            patch["metadata"] = {"labels": added}
        if affinity is not None:
            patch["spec"] = {"nodeAffinity": affinity}
        try:
            await self._api.patch(PERSISTENT_VOLUMES, name, patch)
        except ApiError as exc:
            if exc.not_found:
                return
            if exc.status != 422 or affinity is None:
                raise
            # The API server refuses to change nodeAffinity of an existing PV.
            self._recorder.event(
                ObjectReference(kind="PersistentVolume", name=name, uid=pv.metadata.uid),
                "Warning",
                wk.REASON_FAILED_NODE_AFFINITY,
                f"Could not add node affinity for labels {sorted(labels)}: {exc.message}. "
                "The API server refuses to change the node affinity of an existing "
                "PersistentVolume (unless its MutablePVNodeAffinity feature gate is on); "
                "the persistent-volume-label webhook sets it when the volume is created",
            )
            if added:
                await self._api.patch(PERSISTENT_VOLUMES, name, {"metadata": {"labels": added}})
        log.info("labelled persistent volume %s with %s", name, added)
