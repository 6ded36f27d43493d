"""``kube-ccm new-provider NAME``: a provider package to start from.

It writes a pip package ``kube-ccm-NAME`` whose provider already works against an
in-memory fake of a cloud that it ships (``fake.py``): instances and load balancers
behind a small client class (``client.py``), the seam where the author puts their
cloud's SDK, whose credentials ``initialize`` proves with one call at start-up. It
has its entry point, a typed cloud-config, tests that run kube-ccm's
controllers against it, a Dockerfile and a README with the next steps. Nothing in
it is generated at run time: it is an ordinary package to edit.
"""

from __future__ import annotations

import keyword
import re
import string
from pathlib import Path

from kube_ccm import __version__

__all__ = ["NewProviderError", "files_for", "write_package"]

_NAME = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")


class NewProviderError(ValueError):
    """The name or the target directory cannot be used; the message says why."""


def _minor_range() -> str:
    major, minor = (int(p) for p in __version__.split(".")[:2])
    return f"kube-ccm>={major}.{minor},<{major}.{minor + 1}"


def _params(name: str) -> dict[str, str]:
    if not _NAME.match(name) or len(name) > 40:
        raise NewProviderError(
            f"provider name {name!r}: use lowercase letters, digits and single dashes, "
            "starting with a letter (it becomes the providerID scheme, e.g. mycloud://...)"
        )
    module = "kube_ccm_" + name.replace("-", "_")
    if keyword.iskeyword(module):
        raise NewProviderError(f"provider name {name!r} makes a Python keyword")
    title = "".join(part.capitalize() for part in name.split("-"))
    token_env = name.upper().replace("-", "_") + "_TOKEN"
    return {
        "name": name,
        "module": module,
        "Title": title,
        "pin": _minor_range(),
        "TOKEN_ENV": token_env,
    }


_PYPROJECT = """\
[build-system]
requires = ["setuptools>=70.1"]
build-backend = "setuptools.build_meta"

[project]
name = "kube-ccm-$name"
version = "0.1.0"
description = "The $name cloud provider for kube-ccm"
readme = "README.md"
requires-python = ">=3.11"
dependencies = [
    "$pin",  # the kube-ccm minor version this package is tested against
]

[project.optional-dependencies]
test = ["pytest>=8", "pytest-asyncio>=0.24"]

# How kube-ccm finds the provider: kube-ccm run --cloud-provider=$name
[project.entry-points."kube_ccm.cloud_providers"]
$name = "$module.provider:factory"

[tool.setuptools]
packages = ["$module"]

[tool.setuptools.package-data]
$module = ["py.typed"]

[tool.ruff]
line-length = 100

[tool.mypy]
strict = true

[tool.pytest.ini_options]
asyncio_mode = "auto"
asyncio_default_fixture_loop_scope = "function"
testpaths = ["tests"]
"""

_README = """\
# kube-ccm-$name

The `$name` cloud provider for [kube-ccm](https://github.com/kube-ccm/kube-ccm),
made by `kube-ccm new-provider $name`. It already works, against the in-memory
fake cloud in `$module/fake.py`.

```sh
pip install -e '.[test]'
pytest                                   # the provider, and kube-ccm's controllers on it
kube-ccm run --cloud-provider=$name --cloud-config=cloud.yaml --kubeconfig=...
```

Next steps:

1. Put your cloud's SDK behind `$module/client.py` (`CloudClient`): look
   instances up, create/update/delete load balancers. Keep the fake for tests.
2. Map its errors in `client.py`: "not found" must become `InstanceNotFoundError`
   (only for instances that are really gone), throttling `TransientCloudError`.
3. Extend `$module/config.py` (the `--cloud-config` file, typed and strict).
   `credentials: {file: PATH}` (a mounted Secret) or `{env: $TOKEN_ENV}` names
   the API token; `initialize` proves it with one read-only call at start-up
   (`CloudClient.check_credentials`), so a refused token stops `kube-ccm run` with
   a message naming where the token came from instead of logging 401s.
4. `pytest` runs kube-ccm's conformance kit too (`tests/test_conformance.py`):
   the contract checks call the provider, the daemon checks run `kube-ccm run`
   on a real kube-apiserver (built on first use; needs Go) against the fake.
   Point its driver and cloud-config at a test account of your cloud next.
5. Build the image: `docker build -t kube-ccm-$name .`

The provider contract and what each method must do: kube-ccm's `docs/providers.md`.
"""

_DOCKERFILE = """\
# kube-ccm with this provider installed; `kube-ccm run --cloud-provider=$name`.
FROM kube-ccm:latest
USER root
COPY . /tmp/provider
RUN pip install --no-cache-dir /tmp/provider && rm -rf /tmp/provider
USER 65532:65532
"""

_INIT = '''\
"""The $name cloud provider for kube-ccm."""

from $module.provider import PROVIDER_NAME, ${Title}Cloud, factory

__all__ = ["PROVIDER_NAME", "${Title}Cloud", "factory"]
'''

_CONFIG = '''\
"""The `--cloud-config` file of the $name provider::

    endpoint: https://api.$name.example   # the cloud's API; "fake:" = in memory,
                                           # "fake:/path/state.json" = a shared file
    region: region-1
    clusterTag: kubernetes                 # tag of the load balancers this cluster owns
    requestTimeout: 10s
    credentials: {file: /etc/$name/token}  # the API token (a mounted Secret), or
                                           # {env: $TOKEN_ENV}; omitted: none

Every key is optional (the defaults are below); an unknown key is an error.
"""

from __future__ import annotations

import msgspec
from kube_ccm.cloudprovider import Duration, load_cloud_config


class Config(msgspec.Struct, forbid_unknown_fields=True, frozen=True, rename="camel"):
    endpoint: str = "fake:"
    region: str = "region-1"
    cluster_tag: str = "kubernetes"
    request_timeout: Duration = Duration(10.0)
    credentials: dict[str, str] | None = None


def load(data: bytes | None) -> Config:
    return load_cloud_config(data, Config, provider="$name", example="endpoint: https://...")
'''

_FAKE = """\
\"\"\"A fake cloud, for tests and demos: what `client.py` talks to at an endpoint
`fake:` (in this process) or `fake:/path/state.json` (a file several processes share,
such as a test and the kube-ccm daemon it starts).\"\"\"

from __future__ import annotations

import contextlib
import fcntl
import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass
class FakeInstance:
    id: str
    name: str
    zone: str
    type: str = "small"
    state: str = "running"  # running, stopped, terminated
    private_ip: str = "10.0.0.1"


@dataclass
class FakeLoadBalancer:
    name: str
    tag: str
    ports: list[int]
    targets: list[str]
    address: str


@dataclass
class FakeState:
    instances: dict[str, FakeInstance] = field(default_factory=dict)
    load_balancers: dict[str, FakeLoadBalancer] = field(default_factory=dict)
    next_id: int = 1
    outage: bool = False
    \"\"\"When true every call fails, as in an outage (the conformance kit sets it).\"\"\"
    token: str = ""
    \"\"\"The only API token the cloud accepts; empty: any, or none.\"\"\"


class FakeCloud:
    \"\"\"The fake's state, in memory or in a JSON file (locked while a call runs).\"\"\"

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._memory = FakeState()

    @contextlib.contextmanager
    def state(self) -> Iterator[FakeState]:
        \"\"\"The state for one call; changes made inside are kept.\"\"\"
        if self.path is None:
            yield self._memory
            return
        self.path.touch(exist_ok=True)
        with self.path.open("r+") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            text = handle.read()
            state = _load(text) if text.strip() else FakeState()
            yield state
            handle.seek(0)
            handle.truncate()
            handle.write(json.dumps(asdict(state)))

    def add_instance(self, name: str, zone: str = "zone-a", **fields: str) -> FakeInstance:
        with self.state() as state:
            n = state.next_id
            state.next_id += 1
            instance = FakeInstance(f"i-{n:06d}", name, zone, private_ip=f"10.0.0.{n}", **fields)
            state.instances[instance.id] = instance
            return instance

    def set_state(self, name: str, new_state: str) -> None:
        with self.state() as state:
            for instance in state.instances.values():
                if instance.name == name and instance.state != "terminated":
                    instance.state = new_state


def _load(text: str) -> FakeState:
    raw = json.loads(text)
    return FakeState(
        instances={k: FakeInstance(**v) for k, v in raw["instances"].items()},
        load_balancers={k: FakeLoadBalancer(**v) for k, v in raw["load_balancers"].items()},
        next_id=raw["next_id"],
        outage=raw["outage"],
        token=raw.get("token", ""),
    )


SHARED = FakeCloud()
\"\"\"The cloud every `endpoint: fake:` client talks to in one process.\"\"\"
"""

_CLIENT = """\
\"\"\"The seam between the provider and the cloud: replace the bodies with your SDK's
calls (blocking SDKs: run them with kube_ccm.cloudprovider.BlockingCalls).\"\"\"

from __future__ import annotations

from pathlib import Path

from kube_ccm.cloudprovider import CloudProviderError, Credentials

from $module.config import Config
from $module.fake import SHARED, FakeCloud, FakeInstance, FakeLoadBalancer, FakeState


class NotFoundError(CloudProviderError):
    \"\"\"The cloud has no such object.\"\"\"


class UnauthorizedError(CloudProviderError):
    \"\"\"The cloud refused the credentials (HTTP 401/403).\"\"\"


class CloudClient:
    def __init__(
        self,
        config: Config,
        fake: FakeCloud | None = None,
        credentials: Credentials | None = None,
    ) -> None:
        if not config.endpoint.startswith("fake:"):
            raise CloudProviderError(
                f"endpoint {config.endpoint!r}: this provider only knows the fake cloud yet "
                "(put your SDK in client.py)"
            )
        path = config.endpoint.removeprefix("fake:")
        self._cloud = fake or (FakeCloud(Path(path)) if path else SHARED)
        self.config = config
        self.credentials = credentials

    def credentials_source(self) -> str:
        \"\"\"Where the token comes from, for messages (never the token itself).\"\"\"
        if self.credentials is None:
            return "nowhere (`credentials` is not set in the cloud-config)"
        return f"the {self.credentials.source.describe()}"

    def _up(self, state: FakeState) -> FakeState:
        if state.outage:
            raise CloudProviderError("the cloud's API is unavailable (503)")
        # Your SDK sends the token with every call: self.credentials.current().reveal()
        # (current() follows a rotated Secret).
        token = self.credentials.current().reveal() if self.credentials else ""
        if state.token and token != state.token:
            raise UnauthorizedError("401 Unauthorized: the API token was refused")
        return state

    async def check_credentials(self) -> None:
        \"\"\"One cheap read-only call that needs valid credentials (your cloud's
        "who am I" or a list of regions).\"\"\"
        with self._cloud.state() as state:
            self._up(state)

    async def instance_by_id(self, instance_id: str) -> FakeInstance:
        with self._cloud.state() as state:
            found = self._up(state).instances.get(instance_id)
        if found is None or found.state == "terminated":
            raise NotFoundError(f"instance {instance_id} not found")
        return found

    async def instance_by_name(self, name: str) -> FakeInstance:
        with self._cloud.state() as state:
            for instance in self._up(state).instances.values():
                if instance.name == name and instance.state != "terminated":
                    return instance
        raise NotFoundError(f"no instance named {name}")

    async def load_balancer(self, name: str) -> FakeLoadBalancer | None:
        with self._cloud.state() as state:
            found = self._up(state).load_balancers.get(name)
        return found if found is not None and found.tag == self.config.cluster_tag else None

    async def put_load_balancer(
        self, name: str, ports: list[int], targets: list[str]
    ) -> FakeLoadBalancer:
        with self._cloud.state() as state:
            balancers = self._up(state).load_balancers
            existing = balancers.get(name)
            if existing is not None and existing.tag != self.config.cluster_tag:
                raise CloudProviderError(f"load balancer {name} belongs to another cluster")
            address = existing.address if existing else _free_address(balancers)
            balancer = FakeLoadBalancer(name, self.config.cluster_tag, ports, targets, address)
            balancers[name] = balancer
            return balancer

    async def delete_load_balancer(self, name: str) -> None:
        with self._cloud.state() as state:
            balancers = self._up(state).load_balancers
            existing = balancers.get(name)
            if existing is not None and existing.tag == self.config.cluster_tag:
                del balancers[name]


def _free_address(balancers: dict[str, FakeLoadBalancer]) -> str:
    \"\"\"The lowest address of 192.0.2.0/24 no load balancer holds (a freed one is
    reused; two load balancers never share one).\"\"\"
    used = {balancer.address for balancer in balancers.values()}
    for host in range(1, 255):
        if f"192.0.2.{host}" not in used:
            return f"192.0.2.{host}"
    raise CloudProviderError("the fake cloud has no free address left")
"""

_PROVIDER = '''\
"""The $name provider: instances (InstancesV2) and load balancers."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from kube_ccm.api.objects import LoadBalancerIngress, LoadBalancerStatus, Service
from kube_ccm.cloudprovider import (
    ClientBuilder,
    CloudConfigError,
    CloudProvider,
    Credentials,
    CredentialsSource,
    InstanceMetadata,
    InstanceNotFoundError,
    InstancesV2,
    LoadBalancer,
    Node,
    NodeAddress,
    default_load_balancer_name,
)

from $module import config as config_module
from $module.client import CloudClient, NotFoundError, UnauthorizedError
from $module.fake import FakeCloud, FakeInstance

PROVIDER_NAME = "$name"

log = logging.getLogger(__name__)


class _Instances(InstancesV2):
    def __init__(self, client: CloudClient) -> None:
        self._client = client

    async def _find(self, node: Node) -> FakeInstance | None:
        provider_id = node.spec.provider_id
        try:
            if provider_id:
                return await self._client.instance_by_id(provider_id.rsplit("/", 1)[-1])
            return await self._client.instance_by_name(node.metadata.name)
        except NotFoundError:
            return None  # only "not found" means gone; any other error propagates

    async def instance_exists(self, node: Node) -> bool:
        return await self._find(node) is not None

    async def instance_shutdown(self, node: Node) -> bool:
        found = await self._find(node)
        return found is not None and found.state == "stopped"

    async def instance_metadata(self, node: Node) -> InstanceMetadata | None:
        found = await self._find(node)
        if found is None:
            # Raising keeps the Node tainted and retries it with backoff, so a Node
            # registered before its instance is initialised once the instance appears
            # (returning None would skip the Node until it changes).
            raise InstanceNotFoundError(
                f"instance not found: node {node.metadata.name!r} (providerID "
                f"{node.spec.provider_id or 'unset'}) is not a running or stopped instance"
            )
        return InstanceMetadata(
            provider_id=f"{PROVIDER_NAME}://{found.zone}/{found.id}",
            instance_type=found.type,
            node_addresses=(NodeAddress(type="InternalIP", address=found.private_ip),),
            zone=found.zone,
            region=self._client.config.region,
        )


class _LoadBalancers(LoadBalancer):
    def __init__(self, client: CloudClient) -> None:
        self._client = client

    def get_load_balancer_name(self, cluster_name: str, service: Service) -> str:
        return default_load_balancer_name(service)

    async def get_load_balancer(
        self, cluster_name: str, service: Service
    ) -> LoadBalancerStatus | None:
        found = await self._client.load_balancer(self.get_load_balancer_name(cluster_name, service))
        return None if found is None else _status(found.address)

    async def ensure_load_balancer(
        self, cluster_name: str, service: Service, nodes: Sequence[Node]
    ) -> LoadBalancerStatus:
        balancer = await self._client.put_load_balancer(
            self.get_load_balancer_name(cluster_name, service),
            [p.node_port for p in service.spec.ports],
            _targets(nodes),
        )
        return _status(balancer.address)

    async def update_load_balancer(
        self, cluster_name: str, service: Service, nodes: Sequence[Node]
    ) -> None:
        await self.ensure_load_balancer(cluster_name, service, nodes)

    async def ensure_load_balancer_deleted(self, cluster_name: str, service: Service) -> None:
        await self._client.delete_load_balancer(self.get_load_balancer_name(cluster_name, service))


def _targets(nodes: Sequence[Node]) -> list[str]:
    # Nodes without a providerID yet are left out: they join once initialised.
    return sorted(n.spec.provider_id for n in nodes if n.spec.provider_id)


def _status(address: str) -> LoadBalancerStatus:
    return LoadBalancerStatus(ingress=(LoadBalancerIngress(ip=address),))


class ${Title}Cloud(CloudProvider):
    def __init__(self, client: CloudClient) -> None:
        self.client = client
        self._instances = _Instances(client)
        self._load_balancers = _LoadBalancers(client)

    def provider_name(self) -> str:
        return PROVIDER_NAME

    async def initialize(self, client_builder: ClientBuilder, stop: asyncio.Event) -> None:
        """Start-up: one read-only call proves the credentials. A refused token stops the
        daemon here, saying where it came from, instead of a daemon logging 401s; a
        cloud that does not answer only delays the work (the controllers retry)."""
        try:
            await self.client.check_credentials()
        except UnauthorizedError as exc:
            raise CloudConfigError(
                f"the $name cloud refused the credentials from "
                f"{self.client.credentials_source()}: {exc}; correct them (or the Secret "
                "they come from)"
            ) from None
        except Exception as exc:
            log.error("the $name cloud does not answer at start-up: %s", exc)
        else:
            log.info(
                "the $name cloud accepts the credentials from %s",
                self.client.credentials_source(),
            )
        if self.client.credentials is not None:
            self.client.credentials.start(stop)  # follow a rotated Secret

    async def aclose(self) -> None:
        if self.client.credentials is not None:
            self.client.credentials.close()

    def has_cluster_id(self) -> bool:
        return True  # load balancers are tagged with clusterTag

    def instances_v2(self) -> InstancesV2 | None:
        return self._instances

    def load_balancer(self) -> LoadBalancer | None:
        return self._load_balancers


def build(config: config_module.Config, fake: FakeCloud | None = None) -> ${Title}Cloud:
    """The provider for a parsed cloud-config; the credentials it names are read now,
    so a missing file or unset variable stops the daemon at once."""
    credentials = None
    if config.credentials is not None:
        credentials = Credentials(CredentialsSource.from_config(config.credentials))
        credentials.load()
    return ${Title}Cloud(CloudClient(config, fake, credentials))


def factory(data: bytes | None) -> ${Title}Cloud:
    """The entry point: parse the cloud-config; no network here (use `initialize`)."""
    return build(config_module.load(data))
'''

_TESTS = '''\
"""The provider against its fake cloud, and kube-ccm's controllers running on it."""

from __future__ import annotations

import asyncio

import pytest
from kube_ccm.cloudprovider import CloudConfigError, InstanceNotFoundError, InvalidCloudConfigError
from kube_ccm.testing.conformance import KitClientBuilder
from kube_ccm.testing.world import controller_world, node_object, service_object

from $module import factory
from $module.client import CloudClient
from $module.config import load
from $module.fake import FakeCloud
from $module.provider import ${Title}Cloud, build


def cloud() -> tuple[${Title}Cloud, FakeCloud]:
    fake = FakeCloud()
    return ${Title}Cloud(CloudClient(load(None), fake)), fake


async def test_a_node_gets_its_instances_metadata() -> None:
    provider, fake = cloud()
    instance = fake.add_instance("node-1", zone="zone-b", type="large")
    instances = provider.instances_v2()
    assert instances is not None
    async with controller_world(provider=provider) as world:
        await world.add(node_object("node-1"))
        node = world.nodes.get("node-1")
        assert node is not None
        meta = await instances.instance_metadata(node)
    assert meta is not None
    assert meta.provider_id == f"$name://zone-b/{instance.id}"
    assert (meta.instance_type, meta.zone) == ("large", "zone-b")


async def test_a_node_registered_before_its_instance_is_retried() -> None:
    """Raising (not returning None) keeps the Node tainted and retried until the
    instance appears."""
    provider, fake = cloud()
    instances = provider.instances_v2()
    assert instances is not None
    async with controller_world(provider=provider) as world:
        await world.add(node_object("node-3"))
        node = world.nodes.get("node-3")
        assert node is not None
        with pytest.raises(InstanceNotFoundError, match="node-3"):
            await instances.instance_metadata(node)
        fake.add_instance("node-3")
        assert await instances.instance_metadata(node) is not None


async def test_gone_and_stopped_instances() -> None:
    provider, fake = cloud()
    instance = fake.add_instance("node-2")
    instances = provider.instances_v2()
    assert instances is not None
    async with controller_world(provider=provider) as world:
        await world.add(node_object("node-2", provider_id=f"$name://zone-a/{instance.id}"))
        node = world.nodes.get("node-2")
        assert node is not None
        fake.set_state("node-2", "stopped")
        assert await instances.instance_shutdown(node)
        assert await instances.instance_exists(node)
        fake.set_state("node-2", "terminated")
        assert not await instances.instance_exists(node)


async def test_load_balancers_are_idempotent_and_deleted() -> None:
    provider, _fake = cloud()
    balancer = provider.load_balancer()
    assert balancer is not None
    async with controller_world(provider=provider) as world:
        await world.add_service(service_object("web"))
        service = world.services.get("default/web")
        assert service is not None
        first = await balancer.ensure_load_balancer("kubernetes", service, [])
        assert await balancer.ensure_load_balancer("kubernetes", service, []) == first
        assert await balancer.get_load_balancer("kubernetes", service) == first
        await balancer.ensure_load_balancer_deleted("kubernetes", service)
        await balancer.ensure_load_balancer_deleted("kubernetes", service)
        assert await balancer.get_load_balancer("kubernetes", service) is None


async def test_load_balancers_never_share_an_address() -> None:
    provider, _fake = cloud()
    balancer = provider.load_balancer()
    assert balancer is not None
    async with controller_world(provider=provider) as world:
        services = []
        for name in ("a", "b", "c"):
            await world.add_service(service_object(name))
            service = world.services.get(f"default/{name}")
            assert service is not None
            services.append(service)
        a, b, c = services
        await balancer.ensure_load_balancer("kubernetes", a, [])
        second = await balancer.ensure_load_balancer("kubernetes", b, [])
        await balancer.ensure_load_balancer_deleted("kubernetes", a)
        third = await balancer.ensure_load_balancer("kubernetes", c, [])
    assert second != third


async def test_a_refused_token_stops_the_daemon_at_start_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeCloud()
    with fake.state() as state:
        state.token = "right"
    config = load(b"credentials: {env: $TOKEN_ENV}\\n")
    builder = KitClientBuilder.in_memory()
    monkeypatch.setenv("$TOKEN_ENV", "wrong")
    provider = build(config, fake)
    with pytest.raises(CloudConfigError, match='environment variable "$TOKEN_ENV"'):
        await provider.initialize(builder, asyncio.Event())
    await provider.aclose()
    monkeypatch.setenv("$TOKEN_ENV", "right")
    provider = build(config, fake)
    await provider.initialize(builder, stop := asyncio.Event())
    stop.set()
    await provider.aclose()


def test_the_cloud_config_is_strict() -> None:
    assert factory(b"region: r2\\n").client.config.region == "r2"
    with pytest.raises(InvalidCloudConfigError, match="unknown field `regoin`; known fields: endp"):
        factory(b"regoin: r2\\n")
'''


_CONFTEST = '''\
"""kube-ccm's conformance kit (and the real control plane fixtures it uses)."""

pytest_plugins = ["kube_ccm.testing.conformance"]
'''

_CONFORMANCE = '''\
"""kube-ccm's conformance kit against this provider and its fake cloud, shared through
a file with the kube-ccm daemon the kit starts. Run it against your real cloud too:
give a driver that makes instances there, and the cloud-config of a test account."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kube_ccm.testing.conformance import (
    ConformanceSuite,
    ConformanceTarget,
    DaemonSettings,
    InstanceDriver,
)

from $module import factory
from $module.fake import FakeCloud


class FakeDriver(InstanceDriver):
    """Makes and changes instances in the fake cloud, by Node name."""

    def __init__(self, cloud: FakeCloud) -> None:
        self.cloud = cloud

    async def create_instance(self, name: str) -> None:
        self.cloud.add_instance(name)

    async def stop_instance(self, name: str) -> None:
        self.cloud.set_state(name, "stopped")

    async def start_instance(self, name: str) -> None:
        self.cloud.set_state(name, "running")

    async def delete_instance(self, name: str) -> None:
        self.cloud.set_state(name, "terminated")

    @contextlib.asynccontextmanager
    async def api_errors(self) -> AsyncIterator[None]:
        with self.cloud.state() as state:
            state.outage = True
        try:
            yield
        finally:
            with self.cloud.state() as state:
                state.outage = False


@pytest.fixture
def conformance_provider(tmp_path: Path) -> ConformanceTarget:
    state = tmp_path / "cloud.json"
    config = tmp_path / "cloud.yaml"
    config.write_text(f"endpoint: fake:{state}\\n")
    return ConformanceTarget(
        provider=lambda: factory(config.read_bytes()),
        driver=FakeDriver(FakeCloud(state)),
        daemon=DaemonSettings(cloud_provider="$name", cloud_config=config),
    )


class TestConformance(ConformanceSuite):
    """Every check of the kit; those this provider cannot run are skipped, saying why."""
'''


def files_for(name: str) -> dict[str, str]:
    """Relative path → content of the package for provider ``name``."""
    params = _params(name)
    module = params["module"]
    templates = {
        "pyproject.toml": _PYPROJECT,
        "README.md": _README,
        "Dockerfile": _DOCKERFILE,
        f"{module}/__init__.py": _INIT,
        f"{module}/py.typed": "",
        f"{module}/config.py": _CONFIG,
        f"{module}/fake.py": _FAKE,
        f"{module}/client.py": _CLIENT,
        f"{module}/provider.py": _PROVIDER,
        "tests/test_provider.py": _TESTS,
        "conftest.py": _CONFTEST,
        "tests/test_conformance.py": _CONFORMANCE,
    }
    return {path: string.Template(text).substitute(params) for path, text in templates.items()}


def write_package(name: str, directory: Path) -> list[Path]:
    """Write the package into ``directory`` (created; it must not hold files yet)."""
    files = files_for(name)
    if directory.exists() and any(directory.iterdir()):
        raise NewProviderError(f"{directory} is not empty: choose a new directory (--dir)")
    written = []
    for relative, content in files.items():
        path = directory / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
        written.append(path)
    return written
