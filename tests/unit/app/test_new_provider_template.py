"""The package ``kube-ccm new-provider`` writes, imported in this process: what its
provider does (the integration test installs it and runs its own tests)."""

from __future__ import annotations

import asyncio
import importlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from kube_ccm.api.objects import Node, NodeSpec, ObjectMeta
from kube_ccm.app.tools.newprovider import (
    PLACEHOLDERS,
    TEMPLATE_NAME,
    files_for,
    minor_range,
    template_files,
    write_package,
)
from kube_ccm.cloudprovider import CloudConfigError, CredentialsError, InstanceNotFoundError
from kube_ccm.testing.conformance import KitClientBuilder

CHECKOUT = Path(__file__).resolve().parents[3]
NAME = "tmpl-check"
MODULE = "kube_ccm_tmpl_check"


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("new") / f"kube-ccm-{NAME}"
    write_package(NAME, directory)
    return directory


@pytest.fixture
def generated(package: Path) -> Iterator[ModuleType]:
    """The generated provider module, imported from the package's directory."""
    sys.path.insert(0, str(package))
    try:
        yield importlib.import_module(f"{MODULE}.provider")
    finally:
        sys.path.remove(str(package))
        for name in [m for m in sys.modules if m == MODULE or m.startswith(MODULE + ".")]:
            del sys.modules[name]


def test_the_template_is_its_own_output_for_its_name() -> None:
    """The template is the provider ``mycloud``: rendering it for that name changes
    nothing, so what ruff and mypy check is what authors get, names aside."""
    files = template_files()
    assert files_for(TEMPLATE_NAME) == files
    assert "pyproject.toml" in files
    assert "kube_ccm_mycloud/provider.py" in files
    assert not any("__pycache__" in path or path.endswith(".pyc") for path in files)


def test_rendering_leaves_no_trace_of_the_templates_name() -> None:
    files = files_for("acme-cloud")
    for path, text in files.items():
        assert TEMPLATE_NAME not in path.lower(), path
        assert TEMPLATE_NAME not in text.lower(), path
    assert "class AcmeCloudCloud(CloudProvider):" in files["kube_ccm_acme_cloud/provider.py"]
    assert 'PROVIDER_NAME = "acme-cloud"' in files["kube_ccm_acme_cloud/provider.py"]
    assert "ACME_CLOUD_TOKEN" in files["tests/test_provider.py"]
    assert PLACEHOLDERS == ("kube_ccm_mycloud", "Mycloud", "MYCLOUD", "mycloud")


def test_the_templates_kube_ccm_pin_is_this_minor_version() -> None:
    """The pin is written in the template as it is; a version bump must change it."""
    assert f'"{minor_range()}",' in template_files()["pyproject.toml"]


def node(name: str, provider_id: str = "") -> Node:
    return Node(metadata=ObjectMeta(name=name), spec=NodeSpec(provider_id=provider_id))


async def test_instance_metadata_raises_for_a_node_registered_before_its_instance(
    generated: ModuleType,
) -> None:
    """``None`` would leave the Node tainted and not retried until it changes."""
    fake = importlib.import_module(f"{MODULE}.fake").FakeCloud()
    client = importlib.import_module(f"{MODULE}.client").CloudClient
    config = importlib.import_module(f"{MODULE}.config").load(None)
    provider = generated.TmplCheckCloud(client(config, fake))
    instances = provider.instances_v2()
    with pytest.raises(InstanceNotFoundError, match="node-1"):
        await instances.instance_metadata(node("node-1"))
    fake.add_instance("node-1")
    assert (await instances.instance_metadata(node("node-1"))).zone == "zone-a"


async def test_the_fake_cloud_never_gives_two_load_balancers_one_address(
    generated: ModuleType,
) -> None:
    """Create a and b, delete a, create c: b and c used to share an address."""
    client = importlib.import_module(f"{MODULE}.client").CloudClient(
        importlib.import_module(f"{MODULE}.config").load(None),
        importlib.import_module(f"{MODULE}.fake").FakeCloud(),
    )
    await client.put_load_balancer("a", [80], [])
    b = await client.put_load_balancer("b", [80], [])
    await client.delete_load_balancer("a")
    c = await client.put_load_balancer("c", [80], [])
    assert b.address != c.address
    assert (await client.put_load_balancer("c", [81], [])).address == c.address  # kept


async def test_a_refused_token_stops_the_start_up_naming_where_it_came_from(
    generated: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wrong token used to leave the daemon running and logging 401s."""
    state = tmp_path / "cloud.json"
    with importlib.import_module(f"{MODULE}.fake").FakeCloud(state).state() as cloud:
        cloud.token = "right"
    config = f"endpoint: fake:{state}\ncredentials: {{env: TMPL_CHECK_TOKEN}}\n".encode()
    builder = KitClientBuilder.in_memory()

    monkeypatch.delenv("TMPL_CHECK_TOKEN", raising=False)
    with pytest.raises(CredentialsError, match="TMPL_CHECK_TOKEN"):
        generated.factory(config)  # read at once: an unset variable stops the daemon

    monkeypatch.setenv("TMPL_CHECK_TOKEN", "wrong")
    provider = generated.factory(config)
    with pytest.raises(
        CloudConfigError,
        match='refused the credentials from the environment variable "TMPL_CHECK_TOKEN"',
    ):
        await provider.initialize(builder, asyncio.Event())
    await provider.aclose()

    monkeypatch.setenv("TMPL_CHECK_TOKEN", "right")
    provider = generated.factory(config)
    stop = asyncio.Event()
    await provider.initialize(builder, stop)
    stop.set()
    await provider.aclose()


def test_its_own_tests_pass_without_a_warning(package: Path) -> None:
    """Its tests (the conformance kit's daemon checks aside: they need the control
    plane), with kube-ccm from this checkout; pytest used to warn "Module already
    imported so cannot be rewritten: kube_ccm.testing.pytest_plugin" on every run."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(package), str(CHECKOUT)))}
    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_provider.py"],
        cwd=package,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = tests.stdout + tests.stderr
    assert tests.returncode == 0, output[-4000:]
    assert "passed" in tests.stdout
    assert "warning" not in output.lower(), output[-4000:]
