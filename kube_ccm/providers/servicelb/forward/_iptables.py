"""The iptables mode of ``kube-ccm forward``: klipper-lb's rules, removed on exit.

For each ``SRC_RANGES`` entry, in the filter table (``ip6tables`` for IPv6)::

    -I FORWARD -s <range> -p <proto> --dport <DEST_PORT> -j ACCEPT

and for each ``DEST_IPS`` entry whose family has forwarding on::

    filter  -A FORWARD -d <ip>/32 -p <proto> --dport <DEST_PORT> -j DROP
    nat     -I PREROUTING -p <proto> --dport <SRC_PORT> -j DNAT --to <ip>:<DEST_PORT>
    nat     -I POSTROUTING -d <ip>/32 -p <proto> -j MASQUERADE

exactly as klipper-lb's ``entry`` (so with several addresses of one family the
last one wins, as there). With ``LISTEN_IPS`` the DNAT rule also matches
``-d <listen ip>``. Every rule is deleted again (``-D``, in reverse) when the
forwarder stops; a rule that is already gone is not an error then.

Which ``iptables`` runs is the image's choice (Debian's alternatives pick the
nft or legacy backend); klipper-lb picks by whether ``nf_tables`` is loaded.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from kube_ccm.providers.servicelb.forward._spec import ForwardSpec, SetupError

log = logging.getLogger("kube_ccm.forward")

FORWARDING_SYSCTL = {
    4: Path("/proc/sys/net/ipv4/ip_forward"),
    6: Path("/proc/sys/net/ipv6/conf/all/forwarding"),
}
SYSCTL_NAME = {4: "net.ipv4.ip_forward", 6: "net.ipv6.conf.all.forwarding"}


@dataclass(frozen=True)
class Rule:
    """One rule: its family, table, how it is added (``-I``/``-A``), chain and match."""

    family: int
    table: str
    add: str
    chain: str
    spec: tuple[str, ...]

    @property
    def command(self) -> str:
        return "iptables" if self.family == 4 else "ip6tables"

    def argv(self, action: str | None = None) -> list[str]:
        """The command line adding it (or with ``action="-D"``, deleting it)."""
        return [self.command, "-w", "-t", self.table, action or self.add, self.chain, *self.spec]


def rules(spec: ForwardSpec, families: Sequence[int] = (4, 6)) -> list[Rule]:
    """klipper-lb's rules for ``spec``, in the order it adds them.

    ``families`` are those with forwarding on: a destination of another family
    gets no rules (klipper-lb skips it silently; :func:`installed_rules` refuses).
    """
    proto = spec.protocol.lower()
    found: list[Rule] = []
    for net in spec.src_ranges:
        if net.version not in families:
            continue
        found.append(
            Rule(
                net.version,
                "filter",
                "-I",
                "FORWARD",
                ("-s", str(net), "-p", proto, "--dport", str(spec.dest_port), "-j", "ACCEPT"),
            )
        )
    for ip in spec.dest_ips:
        if ip.version not in families:
            continue
        host = f"{ip}/{32 if ip.version == 4 else 128}"
        to = f"{ip}:{spec.dest_port}" if ip.version == 4 else f"[{ip}]:{spec.dest_port}"
        listen: list[str | None] = [str(a) for a in spec.listen_ips if a.version == ip.version]
        found.append(
            Rule(
                ip.version,
                "filter",
                "-A",
                "FORWARD",
                ("-d", host, "-p", proto, "--dport", str(spec.dest_port), "-j", "DROP"),
            )
        )
        for local in listen or [None]:
            match = ("-d", local) if local is not None else ()
            found.append(
                Rule(
                    ip.version,
                    "nat",
                    "-I",
                    "PREROUTING",
                    (*match, "-p", proto, "--dport", str(spec.src_port), "-j", "DNAT", "--to", to),
                )
            )
        found.append(
            Rule(
                ip.version,
                "nat",
                "-I",
                "POSTROUTING",
                ("-d", host, "-p", proto, "-j", "MASQUERADE"),
            )
        )
    return found


def forwarding_families() -> set[int]:
    """The families whose forwarding sysctl reads 1 in this network namespace."""
    on: set[int] = set()
    for family, path in FORWARDING_SYSCTL.items():
        with contextlib.suppress(OSError):
            if path.read_text().strip() == "1":
                on.add(family)
    return on


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=30)


@contextlib.contextmanager
def installed_rules(spec: ForwardSpec) -> Iterator[list[Rule]]:
    """Check the namespace, add :func:`rules`, yield them, delete them on exit."""
    families = spec.families
    forwarding = forwarding_families()
    off = [f for f in families if f not in forwarding]
    if off:
        names = " and ".join(f"{SYSCTL_NAME[f]}=1" for f in off)
        raise SetupError(
            f"forwarding is off in this pod's network namespace: set the pod sysctl {names} "
            "(allow it with the kubelet's --allowed-unsafe-sysctls), or use --mode userspace"
        )
    wanted = rules(spec, families)
    for command in sorted({rule.command for rule in wanted}):
        if shutil.which(command) is None:
            raise SetupError(
                f"{command} is not installed in this image: the iptables mode needs it "
                "(or use --mode userspace, which needs nothing)"
            )
    added: list[Rule] = []
    try:
        for rule in wanted:
            done = _run(rule.argv())
            if done.returncode != 0:
                detail = (done.stderr or done.stdout).strip()
                hint = (
                    "the container needs the NET_ADMIN capability"
                    if "ermission" in detail
                    else "see iptables' message"
                )
                raise SetupError(f"{' '.join(rule.argv())} failed: {detail}: {hint}")
            added.append(rule)
        log.info("added %d iptables rules", len(added))
        yield added
    finally:
        for rule in reversed(added):
            done = _run(rule.argv("-D"))
            if done.returncode != 0:
                log.warning(
                    "could not delete %s: %s", " ".join(rule.argv("-D")), done.stderr.strip()
                )
        if added:
            log.info("deleted %d iptables rules", len(added))
