# ruff: noqa: E501  (a few tables read best on one line)
"""Which controllers and webhooks run: the list grammar of ``--controllers`` and ``--webhooks``.

As upstream: ``*`` turns on everything on by default, ``foo`` turns foo on,
``-foo`` turns it off, and for each name the first entry naming it decides.
Controllers are known by name or alias (:data:`kube_ccm.app.descriptors.CONTROLLERS`).
"""

from __future__ import annotations

from collections.abc import Sequence

from kube_ccm.api import wellknown as wk
from kube_ccm.app.descriptors import CONTROLLERS, DISABLED_BY_DEFAULT
from kube_ccm.app.options.pflag import OptionsError


def _enabled_by_list(name: str, entries: Sequence[str], *, on_with_star: bool) -> bool:
    """The first entry naming ``name`` decides (``name`` on, ``-name`` off); else ``*``."""
    for entry in entries:
        if entry == name:
            return True
        if entry == f"-{name}":
            return False
    return on_with_star and "*" in entries


def resolve_controllers(requested: Sequence[str]) -> frozenset[str]:
    """``--controllers`` → the canonical names to run.

    Aliases become canonical names (a leading ``-`` kept); for each controller
    the first entry naming it wins; unnamed controllers run iff ``*`` is listed
    and they are not off by default.
    """
    alias_to_name = {c.alias: c.name for c in CONTROLLERS}
    known = [c.name for c in CONTROLLERS]
    entries: list[str] = []
    unknown: list[str] = []
    for raw in requested:
        dash = "-" if raw.startswith("-") else ""
        bare = raw.removeprefix("-")
        canonical = alias_to_name.get(bare, bare)
        if canonical != "*" and canonical not in known:
            unknown.append(bare)
        entries.append(dash + canonical)
    if unknown:
        raise OptionsError(
            *(
                f'"{bare}" is not in the list of known controllers: use one of '
                f"{', '.join(known)} (or the aliases {', '.join(alias_to_name)}), "
                "'*' for all, '-name' to disable one"
                for bare in unknown
            )
        )
    return frozenset(
        name
        for name in known
        if _enabled_by_list(name, entries, on_with_star=name not in DISABLED_BY_DEFAULT)
    )


def resolve_webhooks(requested: Sequence[str]) -> frozenset[str]:
    """``--webhooks``: the ``--controllers`` grammar over the known webhooks."""
    unknown = [e.removeprefix("-") for e in requested if e.removeprefix("-") not in ("*", *wk.KNOWN_WEBHOOKS)]  # fmt: skip
    if unknown:
        raise OptionsError(
            *(
                f'"{bare}" is not in the list of known webhooks: use '
                f"{', '.join(wk.KNOWN_WEBHOOKS)} or '*'"
                for bare in unknown
            )
        )
    return frozenset(
        name for name in wk.KNOWN_WEBHOOKS if _enabled_by_list(name, requested, on_with_star=True)
    )
