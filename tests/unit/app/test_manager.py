"""Start-up errors of the manager say what to fix (§1.12, §8.10)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import socket
from pathlib import Path

import pytest

from kube_ccm.api import wellknown as wk
from kube_ccm.api.objects import Node, ObjectMeta, PersistentVolume, Service
from kube_ccm.app.descriptors import StartupError
from kube_ccm.app.manager import Daemon, build_cloud, run_daemon, validate_before_leading
from kube_ccm.app.options.config import DaemonConfig
from kube_ccm.app.options.configz import configz, redact_url
from kube_ccm.app.options.leadermigration import migration_split
from kube_ccm.app.serving.delegated import DelegatedAuthConfig
from kube_ccm.app.tools.doctor import check_provider
from kube_ccm.cloudprovider import PVLabeler, Registry, TransientCloudError, get_cloud_provider
from kube_ccm.controllers.cloudcalls import CloudCallPolicy, CloudCalls, guard
from kube_ccm.providers.composite import build_composite
from kube_ccm.providers.simulated import factory as simulated_factory
from kube_ccm.runtime.metrics import Metrics
from kube_ccm.testing.fakeprovider import FakeLabelingProvider


def config(tmp_path: Path, text: str | None, **kwargs: object) -> DaemonConfig:
    path = None
    if text is not None:
        file = tmp_path / "cloud.yaml"
        file.write_text(text)
        path = str(file)
    return DaemonConfig(cloud_provider="simulated", cloud_config=path, **kwargs)  # type: ignore[arg-type]


def test_the_simulated_cloud_builds_from_its_cloud_config(tmp_path: Path) -> None:
    cloud = build_cloud(config(tmp_path, f"state: {tmp_path / 'c.db'}\n"))
    assert cloud.provider_name() == "simulated"


def test_an_unknown_provider_names_the_installed_ones(tmp_path: Path) -> None:
    with pytest.raises(StartupError, match=r'unknown cloud provider "nope".*simulated'):
        build_cloud(DaemonConfig(cloud_provider="nope"))


def test_external_is_refused_with_an_explanation() -> None:
    with pytest.raises(StartupError, match="Cloud provider is nil"):
        build_cloud(DaemonConfig(cloud_provider="external"))


def test_a_malformed_cloud_config_is_a_clear_startup_error(tmp_path: Path) -> None:
    with pytest.raises(StartupError, match=r"Cloud provider could not be initialized.*latency"):
        build_cloud(config(tmp_path, "state: x.db\nlatency: soon\n"))


def test_a_missing_cloud_config_file_is_named(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.yaml")
    with pytest.raises(StartupError, match=r"nope\.yaml"):
        build_cloud(DaemonConfig(cloud_provider="simulated", cloud_config=missing))


async def test_run_daemon_returns_1_and_logs_the_reason(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    status = await run_daemon(
        DaemonConfig(
            cloud_provider="simulated",
            cloud_config=None,
            kubeconfig=str(tmp_path / "missing-kubeconfig"),
        )
    )
    assert status == 1
    assert "missing-kubeconfig" in caplog.text
    assert "--kubeconfig" in caplog.text


ALL = frozenset(
    {
        "cloud-node-controller",
        "cloud-node-lifecycle-controller",
        "service-lb-controller",
        "node-route-controller",
    }
)


def test_servingcert_on_instances_the_nodes_write_stops_the_daemon_before_leading() -> None:
    """k3s's instances are the Nodes' own annotations: a node would choose its own
    certificate's names. Refused before the Lease, with what to do instead; the same
    provider without servingcert, and servingcert on a cloud, start."""
    k3s = get_cloud_provider("k3s", None)
    assert k3s is not None
    wanted = DaemonConfig(
        cloud_provider="k3s",
        controllers=frozenset(
            {wk.CONTROLLER_CLOUD_NODE, wk.CONTROLLER_KUBELET_SERVING_CERT_APPROVER}
        ),
    )
    with pytest.raises(StartupError, match=r"'k3s' are not authoritative.*Remove servingcert"):
        validate_before_leading(wanted, k3s)
    validate_before_leading(
        DaemonConfig(cloud_provider="k3s", controllers=frozenset({wk.CONTROLLER_CLOUD_NODE})), k3s
    )
    simulated = get_cloud_provider("simulated", b"state: ':memory:'")
    assert simulated is not None
    validate_before_leading(dataclasses.replace(wanted, cloud_provider="simulated"), simulated)


def test_without_leader_migration_everything_runs_under_the_main_lock() -> None:
    config = DaemonConfig(cloud_provider="simulated", controllers=ALL)
    assert migration_split(config) == (ALL, frozenset(), frozenset())
    # Migration needs leader election, as upstream.
    off = DaemonConfig(
        cloud_provider="simulated",
        controllers=ALL,
        enable_leader_migration=True,
        leader_elect=False,
    )
    assert migration_split(off) == (ALL, frozenset(), frozenset())


def test_the_default_migration_config_moves_only_the_lifecycle_controller() -> None:
    # Upstream quirk (§8.5): the default names route-controller and service-controller,
    # which are not the canonical names, and names are not resolved as aliases.
    config = DaemonConfig(cloud_provider="simulated", controllers=ALL, enable_leader_migration=True)
    main, migrated, elsewhere = migration_split(config)
    assert migrated == {"cloud-node-lifecycle-controller"}
    assert main == ALL - migrated
    assert elsewhere == frozenset()


def test_controllers_listed_for_another_component_do_not_run_here() -> None:
    config = DaemonConfig(
        cloud_provider="simulated",
        controllers=ALL,
        enable_leader_migration=True,
        leader_migration_controllers={
            "node-route-controller": "kube-controller-manager",
            "service-lb-controller": "cloud-controller-manager",
            "cloud-node-lifecycle-controller": "*",
        },
    )
    main, migrated, elsewhere = migration_split(config)
    assert elsewhere == {"node-route-controller"}
    assert migrated == {"service-lb-controller", "cloud-node-lifecycle-controller"}
    assert main == {"cloud-node-controller"}


def test_configz_never_shows_credentials_in_master() -> None:
    shown = configz(
        DaemonConfig(cloud_provider="simulated", master="https://admin:s3cret@10.0.0.1:6443/x")
    )
    assert shown["config"]["master"] == "https://REDACTED@10.0.0.1:6443/x"
    assert "s3cret" not in repr(shown)
    assert configz(DaemonConfig(cloud_provider="simulated"))["config"]["master"] is None


def test_configz_and_doctor_show_which_provider_serves_what() -> None:
    cloud = get_cloud_provider(
        "composite",
        b"providers:\n  simulated:\n    capabilities: [instances, routes]\n"
        b"    config: {state: ':memory:'}\n",
    )
    assert cloud is not None
    shown = configz(
        DaemonConfig(cloud_provider="composite"), guard(cloud, CloudCalls("x", Metrics()))
    )
    assert shown["config"]["cloudProviders"] == {"instances": "simulated", "routes": "simulated"}
    assert "cloudProviders" not in configz(DaemonConfig(cloud_provider="simulated"))["config"]


def test_doctor_shows_which_provider_serves_what(tmp_path: Path) -> None:
    config = tmp_path / "composite.yaml"
    config.write_text(
        "providers: {simulated: {capabilities: [loadBalancer], config: {state: ':memory:'}}}"
    )
    check = check_provider("composite", str(config))
    assert check.status == "PASS"
    assert check.detail == "serves loadBalancer from simulated"


def test_redact_url_keeps_urls_without_credentials() -> None:
    assert redact_url("https://10.0.0.1:6443") == "https://10.0.0.1:6443"
    assert redact_url("http://token@host") == "http://REDACTED@host"


async def test_doctor_skips_the_default_service_account_when_nothing_runs_as_it() -> None:
    from kube_ccm.app.tools.doctor import check_permissions  # noqa: PLC0415
    from kube_ccm.testing.fakeapi import FakeApiServer  # noqa: PLC0415

    api = FakeApiServer()
    client = api.client()
    check = await check_permissions(client, None)
    await client.aclose()
    assert check.status == "SKIP"
    assert "does not exist" in check.detail
    assert "--as" in check.fix


def unreachable_kubeconfig(tmp_path: Path) -> str:
    """A kubeconfig naming an API server nobody listens on."""
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    return str(path)


async def test_a_stopped_daemon_writes_its_events_fences_then_closes_the_provider_then_the_clients(
    tmp_path: Path,
) -> None:
    config = DaemonConfig(
        cloud_provider="simulated",
        cloud_config=None,
        kubeconfig=unreachable_kubeconfig(tmp_path),
        controllers=frozenset(),
        leader_elect=False,
        secure_port=0,
        shutdown_grace_period=1.0,
    )
    daemon = Daemon(config, build_cloud(config))
    events: list[str] = []
    fence_all, close_cloud, close_clients = (
        daemon.clients.fence_all,
        daemon.cloud.aclose,
        daemon.clients.aclose,
    )

    def fence(reason: str) -> None:
        events.append("fence")
        fence_all(reason)

    async def closing_cloud() -> None:
        events.append("cloud closed")
        await close_cloud()

    async def closing_clients() -> None:
        events.append("clients closed")
        await close_clients()

    recorder = daemon.recorder("cloud-node-controller")
    stop_recorder = recorder.stop

    async def flushing(grace: float = 5.0) -> None:
        events.append(f"events flushed within {grace:g} s")
        await stop_recorder(grace)

    daemon.clients.fence_all = fence  # type: ignore[method-assign]
    daemon.cloud.aclose = closing_cloud  # type: ignore[method-assign]
    daemon.clients.aclose = closing_clients  # type: ignore[method-assign]
    recorder.stop = flushing  # type: ignore[method-assign]
    asyncio.get_running_loop().call_later(0.2, daemon.stop.set)
    assert await daemon.run() == 0
    assert events == ["events flushed within 2 s", "fence", "cloud closed", "clients closed"]


async def test_a_server_that_cannot_start_leaves_nothing_open(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = DaemonConfig(
            cloud_provider="simulated",
            kubeconfig=unreachable_kubeconfig(tmp_path),
            bind_address="127.0.0.1",
            secure_port=port,
            cert_dir=str(tmp_path),
            delegated_auth=DelegatedAuthConfig(authentication_skip_lookup=True),
        )
        daemon = Daemon(config, build_cloud(config))
        closed: list[str] = []
        close_clients = daemon.clients.aclose

        async def closing_clients() -> None:
            closed.append("clients")
            await close_clients()

        daemon.clients.aclose = closing_clients  # type: ignore[method-assign]
        with pytest.raises(StartupError, match="cannot serve on"):
            await daemon.run()
    assert closed == ["clients"]


def lbco(config: bytes | None) -> FakeLabelingProvider:
    """A load-balancer provider whose every call fails (transiently: it is retried),
    and which labels volumes."""
    fake = FakeLabelingProvider(config, name="lbco", capabilities={"load_balancer"})
    fake.fail("ensure_load_balancer", TransientCloudError("lbco quota exceeded"))
    fake.fail("get_labels_for_volume", RuntimeError("lbco labels down"))
    return fake


async def test_a_composites_calls_are_counted_and_logged_under_the_member_serving_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 38: servicelb's failures were counted as
    ``cloudprovider_simulated_api_request_errors{request="EnsureLoadBalancer"}``."""
    registry = Registry(entry_point_group=None)
    registry.register("simulated", simulated_factory)
    registry.register("lbco", lbco)
    cloud = build_composite(
        b"providers:\n"
        b"  simulated: {capabilities: [instances], config: {state: ':memory:'}}\n"
        b"  lbco: {capabilities: [loadBalancer, volumeLabels]}\n",
        registry=registry,
    )
    assert cloud.provider_name() == "simulated"
    config = DaemonConfig(
        cloud_provider="composite",
        kubeconfig=unreachable_kubeconfig(tmp_path),
        controllers=frozenset(),
        leader_elect=False,
        secure_port=0,
        cloud_calls=CloudCallPolicy(attempts=2, backoff_base=0.001, backoff_cap=0.001),
    )
    daemon = Daemon(config, cloud)
    try:
        balancer = daemon.cloud.load_balancer()
        instances = daemon.cloud.instances_v2()
        assert balancer is not None
        assert instances is not None
        assert isinstance(daemon.cloud, PVLabeler)
        service = Service(metadata=ObjectMeta(name="web", namespace="default", uid="u"))
        caplog.set_level(logging.INFO, logger="kube_ccm.controllers.cloudcalls")
        with pytest.raises(TransientCloudError):
            await balancer.ensure_load_balancer("kubernetes", service, [])
        with pytest.raises(RuntimeError, match="lbco labels down"):
            await daemon.cloud.get_labels_for_volume(PersistentVolume())
        await instances.instance_exists(Node(metadata=ObjectMeta(name="n1")))
        exposed = daemon.metrics.exposition().decode()
        assert 'cloudprovider_lbco_api_request_errors{request="EnsureLoadBalancer"} 2.0' in exposed
        assert 'cloudprovider_lbco_api_request_errors{request="GetLabelsForVolume"} 1.0' in exposed
        assert (
            'cloudprovider_simulated_api_request_duration_seconds_count{request="InstanceExists"}'
            " 1.0" in exposed
        )
        assert 'cloudprovider_simulated_api_request_errors{request="' not in exposed
        assert "cloudprovider_lbco_api_request_duration_seconds_count" in exposed
        assert 'cloudprovider_lbco_api_request_duration_seconds_count{request="Instance' not in (
            exposed
        )
        [retry] = [r.getMessage() for r in caplog.records if "try 2 of 2" in r.getMessage()]
        assert "EnsureLoadBalancer to the lbco provider failed" in retry
    finally:
        await daemon.clients.aclose()
