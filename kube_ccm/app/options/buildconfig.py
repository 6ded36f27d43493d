"""Checked flag values → :class:`~kube_ccm.app.options.config.DaemonConfig`.

Generic over the flag table: each row's value (converted by the row's
``convert``) goes to the field the row names; dotted names build the nested
settings (``leader_election.lease_duration`` → ``LeaderElectionConfig``). What
no single flag decides is derived here, in :func:`_derived`, and listed in
``config.NOT_FROM_FLAGS``.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kube_ccm.app.options.config import DaemonConfig
from kube_ccm.app.options.flags import FLAGS, parse_flags
from kube_ccm.app.options.leadermigration import (
    DEFAULT_LEADER_MIGRATION,
    load_leader_migration_config,
)
from kube_ccm.app.options.pflag import Flag, OptionsError, ParsedFlags
from kube_ccm.app.options.validation import problems as value_problems


def build_config(parsed: ParsedFlags) -> DaemonConfig:
    """Checked flag values → the daemon's configuration; every problem at once."""
    values = parsed.values
    problems = value_problems(values)
    settings: dict[str, Any] = {}
    for flag in FLAGS:
        if flag.field is not None:
            settings[flag.field] = _converted(flag, values[flag.name], problems)
    migration = DEFAULT_LEADER_MIGRATION
    if values["enable-leader-migration"]:
        migration = _checked(
            problems, lambda: load_leader_migration_config(values["leader-migration-config"])
        )
    if problems:
        raise OptionsError(*problems)
    settings["leader_migration_lease_name"] = migration.leader_name
    settings["leader_migration_controllers"] = dict(migration.controller_leaders)
    settings["extra_flags"] = {f.name: values[f.name] for f in FLAGS if not f.acting}
    _derived(settings)
    built: DaemonConfig = _nest(DaemonConfig, settings)
    return built


def _derived(settings: dict[str, Any]) -> None:
    """The settings more than one flag decides."""
    # A dry run never holds the Lease: its Lease writes would not persist, and a
    # real CCM may be leading beside it. Leader migration acts only with the election.
    settings["leader_elect"] = settings["leader_elect"] and not settings["dry_run"]
    settings["enable_leader_migration"] = (
        settings["enable_leader_migration"] and settings["leader_elect"]
    )
    settings["cloud_calls.unhealthy_after"] = max(10.0, 2 * settings["cloud_call_timeout"])


def _nest(cls: type[Any], settings: Mapping[str, Any]) -> Any:
    """``cls(**settings)``, a dotted name setting a field of a nested dataclass."""
    flat: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    for name, value in settings.items():
        head, dot, rest = name.partition(".")
        if dot:
            nested.setdefault(head, {})[rest] = value
        else:
            flat[name] = value
    hints = typing.get_type_hints(cls)
    for head, inner in nested.items():
        inner_cls = hints[head]
        if not (isinstance(inner_cls, type) and dataclasses.is_dataclass(inner_cls)):
            raise TypeError(f"{cls.__name__}.{head} is not a dataclass: {inner_cls!r}")
        flat[head] = _nest(inner_cls, inner)
    return cls(**flat)


def _converted(flag: Flag, value: Any, problems: list[str]) -> Any:
    """The field's value of ``flag``; a conversion's problems go to ``problems``."""
    convert = flag.convert
    return value if convert is None else _checked(problems, lambda: convert(value))


def _checked(problems: list[str], resolve: Callable[[], Any]) -> Any:
    """``resolve()``, with its OptionsError's problems added to ``problems`` (then None)."""
    try:
        return resolve()
    except OptionsError as exc:
        problems += exc.problems
        return None


def parse_options(argv: Sequence[str]) -> DaemonConfig:
    """argv (without the program name) → the daemon's configuration.

    Raises :class:`OptionsError` (what to change), :class:`HelpRequested` or
    :class:`VersionRequested`.
    """
    return build_config(parse_flags(argv))
