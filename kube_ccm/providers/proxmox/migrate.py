"""The Go Proxmox CCM's ``config.yaml`` as kube-ccm's ``proxmox.yaml``: the table of
docs/on-prem.md ("Migrating from the Go CCM"), applied; every key that could not be
carried over said, all at once. A secret written in the file (``token_secret``,
``password``) is never copied: the result reads it from a file you mount. Pure;
``kube-ccm migrate proxmox`` prints what it returns.
"""

from __future__ import annotations

from typing import Any

SECRETS_DIR = "/etc/kube-ccm/proxmox"
"""Where the result expects the mounted secrets (the Helm chart's ``proxmox.mountPath``)."""
_CLUSTER_KEYS = {"url": "url", "region": "region", "token_id": "tokenId", "username": "username"}


def convert(document: Any) -> tuple[dict[str, Any] | None, list[str]]:
    """``document`` (the Go CCM's config) as a kube-ccm cloud-config, and what was not
    carried over (each a line naming the key and what to do)."""
    notes: list[str] = []
    if not isinstance(document, dict):
        notes.append("the Go CCM's config must be a YAML mapping (features, clusters)")
        return None, notes
    out: dict[str, Any] = {"clusters": []}
    for key in sorted(set(document) - {"features", "clusters"}):
        notes.append(f"{key}: not a key of the Go CCM; left out")
    for i, cluster in enumerate(document.get("clusters") or ()):
        out["clusters"].append(_cluster(i, cluster if isinstance(cluster, dict) else {}, notes))
    features = document.get("features") or {}
    if not isinstance(features, dict):
        notes.append("features: not a mapping; left out")
        features = {}
    provider = features.get("provider")
    if provider == "capmox":
        out["providerIDFormat"] = "uuid"
    elif provider not in (None, "default"):
        notes.append(f"features.provider {provider!r} is neither default nor capmox; left out")
    if features.get("ha_group"):
        out["zone"] = "haGroup"
    if features.get("force_update_labels"):
        notes.append(
            "features.force_update_labels: not carried over; kube-ccm writes the zone and "
            "region labels when a Node is initialised (a live migration does not move them)"
        )
    network = features.get("network")
    if isinstance(network, str):
        network = {"mode": network}  # the Go CCM's docs/config.md form
    if isinstance(network, dict):
        _network(network, out, notes)
    for key in sorted(set(features) - {"provider", "ha_group", "force_update_labels", "network"}):
        notes.append(f"features.{key}: not a key of the Go CCM; left out")
    return out, notes


def _cluster(i: int, cluster: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    where = f"clusters[{i}]"
    out = {new: cluster[old] for old, new in _CLUSTER_KEYS.items() if cluster.get(old)}
    region = str(cluster.get("region") or f"cluster-{i + 1}")
    if cluster.get("token_id_file"):
        out["tokenIdFile"] = cluster["token_id_file"]
    if cluster.get("token_secret_file"):
        out["tokenSecret"] = {"file": cluster["token_secret_file"]}
    elif cluster.get("token_secret") or cluster.get("token_id"):
        out["tokenSecret"] = {"file": f"{SECRETS_DIR}/{region}"}
        notes.append(
            f"{where}.token_secret: not copied (a secret in the config); put it in the file "
            f"{SECRETS_DIR}/{region} (a mounted Secret: kubectl -n kube-system create secret "
            f"generic kube-ccm-proxmox --from-file={region}=./token)"
        )
    if cluster.get("password"):
        out["password"] = {"file": f"{SECRETS_DIR}/{region}-password"}
        notes.append(
            f"{where}.password: not copied (a secret in the config); put it in the file "
            f"{SECRETS_DIR}/{region}-password"
        )
    if cluster.get("insecure"):
        notes.append(
            f"{where}.insecure: not carried over: TLS is always verified; give caFile "
            "(/etc/pve/pve-root-ca.pem on a PVE node)"
        )
    known = {*_CLUSTER_KEYS, "token_id_file", "token_secret_file", "token_secret"}
    for key in sorted(set(cluster) - known - {"password", "insecure"}):
        notes.append(f"{where}.{key}: not a key of the Go CCM; left out")
    return out


def _network(network: dict[str, Any], out: dict[str, Any], notes: list[str]) -> None:
    cidrs = [c.strip() for c in str(network.get("external_ip_cidrs") or "").split(",")]
    kept = [c for c in cidrs if c and not c.startswith("!")]
    if kept:
        out["externalIPCIDRs"] = kept
    for excluded in (c for c in cidrs if c.startswith("!")):
        notes.append(
            f"features.network.external_ip_cidrs {excluded!r}: left out (the Go CCM's code "
            "skips a `!` entry there too)"
        )
    if network.get("ipv6_support_disabled"):
        out["ipv6SupportDisabled"] = True
    mode = network.get("mode")
    if mode not in (None, "auto"):
        notes.append(
            f"features.network.mode {mode!r}: not carried over; kube-ccm reads the guest "
            "agent, else cloud-init, and keeps the kubelet's --node-ip (the Go CCM's auto)"
            + (
                "; with `default` the Go CCM reported the --node-ip alone: expect the "
                "agent's other addresses on the Nodes too"
                if mode == "default"
                else ""
            )
        )
    if network.get("ip_sort_order"):
        notes.append(
            "features.network.ip_sort_order: not carried over; the kubelet's --node-ip "
            "comes first, then the agent's addresses in the agent's order"
        )
    known = {"external_ip_cidrs", "ipv6_support_disabled", "mode", "ip_sort_order"}
    for key in sorted(set(network) - known):
        notes.append(f"features.network.{key}: not a key of the Go CCM; left out")


__all__ = ["SECRETS_DIR", "convert"]
