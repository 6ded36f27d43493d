"""Secrets kept out of the log, whatever the verbosity and whichever library logs.

At ``-v=4`` and above the root logger is at DEBUG, and the client libraries under the
providers log what they send: botocore its signed requests (the ``Authorization``
header with the access key ID and the signature, ``X-Amz-Security-Token``) and the
bodies it gets back, urllib3 and azure-core (under pydo) their URLs and headers,
others their cookies or query strings. :class:`RedactingFilter`, installed on the
root handler by the daemon (``kube_ccm.app.logs``), rewrites every record before it
is formatted:

* **known shapes** (:data:`PATTERNS`): the values of ``Authorization``,
  ``Proxy-Authorization``, ``Cookie``/``Set-Cookie``, ``X-Amz-Security-Token``,
  ``CSRFPreventionToken`` and ``X-Auth-Token`` headers in the usual spellings
  (``Name: value``, ``'Name': b'value'``, ``name=value``); ``Bearer``/``Basic``
  credentials; ``PVEAPIToken=<id>=<secret>`` and ``PVEAuthCookie=``; AWS SigV4's
  ``Credential=``/``Signature=`` and their presigned ``X-Amz-*`` query parameters;
  ``aws_access_key_id``/``aws_secret_access_key``/``aws_session_token`` entries;
  ``password``, ``secret``, ``token``, ``ticket`` and their kin as ``key=value``,
  ``"key": "value"`` or ``<Key>value</Key>`` (XML answers such as STS's); a password
  in a URL (``scheme://user:password@host``); access key IDs (``AKIA...``,
  ``ASIA...``);
* **registered values** (:func:`register_secret`): every
  :class:`~kube_ccm.cloudprovider.Secret` registers its value when it is made (a
  token file, a password file, AWS credentials), the providers register what they
  derive from one (AWS's keys), and the Kubernetes client its bearer token. Each is
  replaced wherever it appears, also percent-encoded.

A replaced value reads ``***`` (an AWS access key ID keeps its first four and last
four characters, as kube-ccm's own messages show it). The filter changes the record
(message, arguments, exception text) in place, so every handler and formatter
downstream sees the redacted text.

Generic machinery: the shapes are the wire formats of HTTP authentication the
shipped providers' libraries use, not knowledge of a cloud.
"""

from __future__ import annotations

import logging
import re
import threading
from urllib.parse import quote

__all__ = [
    "PATTERNS",
    "RedactingFilter",
    "forget_secrets",
    "may_hold_a_shape",
    "redact",
    "register_secret",
]

MASK = "***"
_MIN_LENGTH = 6
"""Registered values shorter than this are not searched for (they would mask ordinary
words); the known shapes still catch them where they appear as credentials."""

_HEADERS = (
    r"authorization|proxy-authorization|x-amz-security-token|x-amz-signature|"
    r"x-amz-credential|cookie|set-cookie|csrfpreventiontoken|x-auth-token|x-api-key"
)
_KEYS = (
    r"password|passwd|passphrase|secret|client_secret|token|access_token|refresh_token|"
    r"id_token|session_token|sessiontoken|secretaccesskey|secret_access_key|api_key|apikey|"
    r"ticket|aws_secret_access_key|aws_session_token|aws_access_key_id|accesskeyid|"
    r"x-amz-security-token|x-amz-signature|x-amz-credential|csrfpreventiontoken"
)

PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # A header in a repr or dict: 'Authorization': b'...' / "Cookie": "..."
    (
        re.compile(rf"""(?i)(['"](?:{_HEADERS})['"]\s*:\s*b?)(['"])(?:(?!\2).)*\2"""),
        rf"\1\2{MASK}\2",
    ),
    # A header on the wire or in text: Authorization: ... (to the end of the line or quote)
    (
        re.compile(rf"""(?i)\b((?:{_HEADERS})\s*:\s*)[^\r\n'"]+"""),
        rf"\1{MASK}",
    ),
    # XML answers: <SecretAccessKey>...</SecretAccessKey>, <SessionToken>, <Password>
    (
        re.compile(
            r"(?i)(<(SecretAccessKey|SessionToken|Password|Token|Ticket|Secret|"
            r"AccessKeyId|CSRFPreventionToken)>)[^<]*(</\2>)"
        ),
        rf"\1{MASK}\3",
    ),
    # JSON-ish: "password": "value", 'token': 'value'
    (
        re.compile(rf"""(?i)(['"](?:{_KEYS})['"]\s*:\s*b?)(['"])(?:(?!\2).)*\2"""),
        rf"\1\2{MASK}\2",
    ),
    # key=value (query strings, forms, INI files); the value up to a separator
    (
        re.compile(rf"""(?i)(?<![\w-])((?:{_KEYS})\s*=\s*)(?!\*\*\*)[^\s&;,'"<>)}}\]]+"""),
        rf"\1{MASK}",
    ),
    # Schemes of the Authorization header wherever they appear
    (re.compile(r"(?i)\b(Bearer|Basic|Negotiate)\s+[A-Za-z0-9\-._~+/]+=*"), rf"\1 {MASK}"),
    (re.compile(r"(PVEAPIToken=[^=\s'\"]+=)[^\s'\",;]+"), rf"\1{MASK}"),
    (re.compile(r"(PVEAuthCookie=)[^;\s'\"]+"), rf"\1{MASK}"),
    # AWS SigV4: Credential=AKIA.../date/region/service/aws4_request, Signature=hex
    (re.compile(r"(?i)\b(Credential=)[^/\s,'\"]+"), rf"\1{MASK}"),
    (re.compile(r"(?i)\b(Signature=)[0-9a-f]{16,}"), rf"\1{MASK}"),
    (re.compile(r"(?i)\b(Signature:\s*)[0-9a-f]{16,}"), rf"\1{MASK}"),
    # A password in a URL: scheme://user:password@host
    (re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@'\"]+:)[^@\s/'\"]+@"), rf"\1{MASK}@"),
    # AWS access key IDs anywhere: keep AKIA and the last four, as kube-ccm shows them
    (re.compile(r"\b((?:AKIA|ASIA|AROA|AIDA)[A-Z0-9]{4})[A-Z0-9]{4,}([A-Z0-9]{4})\b"), r"\1…\2"),
)

_TRIGGERS = (
    "authoriz",
    "cookie",
    "x-api",
    "pass",
    "secret",
    "token",
    "ticket",
    "apikey",
    "api_key",
    "accesskeyid",
    "aws_",
    "bearer",
    "basic",
    "negotiate",
    "credential",
    "signature",
    "@",
    "akia",
    "asia",
    "aroa",
    "aida",
)
"""Case-folded text that every match of a :data:`PATTERNS` entry contains (the header
and key names, which the XML elements' and ``PVEAPIToken``/``PVEAuthCookie``'s contain
too; the authorization schemes; ``Credential=``, ``Signature``; the ``@`` of a URL's
password; an access key ID's prefix): a message holding none of them cannot match any
pattern, and skips the thirteen regular expressions (about 40 µs a record, a few per cent
of the daemon's CPU per Node initialised). tests/unit/runtime/test_redaction.py checks
every pattern's matches against this list."""

_lock = threading.Lock()
_values: frozenset[str] = frozenset()
_combined: re.Pattern[str] | None = None


def register_secret(value: str) -> None:
    """Have ``value`` (and its percent-encoded form) replaced in every log record from
    now on. Values shorter than six characters are ignored (see :data:`_MIN_LENGTH`)."""
    global _values, _combined  # noqa: PLW0603 (one process-wide registry, by design)
    value = value.strip()
    if len(value) < _MIN_LENGTH:
        return
    forms = {value, quote(value, safe=""), quote(value, safe="/")}
    with _lock:
        if forms <= _values:
            return
        _values = _values | forms
        ordered = sorted(_values, key=len, reverse=True)  # the longest first
        _combined = re.compile("|".join(re.escape(v) for v in ordered))


def forget_secrets() -> None:
    """Drop every registered value (for tests)."""
    global _values, _combined
    with _lock:
        _values, _combined = frozenset(), None


def redact(text: str) -> str:
    """``text`` with registered values and known secret shapes replaced."""
    combined = _combined
    if combined is not None:
        text = combined.sub(MASK, text)
    if not may_hold_a_shape(text):
        return text
    for pattern, replacement in PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def may_hold_a_shape(text: str) -> bool:
    """Whether ``text`` holds one of :data:`_TRIGGERS`, without which no
    :data:`PATTERNS` entry can match it."""
    folded = text.casefold()  # (?i) also matches a long s or a Kelvin sign; casefold too
    return any(trigger in folded for trigger in _TRIGGERS)


class RedactingFilter(logging.Filter):
    """Rewrites each record's message, arguments and exception text with
    :func:`redact`; never drops a record."""

    _formatter = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken format string: keep what can be shown
            message = f"{record.msg!s} {record.args!r}"
        record.msg, record.args = redact(message), None
        if record.exc_info:
            text = record.exc_text or self._formatter.formatException(record.exc_info)
            record.exc_text, record.exc_info = redact(text), None
        elif record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True
