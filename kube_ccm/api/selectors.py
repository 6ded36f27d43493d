"""Kubernetes label selectors in their string form (``kubectl -l``), parsed and matched.

The grammar is the apimachinery one: requirements separated by commas, each one of
``key``, ``!key``, ``key=value``, ``key==value``, ``key!=value``,
``key in (a,b)`` and ``key notin (a,b)``. All requirements must hold. ``!=`` and
``notin`` also match objects without the key, as in Kubernetes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

Operator = Literal["exists", "!exists", "=", "!=", "in", "notin"]

_KEY = r"[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?"
_VALUE = r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_SET = re.compile(rf"^\s*(?P<key>{_KEY})\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)\s*$")
_BINARY = re.compile(rf"^\s*(?P<key>{_KEY})\s*(?P<op>==|=|!=)\s*(?P<value>{_VALUE})\s*$")
_EXISTS = re.compile(rf"^\s*(?P<bang>!?)\s*(?P<key>{_KEY})\s*$")


class SelectorError(ValueError):
    """The selector does not parse; the message shows the bad part and the grammar."""


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: Operator
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.operator == "exists":
            return present
        if self.operator == "!exists":
            return not present
        if self.operator in ("=", "in"):
            return present and labels[self.key] in self.values
        return not present or labels[self.key] not in self.values


@dataclass(frozen=True)
class LabelSelector:
    requirements: tuple[Requirement, ...]
    text: str = ""

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)

    def __str__(self) -> str:
        return self.text


def _split(text: str) -> list[str]:
    """Commas separate requirements, except inside the parentheses of a set."""
    parts, depth, current = [], 0, ""
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return parts


def parse_selector(text: str) -> LabelSelector:
    """A selector from its string form; the empty string selects everything."""
    if not text.strip():
        return LabelSelector((), text)
    requirements: list[Requirement] = []
    for part in _split(text):
        if match := _SET.match(part):
            values = frozenset(v.strip() for v in match["values"].split(","))
            if "" in values or any(not re.fullmatch(_VALUE, v) for v in values):
                raise SelectorError(f"invalid values in {part.strip()!r}")
            requirements.append(Requirement(match["key"], match["op"], values))  # type: ignore[arg-type]
        elif match := _BINARY.match(part):
            op: Operator = "!=" if match["op"] == "!=" else "="
            requirements.append(Requirement(match["key"], op, frozenset({match["value"]})))
        elif match := _EXISTS.match(part):
            requirements.append(Requirement(match["key"], "!exists" if match["bang"] else "exists"))
        else:
            raise SelectorError(
                f"cannot parse {part.strip()!r} in the label selector {text!r}: use key, !key, "
                "key=value, key!=value, key in (a,b) or key notin (a,b), separated by commas"
            )
    return LabelSelector(tuple(requirements), text)


__all__ = ["LabelSelector", "Requirement", "SelectorError", "parse_selector"]
