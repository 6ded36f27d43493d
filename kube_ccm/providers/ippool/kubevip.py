"""kube-vip-cloud-provider's ConfigMap format, read as it is, so users switch unchanged.

PROVISIONAL: grammar to be checked against kube-vip-cloud-provider's documentation.
"""

from __future__ import annotations

from collections.abc import Mapping

from kube_ccm.providers.ippool.pools import GLOBAL, Pool, PoolError, parse_spans


def pools_from_kubevip(data: Mapping[str, str], where: str) -> list[Pool]:
    """The pools the keys of ``data`` define (other keys are ignored)."""
    pools: list[Pool] = []
    shared = {
        key.removeprefix("allow-share-")
        for key, value in data.items()
        if key.startswith("allow-share-") and str(value).strip().lower() == "true"
    }
    for key, value in sorted(data.items()):
        for prefix in ("cidr-", "range-"):
            if key.startswith(prefix):
                name = key.removeprefix(prefix)
                if not name:
                    raise PoolError(f"{where}: key {key!r} names no namespace")
                spans = parse_spans(str(value), f"{where} key {key}")
                pools.append(Pool(name, f"{where} key {key}", spans, allow_share=name in shared))
    return pools


__all__ = ["GLOBAL", "pools_from_kubevip"]
