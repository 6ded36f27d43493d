"""Registering, discovering and initializing cloud providers (§1.12)."""

from __future__ import annotations

import logging
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from kube_ccm.cloudprovider import (
    ENTRY_POINT_GROUP,
    CloudConfigFileError,
    CloudProvider,
    CloudProviderInitError,
    DuplicateCloudProviderError,
    ProviderEntryPointError,
    Registry,
    UnknownCloudProviderError,
    _registry,
    get_cloud_provider,
    init_cloud_provider,
    is_cloud_provider,
    is_external,
    register_cloud_provider,
)
from kube_ccm.testing.fakeprovider import FakeProvider


def failing_factory(config: bytes | None) -> CloudProvider:
    raise ValueError("region is required")


@pytest.fixture
def registry() -> Registry:
    """A registry that ignores installed packages."""
    return Registry(entry_point_group=None)


# -- registration ---------------------------------------------------------------


def test_registered_provider_is_known_and_built_with_the_config(registry: Registry) -> None:
    registry.register("mycloud", FakeProvider)
    assert registry.is_cloud_provider("mycloud")
    provider = registry.get_cloud_provider("mycloud", b"region: x")
    assert isinstance(provider, FakeProvider)
    assert provider.config == b"region: x"


def test_registering_a_name_twice_is_refused(registry: Registry) -> None:
    registry.register("mycloud", FakeProvider)
    with pytest.raises(DuplicateCloudProviderError) as caught:
        registry.register("mycloud", FakeProvider)
    assert str(caught.value) == 'Cloud provider "mycloud" was registered twice'


def test_unknown_provider_lookup_gives_none(registry: Registry) -> None:
    assert not registry.is_cloud_provider("nope")
    assert registry.get_cloud_provider("nope", None) is None


def test_only_the_literal_external_is_external() -> None:
    assert is_external("external")
    assert not is_external("External")
    assert not is_external("")
    assert not is_external("aws")


def test_reset_forgets_registrations(registry: Registry) -> None:
    registry.register("mycloud", FakeProvider)
    registry.reset()
    assert not registry.is_cloud_provider("mycloud")
    registry.register("mycloud", FakeProvider)


# -- init_cloud_provider --------------------------------------------------------


def test_init_with_an_empty_name_gives_no_provider(registry: Registry) -> None:
    assert registry.init_cloud_provider("", None) is None


def test_init_external_gives_no_provider_and_says_so(
    registry: Registry, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger=_registry.__name__):
        assert registry.init_cloud_provider("external", "/nonexistent/cloud.conf") is None
    assert "External cloud provider specified" in caplog.messages


def test_init_without_config_path_passes_none_to_the_factory(registry: Registry) -> None:
    registry.register("mycloud", FakeProvider)
    provider = registry.init_cloud_provider("mycloud", "")
    assert isinstance(provider, FakeProvider)
    assert provider.config is None


def test_init_passes_the_config_file_contents_to_the_factory(
    registry: Registry, tmp_path: Path
) -> None:
    config = tmp_path / "cloud.conf"
    config.write_bytes(b"[Global]\nregion = eu-west-1\n")
    registry.register("mycloud", FakeProvider)
    provider = registry.init_cloud_provider("mycloud", str(config))
    assert isinstance(provider, FakeProvider)
    assert provider.config == b"[Global]\nregion = eu-west-1\n"


def test_init_with_an_unreadable_config_file_names_the_file(
    registry: Registry, tmp_path: Path
) -> None:
    missing = tmp_path / "missing.conf"
    registry.register("mycloud", FakeProvider)
    with pytest.raises(CloudConfigFileError) as caught:
        registry.init_cloud_provider("mycloud", str(missing))
    assert caught.value.path == str(missing)
    assert f'could not read cloud config file "{missing}"' in str(caught.value)
    assert "--cloud-config" in str(caught.value)


def test_init_wraps_a_factory_error_with_the_provider_name(registry: Registry) -> None:
    registry.register("mycloud", failing_factory)
    with pytest.raises(CloudProviderInitError) as caught:
        registry.init_cloud_provider("mycloud", None)
    assert str(caught.value) == 'could not init cloud provider "mycloud": region is required'
    assert isinstance(caught.value.__cause__, ValueError)


def test_init_reports_a_factory_that_returns_no_provider(registry: Registry) -> None:
    registry.register("mycloud", lambda config: None)  # type: ignore[arg-type,return-value]
    with pytest.raises(CloudProviderInitError, match=r'^could not init cloud provider "mycloud": '):
        registry.init_cloud_provider("mycloud", None)


def test_init_of_an_unknown_name_lists_the_known_ones(registry: Registry) -> None:
    registry.register("beta", FakeProvider)
    registry.register("alpha", FakeProvider)
    with pytest.raises(UnknownCloudProviderError) as caught:
        registry.init_cloud_provider("gamma", None)
    message = str(caught.value)
    assert message.startswith('unknown cloud provider "gamma"')
    assert '"alpha", "beta"' in message
    assert caught.value.known == ("alpha", "beta")


def test_init_of_an_unknown_name_with_nothing_installed_says_so(registry: Registry) -> None:
    with pytest.raises(UnknownCloudProviderError, match="none is installed"):
        registry.init_cloud_provider("gamma", None)


# -- module-level functions -----------------------------------------------------


def test_module_functions_use_the_default_registry(
    monkeypatch: pytest.MonkeyPatch, registry: Registry
) -> None:
    monkeypatch.setattr(_registry, "default_registry", registry)
    register_cloud_provider("mycloud", FakeProvider)
    assert is_cloud_provider("mycloud")
    assert isinstance(get_cloud_provider("mycloud", None), FakeProvider)
    assert isinstance(init_cloud_provider("mycloud", None), FakeProvider)
    assert get_cloud_provider("other", None) is None


# -- entry points ---------------------------------------------------------------


def _install(
    site: Path, dist: str, version: str, entry_points: dict[str, str], modules: dict[str, str]
) -> None:
    """Lay out an installed distribution (dist-info + modules) under ``site``."""
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    lines = "\n".join(f"{name} = {value}" for name, value in entry_points.items())
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{lines}\n")
    for module, source in modules.items():
        (site / f"{module}.py").write_text(textwrap.dedent(source))


PROVIDER_MODULE = """
    from kube_ccm.testing.fakeprovider import FakeProvider

    def create(config):
        return FakeProvider(config, name="installed")
"""


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh site directory on sys.path; modules imported from it are forgotten after."""
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    before = set(sys.modules)
    yield site
    for name in set(sys.modules) - before:
        if name.startswith("kccm_test_"):
            del sys.modules[name]


def test_installed_provider_is_known_without_importing_it(site: Path) -> None:
    _install(
        site,
        "kccm-test-cloud",
        "1.2.0",
        {"installed": "kccm_test_cloud:create"},
        {"kccm_test_cloud": PROVIDER_MODULE},
    )
    registry = Registry()
    assert registry.is_cloud_provider("installed")
    assert "installed" in registry.names()
    assert "kccm_test_cloud" not in sys.modules


def test_installed_provider_is_imported_on_lookup_and_built(site: Path) -> None:
    _install(
        site,
        "kccm-test-cloud",
        "1.2.0",
        {"installed": "kccm_test_cloud:create"},
        {"kccm_test_cloud": PROVIDER_MODULE},
    )
    provider = Registry().init_cloud_provider("installed", None)
    assert provider is not None
    assert provider.provider_name() == "installed"
    assert "kccm_test_cloud" in sys.modules


def test_installed_provider_that_fails_to_import_names_its_distribution(site: Path) -> None:
    _install(
        site,
        "kccm-test-broken",
        "0.3.1",
        {"broken": "kccm_test_broken:create"},
        {"kccm_test_broken": "import kccm_test_no_such_dependency\n"},
    )
    with pytest.raises(ProviderEntryPointError) as caught:
        Registry().init_cloud_provider("broken", None)
    message = str(caught.value)
    assert message.startswith('cloud provider "broken" from kccm-test-broken 0.3.1 could not')
    assert "kccm_test_no_such_dependency" in message
    assert caught.value.distribution == "kccm-test-broken 0.3.1"


def test_installed_entry_point_naming_a_module_is_refused(site: Path) -> None:
    _install(
        site,
        "kccm-test-module",
        "1.0",
        {"modcloud": "kccm_test_module"},
        {"kccm_test_module": PROVIDER_MODULE},
    )
    with pytest.raises(ProviderEntryPointError, match="must name a factory callable"):
        Registry().get_cloud_provider("modcloud", None)


def test_two_distributions_declaring_one_name_are_refused(site: Path) -> None:
    _install(site, "kccm-test-one", "1.0", {"twin": "kccm_test_one:create"}, {})
    _install(site, "kccm-test-two", "2.0", {"twin": "kccm_test_two:create"}, {})
    with pytest.raises(DuplicateCloudProviderError) as caught:
        Registry().is_cloud_provider("twin")
    message = str(caught.value)
    assert message.startswith('Cloud provider "twin" was registered twice')
    assert "kccm-test-one 1.0" in message
    assert "kccm-test-two 2.0" in message


def test_explicit_registration_overrides_an_installed_provider(site: Path) -> None:
    _install(
        site,
        "kccm-test-cloud",
        "1.2.0",
        {"installed": "kccm_test_cloud:create"},
        {"kccm_test_cloud": PROVIDER_MODULE},
    )
    registry = Registry()
    registry.register("installed", FakeProvider)
    provider = registry.get_cloud_provider("installed", None)
    assert isinstance(provider, FakeProvider)
    assert provider.provider_name() == "fake", "built by the registered factory"
    assert "kccm_test_cloud" not in sys.modules


def test_registering_a_name_already_loaded_from_an_entry_point_is_refused(site: Path) -> None:
    _install(
        site,
        "kccm-test-cloud",
        "1.2.0",
        {"installed": "kccm_test_cloud:create"},
        {"kccm_test_cloud": PROVIDER_MODULE},
    )
    registry = Registry()
    registry.get_cloud_provider("installed", None)
    with pytest.raises(DuplicateCloudProviderError):
        registry.register("installed", FakeProvider)


def test_registry_without_entry_point_group_ignores_installed_packages(site: Path) -> None:
    _install(
        site,
        "kccm-test-cloud",
        "1.2.0",
        {"installed": "kccm_test_cloud:create"},
        {"kccm_test_cloud": PROVIDER_MODULE},
    )
    assert not Registry(entry_point_group=None).is_cloud_provider("installed")
