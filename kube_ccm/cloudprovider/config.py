"""Typed cloud-config loading for providers: YAML in, your struct out, or one line that
says what to fix.

Declare the cloud-config as a :class:`msgspec.Struct` with
``forbid_unknown_fields=True`` (a misspelt key must be an error, not a silently
ignored default) and, for camelCase keys, ``rename="camel"``; use
:class:`Duration` for durations, written as Go writes them (``500ms``, ``1m30s``)::

    class MyCloudConfig(msgspec.Struct, forbid_unknown_fields=True, frozen=True,
                        rename="camel"):
        endpoint: str
        region: str = "eu-1"
        request_timeout: Duration = Duration(10.0)

    def factory(data: bytes | None) -> MyCloud:
        return MyCloud(load_cloud_config(data, MyCloudConfig, provider="mycloud"))

:func:`load_cloud_config` refuses a key given twice, a document that is not a
mapping, unknown keys (every one of them at once, each with the known ones, and a
hint of the provider's for a key it recognises, say another project's), a wrong type
(say, "`credentials` must be a mapping, got a string") and a malformed duration, each
with a :class:`InvalidCloudConfigError` naming the provider, the key's path and what
to write; the daemon shows it as the start-up error. Unknown keys and the first other
problem are told together, so that one start-up names every key to fix. No file
(``data`` is ``None``) is an error unless the struct can be built from its defaults.

Its two steps are also offered alone, for a provider whose messages keep msgspec's
own wording (the in-tree ones, whose errors predate :func:`load_cloud_config`):
:func:`parse_yaml` (the document, or "the <provider> cloud-config is not valid
YAML: ...") and :func:`convert_config` (the document as a struct, or "invalid
<provider> cloud-config: <msgspec's message>").
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, TypeVar

import msgspec
import msgspec.inspect
import yaml

from kube_ccm.cloudprovider._errors import CloudConfigError, one_line

__all__ = [
    "DuplicateKeyError",
    "Duration",
    "InvalidCloudConfigError",
    "convert_config",
    "load_cloud_config",
    "parse_duration",
    "parse_yaml",
    "unknown_fields",
]

T = TypeVar("T", bound=msgspec.Struct)

_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)(h|ms|us|µs|ns|m|s))+$")
_PART = re.compile(r"(\d+(?:\.\d+)?)(h|ms|us|µs|ns|m|s)")
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def parse_duration(text: str | float) -> float:
    """A Go duration (``1m30s``, ``50ms``; ``0``) or a number of seconds → seconds."""
    if isinstance(text, bool):
        raise ValueError(f"invalid duration {text!r}: write e.g. 50ms, 2s, 1m30s")
    if isinstance(text, int | float):
        if text < 0:
            raise ValueError(f"invalid duration {text!r}: it cannot be negative")
        return float(text)
    text = text.strip()
    if text == "0":
        return 0.0
    if not _DURATION.match(text):
        raise ValueError(f"invalid duration {text!r}: write e.g. 50ms, 2s, 1m30s")
    return sum(float(n) * _UNIT_SECONDS[unit] for n, unit in _PART.findall(text))


class Duration:
    """A length of time in a cloud-config, written ``500ms``, ``2s``, ``1m30s`` (or a
    number of seconds); ``.seconds`` is the value."""

    __slots__ = ("seconds",)

    def __init__(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a duration cannot be negative")
        self.seconds = float(seconds)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Duration) and other.seconds == self.seconds

    def __hash__(self) -> int:
        return hash(self.seconds)

    def __repr__(self) -> str:
        return f"Duration({self.seconds:g})"


class InvalidCloudConfigError(CloudConfigError, ValueError):
    """A cloud-config the provider cannot use; one line, naming the key."""

    def __init__(self, message: str) -> None:
        super().__init__(one_line(message))


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML that refuses a key given twice in one mapping (PyYAML keeps the last)."""


def _unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _value in node.value:
        key = loader.construct_object(key_node)
        if key in seen:
            raise DuplicateKeyError(key, key_node.start_mark.line + 1)
        seen.add(key)
    return loader.construct_mapping(node)


class DuplicateKeyError(Exception):
    """A key is given twice in one mapping of the document (``line`` counts from 1)."""

    def __init__(self, key: object, line: int) -> None:
        super().__init__(f"`{key}` is given twice in one mapping (line {line}); give it once")
        self.key = key
        self.line = line


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def parse_yaml(
    data: bytes | str,
    *,
    provider: str,
    error: type[InvalidCloudConfigError] = InvalidCloudConfigError,
    unique_keys: bool = False,
) -> Any:
    """The YAML document in ``data``; ``error`` when it is not YAML. With ``unique_keys``
    a key given twice in one mapping raises :class:`DuplicateKeyError` (PyYAML would keep
    the last)."""
    try:
        return yaml.load(data, Loader=_UniqueKeyLoader if unique_keys else yaml.SafeLoader)
    except yaml.YAMLError as exc:
        raise error(f"the {provider} cloud-config is not valid YAML: {exc}") from exc


def convert_config(
    document: Any,
    schema: type[T],
    *,
    provider: str,
    error: type[InvalidCloudConfigError] = InvalidCloudConfigError,
    see: str = "",
) -> T:
    """``document`` as ``schema``; else ``error`` with msgspec's message, then ``see`` (where
    the keys are explained)."""
    unknown = _unknown_problem(document, schema, {})
    try:
        converted = msgspec.convert(_without(document, schema) if unknown else document, schema)
    except msgspec.ValidationError as exc:
        also = f"{unknown}; also " if unknown else ""
        raise error(f"invalid {provider} cloud-config: {also}{exc}{see}") from exc
    if unknown:
        raise error(f"invalid {provider} cloud-config: {unknown}{see}")
    return converted


def _decode(kind: type, value: Any) -> Any:
    if kind is Duration:
        try:
            return Duration(parse_duration(value))
        except (TypeError, ValueError) as exc:
            # A ValueError (not a ValidationError) gets the key's path from msgspec.
            raise ValueError(str(exc)) from None
    raise NotImplementedError(f"unsupported type {kind!r}")


def load_cloud_config(
    data: bytes | str | None,
    schema: type[T],
    *,
    provider: str,
    example: str = "",
    hints: Mapping[str, str] | None = None,
) -> T:
    """Parse ``data`` (the ``--cloud-config`` file's content, ``None`` without one) into
    ``schema``. ``example`` (say, ``"endpoint: https://api.example"``) is shown when
    there is no file and the struct has required fields. ``hints`` maps an unknown key
    (its name, wherever it is) to what to write instead: say, another project's key."""
    if not schema.__struct_config__.forbid_unknown_fields:
        raise TypeError(
            f"{schema.__name__} must be declared with forbid_unknown_fields=True: a misspelt "
            "cloud-config key must be an error"
        )
    hint = f", e.g. `{example}`" if example else ""
    text = data.decode() if isinstance(data, bytes) else data
    if text is None or not text.strip():
        try:
            return msgspec.convert({}, schema, dec_hook=_decode)
        except msgspec.ValidationError:
            raise InvalidCloudConfigError(
                f"the {provider} provider needs a --cloud-config{hint}"
            ) from None
    try:
        document = parse_yaml(text, provider=provider, unique_keys=True)
    except DuplicateKeyError as exc:
        raise InvalidCloudConfigError(f"invalid {provider} cloud-config: {exc}") from None
    if not isinstance(document, dict):
        raise InvalidCloudConfigError(
            f"the {provider} cloud-config must be a YAML mapping of keys to values{hint}"
        )
    unknown = _unknown_problem(document, schema, hints or {})
    try:
        converted = msgspec.convert(
            _without(document, schema) if unknown else document, schema, dec_hook=_decode
        )
    except msgspec.ValidationError as exc:
        also = f"{unknown}; also " if unknown else ""
        raise InvalidCloudConfigError(
            f"invalid {provider} cloud-config: {also}{_explain(str(exc), schema)}"
        ) from None
    if unknown:
        raise InvalidCloudConfigError(f"invalid {provider} cloud-config: {unknown}")
    return converted


def unknown_fields(document: Any, schema: type[msgspec.Struct]) -> list[tuple[str, str]]:
    """Every key of ``document`` that ``schema`` does not know, as (where, key): where
    is the path of the mapping holding it (``""`` for the top, ``clusters[0]``), in
    the document's order. Only structs that forbid unknown fields are checked."""
    found: list[tuple[str, str]] = []
    _walk(document, msgspec.inspect.type_info(schema), "", found)
    return found


def _walk(value: Any, info: msgspec.inspect.Type | None, path: str, found: list[Any]) -> None:
    if isinstance(value, dict):
        struct = _struct_in(info)
        if struct is not None:
            fields = {f.encode_name: f for f in struct.fields}
            for key, item in value.items():
                field = fields.get(key) if isinstance(key, str) else None
                if field is None:
                    if struct.forbid_unknown_fields:
                        found.append((path, str(key)))
                    continue
                _walk(item, field.type, f"{path}.{key}" if path else str(key), found)
            return
        items = _items_in(info)
        if items is not None:
            for key, item in value.items():
                _walk(item, items, f"{path}.{key}" if path else str(key), found)
    elif isinstance(value, list):
        items = _items_in(info)
        if items is not None:
            for i, item in enumerate(value):
                _walk(item, items, f"{path}[{i}]", found)


def _without(document: Any, schema: type[msgspec.Struct]) -> Any:
    """``document`` without its unknown keys (to find its other problems too)."""
    unknown = set(unknown_fields(document, schema))

    def strip(value: Any, path: str) -> Any:
        if isinstance(value, dict):
            return {
                k: strip(v, f"{path}.{k}" if path else str(k))
                for k, v in value.items()
                if (path, str(k)) not in unknown
            }
        if isinstance(value, list):
            return [strip(v, f"{path}[{i}]") for i, v in enumerate(value)]
        return value

    return strip(document, "")


def _unknown_problem(document: Any, schema: type[msgspec.Struct], hints: Mapping[str, str]) -> str:
    """Every unknown key at once, grouped by the mapping holding them, each group with
    its known fields (and a key's hint, when ``hints`` has one); "" when none."""
    groups: dict[str, list[str]] = {}
    for where, key in unknown_fields(document, schema):
        hint = hints.get(key)
        groups.setdefault(where, []).append(f"`{key}`" + (f" ({hint})" if hint else ""))
    told = []
    for where, keys in groups.items():
        inside = f" in `{where}`" if where else ""
        known = _known_fields(schema, f".{where}" if where else "")
        listed = f"; known fields: {', '.join(known)}" if known else ""
        plural = "s" if len(keys) > 1 else ""
        told.append(f"unknown field{plural} {', '.join(keys)}{inside}{listed}")
    return "; ".join(told)


# msgspec's wording, in ours: "Expected `object`, got `str` - at `$.credentials`" becomes
# "`credentials` must be a mapping, got a string".
_AT = re.compile(r"^(?P<what>.*?)(?: - at (?P<key>`key` in )?`\$(?P<path>[^`]*)`)?$", re.DOTALL)
_UNKNOWN = re.compile(r"^Object contains unknown field `(?P<field>.*)`$", re.DOTALL)
_MISSING = re.compile(r"^Object missing required field `(?P<field>.*)`$", re.DOTALL)
_EXPECTED = re.compile(
    r"^Expected `(?P<want>[^`]+)`(?P<bound>.*?)(?:, got `(?P<got>[^`]+)`)?$", re.DOTALL
)
_KINDS = {
    "str": "a string",
    "int": "an integer",
    "float": "a number",
    "bool": "true or false",
    "object": "a mapping",
    "array": "a list",
    "null": "null",
    "bytes": "base64 bytes",
    "datetime": "a date and time",
    "date": "a date",
    "time": "a time",
    "duration": "a duration",
    "uuid": "a UUID",
    "decimal": "a decimal number",
}


def _explain(message: str, schema: type[msgspec.Struct]) -> str:
    """One msgspec validation message, as our other errors read."""
    at = _AT.match(message)
    assert at is not None  # the pattern matches any text
    what, path, key = at["what"], at["path"] or "", bool(at["key"])
    where = path.removeprefix(".")
    if key:
        subject = f"a key of `{where}`" if where else "a key"
    else:
        subject = f"`{where}`" if where else "the cloud-config"
    if match := _UNKNOWN.match(what):
        inside = f" in `{where}`" if where else ""
        known = _known_fields(schema, path)
        listed = f"; known fields: {', '.join(known)}" if known else ""
        return f"unknown field `{match['field']}`{inside}{listed}"
    if match := _MISSING.match(what):
        name = f"{where}.{match['field']}" if where else match["field"]
        return f"`{name}` is required"
    if match := _EXPECTED.match(what):
        kinds = [k for k in match["want"].split(" | ") if k != "null"] or ["null"]
        want = " or ".join(_KINDS.get(k, f"`{k}`") for k in kinds)
        got = match["got"]
        given = f", got {_KINDS.get(got, f'`{got}`')}" if got else ""
        return f"{subject} must be {want}{match['bound']}{given}"
    return f"{subject}: {what}" if where else what


def _known_fields(schema: type[msgspec.Struct], path: str) -> list[str]:
    """The keys of the struct at ``path`` (msgspec's ``.name``/``[0]``/``[...]`` steps)."""
    info: msgspec.inspect.Type | None = msgspec.inspect.type_info(schema)
    for name, _index in re.findall(r"\.([^.\[]+)|\[([^\]]*)\]", path):
        if name:
            struct = _struct_in(info)
            field = (
                next((f for f in struct.fields if f.encode_name == name), None) if struct else None
            )
            info = field.type if field else None
        else:
            info = _items_in(info)
    struct = _struct_in(info)
    return [f.encode_name for f in struct.fields] if struct else []


def _struct_in(info: msgspec.inspect.Type | None) -> msgspec.inspect.StructType | None:
    if isinstance(info, msgspec.inspect.StructType):
        return info
    if isinstance(info, msgspec.inspect.UnionType):
        return next((s for t in info.types if (s := _struct_in(t)) is not None), None)
    return None


def _items_in(info: msgspec.inspect.Type | None) -> msgspec.inspect.Type | None:
    """The type of a collection's elements (a mapping's values)."""
    if isinstance(info, msgspec.inspect.DictType):
        return info.value_type
    if isinstance(
        info,
        msgspec.inspect.ListType
        | msgspec.inspect.VarTupleType
        | msgspec.inspect.SetType
        | msgspec.inspect.FrozenSetType,
    ):
        return info.item_type
    if isinstance(info, msgspec.inspect.UnionType):
        return next((i for t in info.types if (i := _items_in(t)) is not None), None)
    return None
