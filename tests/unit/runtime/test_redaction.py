"""The log filter: what the client libraries write at debug level reaches the log with
every credential, token, signature and password replaced (issue 37, item 6)."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from kube_ccm.app.logs import configure_logging
from kube_ccm.cloudprovider import Secret
from kube_ccm.runtime import redaction
from kube_ccm.runtime.redaction import (
    PATTERNS,
    forget_secrets,
    may_hold_a_shape,
    redact,
    register_secret,
)

ACCESS_KEY_ID = "AKIAIOSFODNN7EXAMPLE"
SECRET_KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
SESSION_TOKEN = "FQoGZXIvYXdzEXAMPLE//session+token/value=="
SIGNATURE = "5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7"
PVE_SECRET = "5f0c1f2e-8d53-4a0b-9f4e-aaaaaaaaaaaa"


@pytest.fixture(autouse=True)
def clean() -> Iterator[None]:
    forget_secrets()
    yield
    forget_secrets()


KNOWN_SHAPES = [
    (  # botocore.endpoint at DEBUG: the signed request
        "Sending http request: <AWSPreparedRequest method=POST, headers={'X-Amz-Date': "
        f"b'20261128T120000Z', 'X-Amz-Security-Token': b'{SESSION_TOKEN}', "
        f"'Authorization': b'AWS4-HMAC-SHA256 Credential={ACCESS_KEY_ID}/20261128/"
        f"us-east-1/ec2/aws4_request, SignedHeaders=host;x-amz-date, Signature={SIGNATURE}'}}>",
        [SESSION_TOKEN, ACCESS_KEY_ID, SIGNATURE],
    ),
    (  # botocore.auth at DEBUG
        f"CanonicalRequest:\nPOST\n/\n\nx-amz-security-token:{SESSION_TOKEN}\n",
        [SESSION_TOKEN],
    ),
    (f"Signature:\n{SIGNATURE}", [SIGNATURE]),
    (  # a presigned URL
        f"GET https://s3.amazonaws.com/b?X-Amz-Credential={ACCESS_KEY_ID}%2F20261128&"
        f"X-Amz-Security-Token={SESSION_TOKEN}&X-Amz-Signature={SIGNATURE}",
        [SESSION_TOKEN, ACCESS_KEY_ID, SIGNATURE],
    ),
    (  # a shared-credentials file
        f"[default]\naws_access_key_id = {ACCESS_KEY_ID}\naws_secret_access_key = "
        f"{SECRET_KEY}\naws_session_token = {SESSION_TOKEN}",
        [ACCESS_KEY_ID, SECRET_KEY, SESSION_TOKEN],
    ),
    (  # STS's answer body
        f"Response body: b'<Credentials><AccessKeyId>ASIA{ACCESS_KEY_ID[4:]}</AccessKeyId>"
        f"<SecretAccessKey>{SECRET_KEY}</SecretAccessKey><SessionToken>{SESSION_TOKEN}"
        "</SessionToken></Credentials>'",
        [SECRET_KEY, SESSION_TOKEN, ACCESS_KEY_ID[4:]],
    ),
    (f"Authorization: PVEAPIToken=kube-ccm@pve!ccm={PVE_SECRET}", [PVE_SECRET]),
    (
        f"GET /api2/json/version headers=Authorization=PVEAPIToken=a@pve!t={PVE_SECRET}",
        [PVE_SECRET],
    ),
    (
        "{'Cookie': 'PVEAuthCookie=PVE:root@pam:65A0B1C2::c2lnbmF0dXJl', "
        "'CSRFPreventionToken': '65A0B1C2:Y3NyZnRva2Vu'}",
        ["c2lnbmF0dXJl", "Y3NyZnRva2Vu"],
    ),
    ('{"data": {"ticket": "PVE:root@pam:65A0B1C2::c2lnbmF0dXJl"}}', ["c2lnbmF0dXJl"]),
    (
        "send: b'GET / HTTP/1.1\\r\\nAuthorization: Bearer dop_v1_abcdef0123\\r\\n'",
        ["dop_v1_abcdef0123"],
    ),
    ("Bearer eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln", ["eyJhbGciOiJSUzI1NiJ9"]),
    ("proxy said: Basic dXNlcjpodW50ZXIy", ["dXNlcjpodW50ZXIy"]),
    ("WWW: Negotiate YIIBhwYGKwYBBQUCoIIB", ["YIIBhwYGKwYBBQUCoIIB"]),
    ("S3 answered: ...X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F2026", ["IOSFODNN7EXAMPLE"]),
    ("aws_access_key_id=ZZZZ0123456789ABCDEF", ["ZZZZ0123456789ABCDEF"]),
    ("v4 header: Credential=ZZZZEXAMPLE0123/20261128/us-east-1", ["ZZZZEXAMPLE0123"]),
    ("connecting to qemu+ssh://ccm:hunter2hunter@hv1/system", ["hunter2hunter"]),
    ("POST /access/ticket username=root@pam&password=pve-pass-word", ["pve-pass-word"]),
    ("\u017fecret=abcdefgh0123 to\u212aen=ijklmnop4567", ["abcdefgh0123", "ijklmnop4567"]),
    ("'X-API-KEY': 'k-0123456789' PASSWD=hunter2hunter2", ["k-0123456789", "hunter2hunter2"]),
]


@pytest.mark.parametrize(("line", "secrets"), KNOWN_SHAPES)
def test_known_shapes_are_masked(line: str, secrets: list[str]) -> None:
    masked = redact(line)
    for secret in secrets:
        assert secret not in masked, masked
    assert "***" in masked or "…" in masked


def test_every_match_of_every_shape_holds_a_trigger_so_the_quick_check_never_skips_one() -> None:
    """``redact`` skips the patterns for a message without any of ``_TRIGGERS``: each
    text a pattern matches (in every known shape, and in the message that has them
    all) must hold one, or a secret of that shape would reach the log."""
    lines = [line for line, _ in KNOWN_SHAPES]
    lines.append(" ".join(lines))
    matched = 0
    for pattern, _ in PATTERNS:
        for line in lines:
            for match in pattern.finditer(line):
                matched += 1
                assert may_hold_a_shape(match.group(0)), (pattern.pattern, match.group(0))
    assert matched >= len(PATTERNS)
    assert all(any(p.search(line) for line in lines) for p, _ in PATTERNS), "a shape never met"


def test_every_header_key_and_key_id_shape_holds_a_trigger() -> None:
    """Each name the patterns know, in each shape it is masked in, and each access key
    ID prefix: the quick check lets it through, and it is masked."""
    names = redaction._HEADERS.split("|") + redaction._KEYS.split("|")
    texts = [f"{n}=Zz0123456789" for n in names if n in redaction._KEYS.split("|")]
    texts += [f"'{n.title()}': 'Zz0123456789'" for n in names]
    texts += [f"{n.upper()}: Zz0123456789" for n in redaction._HEADERS.split("|")]
    texts += [f"id {p}ZZZZ01234567" for p in ("AKIA", "ASIA", "AROA", "AIDA")]
    for text in texts:
        assert may_hold_a_shape(text), text
        assert "Zz0123456789" not in redact(text), text
        assert "ZZZZ01234567" not in redact(text), text


def test_a_message_without_a_trigger_is_left_as_it_is_cheaply() -> None:
    line = "node sim-001234 initialized in 0.012 s (providerID simulated://zone-a/i-001234)"
    assert not may_hold_a_shape(line)
    assert redact(line) == line
    assert may_hold_a_shape(line.replace("zone-a", "u:p@zone-a"))


def test_kube_ccms_own_messages_keep_their_meaning() -> None:
    for line in (
        "the API token kube-ccm@pve!ccm (secret sha256:1a2b3c4d) was refused; check tokenId "
        "and the secret in tokenSecret",
        'AWS rejected the credentials from file "/etc/aws" (sha256 1a2b3c4d, access key AKIA…WXYZ)',
        "node n1: error checking if the instance exists: HTTP 503",
        "give the daemon a token of team 'cluster team' (the Secret the token comes from)",
    ):
        assert redact(line) == line


def test_a_registered_value_is_masked_anywhere_even_percent_encoded() -> None:
    register_secret("my/odd+secret value")
    register_secret("short")  # too short to be searched for: ordinary words stay
    assert redact("a my/odd+secret value b") == "a *** b"
    assert redact("q=my%2Fodd%2Bsecret%20value") == "q=***"
    assert redact("short of time") == "short of time"


def test_every_secret_registers_its_value() -> None:
    Secret("a-token-from-a-file-0123")
    assert redact("x a-token-from-a-file-0123 y") == "x *** y"


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_the_daemons_handler_masks_messages_arguments_and_tracebacks(fmt: str) -> None:
    stream = io.StringIO()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        configure_logging(10, fmt, stream)
        register_secret(SECRET_KEY)
        log = logging.getLogger("botocore.endpoint")
        log.debug("Making request with %s", {"aws_secret_access_key": SECRET_KEY})
        try:
            raise RuntimeError(f"failed with key {SECRET_KEY} and token Bearer abcdefgh12345")
        except RuntimeError:
            log.exception("boom")
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    text = stream.getvalue()
    assert SECRET_KEY not in text
    assert "abcdefgh12345" not in text
    assert "RuntimeError" in text  # the traceback is still there
    if fmt == "json":
        assert all(json.loads(line) for line in text.splitlines() if line.startswith("{"))
