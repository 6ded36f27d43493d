"""The ``kube-ccm`` command: one entry point, a subcommand per job.

``kube-ccm run``           the cloud-controller-manager daemon (upstream's flags)
``kube-ccm sandbox``       everything locally: control plane, simulated cloud, nodes, kube-ccm
``kube-ccm controlplane``  run a local kube-apiserver + etcd (the test bed)
``kube-ccm simcloud``      drive and inspect the simulated cloud
``kube-ccm gc``            find (and delete) load balancers whose Service is gone
``kube-ccm forward``       forward a ServiceLB port (the svclb pods' container; the
                          servicelb provider's :mod:`~kube_ccm.providers.servicelb.forward`)
``kube-ccm migrate``       convert MetalLB's, Cilium's or the Go Proxmox CCM's configuration
``kube-ccm version``       print the version
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import logging
import platform
import sys
from collections.abc import Sequence
from pathlib import Path

from kube_ccm import __version__
from kube_ccm.app.logs import configure_logging
from kube_ccm.app.tools import migrate
from kube_ccm.providers.servicelb import forward
from kube_ccm.providers.simulated import cli as simcloud

# doctor and gc read the kubeconfig as kubectl does (runtime.kubeconfig.load_tool_config);
# the daemon, as upstream's, reads only --kubeconfig/--master.
KUBECONFIG_HELP = (
    "default: $KUBECONFIG (its existing files, merged as kubectl does), else "
    "~/.kube/config, else in-cluster"
)


def _controlplane(args: argparse.Namespace) -> int:
    # Imported lazily: the daemon must not pay for the test bed's imports.
    from kube_ccm.testing.controlplane import run_up  # noqa: PLC0415

    return run_up(args.duration, args.data_dir)


def _doctor(args: argparse.Namespace) -> int:
    from kube_ccm.app.tools.doctor import report, run_checks  # noqa: PLC0415
    from kube_ccm.runtime.client import KubeClient  # noqa: PLC0415
    from kube_ccm.runtime.clientbuilder import SimpleClientBuilder  # noqa: PLC0415
    from kube_ccm.runtime.kubeconfig import KubeConfigError, load_tool_config  # noqa: PLC0415

    async def go() -> int:
        try:
            config = load_tool_config(args.kubeconfig)
            client = KubeClient.from_config(config)
            builder = (
                SimpleClientBuilder(
                    config,
                    base_user_agent="kube-ccm-doctor",
                    qps=20,
                    burst=30,
                )
                if args.cloud_provider and args.probe
                else None
            )
        except KubeConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        try:
            async with client:
                checks = await run_checks(
                    client,
                    identity=args.identity,
                    groups=args.groups or (),
                    provider=args.cloud_provider,
                    cloud_config=args.cloud_config,
                    stuck_after=datetime.timedelta(seconds=args.stuck_after),
                    builder=builder,
                    cluster_name=args.cluster_name,
                    call_timeout=args.cloud_call_timeout,
                )
        finally:
            if builder is not None:
                await builder.aclose()
        return report(checks)

    return asyncio.run(go())


def _gc(args: argparse.Namespace) -> int:
    from kube_ccm.app.tools.gc import collect  # noqa: PLC0415

    return asyncio.run(
        collect(
            cloud_provider=args.cloud_provider,
            cloud_config=args.cloud_config,
            kubeconfig=args.kubeconfig,
            cluster_name=args.cluster_name,
            dry_run=args.dry_run,
        )
    )


def _new_provider(args: argparse.Namespace) -> int:
    from kube_ccm.app.tools.newprovider import NewProviderError, write_package  # noqa: PLC0415

    directory = args.dir or Path(f"kube-ccm-{args.name}")
    try:
        written = write_package(args.name, directory)
    except NewProviderError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {len(written)} files to {directory}/; next:")
    print(f"  cd {directory} && pip install -e '.[test]' && pytest")
    print(f"  kube-ccm run --cloud-provider={args.name} ...   (see {directory}/README.md)")
    return 0


def _sandbox(args: argparse.Namespace) -> int:
    from kube_ccm.sandbox import SandboxOptions  # noqa: PLC0415
    from kube_ccm.sandbox import main as sandbox_main  # noqa: PLC0415
    from kube_ccm.sandbox.kubelets import KubeletTimings  # noqa: PLC0415

    if args.real_nodes and args.nodes is not None:
        print(
            "error: --real-nodes N runs N real kubelets instead of the --nodes simulated "
            "ones: drop --nodes",
            file=sys.stderr,
        )
        return 2
    return sandbox_main(
        SandboxOptions(
            nodes=args.real_nodes or (20 if args.nodes is None else args.nodes),
            services=args.services,
            duration=args.duration,
            latency=args.latency,
            failure_rate=args.failure_rate,
            concurrent_node_syncs=args.concurrent_node_syncs,
            provider=args.provider,
            cloud_config=args.cloud_config,
            data_dir=args.data_dir,
            kill=args.kill,
            shutdown=args.shutdown,
            kubelets=KubeletTimings(grace_period=args.node_monitor_grace_period),
            on_prem=args.on_prem,
            stall_timeout=args.stall_timeout,
            provision_command=args.provision_command,
            real_nodes=args.real_nodes,
        )
    )


def _parse_duration(text: str) -> float:
    """Go-style durations (``90s``, ``5m``, ``1h``) or plain seconds."""
    units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    try:
        for suffix in ("ms", "s", "m", "h"):
            if text.endswith(suffix):
                return float(text[: -len(suffix)]) * units[suffix]
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid duration {text!r}: use a number of seconds or e.g. 30s, 5m, 1h"
        ) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kube-ccm", description="The Kubernetes cloud-controller-manager, in Python."
    )
    parser.add_argument(
        "--version", action="version", version=f"kube-ccm {__version__}", help="print the version"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    cp = sub.add_parser(
        "controlplane",
        help="run a local kube-apiserver + etcd and print its kubeconfig",
        description=(
            "Start a real kube-apiserver and etcd on loopback (built from the Go module proxy "
            "on first use), print where its admin kubeconfig is and the server version, and "
            "keep it running until Ctrl-C or --duration."
        ),
    )
    cp.add_argument(
        "--duration",
        type=_parse_duration,
        default=None,
        help="stop after this long (e.g. 20s, 5m); default: run until Ctrl-C",
    )
    cp.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="keep certificates, etcd data and logs here (default: a temporary directory, removed)",
    )
    cp.set_defaults(handler=_controlplane)

    sub.add_parser(
        "run",
        help="run the cloud-controller-manager daemon (kube-ccm run --help for its flags)",
        add_help=False,
    )
    simcloud.add_parser(sub)

    sandbox = sub.add_parser(
        "sandbox",
        help="the whole system locally: control plane, simulated cloud, nodes, kube-ccm",
        description=(
            "Start a real kube-apiserver and etcd, register simulated nodes, run kube-ccm with "
            "the simulated cloud, show progress and a summary, then keep running until Ctrl-C "
            "or --duration."
        ),
    )
    sandbox.add_argument(
        "--nodes", type=int, default=None, help="simulated nodes to register (default 20)"
    )
    sandbox.add_argument(
        "--real-nodes",
        type=int,
        default=0,
        metavar="N",
        help="run N real kubelets (each on its own containerd) with kube-controller-manager "
        "and kube-scheduler instead of simulated ones, and kube-ccm from the image of this "
        "checkout, installed by its Helm chart (min(N, 2) replicas, leader election); needs "
        "root and `make sysdeps` (default 0: simulated kubelets)",
    )
    sandbox.add_argument(
        "--services", type=int, default=5, help="LoadBalancer services to create (default 5)"
    )
    sandbox.add_argument(
        "--duration",
        type=_parse_duration,
        default=None,
        help="keep running this long after initialisation (default: until Ctrl-C)",
    )
    sandbox.add_argument(
        "--latency", type=_parse_duration, default=0.0, help="simulated cloud latency per call"
    )
    sandbox.add_argument(
        "--failure-rate", type=float, default=0.0, help="share of cloud calls failing (0..1)"
    )
    sandbox.add_argument(
        "--concurrent-node-syncs", type=int, default=4, help="kube-ccm workers (default 4)"
    )
    sandbox.add_argument(
        "--provider",
        default="simulated",
        help="installed provider to run (default simulated); aws without --cloud-config "
        "runs against a local moto server the sandbox starts (needs the dev and aws extras), "
        "proxmox without --cloud-config against a local fakepve with ippool load balancers "
        "(needs the dev extra), servicelb with --real-nodes N: ServiceLB load balancers "
        "answering on the node IPs",
    )
    sandbox.add_argument(
        "--cloud-config",
        type=Path,
        default=None,
        help="the cloud-config for --provider other than simulated (default: none)",
    )
    sandbox.add_argument(
        "--data-dir", type=Path, default=None, help="keep all state here (default: temporary)"
    )
    sandbox.add_argument(
        "--stall-timeout",
        type=_parse_duration,
        default=60.0,
        help="give up when no node is initialised for this long, printing kube-ccm's last "
        "errors (default 60s)",
    )
    sandbox.add_argument(
        "--provision-command",
        default="",
        help="with --provider: a command run with the node names (sandbox-node-0000 ...) "
        "as arguments before the nodes register, to create their instances (default none)",
    )
    sandbox.add_argument(
        "--on-prem",
        action="store_true",
        help="the composed on-prem setup instead of the simulated cloud: instances from "
        "libvirt (a local libvirtd on its test driver), load balancers from ippool "
        "(needs the libvirt extra and libvirtd; default off)",
    )
    sandbox.add_argument(
        "--kill",
        type=int,
        default=0,
        help="after the load balancers, this many kubelets die and their instances are "
        "terminated: kube-ccm deletes the Nodes (default 0)",
    )
    sandbox.add_argument(
        "--shutdown",
        type=int,
        default=0,
        help="this many kubelets die and their instances shut down: kube-ccm taints the "
        "Nodes (default 0)",
    )
    sandbox.add_argument(
        "--node-monitor-grace-period",
        type=_parse_duration,
        default=15.0,
        help="how long a kubelet may stay silent before its Node turns Ready=Unknown, as "
        "kube-controller-manager's flag of that name (default 15s here, to keep demos short)",
    )
    sandbox.set_defaults(handler=_sandbox)

    new = sub.add_parser(
        "new-provider",
        help="write a provider package to start from",
        description=(
            "Write a pip package kube-ccm-NAME: a working provider (instances and load "
            "balancers) against an in-memory fake cloud it ships, its entry point, a typed "
            "cloud-config, tests running kube-ccm's controllers on it, a command of its "
            "own (NAME-cloud-controller-manager) and a Dockerfile."
        ),
    )
    new.add_argument("name", help="the provider's name (the providerID scheme), e.g. mycloud")
    new.add_argument(
        "--dir", type=Path, default=None, help="where to write it (default ./kube-ccm-NAME)"
    )
    new.set_defaults(handler=_new_provider)

    gc = sub.add_parser(
        "gc",
        help="find (and delete) load balancers whose Service is gone",
        description=(
            "List the load balancers this cluster owns (providers with LoadBalancerInventory) "
            "and the Services, report every load balancer no Service will clean up (deleted "
            "while no CCM ran, or without the cleanup finalizer; or no longer wanting one), "
            "and delete them unless --dry-run. Exit status 1 while leaks remain."
        ),
    )
    gc.add_argument("--cloud-provider", required=True, help="the provider, as for kube-ccm run")
    gc.add_argument("--cloud-config", default=None, help="its cloud-config file")
    gc.add_argument("--kubeconfig", default=None, help=KUBECONFIG_HELP)
    gc.add_argument(
        "--cluster-name", default="kubernetes", help="as --cluster-name of kube-ccm run"
    )
    gc.add_argument("--dry-run", action="store_true", help="report only, delete nothing")
    gc.set_defaults(handler=_gc)

    doctor = sub.add_parser(
        "doctor",
        help="check a live cluster for what an external CCM needs",
        description=(
            "Check a cluster: kubelets with --cloud-provider=external, nodes stuck "
            "uninitialised, kube-controller-manager cloud loops, the PersistentVolumeLabel "
            "admission plugin, the CCM identity's permissions and the provider's capabilities. "
            "Exit status 1 if any check fails."
        ),
    )
    doctor.add_argument("--kubeconfig", default=None, help=KUBECONFIG_HELP)
    doctor.add_argument(
        "--as",
        dest="identity",
        default=None,
        help="the CCM's identity whose permissions to check (default: the ServiceAccount "
        "kube-system/cloud-controller-manager of deploy/rbac.yaml, checked if it exists)",
    )
    doctor.add_argument(
        "--as-group",
        dest="groups",
        action="append",
        default=None,
        help="a group of the --as identity (repeatable), as kubectl's --as-group",
    )
    doctor.add_argument(
        "--cloud-provider",
        default="",
        help="also report this provider's capabilities and probe its cloud",
    )
    doctor.add_argument(
        "--probe",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="with --cloud-provider: call the cloud read-only for every Node, LoadBalancer "
        "Service and the routes, and report what does not match (default on)",
    )
    doctor.add_argument(
        "--cluster-name", default="kubernetes", help="as kube-ccm run's (default kubernetes)"
    )
    doctor.add_argument(
        "--cloud-call-timeout",
        type=_parse_duration,
        default=10.0,
        help="how long each probing call may take (default 10s)",
    )
    doctor.add_argument("--cloud-config", default=None, help="the provider's cloud-config file")
    doctor.add_argument(
        "--stuck-after",
        type=_parse_duration,
        default=300.0,
        help="a node uninitialised for longer is reported (default 5m)",
    )
    doctor.set_defaults(handler=_doctor)

    # The servicelb provider's data plane, the svclb pods' container: its module
    # imports nothing of the daemon; it logs as the daemon does.
    forward.add_parser(sub, configure_logging=configure_logging)
    migrate.add_parser(sub)

    version = sub.add_parser("version", help="print the version")
    version.set_defaults(handler=lambda _args: print(f"kube-ccm {__version__}") or 0)
    return parser


def run(argv: Sequence[str] | None = None, program: str = "kube-ccm run") -> int:
    """Parse the daemon's flags and run it; the exit status.

    ``argv`` defaults to ``sys.argv[1:]``, so a provider's own main is
    ``register_cloud_provider(...)`` then ``sys.exit(run())``; ``program`` names
    the command in ``--help``. Bad flags: ``Error: ...`` lines on stderr, 1.
    """
    # Imported here: the other subcommands must not pay for the daemon's imports.
    from kube_ccm.app.manager import run_daemon  # noqa: PLC0415
    from kube_ccm.app.options.buildconfig import build_config  # noqa: PLC0415
    from kube_ccm.app.options.flags import parse_flags  # noqa: PLC0415
    from kube_ccm.app.options.pflag import (  # noqa: PLC0415
        HelpRequested,
        OptionsError,
        VersionRequested,
    )
    from kube_ccm.app.options.usage import effective_flags, inert_flags, usage  # noqa: PLC0415

    try:
        parsed = parse_flags(sys.argv[1:] if argv is None else argv)
        config = build_config(parsed)
    except HelpRequested:
        print(usage(program), end="")
        return 0
    except VersionRequested as request:
        print(_raw_version() if request.raw else f"kube-ccm {__version__}")
        return 0
    except OptionsError as exc:
        for problem in exc.problems:
            print(f"Error: {problem}", file=sys.stderr)
        print("run with --help to see all flags", file=sys.stderr)
        return 1
    configure_logging(config.verbosity, config.logging_format)
    log = logging.getLogger("kube_ccm.app")
    if config.verbosity >= 1:
        for line in effective_flags(parsed):
            log.info("%s", line)
    for name in inert_flags(parsed):
        log.warning("--%s is accepted for compatibility but not acted on yet", name)
    return asyncio.run(run_daemon(config))


def _raw_version() -> str:
    """``--version=raw``: what upstream's raw version shows, for Python."""
    return json.dumps(
        {
            "gitVersion": __version__,
            "pythonVersion": platform.python_version(),
            "platform": f"{sys.platform}/{platform.machine()}",
        }
    )


def cloud_controller_manager_main() -> None:
    """The ``cloud-controller-manager`` command: ``kube-ccm run`` under upstream's name."""
    sys.exit(run(sys.argv[1:], program="cloud-controller-manager"))


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["run"]:
        # The daemon parses its own (Go-style) flags, including its --help.
        return run(argv[1:])
    args = build_parser().parse_args(argv)
    result: int = args.handler(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
