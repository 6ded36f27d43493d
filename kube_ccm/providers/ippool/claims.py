"""Address claims, kept in the Kubernetes API as ``networking.k8s.io/v1`` IPAddress objects.

An IPAddress is named by the address itself (canonical form), so the API server
makes creating one atomic: of two replicas, or two workers, that claim one address
at once, exactly one succeeds and the other gets ``409 AlreadyExists``. That is
what keeps an address from going to two Services across restarts, `kill -9` and
failovers: the claim is durable before any Service status shows the address, and
the allocator's view is rebuilt from the API (a LIST) whenever it starts.

Each claim is labelled ``ipaddress.kubernetes.io/managed-by: ippool.kube-ccm.io``
(the API server's own ClusterIP repair loop leaves IPAddresses of other managers
alone; a ClusterIP in a service CIDR that overlaps a pool is refused instead of
handed out twice), points with ``spec.parentRef`` at its pool (immutable, so not at
a Service: sharers come and go) and lists its holders in the annotation
``ippool.kube-ccm.io/holders``. Holders change with a resourceVersion-checked
replace; the last holder's release deletes the object with a resourceVersion
precondition.

The first holder's namespace owns the claim (:attr:`Claim.owner`): the namespace
that took the address first. Holders of other namespaces are guests, there only
because both sides opted in to sharing across namespaces. A holder's sharing key is
stored as a digest, never as written: the key is what lets a Service join, so the
claim does not show it. Claims written before that (a plain ``sharingKey``,
:attr:`Claim.legacy`) are read as before; the provider rewrites them when it loads
the index.
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import json
import logging
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

from kube_ccm.cloudprovider import IP_ADDRESSES, ApiError, KubernetesClient, TypedClient
from kube_ccm.providers.ippool.pools import IPAddress

log = logging.getLogger(__name__)

_K = TypeVar("_K")

MANAGED_BY_LABEL = "ipaddress.kubernetes.io/managed-by"
MANAGED_BY = "ippool.kube-ccm.io"
HOLDERS_ANNOTATION = "ippool.kube-ccm.io/holders"
PARENT_GROUP = "ippool.kube-ccm.io"
PARENT_RESOURCE = "pools"


LEGACY_ALLOW_SHARE_KEY = "kube-vip allow-share "
"""How claims before digests recorded a pool's implicit key (``allow-share-<name>``)."""
ANY_NAMESPACE = "*"


def key_digest(key: str) -> str:
    """What a claim records of a sharing key: equal keys, equal digests."""
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True)
class Holder:
    """A Service holding a claim, with what it needs to check sharing."""

    namespace: str
    name: str
    uid: str
    ports: tuple[str, ...] = ()
    """``TCP/80``-style protocol/port pairs."""
    sharing_key: str = ""
    """:func:`key_digest` of the Service's sharing-key annotation, or ""."""
    pool_share: str = ""
    """The pool whose ``allow-share-<name>`` lets the Service share (no annotation key):
    kept apart from :attr:`sharing_key`, where no annotation can write it."""
    share_with: frozenset[str] = frozenset()
    """The other namespaces the Service agrees to share with (:data:`ANY_NAMESPACE`:
    all), from its cross-namespace annotation."""
    cluster: str = ""
    """``--cluster-name`` of the CCM that claimed it ("" in claims older than this field:
    read as the default cluster name, ``kubernetes``)."""
    rules: frozenset[str] = frozenset()
    """Whose sharing rules its sharing key brings (``metallb``, ``cilium``): the
    annotation it was written in (:func:`.provider.sharing_key`)."""
    traffic_policy: str = ""
    """``spec.externalTrafficPolicy``, recorded for a Service with a sharing key
    (Cilium's rule compares it)."""
    selector: str = ""
    """A digest of ``spec.selector``, recorded when MetalLB's rules need it."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def sharing(self) -> tuple[str, str] | None:
        """What it shares by: its annotation key's digest, else its pool's rule."""
        if self.sharing_key:
            return ("key", self.sharing_key)
        if self.pool_share:
            return ("pool", self.pool_share)
        return None

    def consents(self, namespace: str) -> bool:
        """Whether it may share with a Service of ``namespace``."""
        return (
            namespace == self.namespace
            or namespace in self.share_with
            or ANY_NAMESPACE in self.share_with
        )

    def to_json(self) -> dict[str, object]:
        data: dict[str, object] = {
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
            "ports": list(self.ports),
        }
        if self.sharing_key:
            data["sharingKeyDigest"] = self.sharing_key
        if self.pool_share:
            data["allowShare"] = self.pool_share
        if self.share_with:
            data["shareWith"] = sorted(self.share_with)
        if self.cluster:
            data["cluster"] = self.cluster
        if self.rules:
            data["rules"] = sorted(self.rules)
        if self.traffic_policy:
            data["trafficPolicy"] = self.traffic_policy
        if self.selector:
            data["selector"] = self.selector
        return data

    @classmethod
    def from_json(cls, data: dict[str, object]) -> Holder:
        ports = data.get("ports") or []
        share_with = data.get("shareWith") or []
        rules = data.get("rules") or []
        digest = str(data.get("sharingKeyDigest") or "")
        pool_share = str(data.get("allowShare") or "")
        legacy = str(data.get("sharingKey") or "")
        if legacy.startswith(LEGACY_ALLOW_SHARE_KEY):
            pool_share = pool_share or legacy.removeprefix(LEGACY_ALLOW_SHARE_KEY)
        elif legacy:
            digest = digest or key_digest(legacy)
        return cls(
            namespace=str(data.get("namespace", "")),
            name=str(data.get("name", "")),
            uid=str(data.get("uid", "")),
            ports=tuple(str(p) for p in ports) if isinstance(ports, list) else (),
            sharing_key=digest,
            pool_share=pool_share,
            share_with=(
                frozenset(str(n) for n in share_with)
                if isinstance(share_with, list)
                else frozenset()
            ),
            cluster=str(data.get("cluster") or ""),
            rules=frozenset(str(r) for r in rules) if isinstance(rules, list) else frozenset(),
            traffic_policy=str(data.get("trafficPolicy") or ""),
            selector=str(data.get("selector") or ""),
        )


@dataclass(frozen=True)
class Claim:
    address: IPAddress
    pool: str
    holders: tuple[Holder, ...]
    resource_version: str
    legacy: bool = False
    """Written by an older kube-ccm, with plain sharing keys: rewrite it."""
    foreign: bool = False
    """Not ippool's: another manager's IPAddress (the API server's for a ClusterIP),
    found when creating ours failed; taken, and never written."""
    pool_resource: str = PARENT_RESOURCE
    """``pools`` (a kube-vip pool) or ``loadbalancerpools`` (a LoadBalancerPool)."""

    @property
    def pool_ref(self) -> str:
        """As :attr:`.pools.Pool.ref`."""
        return (
            self.pool
            if self.pool_resource == PARENT_RESOURCE
            else f"{self.pool_resource}/{self.pool}"
        )

    @property
    def owner(self) -> str:
        """The namespace that owns the address: its first holder's."""
        return self.holders[0].namespace if self.holders else ""

    def held_by(self, uid: str) -> bool:
        return any(h.uid == uid for h in self.holders)

    def others(self, uid: str) -> tuple[Holder, ...]:
        return tuple(h for h in self.holders if h.uid != uid)


def canonical(address: IPAddress) -> str:
    """The IPAddress object name for ``address`` (the API server insists on it)."""
    return address.compressed


def _parse(item: dict[str, object]) -> Claim | None:
    metadata = item.get("metadata")
    spec = item.get("spec")
    if not isinstance(metadata, dict) or not isinstance(spec, dict):
        return None
    try:
        address = ipaddress.ip_address(str(metadata.get("name", "")))
    except ValueError:
        return None
    annotations = metadata.get("annotations") or {}
    try:
        raw = json.loads(annotations.get(HOLDERS_ANNOTATION) or "[]")
    except ValueError:
        log.warning("IPAddress %s: unreadable %s annotation", address, HOLDERS_ANNOTATION)
        raw = []
    if not isinstance(raw, list):
        raw = []
    holders = tuple(Holder.from_json(h) for h in raw if isinstance(h, dict))
    legacy = any(isinstance(h, dict) and "sharingKey" in h for h in raw)
    parent = spec.get("parentRef")
    pool = str(parent.get("name", "")) if isinstance(parent, dict) else ""
    resource = str(parent.get("resource") or PARENT_RESOURCE) if isinstance(parent, dict) else ""
    labels = metadata.get("labels") or {}
    foreign = not isinstance(labels, dict) or labels.get(MANAGED_BY_LABEL) != MANAGED_BY
    return Claim(
        address,
        pool,
        holders,
        str(metadata.get("resourceVersion", "")),
        legacy,
        foreign,
        resource or PARENT_RESOURCE,
    )


def _body(
    address: IPAddress, pool: str, holders: Iterable[Holder], resource: str = PARENT_RESOURCE
) -> dict[str, object]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "IPAddress",
        "metadata": {
            "name": canonical(address),
            "labels": {MANAGED_BY_LABEL: MANAGED_BY},
            "annotations": {
                HOLDERS_ANNOTATION: json.dumps(
                    [h.to_json() for h in holders], separators=(",", ":"), sort_keys=True
                )
            },
        },
        "spec": {"parentRef": {"group": PARENT_GROUP, "resource": resource, "name": pool}},
    }


class ClaimStore:
    """The claims, indexed in memory; the API is the truth and wins every race.

    Indexed by address, by holder UID and by sharing rule, so no lookup scans every
    claim. :attr:`on_release` is told of each address that leaves the index (the
    free-address indexes take it back). Loads are single-flight, and a write that
    lands while a load's LIST is in flight is applied again over its result."""

    def __init__(self, client: KubernetesClient) -> None:
        self._api = TypedClient(client)
        self._claims: dict[IPAddress, Claim] = {}
        self._owned: Counter[str] = Counter()
        self._by_uid: dict[str, set[IPAddress]] = {}
        self._by_sharing: dict[tuple[str, str], set[IPAddress]] = {}
        self._loading: asyncio.Future[None] | None = None
        self._journal: list[tuple[IPAddress, Claim | None]] | None = None
        self._doubted = False
        self.loaded = False
        self.generation = 0
        """Incremented by every load: what was derived from the index before is stale."""
        self.on_release: Callable[[IPAddress], None] | None = None

    async def load(self) -> None:
        """(Re)build the index from the API (on start, and after a lost race); callers
        that come while a load runs wait for it."""
        if self._loading is not None:
            await asyncio.shield(self._loading)
            return
        self._loading = asyncio.get_running_loop().create_future()
        self._journal = []
        self._doubted = False
        try:
            listing = await self._api.list(
                IP_ADDRESSES, label_selector=f"{MANAGED_BY_LABEL}={MANAGED_BY}"
            )
            claims = (_parse(item) for item in listing.items)
            journal, self._journal = self._journal, None
            self._claims = {}
            self._owned = Counter()
            self._by_uid = {}
            self._by_sharing = {}
            for claim in claims:
                if claim is not None:
                    self._index(claim)
            for address, written in journal:
                if written is None:
                    self._drop(address)
                else:
                    self._put(address, written)
            self.generation += 1
            self.loaded = not self._doubted  # a write in doubt meanwhile: load again
            self._loading.set_result(None)
        except BaseException as exc:
            self._loading.set_exception(
                RuntimeError("loading the IPAddress claims was interrupted; will retry")
                if isinstance(exc, asyncio.CancelledError)
                else exc
            )
            self._loading.exception()  # retrieved: only waiters re-raise it
            raise
        finally:
            self._journal = None
            self._loading = None

    def _index(self, claim: Claim) -> None:
        address = claim.address
        self._claims[address] = claim
        if not claim.foreign:
            self._owned[claim.owner] += 1
        for holder in claim.holders:
            self._by_uid.setdefault(holder.uid, set()).add(address)
            if holder.sharing is not None:
                self._by_sharing.setdefault(holder.sharing, set()).add(address)

    def _unindex(self, address: IPAddress) -> Claim | None:
        old = self._claims.pop(address, None)
        if old is None:
            return None
        if not old.foreign:
            self._owned[old.owner] -= 1
        for holder in old.holders:
            _discard(self._by_uid, holder.uid, address)
            if holder.sharing is not None:
                _discard(self._by_sharing, holder.sharing, address)
        return old

    def _put(self, address: IPAddress, claim: Claim) -> None:
        if self._journal is not None:
            self._journal.append((address, claim))
        self._unindex(address)
        self._index(claim)

    def _drop(self, address: IPAddress) -> None:
        if self._journal is not None:
            self._journal.append((address, None))
        if self._unindex(address) is not None and self.on_release is not None:
            self.on_release(address)

    def owned_by(self, namespace: str) -> int:
        """How many claims ``namespace`` owns (is the first holder of)."""
        return self._owned[namespace]

    def all(self) -> Sequence[Claim]:
        return tuple(self._claims.values())

    def get(self, address: IPAddress) -> Claim | None:
        return self._claims.get(address)

    def held_by(self, uid: str) -> list[Claim]:
        return sorted(
            (self._claims[a] for a in self._by_uid.get(uid, ())),
            key=lambda c: (c.address.version, int(c.address)),
        )

    def sharing(self, rule: tuple[str, str]) -> list[Claim]:
        """The claims a holder sharing by ``rule`` (:attr:`Holder.sharing`) holds, in
        address order."""
        return sorted(
            (self._claims[a] for a in self._by_sharing.get(rule, ())),
            key=lambda c: (c.address.version, int(c.address)),
        )

    async def _refresh(self, address: IPAddress) -> Claim | None:
        try:
            item = await self._api.get(IP_ADDRESSES, canonical(address))
        except ApiError as exc:
            if exc.not_found:
                self._drop(address)
                return None
            raise
        claim = _parse(item)
        if claim is None:
            self._drop(address)
        else:
            self._put(address, claim)
        return claim

    def _in_doubt(self) -> None:
        """A write was cancelled (or its connection dropped) in flight: the API may have
        done it without the index knowing, so the next use reloads the index. Otherwise
        a claim created just before a cancellation is never released (found by the
        conformance kit)."""
        self.loaded = False
        self._doubted = True

    async def create(
        self, address: IPAddress, pool: str, holder: Holder, resource: str = PARENT_RESOURCE
    ) -> Claim | None:
        """Claim a free address; ``None`` when someone else claimed it first (the index
        then shows their claim)."""
        try:
            item = await self._api.create(IP_ADDRESSES, _body(address, pool, [holder], resource))
        except ApiError as exc:
            if exc.status == 409:
                await self._refresh(address)
                return None
            raise
        except BaseException:
            self._in_doubt()
            raise
        claim = _parse(item)
        assert claim is not None
        self._put(address, claim)
        return claim

    async def set_holders(self, claim: Claim, holders: Sequence[Holder]) -> Claim | None:
        """Replace the holders (join, leave, ports changed); the last one leaving
        deletes the claim. ``None`` when the claim changed meanwhile (the index is
        refreshed; decide again)."""
        name = canonical(claim.address)
        try:
            if not holders:
                await self._api.delete(
                    IP_ADDRESSES,
                    name,
                    body={"preconditions": {"resourceVersion": claim.resource_version}},
                )
                self._drop(claim.address)
                return replace(claim, holders=())
            body = _body(claim.address, claim.pool, holders, claim.pool_resource)
            metadata = body["metadata"]
            assert isinstance(metadata, dict)
            metadata["resourceVersion"] = claim.resource_version
            item = await self._api.replace(IP_ADDRESSES, name, body)
        except ApiError as exc:
            if exc.status == 409 or exc.not_found:
                await self._refresh(claim.address)
                return None
            raise
        except BaseException:
            self._in_doubt()
            raise
        updated = _parse(item)
        assert updated is not None
        self._put(claim.address, updated)
        return updated


def _discard(index: dict[_K, set[IPAddress]], key: _K, address: IPAddress) -> None:
    found = index.get(key)
    if found is not None:
        found.discard(address)
        if not found:
            del index[key]
