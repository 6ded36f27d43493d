# ruff: noqa: E501  (a few tables read best on one line)
"""``--leader-migration-config``: read and check a LeaderMigrationConfiguration file,
and split the enabled controllers by the lock they run under (:func:`migration_split`).

The file (group ``controllermanager.config.k8s.io``, version v1, v1beta1 or
v1alpha1; YAML or JSON) names the migration Lease and, per controller, the
component that runs it while the migration lasts. Every problem is reported at
once, each saying what to write instead.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import yaml

from kube_ccm.api import wellknown as wk
from kube_ccm.app.options.config import DaemonConfig
from kube_ccm.app.options.pflag import OptionsError


@dataclass(frozen=True)
class LeaderMigrationConfig:
    """A validated ``LeaderMigrationConfiguration``."""

    leader_name: str
    """The name of the second Lease, the one that protects the migration."""
    controller_leaders: Mapping[str, str]
    """Controller name → the component that runs it during the migration (``*``: any)."""


DEFAULT_LEADER_MIGRATION: Final = LeaderMigrationConfig(
    leader_name=wk.LEADER_MIGRATION_LEASE_NAME,
    # Upstream's default, quirk included: names as listed, no alias resolution.
    controller_leaders=dict.fromkeys(wk.LEADER_MIGRATION_DEFAULT_CONTROLLERS, "*"),
)

_MIGRATION_FIELDS: Final = frozenset({"apiVersion", "kind", "leaderName", "resourceLock", "controllerLeaders"})  # fmt: skip
_LEADER_FIELDS: Final = frozenset({"name", "component"})


def load_leader_migration_config(path: str) -> LeaderMigrationConfig:
    """Read and check a LeaderMigrationConfiguration (YAML or JSON); empty path: the default."""
    if not path:
        return DEFAULT_LEADER_MIGRATION
    where = f'--leader-migration-config "{path}"'
    try:
        document = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise OptionsError(f"{where}: cannot read the file: {exc.strerror or exc}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise OptionsError(f"{where}: not valid YAML or JSON: {exc}") from None
    problems = _migration_problems(document)
    if problems:
        raise OptionsError(*(f"{where}: {problem}" for problem in problems))
    leaders = document.get("controllerLeaders") or []
    return LeaderMigrationConfig(
        leader_name=document["leaderName"],
        controller_leaders={entry["name"]: entry["component"] for entry in leaders},
    )


def _migration_problems(document: object) -> list[str]:
    expected = f"{wk.LEADER_MIGRATION_CONFIG_GROUP}/{wk.LEADER_MIGRATION_CONFIG_VERSIONS[-1]}"
    if not isinstance(document, dict):
        return [f"must be a {wk.LEADER_MIGRATION_CONFIG_KIND} object (apiVersion {expected})"]
    problems: list[str] = []
    api_version = document.get("apiVersion")
    group, _, version = str(api_version).partition("/")
    if (
        group != wk.LEADER_MIGRATION_CONFIG_GROUP
        or version not in wk.LEADER_MIGRATION_CONFIG_VERSIONS
    ):
        problems.append(f"apiVersion {api_version!r} is not supported: use {expected}")
    if document.get("kind") != wk.LEADER_MIGRATION_CONFIG_KIND:
        problems.append(
            f"kind {document.get('kind')!r} is not supported: use {wk.LEADER_MIGRATION_CONFIG_KIND}"
        )
    problems += [f'unknown field "{key}"' for key in document if key not in _MIGRATION_FIELDS]
    if not isinstance(document.get("leaderName"), str) or not document["leaderName"]:
        problems.append(
            "leaderName: Required value: leaderName must be set (the name of the migration Lease)"
        )
    lock = document.get("resourceLock", wk.LEADER_ELECTION_RESOURCE_LOCK)
    if lock != wk.LEADER_ELECTION_RESOURCE_LOCK:
        problems.append(
            f'resourceLock: Unsupported value: {json.dumps(lock)}: kube-ccm locks on "leases" only'
        )
    leaders = document.get("controllerLeaders") or []
    if not isinstance(leaders, list):
        return [*problems, "controllerLeaders must be a list of {name, component}"]
    seen: set[str] = set()
    for index, entry in enumerate(leaders):
        problems += _leader_problems(f"controllerLeaders[{index}]", entry, seen)
    return problems


def _leader_problems(path: str, entry: object, seen: set[str]) -> list[str]:
    if not isinstance(entry, dict):
        return [f"{path} must be an object with name and component"]
    problems = [f'{path}: unknown field "{key}"' for key in entry if key not in _LEADER_FIELDS]
    for key in ("name", "component"):
        if not isinstance(entry.get(key), str) or not entry[key]:
            problems.append(f"{path}.{key}: Required value: {key} must be set")
    name = entry.get("name")
    if isinstance(name, str) and name:
        if name in seen:
            problems.append(f'{path}.name: Duplicate value: "{name}" is listed twice')
        seen.add(name)
    return problems


def migration_split(config: DaemonConfig) -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    """Enabled controllers split for leader migration: (under the main lock,
    under the migration lock, run by another component and so not here).

    Without leader migration every enabled controller runs under the main lock.
    With it, a controller listed for ``cloud-controller-manager`` or ``*`` runs
    under the migration lock; one listed for another component does not run here
    at all. Names match exactly (upstream's default config names two controllers
    by their old names, so only the lifecycle controller moves with it).
    """
    enabled = frozenset(config.controllers)
    if not (config.leader_elect and config.enable_leader_migration):
        return enabled, frozenset(), frozenset()
    listed = config.leader_migration_controllers
    ours = {name for name, component in listed.items() if component in ("*", wk.COMPONENT_NAME)}
    elsewhere = enabled & (listed.keys() - ours)
    migrated = enabled & ours
    return enabled - migrated - elsewhere, migrated, elsewhere
