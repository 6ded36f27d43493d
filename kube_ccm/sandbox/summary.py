"""What the sandbox reports at the end: the summary (times, cloud calls, kube-ccm's API
requests) and the closing hints, commands to try while it keeps running."""

from __future__ import annotations

import platform
import shutil
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from kube_ccm.sandbox.local import stop_kubelet_hint

if TYPE_CHECKING:
    from kube_ccm.sandbox.local import LocalCloud

__all__ = ["Failures", "audited_requests", "hints", "kubectl_command", "summary"]

_VERBS = {
    "get": "GET",
    "list": "LIST",
    "create": "POST",
    "update": "PUT",
    "patch": "PATCH",
    "delete": "DELETE",
    "deletecollection": "DELETE",
}
_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


@dataclass(frozen=True)
class Failures:
    """What ``--kill`` and ``--shutdown`` did, and how long kube-ccm took to react."""

    killed: int = 0
    killed_took: float = 0.0
    shut_down: int = 0
    shut_down_took: float = 0.0


def audited_requests(events: list[dict[str, Any]]) -> Counter[str]:
    """``VERB resource`` counts of finished requests in audit events, as the summary
    shows them (watches not counted)."""
    counts: Counter[str] = Counter()
    for event in events:
        verb = _VERBS.get(event.get("verb", ""))
        resource = (event.get("objectRef") or {}).get("resource")
        if event.get("stage") == "ResponseComplete" and verb and resource:
            counts[f"{verb} {resource}"] += 1
    return counts


def summary(
    out: TextIO,
    *,
    nodes: int,
    took: float,
    services: int,
    lb_took: float,
    failures: Failures,
    calls: dict[str, dict[str, int]] | None,
    requests: Counter[str],
    state: Path | None,
    ingress: str = "IP",
) -> None:
    print(f"\nall {nodes} nodes initialised in {took:.2f} s (including daemon start-up)", file=out)
    if services:
        print(
            f"all {services} load balancers got an ingress {ingress} in {lb_took:.2f} s", file=out
        )
    if failures.killed:
        print(
            f"all {failures.killed} dead nodes deleted in {failures.killed_took:.2f} s "
            "(including the grace period)",
            file=out,
        )
    if failures.shut_down:
        print(
            f"all {failures.shut_down} shut-down nodes tainted in {failures.shut_down_took:.2f} s "
            "(including the grace period)",
            file=out,
        )
    if calls is None:
        print("cloud calls: counted by the simulated cloud only", file=out)
    else:
        print("cloud calls:", file=out)
        for method, count in sorted(calls.items()):
            print(f"  {method:<28} {count['count']:>6}  ({count['errors']} failed)", file=out)
    print("API requests by kube-ccm during the run (watches not counted):", file=out)
    for key, requested in sorted(requests.items()):
        if requested:
            print(f"  {key:<28} {requested:>6}", file=out)
    if state is not None:
        print(
            f"simulated cloud state: {state} (inspect with {kube_ccm_command()} simcloud "
            "--state ...)",
            file=out,
        )


def kube_ccm_command() -> str:
    """How to run this kube-ccm from a shell: ``kube-ccm`` when that is it on PATH, else
    the virtualenv's script (``make run`` does not put it on PATH)."""
    script = Path(sys.executable).parent / "kube-ccm"
    on_path = shutil.which("kube-ccm")
    if not script.is_file() or (on_path and Path(on_path).resolve() == script.resolve()):
        return "kube-ccm"
    return str(script)


def kubectl_command(kubeconfig: Path) -> tuple[str, str | None]:
    """``kubectl`` for the hints, and how to get it first when it is not on PATH: a
    download of the control plane's version (a fresh machine has curl, not kubectl)."""
    if shutil.which("kubectl"):
        return f"kubectl --kubeconfig {kubeconfig}", None
    from kube_ccm.testing.binaries import ControlPlaneBinariesError, pinned_versions  # noqa: PLC0415

    try:
        version = pinned_versions().kubernetes
    except (ControlPlaneBinariesError, OSError):
        version = "$(curl -fsSL https://dl.k8s.io/release/stable.txt)"
    arch = _ARCH.get(platform.machine().lower(), platform.machine().lower())
    get = (
        f"  curl -fsSLo kubectl https://dl.k8s.io/release/{version}/bin/linux/{arch}/kubectl "
        "&& chmod +x kubectl   # kubectl is not installed: the control plane's version"
    )
    return f"./kubectl --kubeconfig {kubeconfig}", get


def hints(
    out: TextIO,
    kubeconfig: Path,
    node: str,
    *,
    state: Path | None = None,
    local: LocalCloud | None = None,
) -> None:
    """Commands to try while the sandbox runs. ``state``: the simulated cloud's state
    file, only when kube-ccm runs the simulated cloud; ``local``: a provider's own
    cloud, which gives its own."""
    kubectl, get_kubectl = kubectl_command(kubeconfig)
    lines = [] if get_kubectl is None else [get_kubectl]
    lines.append(
        f"  {kubectl} get nodes -L topology.kubernetes.io/zone,node.kubernetes.io/instance-type"
    )
    if local is not None:
        lines += local.hints(kubectl, node)
    else:
        lines.append(stop_kubelet_hint(kubectl, node))
        if state is not None:
            lines.append(
                f"  {kube_ccm_command()} simcloud --state {state} instances terminate {node}"
                "   # and its instance"
            )
    print("\ntry:\n" + "\n".join(lines), file=out)
