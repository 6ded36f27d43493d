"""Feature gates: ``--feature-gates=Name=true,Other=false`` as upstream parses it.

The set is the cloud-controller-manager's: its own gates, the shared
controller-manager gate and component-base's logging gates, plus the special
``AllAlpha``/``AllBeta`` switches. A gate that upstream has *removed* is
refused like any unknown name (as upstream does), but the message says why and
what to do. A gate that graduated and is locked cannot be set against its
locked value.

:class:`FeatureGates` is the typed, immutable result the daemon carries in
``DaemonConfig.feature_gates``: a ``Mapping[str, bool]`` of every known gate,
with :meth:`FeatureGates.enabled` for readable call sites.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Final


class FeatureGateError(ValueError):
    """A ``--feature-gates`` entry is invalid; the message says which and what to write."""


class Stage(enum.Enum):
    ALPHA = "ALPHA"
    BETA = "BETA"
    GA = "GA"
    DEPRECATED = "DEPRECATED"


@dataclass(frozen=True)
class FeatureSpec:
    """A gate's default and maturity, as component-base's ``FeatureSpec``."""

    default: bool
    stage: Stage
    locked: bool = False
    description: str = ""


CLOUD_CONTROLLER_MANAGER_WEBHOOK: Final = "CloudControllerManagerWebhook"
WATCH_BASED_ROUTES_RECONCILIATION: Final = "CloudControllerManagerWatchBasedRoutesReconciliation"
RELEASE_LEADER_ELECTION_LOCK_ON_EXIT: Final = "ControllerManagerReleaseLeaderElectionLockOnExit"
LOGGING_ALPHA_OPTIONS: Final = "LoggingAlphaOptions"
LOGGING_BETA_OPTIONS: Final = "LoggingBetaOptions"
CONTEXTUAL_LOGGING: Final = "ContextualLogging"

ALL_ALPHA: Final = "AllAlpha"
ALL_BETA: Final = "AllBeta"
"""Special gates: turn every unset alpha (beta) gate on or off."""

KNOWN_FEATURES: Final[Mapping[str, FeatureSpec]] = {
    CLOUD_CONTROLLER_MANAGER_WEBHOOK: FeatureSpec(
        False, Stage.ALPHA, description="serve the webhooks named by --webhooks"
    ),
    WATCH_BASED_ROUTES_RECONCILIATION: FeatureSpec(
        False, Stage.ALPHA, description="reconcile routes on node events, not only periodically"
    ),
    RELEASE_LEADER_ELECTION_LOCK_ON_EXIT: FeatureSpec(
        False, Stage.ALPHA, description="accepted; the cloud-controller-manager does not act on it"
    ),
    LOGGING_ALPHA_OPTIONS: FeatureSpec(False, Stage.ALPHA, description="logging; not acted on"),
    LOGGING_BETA_OPTIONS: FeatureSpec(True, Stage.BETA, description="logging; not acted on"),
    CONTEXTUAL_LOGGING: FeatureSpec(True, Stage.BETA, description="logging; not acted on"),
}
"""Every gate ``--feature-gates`` accepts besides ``AllAlpha``/``AllBeta``."""

REMOVED_FEATURES: Final[Mapping[str, str]] = {
    "StableLoadBalancerNodeSet": "GA in 1.30 and removed in 1.32",
    "CloudDualStackNodeIPs": "GA in 1.30 and since removed; its behaviour is unconditional",
    "ComponentSLIs": "GA in 1.32 and removed in 1.35",
}
"""Gates upstream no longer knows; their behaviour is now unconditional."""


class FeatureGates(Mapping[str, bool]):
    """The value of every known gate, immutable; ``gates.enabled(name)`` reads one.

    Constructed from the explicit settings (``FeatureGates()`` is all defaults);
    the settings are checked the way ``--feature-gates`` checks them.
    """

    __slots__ = ("_explicit", "_values")

    def __init__(self, settings: Mapping[str, bool] | Iterable[tuple[str, bool]] = ()) -> None:
        explicit = dict(settings)
        for name, value in explicit.items():
            _check_setting(name, value)
        self._explicit: dict[str, bool] = explicit
        self._values: dict[str, bool] = _resolve(explicit)

    def enabled(self, name: str) -> bool:
        """Whether the gate is on; an unknown name is a programming error (KeyError)."""
        try:
            return self._values[name]
        except KeyError:
            raise KeyError(f"unknown feature gate {name!r}: known are {', '.join(self)}") from None

    @property
    def explicit(self) -> Mapping[str, bool]:
        """What ``--feature-gates`` set, as given (``AllAlpha``/``AllBeta`` included)."""
        return dict(self._explicit)

    def __getitem__(self, name: str) -> bool:
        return self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"FeatureGates({self._explicit!r})"

    def __str__(self) -> str:
        """``Name=true,Other=false`` for the explicit settings, sorted, as pflag prints it."""
        return format_settings(self._explicit)


def _check_setting(name: str, value: bool) -> None:
    if name in (ALL_ALPHA, ALL_BETA):
        return
    spec = KNOWN_FEATURES.get(name)
    if spec is None:
        removed = REMOVED_FEATURES.get(name)
        hint = (
            f" ({removed}: remove it from --feature-gates)"
            if removed
            else f" (known: {', '.join(sorted([*KNOWN_FEATURES, ALL_ALPHA, ALL_BETA]))})"
        )
        raise FeatureGateError(f"unrecognized feature gate: {name}{hint}")
    if spec.locked and value != spec.default:
        raise FeatureGateError(
            f"cannot set feature gate {name} to {str(value).lower()}, feature is locked to "
            f"{str(spec.default).lower()}: remove it from --feature-gates"
        )


def _resolve(explicit: Mapping[str, bool]) -> dict[str, bool]:
    values: dict[str, bool] = {}
    for name, spec in KNOWN_FEATURES.items():
        if name in explicit:
            values[name] = explicit[name]
        elif spec.stage is Stage.ALPHA and ALL_ALPHA in explicit:
            values[name] = explicit[ALL_ALPHA]
        elif spec.stage is Stage.BETA and ALL_BETA in explicit:
            values[name] = explicit[ALL_BETA]
        else:
            values[name] = spec.default
    return values


def parse_go_bool(text: str) -> bool:
    """Go's ``strconv.ParseBool``: exactly these spellings (also the flags' boolean syntax,
    :mod:`kube_ccm.app.options.pflag`)."""
    if text in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if text in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    raise ValueError(f'strconv.ParseBool: parsing "{text}": invalid syntax')


def parse_settings(text: str) -> dict[str, bool]:
    """``Name=true,Other=false`` → ``{Name: True, Other: False}``, each entry checked.

    As component-base's ``MapStringBool``: entries are comma-separated, spaces
    around them are ignored, an empty text sets nothing.
    """
    settings: dict[str, bool] = {}
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        name, has_value, value = entry.partition("=")
        name = name.strip()
        if not has_value:
            raise FeatureGateError(f"missing bool value for {name}: write {name}=true")
        try:
            settings[name] = parse_go_bool(value.strip())
        except ValueError as exc:
            raise FeatureGateError(
                f"invalid value of {name}={value.strip()}, err: {exc} (use true or false)"
            ) from None
        _check_setting(name, settings[name])
    return settings


def format_settings(settings: Mapping[str, bool]) -> str:
    """``{Name: True}`` → ``Name=true``, sorted by name."""
    return ",".join(f"{name}={str(value).lower()}" for name, value in sorted(settings.items()))


def parse_feature_gates(text: str) -> FeatureGates:
    """``--feature-gates`` text → every gate's value (unset ones at their default)."""
    return FeatureGates(parse_settings(text))


def describe() -> str:
    """One line per gate for ``--help``: ``Name=true|false (STAGE - default=false)``."""
    lines = [f"{ALL_ALPHA}=true|false (ALPHA - default=false)"]
    lines.append(f"{ALL_BETA}=true|false (BETA - default=false)")
    for name, spec in sorted(KNOWN_FEATURES.items()):
        lines.append(
            f"{name}=true|false ({spec.stage.value} - default={str(spec.default).lower()})"
        )
    return "\n".join(lines)
