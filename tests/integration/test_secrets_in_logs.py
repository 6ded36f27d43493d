"""No credential in the daemon's log at the highest verbosity (issue 37, item 6).

Each test runs ``kube-ccm run --v=10`` (debug from every library: botocore's signed
requests, aiohttp, libvirt) on the real apiserver, against a provider's fake (moto,
fakepve, libvirtd's test driver) with credentials of every kind the provider takes,
lets it initialise a Node (so the cloud is called), and then searches the whole log
for each secret, and for the shapes a secret leaves (a SigV4 signature): none may
appear. The kube client's bearer token (the daemon's kubeconfig is a ServiceAccount
token) is searched for in every one. The DigitalOcean package has its own, beside
its fake (``providers-out-of-tree/digitalocean/tests/test_daemon.py``).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import uuid as uuidlib
from pathlib import Path

import pytest
import yaml

from kube_ccm.providers.aws.moto import Ec2Proxy, MotoServer
from kube_ccm.providers.libvirt.libvirtd import LibvirtdServer, LibvirtdUnavailableError
from kube_ccm.providers.proxmox.fakepve import FakePveServer
from kube_ccm.runtime.client import KubeClient
from kube_ccm.testing.daemon import DaemonProcess
from kube_ccm.testing.manifests import UNINITIALIZED_TAINT, create_node, find_node, taint_keys
from kube_ccm.testing.pytest_plugin import Cleanup
from kube_ccm.testing.waiting import eventually

LOUDEST = (
    "--v=10",
    "--leader-elect=false",
    "--controllers=cloud-node,cloud-node-lifecycle",
    "--node-monitor-period=500ms",
    "--node-status-update-frequency=2s",
    "--cloud-call-timeout=5s",
)
SIGV4_SIGNATURE = re.compile(r"[0-9a-f]{64}")


def bearer_token(kubeconfig: Path) -> str:
    document = yaml.safe_load(kubeconfig.read_text())
    token = str(document["users"][0]["user"]["token"])
    assert len(token) > 20
    return token


async def initialised(client: KubeClient, name: str) -> None:
    async def done() -> bool:
        return UNINITIALIZED_TAINT["key"] not in taint_keys(await find_node(client, name))

    await eventually(done, within=60, what=f"Node {name} initialised")


def assert_clean(log: str, secrets: dict[str, str]) -> None:
    found = [what for what, value in secrets.items() if value in log]
    assert not found, f"in the daemon's log at --v=10: {', '.join(found)}"


async def test_aws_keys_session_token_and_signatures_stay_out_of_the_log(  # noqa: PLR0917 (fixtures)
    ccm_kubeconfig: Path,
    moto_server: MotoServer,
    ec2_proxy: Ec2Proxy,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    tmp_path: Path,
) -> None:
    network = moto_server.network(("us-east-1a",))
    instance = moto_server.run_instance(network, "us-east-1a")
    keys, session_token = moto_server.session_keys()
    credentials = tmp_path / "aws-credentials"
    credentials.write_text(
        f"[default]\naws_access_key_id = {keys.access_key_id}\n"
        f"aws_secret_access_key = {keys.secret_access_key}\naws_session_token = {session_token}\n"
    )
    config = tmp_path / "aws.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "region": network.region,
                "vpcId": network.vpc_id,
                "clusterName": "demo",
                "endpoint": ec2_proxy.url,
                "stsEndpoint": ec2_proxy.url,
                "credentials": {"file": str(credentials)},
            }
        )
    )
    process = DaemonProcess(
        kubeconfig=ccm_kubeconfig,
        workdir=tmp_path / "daemon",
        provider="aws",
        cloud_config_file=config,
        args=list(LOUDEST),
        env={
            "AWS_EC2_METADATA_DISABLED": "true",
            "AWS_CONFIG_FILE": "/nonexistent/aws-config",
            "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/aws-credentials",
        },
    ).start()
    try:
        await create_node(kube_client, kube_cleanup, instance.private_dns_name)
        await initialised(kube_client, instance.private_dns_name)
    finally:
        process.stop()
    log = process.log()
    assert "X-Amz-Security-Token" in log, "botocore's signed requests are not in the log"
    assert "Authorization" in log
    assert_clean(
        log,
        {
            "the secret access key": keys.secret_access_key,
            "the session token": session_token,
            "the access key ID": keys.access_key_id,
            "the kube client's bearer token": bearer_token(ccm_kubeconfig),
        },
    )
    signed = [line for line in log.splitlines() if "Signature" in line]
    assert signed, "no signed request in the log"
    assert not [line for line in signed if SIGV4_SIGNATURE.search(line)], signed[:3]


async def test_proxmox_token_password_and_ticket_stay_out_of_the_log(
    ccm_kubeconfig: Path,
    fakepve_server: FakePveServer,
    kube_client: KubeClient,
    kube_cleanup: Cleanup,
    tmp_path: Path,
) -> None:
    """One cluster with an API token, one with a password login (a ticket cookie and a
    CSRF token come back): neither the secret, the password nor the ticket is logged."""
    password = "pve-root-password-kube-ccm-0123"
    with FakePveServer(tmp_path / "pve2", region="cluster-2") as second:
        second.call(lambda: setattr(second.pve, "password", password))
        (tmp_path / "password").write_text(password + "\n")
        login = second.cluster_config()
        del login["tokenId"], login["tokenSecret"]
        login.update(username="root@pam", password={"file": str(tmp_path / "password")})
        fakepve_server.add_vm(100, "px-sec-a")
        second.add_vm(200, "px-sec-b", node="pve7")
        config = tmp_path / "proxmox.yaml"
        config.write_text(
            yaml.safe_dump({"clusters": [fakepve_server.cluster_config(), login], "cacheTTL": "0s"})
        )
        process = DaemonProcess(
            kubeconfig=ccm_kubeconfig,
            workdir=tmp_path / "daemon",
            provider="proxmox",
            cloud_config_file=config,
            args=list(LOUDEST),
        ).start()
        try:
            for name in ("px-sec-a", "px-sec-b"):
                await create_node(kube_client, kube_cleanup, name)
            for name in ("px-sec-a", "px-sec-b"):
                await initialised(kube_client, name)
        finally:
            process.stop()
        tickets = await second.acall(lambda: dict(second.pve.tickets))
    assert tickets, "the password cluster issued no ticket"
    secrets = {
        "the API token's secret": fakepve_server.secret_file.read_text().strip(),
        "the password": password,
        "the kube client's bearer token": bearer_token(ccm_kubeconfig),
    }
    for ticket, entry in tickets.items():
        secrets[f"ticket {ticket[:12]}"] = ticket
        secrets["the CSRF token"] = str(entry["csrf"])
    assert_clean(process.log(), secrets)


async def test_libvirt_passphrase_stays_out_of_the_log(
    ccm_kubeconfig: Path, kube_client: KubeClient, kube_cleanup: Cleanup, tmp_path: Path
) -> None:
    """libvirt's test socket asks for no credentials; the passphrase is still read
    (openAuth with the callback), and never logged."""
    workdir = Path(f"/tmp/kc-lvsec-{os.getpid()}-{uuidlib.uuid4().hex[:6]}")
    server = LibvirtdServer(workdir)
    try:
        try:
            server.start()
        except LibvirtdUnavailableError as exc:
            if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
                pytest.fail(f"CI needs libvirtd: {exc}")
            pytest.skip(str(exc))
        server.connection().defineXML(server.domain_xml("lv-sec")).create()
        passphrase = "libvirt-sasl-passphrase-0123"
        (tmp_path / "pass").write_text(passphrase + "\n")
        host = {
            "uri": server.uri,
            "name": "hv1",
            "username": "ccm",
            "credentials": {"file": str(tmp_path / "pass")},
        }
        config = tmp_path / "libvirt.yaml"
        config.write_text(yaml.safe_dump({"hosts": [host]}))
        process = DaemonProcess(
            kubeconfig=ccm_kubeconfig,
            workdir=tmp_path / "daemon",
            provider="libvirt",
            cloud_config_file=config,
            args=list(LOUDEST),
        ).start()
        try:
            await create_node(kube_client, kube_cleanup, "lv-sec")
            await initialised(kube_client, "lv-sec")
        finally:
            process.stop()
        assert_clean(
            process.log(),
            {
                "the passphrase": passphrase,
                "the kube client's bearer token": bearer_token(ccm_kubeconfig),
            },
        )
    finally:
        await asyncio.to_thread(server.stop)
        shutil.rmtree(workdir, ignore_errors=True)
