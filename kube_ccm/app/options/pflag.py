# ruff: noqa: E501  (a few tables read best on one line)
"""pflag's command-line syntax and Go's value syntax, for any table of flags.

Why: operators replace a Go cloud-controller-manager with kube-ccm by changing the
image, not the manifest, so a command line must parse exactly as pflag parses it:

* ``--name=value`` or ``--name value``; a boolean is ``--name``,
  ``--name=true`` or ``--name=false`` and never takes the next argument;
* shorthands ``-v=4``, ``-v 4``, ``-v4`` and ``-h``; ``--`` ends the flags;
* durations are Go durations (``5m0s``, ``1h30m``, ``500ms``; a bare number
  other than ``0`` is an error, as in Go); integers take Go's ``0x``/``0o``/
  ``0b`` prefixes; list flags repeat by appending, map flags by merging; a
  repeated scalar flag: the last one wins;
* positional arguments are refused; ``-h``/``--help`` and ``--version`` are
  answered by the caller (:class:`HelpRequested`, :class:`VersionRequested`).

This module knows no flag of the daemon: :func:`parse_argv` takes the table
(:data:`kube_ccm.app.options.flags.FLAGS`). Errors carry pflag's wording.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from kube_ccm.app.options import featuregates
from kube_ccm.cloudprovider import one_line

# -- errors ------------------------------------------------------------------------


class OptionsError(Exception):
    """The flags are invalid. One message per problem, each saying what to write instead."""

    def __init__(self, *problems: str) -> None:
        problems = tuple(one_line(p) for p in problems)
        super().__init__("\n".join(problems))
        self.problems: tuple[str, ...] = problems


class HelpRequested(Exception):  # noqa: N818 (a request, not an error)
    """``-h``/``--help``: the caller prints :func:`usage` and exits 0."""


class VersionRequested(Exception):  # noqa: N818
    """``--version`` (``raw``: ``--version=raw``): the caller prints the version, exits 0."""

    def __init__(self, *, raw: bool) -> None:
        super().__init__("--version=raw" if raw else "--version")
        self.raw = raw


# -- Go value syntax ---------------------------------------------------------------

_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)([^\d.]*)")
_UNITS: Final = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}  # fmt: skip


def parse_go_duration(text: str) -> float:
    """Go's ``time.ParseDuration``, in seconds: ``1h30m``, ``500ms``, ``0``, ``-5s``."""
    body = text[1:] if text[:1] in ("+", "-") else text
    sign = -1.0 if text[:1] == "-" else 1.0
    if body == "0":
        return 0.0
    if not body:
        raise ValueError(f'time: invalid duration "{text}"')
    total = 0.0
    position = 0
    while position < len(body):
        match = _DURATION_PART.match(body, position)
        if match is None:
            raise ValueError(f'time: invalid duration "{text}"')
        number, unit = match.groups()
        if not unit:
            raise ValueError(f'time: missing unit in duration "{text}"')
        if unit not in _UNITS:
            raise ValueError(f'time: unknown unit "{unit}" in duration "{text}"')
        total += float(number) * _UNITS[unit]
        position = match.end()
    return sign * total


def format_go_duration(seconds: float) -> str:
    """Seconds → Go's ``Duration.String()``: ``5m0s``, ``12h0m0s``, ``500ms``, ``0s``."""
    if seconds == 0:
        return "0s"
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    if seconds < 1:
        for unit, scale in (("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
            if seconds >= scale:
                return f"{sign}{round(seconds / scale, 9):g}{unit}"
        return f"{sign}{seconds / 1e-9:g}ns"
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    text = f"{round(secs, 9):g}s"
    if hours or minutes:
        text = f"{int(minutes)}m{text}"
    if hours:
        text = f"{int(hours)}h{text}"
    return sign + text


def _int_parser(bits: int) -> Callable[[str], int]:
    """Go's ``strconv.ParseInt(text, 0, bits)``: sign, ``0x``/``0o``/``0b``, leading-0 octal."""
    limit = 1 << (bits - 1)

    def parse(text: str) -> int:
        try:
            if not text.isascii() or text.strip() != text:
                raise ValueError
            octal = re.fullmatch(r"[+-]?0[0-7_]+", text)
            value = int(text, 8) if octal else int(text, 0)
        except ValueError:
            raise ValueError(f'strconv.ParseInt: parsing "{text}": invalid syntax') from None
        if not -limit <= value < limit:
            raise ValueError(f'strconv.ParseInt: parsing "{text}": value out of range')
        return value

    return parse


def _parse_level(text: str) -> int:
    """klog's ``Level``: a non-negative decimal."""
    if not re.fullmatch(r"\d+", text):
        raise ValueError(f'strconv.ParseUint: parsing "{text}": invalid syntax')
    return int(text)


def _parse_float(text: str) -> float:
    try:
        if not text.isascii() or text.strip() != text or "_" in text:
            raise ValueError
        return float(text)
    except ValueError:
        raise ValueError(f'strconv.ParseFloat: parsing "{text}": invalid syntax') from None


def format_float(value: float) -> str:
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text


def _parse_strings(text: str) -> tuple[str, ...]:
    """A pflag string slice: comma-separated; kube-ccm also trims spaces around items."""
    if not text:
        return ()
    return tuple(part.strip() for part in text.split(","))


def _parse_version(text: str) -> str:
    if text == "raw":
        return text
    return "true" if featuregates.parse_go_bool(text) else "false"


# -- flag types and rows -----------------------------------------------------------


@dataclass(frozen=True)
class FlagType:
    """How a flag's text becomes a value, and back (for ``--help`` and the FLAG lines)."""

    name: str
    """Shown after the flag in ``--help``, as pflag does (empty for booleans)."""
    parse: Callable[[str], Any]
    show: Callable[[Any], str] = str
    no_opt_value: str | None = None
    """The value when the flag is given without ``=value`` (then it never takes the next argument)."""
    merge: Callable[[Any, Any], Any] | None = None
    """How a repeated flag combines with its earlier value (None: the last one wins)."""
    quoted: bool = False


STRING: Final = FlagType("string", str, quoted=True)
BOOL: Final = FlagType("", featuregates.parse_go_bool, lambda v: "true" if v else "false", no_opt_value="true")  # fmt: skip
INT: Final = FlagType("int", _int_parser(64))
INT32: Final = FlagType("int32", _int_parser(32))
FLOAT32: Final = FlagType("float32", _parse_float, format_float)
DURATION: Final = FlagType("duration", parse_go_duration, format_go_duration)
STRINGS: Final = FlagType("strings", _parse_strings, lambda v: "[" + ",".join(v) + "]", merge=lambda old, new: (*old, *new))  # fmt: skip
LEVEL: Final = FlagType("Level", _parse_level)
GATES: Final = FlagType("mapStringBool", featuregates.parse_settings, featuregates.format_settings, merge=lambda old, new: {**old, **new}, quoted=True)  # fmt: skip
VERSION: Final = FlagType("version[=true]", _parse_version, no_opt_value="true")


@dataclass(frozen=True)
class Flag:
    """One row of a flag table."""

    name: str
    type: FlagType
    default: Any
    help: str
    acting: bool = True
    """False: accepted for compatibility, not acted on yet (said in ``--help``)."""
    section: str = ""
    shorthand: str = ""
    field: str | None = None
    """The ``DaemonConfig`` field this flag sets: a dotted path into a nested
    setting, e.g. ``leader_election.lease_duration``; None for a flag no field
    holds (``--help``, a checked-only flag, an inert one)."""
    convert: Callable[[Any], Any] | None = None
    """Flag value → field value when they differ (e.g. ``""`` → None); may raise
    ``OptionsError``. None: the field takes the flag's value as it is."""

    def show(self, value: Any) -> str:
        """The value as pflag prints it."""
        return self.type.show(value)

    def default_text(self) -> str:
        shown = self.show(self.default)
        return json.dumps(shown, ensure_ascii=False) if self.type.quoted else shown


# -- parsing -----------------------------------------------------------------------


@dataclass(frozen=True)
class ParsedFlags:
    """Every flag's value (defaults filled in) and which ones the command line set."""

    values: Mapping[str, Any]
    explicit: frozenset[str]


class _ArgvParser:
    """One pass over argv with pflag's rules; errors carry pflag's wording."""

    def __init__(self, argv: Sequence[str], flags: Sequence[Flag]) -> None:
        self.by_name: Mapping[str, Flag] = {f.name: f for f in flags}
        self.by_shorthand: Mapping[str, Flag] = {f.shorthand: f for f in flags if f.shorthand}
        self.args = list(argv)
        self.index = 0
        self.values: dict[str, Any] = {f.name: f.default for f in flags}
        self.explicit: set[str] = set()
        self.positional: list[tuple[str, str]] = []
        """(argument, the argument before it): for a precise error message."""

    def parse(self) -> ParsedFlags:
        while self.index < len(self.args):
            arg = self._take()
            if arg == "--":
                self.positional += [(a, arg) for a in self.args[self.index :]]
                break
            if arg.startswith("--"):
                self._long(arg)
            elif arg.startswith("-") and arg != "-":
                self._shorthands(arg)
            else:
                self.positional.append((arg, self.args[self.index - 2] if self.index > 1 else ""))
        self._refuse_positional()
        version = self.values["version"]
        if version != "false":
            raise VersionRequested(raw=version == "raw")
        return ParsedFlags(dict(self.values), frozenset(self.explicit))

    def _take(self) -> str:
        arg = self.args[self.index]
        self.index += 1
        return arg

    def _long(self, arg: str) -> None:
        name, has_value, value = arg[2:].partition("=")
        if not name or name[0] in "-=":
            raise OptionsError(f"bad flag syntax: {arg}")
        flag = self.by_name.get(name)
        if flag is None:
            raise OptionsError(f"unknown flag: --{name}")
        if not has_value:
            value = self._value_for(flag, f"--{name}")
        self._set(flag, value, f"--{name}")

    def _shorthands(self, arg: str) -> None:
        letters = arg[1:]
        while letters:
            letter, rest = letters[0], letters[1:]
            flag = self.by_shorthand.get(letter)
            if flag is None:
                raise OptionsError(
                    f"unknown shorthand flag: {letter!r} in {arg}{self._long_hint(arg)}"
                )
            if rest.startswith("="):
                value, letters = rest[1:], ""
            elif flag.type.no_opt_value is not None:
                value, letters = flag.type.no_opt_value, rest
            elif rest:
                value, letters = rest, ""
            else:
                value, letters = self._value_for(flag, f"{letter!r} in -{letter}"), ""
            self._set(flag, value, f"-{letter}, --{flag.name}")

    def _value_for(self, flag: Flag, shown: str) -> str:
        if flag.type.no_opt_value is not None:
            return flag.type.no_opt_value
        if self.index < len(self.args):
            return self._take()
        raise OptionsError(f"flag needs an argument: {shown}")

    def _set(self, flag: Flag, text: str, shown: str) -> None:
        try:
            value = flag.type.parse(text)
        except ValueError as exc:
            raise OptionsError(f'invalid argument "{text}" for "{shown}" flag: {exc}') from None
        if flag.name in self.explicit and flag.type.merge is not None:
            value = flag.type.merge(self.values[flag.name], value)
        self.values[flag.name] = value
        self.explicit.add(flag.name)
        if flag.name == "help" and value:
            raise HelpRequested

    def _long_hint(self, arg: str) -> str:
        name = arg[1:].partition("=")[0]
        return f" (did you mean -{arg}?)" if name in self.by_name else ""

    def _refuse_positional(self) -> None:
        # As upstream's command: empty arguments are tolerated, anything else refused.
        for arg, before in self.positional:
            if not arg:
                continue
            hint = "this command takes only flags"
            flag = self.by_name.get(before.lstrip("-"))
            if flag is not None and flag.type is BOOL and _is_go_bool(arg):
                hint = f"a boolean flag never takes the next argument: write {before}={arg}"
            raise OptionsError(f'unexpected argument "{arg}": {hint}')


def _is_go_bool(text: str) -> bool:
    try:
        featuregates.parse_go_bool(text)
    except ValueError:
        return False
    return True


def parse_argv(argv: Sequence[str], flags: Sequence[Flag]) -> ParsedFlags:
    """argv (without the program name) → every flag's value; syntax errors only.

    ``flags`` must include ``help`` (a bool) and ``version`` (:data:`VERSION`): they
    raise :class:`HelpRequested` and :class:`VersionRequested`.
    """
    return _ArgvParser(argv, flags).parse()
