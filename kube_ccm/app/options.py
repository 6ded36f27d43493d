"""The daemon's flags, from argv to a checked :class:`DaemonConfig`: the one import.

:func:`parse_options` turns argv into a :class:`DaemonConfig` or raises
:class:`OptionsError`, whose message says what to change (or
:class:`HelpRequested` / :class:`VersionRequested`). The work is split by job:

* :mod:`kube_ccm.app.pflag`: pflag's command-line syntax and Go's value syntax;
* :mod:`kube_ccm.app.flags`: the flag table, grouped as upstream groups it, each
  row naming the ``DaemonConfig`` field it sets;
* :mod:`kube_ccm.app.validation`: the checks of the values;
* :mod:`kube_ccm.app.selection`: the ``--controllers``/``--webhooks`` grammar;
* :mod:`kube_ccm.app.leadermigration`: the ``--leader-migration-config`` file;
* :mod:`kube_ccm.app.buildconfig`: values → :class:`DaemonConfig`
  (:mod:`kube_ccm.app.config`);
* :mod:`kube_ccm.app.usage`: ``--help`` and the ``FLAG:`` lines.

Adding a flag: one row in :mod:`kube_ccm.app.flags` (with ``field=``) and one
field on :class:`DaemonConfig`, then use the field where it acts.
"""

from __future__ import annotations

from kube_ccm.app.buildconfig import build_config, parse_options
from kube_ccm.app.config import DaemonConfig
from kube_ccm.app.flags import FLAGS, NOT_ACTING, parse_flags
from kube_ccm.app.pflag import (
    HelpRequested,
    OptionsError,
    VersionRequested,
    format_go_duration,
    parse_go_duration,
)
from kube_ccm.app.selection import resolve_controllers, resolve_webhooks
from kube_ccm.app.usage import effective_flags, inert_flags, usage

__all__ = [
    "FLAGS",
    "NOT_ACTING",
    "DaemonConfig",
    "HelpRequested",
    "OptionsError",
    "VersionRequested",
    "build_config",
    "effective_flags",
    "format_go_duration",
    "inert_flags",
    "parse_flags",
    "parse_go_duration",
    "parse_options",
    "resolve_controllers",
    "resolve_webhooks",
    "usage",
]
