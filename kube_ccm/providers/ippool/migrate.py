"""The migration guides' mechanical steps for pools (docs/on-prem.md, "Migrating from
MetalLB" step 4, "Migrating from Cilium LB-IPAM" step 2): MetalLB's ``IPAddressPool``
and Cilium's ``CiliumLoadBalancerIPPool`` as LoadBalancerPools, with every key that
could not be carried over said, all at once. Pure functions of the documents read;
``kube-ccm migrate`` prints what they return.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kube_ccm.providers.ippool.objects import GROUP, KIND, VERSION

API_VERSION = f"{GROUP}/{VERSION}"
METALLB_GROUP = "metallb.io"
CILIUM_GROUP = "cilium.io"
METALLB_KEPT = frozenset(
    {"L2Advertisement", "BGPAdvertisement", "BGPPeer", "BFDProfile", "Community"}
)
"""MetalLB's kinds its speaker keeps using (the guide keeps the speaker announcing)."""
_METALLB_SPEC = frozenset({"addresses", "autoAssign", "avoidBuggyIPs", "serviceAllocation"})
_ALLOCATION = frozenset({"priority", "namespaces", "namespaceSelectors", "serviceSelectors"})
_CILIUM_SPEC = frozenset({"blocks", "cidrs", "serviceSelector", "allowFirstLastIPs", "disabled"})


@dataclass
class Converted:
    """What a conversion gives: the objects to apply, and what was not carried over
    (each a line naming the object and the key, and what to do)."""

    objects: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _name(doc: Mapping[str, Any]) -> str:
    meta = doc.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{doc.get('kind')} {namespace + '/' if namespace else ''}{meta.get('name')}"


def _pool(name: str, spec: dict[str, Any], was: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, "annotations": {"ippool.kube-ccm.io/migrated-from": was}},
        "spec": spec,
    }


def convert(documents: Iterable[Any]) -> Converted:
    """MetalLB's and Cilium's pools among ``documents`` as LoadBalancerPools, by the
    guides' steps; the other documents are named in the notes (MetalLB's
    advertisements and peers stay for its speaker, anything else is not a pool)."""
    result = Converted()
    names: dict[str, str] = {}
    for doc in documents:
        if not isinstance(doc, dict):
            continue
        kind, api = doc.get("kind"), str(doc.get("apiVersion") or "")
        group = api.partition("/")[0]
        if group == METALLB_GROUP and kind == "IPAddressPool":
            pool = _from_metallb(doc, result.notes)
        elif group == CILIUM_GROUP and kind == "CiliumLoadBalancerIPPool":
            pool = _from_cilium(doc, result.notes)
        elif group == METALLB_GROUP and kind in METALLB_KEPT:
            result.notes.append(
                f"{_name(doc)}: not converted; keep it for MetalLB's speaker, which "
                "announces what ippool allocates (announcer: status)"
            )
            continue
        else:
            result.notes.append(
                f"{_name(doc)}: not converted; only MetalLB's IPAddressPool and Cilium's "
                "CiliumLoadBalancerIPPool are pools"
            )
            continue
        name = pool["metadata"]["name"]
        if name in names:
            result.notes.append(
                f"{_name(doc)}: a LoadBalancerPool {name!r} comes from {names[name]} already "
                "(LoadBalancerPools are cluster-wide); rename one of them"
            )
        names[name] = _name(doc)
        result.objects.append(pool)
    return result


def _from_metallb(doc: Mapping[str, Any], notes: list[str]) -> dict[str, Any]:
    """MetalLB step 4: kind and apiVersion changed, the namespace dropped, ``spec``
    kept; ``avoidBuggyIPs: false`` unless set and ``allowFirstLastIPs: true`` (MetalLB's
    defaults: ippool's leave out .0/.255 and a CIDR's ends)."""
    spec = dict(doc.get("spec") or {})
    where = _name(doc)
    for key in sorted(set(spec) - _METALLB_SPEC):
        notes.append(f"{where}: spec.{key} is not carried over (LoadBalancerPool has none)")
        spec.pop(key)
    allocation = spec.get("serviceAllocation")
    if isinstance(allocation, dict):
        for key in sorted(set(allocation) - _ALLOCATION):
            notes.append(f"{where}: spec.serviceAllocation.{key} is not carried over")
        spec["serviceAllocation"] = {k: v for k, v in allocation.items() if k in _ALLOCATION}
    spec.setdefault("avoidBuggyIPs", False)
    spec["allowFirstLastIPs"] = True
    return _pool(str((doc.get("metadata") or {}).get("name")), spec, where)


def _from_cilium(doc: Mapping[str, Any], notes: list[str]) -> dict[str, Any]:
    """Cilium step 2: ``blocks`` (or the older ``cidrs``) become ``addresses``,
    ``serviceSelector`` the one entry of ``serviceAllocation.serviceSelectors``,
    ``allowFirstLastIPs`` a boolean, ``disabled`` kept, and ``avoidBuggyIPs: false``
    (LB-IPAM gives out .0 and .255)."""
    given = doc.get("spec") or {}
    where = _name(doc)
    for key in sorted(set(given) - _CILIUM_SPEC):
        notes.append(f"{where}: spec.{key} is not carried over (LoadBalancerPool has none)")
    addresses: list[str] = []
    for i, item in enumerate([*(given.get("blocks") or ()), *(given.get("cidrs") or ())]):
        block: dict[str, Any] = item if isinstance(item, dict) else {}
        if block.get("cidr"):
            addresses.append(str(block["cidr"]))
        elif block.get("start") and block.get("stop"):
            addresses.append(f"{block['start']}-{block['stop']}")
        elif block.get("start"):
            addresses.append(str(block["start"]))
        else:
            notes.append(f"{where}: spec.blocks[{i}] has neither cidr nor start; left out")
    spec: dict[str, Any] = {"addresses": addresses, "avoidBuggyIPs": False}
    first_last = str(given.get("allowFirstLastIPs") or "No")
    if first_last not in ("Yes", "No"):
        notes.append(
            f"{where}: spec.allowFirstLastIPs {first_last[:20]!r} is neither Yes nor No; "
            "written as false (Cilium's default)"
        )
    spec["allowFirstLastIPs"] = first_last == "Yes"
    if given.get("disabled"):
        spec["disabled"] = True
    if given.get("serviceSelector"):
        spec["serviceAllocation"] = {"serviceSelectors": [given["serviceSelector"]]}
    return _pool(str((doc.get("metadata") or {}).get("name")), spec, where)


__all__ = ["API_VERSION", "Converted", "convert"]
