"""The flag table and DaemonConfig agree: each flag names a field, each field has a flag."""

from __future__ import annotations

import dataclasses
import typing
from collections import Counter

from kube_ccm.app.options.buildconfig import parse_options
from kube_ccm.app.options.config import NOT_FROM_FLAGS, DaemonConfig
from kube_ccm.app.options.flags import FLAGS


def leaf_fields(cls: type[object], prefix: str = "") -> set[str]:
    """Every field of ``cls`` as a dotted path, nested dataclasses opened."""
    hints = typing.get_type_hints(cls)
    leaves: set[str] = set()
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        kind = hints[field.name]
        if isinstance(kind, type) and dataclasses.is_dataclass(kind):
            leaves |= leaf_fields(kind, f"{prefix}{field.name}.")
        else:
            leaves.add(prefix + field.name)
    return leaves


def test_every_flag_names_a_field_of_the_config() -> None:
    named = {f.field for f in FLAGS if f.field is not None}
    assert named - leaf_fields(DaemonConfig) == set()


def test_every_field_is_set_by_exactly_one_flag_or_is_listed_as_derived() -> None:
    named = Counter(f.field for f in FLAGS if f.field is not None)
    assert [name for name, count in named.items() if count > 1] == []
    assert leaf_fields(DaemonConfig) - named.keys() == set(NOT_FROM_FLAGS)
    assert named.keys() & NOT_FROM_FLAGS.keys() == set()


def test_an_acting_flag_without_a_field_is_one_of_the_few_that_need_none() -> None:
    # --help/--version are answered by the command, --leader-elect-resource-lock is
    # only checked ("leases"), --leader-migration-config is read into two fields.
    assert {f.name for f in FLAGS if f.acting and f.field is None} == {
        "help",
        "version",
        "leader-elect-resource-lock",
        "leader-migration-config",
    }


def test_the_defaults_of_the_flags_are_the_defaults_of_the_config() -> None:
    # Built from the flags' defaults, the config equals DaemonConfig's own defaults
    # except where the flags deliberately differ: upstream's '*' runs every controller,
    # the gates are resolved to every known gate, the inert flags are recorded.
    built = parse_options(["--cloud-provider=simulated"])
    default = DaemonConfig(cloud_provider="simulated")
    differ = {
        f.name
        for f in dataclasses.fields(DaemonConfig)
        if getattr(built, f.name) != getattr(default, f.name)
    }
    assert differ == {"controllers", "feature_gates", "extra_flags"}
