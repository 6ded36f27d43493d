"""PV labels (§6): label claimed volumes, never overwrite, node affinity as upstream built it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kube_ccm.api import wellknown as wk
from kube_ccm.api.objects import PersistentVolume, decode
from kube_ccm.controllers.pvlabel import (
    PersistentVolumeLabelController,
    affinity_requirements,
    labels_to_add,
    node_affinity_with,
)
from kube_ccm.providers.simulated.provider import CSI_DRIVER
from kube_ccm.runtime.informer import Informer
from kube_ccm.runtime.resources import PERSISTENT_VOLUMES
from kube_ccm.testing.world import World


def pv_object(name: str, driver: str = CSI_DRIVER, **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "capacity": {"storage": "1Gi"},
        "accessModes": ["ReadWriteOnce"],
        "csi": {"driver": driver, "volumeHandle": f"vol-{name}"},
        **extra.pop("spec", {}),
    }
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, **extra},
        "spec": spec,
    }


def pv(obj: dict[str, Any]) -> PersistentVolume:
    import json  # noqa: PLC0415

    return decode(PersistentVolume, json.dumps(obj))


@pytest.fixture
async def volumes(world: World) -> AsyncIterator[Informer[PersistentVolume]]:
    informer: Informer[PersistentVolume] = Informer(world.client, PERSISTENT_VOLUMES)
    task = asyncio.create_task(informer.run())
    await informer.wait_synced()
    yield informer
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def controller(
    world: World, volumes: Informer[PersistentVolume]
) -> PersistentVolumeLabelController:
    return PersistentVolumeLabelController(
        client=world.client,
        volumes=volumes,
        cloud=world.cloud,
        recorder=world.recorder,
        metrics=world.metrics,
    )


async def settle(volumes: Informer[PersistentVolume], name: str) -> None:
    for _ in range(200):
        if volumes.get(name) is not None:
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"volume {name} never cached")


async def test_a_claimed_volume_gets_zone_labels_and_node_affinity(
    world: World, volumes: Informer[PersistentVolume]
) -> None:
    world.state.add_volume("vol-pv1", zone="sim-zone-b", region="sim-region-1")
    world.api.put_object(pv_object("pv1"))
    await settle(volumes, "pv1")

    await controller(world, volumes).sync("pv1")

    stored = world.api.object("/api/v1/persistentvolumes/pv1")
    assert stored is not None
    assert stored["metadata"]["labels"] == {
        wk.LABEL_ZONE: "sim-zone-b",
        wk.LABEL_REGION: "sim-region-1",
    }
    terms = stored["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
    assert terms == [
        {
            "matchExpressions": [
                {"key": wk.LABEL_REGION, "operator": "In", "values": ["sim-region-1"]},
                {"key": wk.LABEL_ZONE, "operator": "In", "values": ["sim-zone-b"]},
            ]
        }
    ]


async def test_a_volume_of_another_driver_is_never_touched(
    world: World, volumes: Informer[PersistentVolume]
) -> None:
    world.api.put_object(pv_object("nfs", driver="nfs.csi.k8s.io"))
    await settle(volumes, "nfs")

    await controller(world, volumes).sync("nfs")

    assert [r for r in world.api.writes() if "persistentvolumes" in r.path] == []


async def test_existing_labels_are_never_overwritten(
    world: World, volumes: Informer[PersistentVolume]
) -> None:
    world.state.add_volume("vol-pv1", zone="sim-zone-b", region="sim-region-1")
    world.api.put_object(pv_object("pv1", labels={wk.LABEL_ZONE: "user-zone"}))
    await settle(volumes, "pv1")

    await controller(world, volumes).sync("pv1")

    stored = world.api.object("/api/v1/persistentvolumes/pv1")
    assert stored is not None
    assert stored["metadata"]["labels"][wk.LABEL_ZONE] == "user-zone"
    assert stored["metadata"]["labels"][wk.LABEL_REGION] == "sim-region-1"


async def test_a_labeler_error_is_retried(
    world: World, volumes: Informer[PersistentVolume]
) -> None:
    world.api.put_object(pv_object("missing"))  # no such volume in the cloud
    await settle(volumes, "missing")
    with pytest.raises(Exception, match="does not exist"):
        await controller(world, volumes).sync("missing")


def test_multi_zone_values_become_sorted_sets() -> None:
    assert affinity_requirements({wk.LABEL_ZONE: "c__a__b", wk.LABEL_REGION: "r"}) == [
        {"key": wk.LABEL_REGION, "operator": "In", "values": ["r"]},
        {"key": wk.LABEL_ZONE, "operator": "In", "values": ["a", "b", "c"]},
    ]


def test_affinity_is_appended_to_every_term_unless_a_key_is_already_used() -> None:
    two_terms = {
        "nodeAffinity": {
            "required": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "a", "operator": "Exists"}]},
                    {"matchExpressions": [{"key": "b", "operator": "Exists"}]},
                ]
            }
        }
    }
    affinity = node_affinity_with(pv(pv_object("x", spec=two_terms)), {wk.LABEL_ZONE: "z"})
    assert affinity is not None
    terms = affinity["required"]["nodeSelectorTerms"]
    assert [len(t["matchExpressions"]) for t in terms] == [2, 2]
    uses_zone = {
        "nodeAffinity": {
            "required": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": wk.LABEL_ZONE, "operator": "In", "values": ["q"]}
                        ]
                    }
                ]
            }
        }
    }
    assert node_affinity_with(pv(pv_object("y", spec=uses_zone)), {wk.LABEL_ZONE: "z"}) is None
    assert node_affinity_with(pv(pv_object("z")), {}) is None


def test_labels_to_add_skips_existing_keys() -> None:
    volume = pv(pv_object("x", labels={"a": "1"}))
    assert labels_to_add(volume, {"a": "2", "b": "3"}) == {"b": "3"}
