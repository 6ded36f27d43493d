"""The daemon's flags, from argv to a checked :class:`~.config.DaemonConfig`.

:func:`.buildconfig.parse_options` turns argv into a ``DaemonConfig`` or raises
:class:`.pflag.OptionsError`, whose message says what to change (or
:class:`.pflag.HelpRequested` / :class:`.pflag.VersionRequested`). The work is split
by job:

* :mod:`.pflag`: pflag's command-line syntax and Go's value syntax;
* :mod:`.flags`: the flag table, grouped as upstream groups it, each row naming the
  ``DaemonConfig`` field it sets;
* :mod:`.featuregates`: ``--feature-gates``, the gates known and their defaults;
* :mod:`.validation`: the checks of the values;
* :mod:`.selection`: the ``--controllers``/``--webhooks`` grammar;
* :mod:`.leadermigration`: the ``--leader-migration-config`` file, and which
  controllers run under which lock;
* :mod:`.buildconfig`: values → ``DaemonConfig`` (:mod:`.config`);
* :mod:`.usage`: ``--help`` and the ``FLAG:`` lines;
* :mod:`.configz`: the configuration as ``/configz`` shows it.

Adding a flag: one row in :mod:`.flags` (with ``field=``) and one field on
``DaemonConfig``, then use the field where it acts.

This package imports nothing itself: :mod:`.flags` lists the daemon's controllers
(:mod:`kube_ccm.app.descriptors`), which in turn take a ``DaemonConfig``.
"""
