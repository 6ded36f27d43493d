"""Small pure helpers over the API structs.

They mirror upstream's taint, condition, address and zone helpers so every
controller applies the same rules. Functions that "change" a list return a new
tuple together with a ``changed`` flag: ``False`` means the caller must not
write anything (upstream skips the API call in that case).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from kube_ccm.api.objects import Node, NodeAddress, NodeCondition, Taint
from kube_ccm.api.wellknown import (
    CONDITION_UNKNOWN,
    LABEL_MULTI_ZONE_DELIMITER,
    NODE_CONDITION_READY,
)

__all__ = [
    "add_or_update_taint",
    "find_taint",
    "get_node_condition",
    "has_taint",
    "merge_addresses",
    "node_ready_status",
    "parse_zones",
    "remove_taint",
    "taint_matches",
    "zones_from_label_value",
    "zones_to_label_value",
]

# ---------------------------------------------------------------------------
# taints
# ---------------------------------------------------------------------------


def taint_matches(a: Taint, b: Taint) -> bool:
    """Two taints match when key **and** effect are equal; value and time do not count."""
    return a.key == b.key and a.effect == b.effect


def find_taint(taints: Iterable[Taint], key: str, effect: str | None = None) -> Taint | None:
    """The first taint with ``key`` (and ``effect``, if given), or ``None``."""
    for taint in taints:
        if taint.key == key and (effect is None or taint.effect == effect):
            return taint
    return None


def has_taint(node: Node, key: str, effect: str | None = None) -> bool:
    """Whether the node carries a taint with ``key`` (and ``effect``, if given)."""
    return find_taint(node.spec.taints, key, effect) is not None


def add_or_update_taint(taints: Sequence[Taint], taint: Taint) -> tuple[tuple[Taint, ...], bool]:
    """Put ``taint`` on the list, as upstream's ``AddOrUpdateTaint`` does.

    A matching taint (same key and effect) that is identical in every field means
    no change. A matching taint that differs (value, time added) is replaced where
    it stands. Otherwise ``taint`` is appended.
    """
    result: list[Taint] = []
    replaced = False
    for existing in taints:
        if taint_matches(existing, taint):
            if existing == taint:
                return tuple(taints), False
            result.append(taint)
            replaced = True
        else:
            result.append(existing)
    if not replaced:
        result.append(taint)
    return tuple(result), True


def remove_taint(taints: Sequence[Taint], taint: Taint) -> tuple[tuple[Taint, ...], bool]:
    """Drop every taint matching ``taint`` (key and effect); ``changed`` is false if none did."""
    kept = tuple(t for t in taints if not taint_matches(t, taint))
    return kept, len(kept) != len(taints)


# ---------------------------------------------------------------------------
# conditions
# ---------------------------------------------------------------------------


def get_node_condition(node: Node, condition_type: str) -> NodeCondition | None:
    """The node's condition of ``condition_type``, or ``None`` if it has none."""
    for condition in node.status.conditions:
        if condition.type == condition_type:
            return condition
    return None


def node_ready_status(node: Node) -> str:
    """Status of the ``Ready`` condition: ``True``, ``False`` or ``Unknown``.

    A node without a Ready condition counts as ``Unknown``, which makes it eligible
    for deletion by the lifecycle controller.
    """
    condition = get_node_condition(node, NODE_CONDITION_READY)
    return condition.status if condition is not None else CONDITION_UNKNOWN


# ---------------------------------------------------------------------------
# addresses
# ---------------------------------------------------------------------------


def merge_addresses(
    addresses: Sequence[NodeAddress], extra: Iterable[NodeAddress]
) -> tuple[NodeAddress, ...]:
    """``addresses`` followed by each of ``extra`` whose (type, address) pair is new.

    Order is kept: existing entries first, then new ones in the order given.
    """
    seen = {(a.type, a.address) for a in addresses}
    result = list(addresses)
    for address in extra:
        pair = (address.type, address.address)
        if pair not in seen:
            seen.add(pair)
            result.append(address)
    return tuple(result)


# ---------------------------------------------------------------------------
# zones
# ---------------------------------------------------------------------------


def _split_zones(value: str, separator: str, what: str) -> frozenset[str]:
    zones = [z.strip() for z in value.split(separator)]
    if any(not z for z in zones):
        raise ValueError(f"{what} {value!r} contains an empty zone; remove the extra {separator!r}")
    return frozenset(zones)


def parse_zones(value: str) -> frozenset[str]:
    """A comma-separated zone list as a set; an empty element is an error (upstream
    ``ZonesToSet``)."""
    return _split_zones(value, ",", "zone list")


def zones_from_label_value(value: str) -> frozenset[str]:
    """A ``__``-joined zone label value (``a__b``) as a set; an empty element is an
    error (upstream ``LabelZonesToSet``)."""
    return _split_zones(value, LABEL_MULTI_ZONE_DELIMITER, "zone label value")


def zones_to_label_value(zones: Iterable[str]) -> str:
    """Zones joined with ``__`` in sorted order, the inverse of :func:`zones_from_label_value`."""
    return LABEL_MULTI_ZONE_DELIMITER.join(sorted(set(zones)))
