"""Which client configuration to use: the kubeconfig, ``--master`` or in-cluster.

Two sets of rules, one per kind of program. The daemon's
(:func:`load_config`, upstream's ``clientcmd.BuildConfigFromFlags``): ``--kubeconfig``,
else ``--master``, else in-cluster; ``$KUBECONFIG`` is not read. The command-line
tools' (:func:`load_tool_config`, for ``doctor`` and ``gc``): kubectl's, with
``$KUBECONFIG``'s files merged as kubectl merges them. lightkube parses each file;
every error is a :class:`KubeConfigError` that says which file or setting to fix.
The transports turn the result into TLS and credentials
(:mod:`kube_ccm.runtime.aiohttptransport`, :mod:`kube_ccm.runtime.credentials`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec
import yaml
from lightkube.config.kubeconfig import KubeConfig, SingleConfig
from lightkube.core.exceptions import ConfigError as _LightkubeConfigError


class KubeConfigError(Exception):
    """The client configuration (kubeconfig, in-cluster files, ``--master``) is unusable."""


def load_config(
    kubeconfig: str | os.PathLike[str] | None = None,
    *,
    master: str | None = None,
    context: str | None = None,
) -> SingleConfig:
    """Resolve the client configuration; errors say which file or setting to fix.

    The daemon's rules, upstream's ``clientcmd.BuildConfigFromFlags``: ``kubeconfig``,
    else ``master``, else in-cluster; ``$KUBECONFIG`` is not read (the command-line
    tools read it: :func:`load_tool_config`).
    """
    try:
        if kubeconfig:
            path = Path(kubeconfig).expanduser()
            if not path.is_file():
                raise KubeConfigError(
                    f"kubeconfig {str(kubeconfig)!r} does not exist: pass the path of a "
                    "readable kubeconfig with --kubeconfig"
                )
            config = KubeConfig.from_file(path).get(context)
        elif master:
            config = KubeConfig.from_server(master).get()
        else:
            try:
                config = KubeConfig.from_service_account().get()
            except (_LightkubeConfigError, KeyError) as exc:
                raise KubeConfigError(
                    "no --kubeconfig or --master given and not running in a cluster "
                    f"({exc}): pass --kubeconfig PATH"
                ) from exc
    except _LightkubeConfigError as exc:
        raise KubeConfigError(f"invalid kubeconfig {str(kubeconfig)!r}: {exc}") from exc
    if config is None:
        raise KubeConfigError(f"kubeconfig {str(kubeconfig)!r} has no usable context")
    if master:
        config = config._replace(cluster=_with_server(config.cluster, master))
    return config


def _with_server(cluster: Any, server: str) -> Any:
    return msgspec.structs.replace(cluster, server=server)


# The kubeconfig fields that name files, resolved against the file that sets them
# when several files are merged (client-go's ResolveLocalPaths; also an exec plugin's
# command when it is a relative path with a directory).
_CLUSTER_FILES = ("certificate-authority",)
_USER_FILES = ("client-certificate", "client-key", "tokenFile")


def load_tool_config(
    kubeconfig: str | os.PathLike[str] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
) -> SingleConfig:
    """The command-line tools' configuration (``doctor``, ``gc``), by kubectl's rules.

    ``kubeconfig`` (``--kubeconfig``) when given; else the files ``$KUBECONFIG`` lists
    (separated by ``os.pathsep``, ``:`` on Linux): those that exist are merged as
    kubectl merges them (the first file to define a cluster, user or context by a name
    wins, and the first ``current-context`` set); else ``~/.kube/config`` when
    ``$KUBECONFIG`` is unset or empty and that file exists; else in-cluster.
    """
    if kubeconfig:
        return load_config(kubeconfig)
    env = os.environ if environ is None else environ
    listed = [p for p in env.get("KUBECONFIG", "").split(os.pathsep) if p]
    if listed:
        candidates = [Path(p).expanduser() for p in listed]
        tried = f"none of the files $KUBECONFIG lists exists ({env['KUBECONFIG']})"
    else:
        candidates = [Path("~/.kube/config").expanduser()]
        tried = "$KUBECONFIG is not set, ~/.kube/config does not exist"
    existing = [p for p in dict.fromkeys(candidates) if p.is_file()]
    if len(existing) == 1:
        return load_config(existing[0])
    if existing:
        return _merged(existing)
    try:
        config = KubeConfig.from_service_account().get()
    except (_LightkubeConfigError, KeyError) as exc:
        raise KubeConfigError(
            f"no --kubeconfig given, {tried} and not running in a cluster ({exc}): "
            "pass --kubeconfig PATH or set KUBECONFIG"
        ) from exc
    if config is None:  # pragma: no cover - from_service_account sets its context
        raise KubeConfigError("the in-cluster configuration has no context")
    return config


def _merged(paths: list[Path]) -> SingleConfig:
    """Several kubeconfig files as one, by kubectl's merge rules; each file's relative
    paths are resolved against its own directory first."""
    merged: dict[str, Any] = {"clusters": [], "users": [], "contexts": []}
    seen: dict[str, set[str]] = {key: set() for key in merged}
    for path in paths:
        try:
            document = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise KubeConfigError(f"invalid kubeconfig {str(path)!r}: {exc}") from exc
        if not isinstance(document, dict):
            raise KubeConfigError(f"invalid kubeconfig {str(path)!r}: not a mapping")
        for key, inner, files in (
            ("clusters", "cluster", _CLUSTER_FILES),
            ("users", "user", _USER_FILES),
            ("contexts", "context", ()),
        ):
            for entry in document.get(key) or []:
                name = entry.get("name") if isinstance(entry, dict) else None
                if name is None or name in seen[key]:
                    continue
                seen[key].add(name)
                body = dict(entry.get(inner) or {})
                for field in files:
                    if body.get(field) and not Path(body[field]).is_absolute():
                        body[field] = str(path.parent / body[field])
                plugin = body.get("exec")
                if isinstance(plugin, dict):
                    command = str(plugin.get("command", ""))
                    if os.sep in command and not Path(command).is_absolute():
                        body["exec"] = {**plugin, "command": str(path.parent / command)}
                merged[key].append({"name": name, inner: body})
        if "current-context" not in merged and document.get("current-context"):
            merged["current-context"] = document["current-context"]
    where = ":".join(map(str, paths))
    try:
        config = KubeConfig.from_dict(merged, fname=paths[0]).get()
    except (_LightkubeConfigError, KeyError, msgspec.ValidationError) as exc:
        raise KubeConfigError(f"invalid kubeconfig {where!r}: {exc}") from exc
    if config is None:
        raise KubeConfigError(f"kubeconfig {where!r} has no usable context")
    return config
