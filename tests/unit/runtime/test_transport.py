"""Each transport (aiohttp, libcurl) against a real HTTP server on loopback: credentials
from the kubeconfig (static, rotating token file, exec plugin, basic), a stale
kept-alive connection, watch streams, and errors that say what to fix."""

from __future__ import annotations

import asyncio
import base64
import datetime
import ipaddress
import json
import ssl
import stat
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID, ObjectIdentifier
from lightkube.config.kubeconfig import SingleConfig
from lightkube.config.models import User, UserExec

from kube_ccm.runtime.aiohttptransport import AiohttpTransport
from kube_ccm.runtime.client import KubeClient
from kube_ccm.runtime.credentials import CredentialSource, credential_source
from kube_ccm.runtime.kubeconfig import load_config
from kube_ccm.runtime.transport import CredentialError, Request, Transport, TransportError

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Kind:
    """Builds the transport under test: the same contract holds for each."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, server: str, *, credentials: CredentialSource | None = None) -> Transport:
        if self.name == "curl":
            from kube_ccm.runtime.curltransport import CurlTransport  # noqa: PLC0415

            return CurlTransport(server, credentials=credentials)
        return AiohttpTransport(server, credentials=credentials)

    def from_config(self, config: SingleConfig) -> Transport:
        if self.name == "curl":
            from kube_ccm.runtime.curltransport import CurlTransport  # noqa: PLC0415

            return CurlTransport.from_config(config)
        return AiohttpTransport.from_config(config)


@pytest.fixture(params=["aiohttp", "curl"])
def kind(request: pytest.FixtureRequest) -> Kind:
    if request.param == "curl":
        pytest.importorskip("pycurl", reason="the curl transport's extra (kube-ccm[curl])")
    return Kind(request.param)


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Handler], Awaitable[str]]]:
    runners: list[web.AppRunner] = []

    async def start(handler: Handler) -> str:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return f"http://127.0.0.1:{port}"

    yield start
    for runner in runners:
        await runner.cleanup()


def recorder(seen: list[web.Request], status: int = 200) -> Handler:
    async def handle(request: web.Request) -> web.Response:
        seen.append(request)
        return web.json_response(
            {"path": request.path, "query": dict(request.query)}, status=status
        )

    return handle


async def test_requests_carry_path_query_headers_and_body(
    kind: Kind,
    serve: Callable[[Handler], Awaitable[str]],
) -> None:
    bodies: list[bytes] = []

    async def handle(request: web.Request) -> web.Response:
        bodies.append(await request.read())
        return web.json_response(
            {
                "path": request.path,
                "query": dict(request.query),
                "type": request.headers.get("Content-Type"),
                "agent": request.headers.get("User-Agent"),
            }
        )

    server = await serve(handle)
    client = KubeClient(kind(server), user_agent="kube-ccm/test")
    try:
        answer = await client.patch(
            "/api/v1/nodes/n1/status",
            {"metadata": {"labels": {"a": "b"}}},
            patch_type="merge",
            params={"fieldManager": "x", "limit": 3},
        )
    finally:
        await client.aclose()
    assert answer == {
        "path": "/api/v1/nodes/n1/status",
        "query": {"fieldManager": "x", "limit": "3"},
        "type": "application/merge-patch+json",
        "agent": "kube-ccm/test",
    }
    assert json.loads(bodies[0]) == {"metadata": {"labels": {"a": "b"}}}


async def test_a_token_file_is_reread_when_the_server_refuses_the_old_token(
    kind: Kind, serve: Callable[[Handler], Awaitable[str]], tmp_path: Path
) -> None:
    token = tmp_path / "token"
    token.write_text("old\n")
    seen: list[str] = []

    async def handle(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization", ""))
        if request.headers.get("Authorization") != "Bearer new":
            return web.json_response({"kind": "Status", "code": 401}, status=401)
        return web.json_response({})

    server = await serve(handle)
    transport = kind(server, credentials=credential_source(User(token_file=str(token))))
    try:
        assert (await transport.send(Request("GET", "/a"))).status == 401  # not yet rotated
        token.write_text("new\n")  # the kubelet rotates the projected token
        assert (await transport.send(Request("GET", "/a"))).status == 200
    finally:
        await transport.aclose()
    # the first 401 re-reads the same token (no retry); the second finds the new one
    assert seen == ["Bearer old", "Bearer old", "Bearer new"]


async def test_an_exec_plugin_runs_once_until_its_token_expires(
    kind: Kind, serve: Callable[[Handler], Awaitable[str]], tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    plugin = tmp_path / "plugin.py"
    plugin.write_text(
        "import json, os, pathlib, sys\n"
        f"p = pathlib.Path({str(runs)!r}); n = len(p.read_text()) if p.exists() else 0\n"
        "p.write_text('x' * (n + 1))\n"
        "assert json.loads(os.environ['KUBERNETES_EXEC_INFO'])['kind'] == 'ExecCredential'\n"
        "expiry = sys.argv[1]\n"
        "status = {'token': f'tok{n}'}\n"
        "if expiry: status['expirationTimestamp'] = expiry\n"
        "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', "
        "'kind': 'ExecCredential', 'status': status}))\n"
    )
    plugin.chmod(plugin.stat().st_mode | stat.S_IEXEC)
    seen: list[str] = []

    async def handle(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization", ""))
        return web.json_response({})

    server = await serve(handle)

    def exec_user(expiry: str) -> User:
        return User(
            exec=UserExec(
                apiVersion="client.authentication.k8s.io/v1",
                command=sys.executable,
                args=[str(plugin), expiry],
            )
        )

    lasting = kind(server, credentials=credential_source(exec_user("2999-01-01T00:00:00Z")))
    expired = kind(server, credentials=credential_source(exec_user("2000-01-01T00:00:00Z")))
    try:
        for _ in range(3):
            await lasting.send(Request("GET", "/a"))
        assert seen == ["Bearer tok0"] * 3
        await expired.send(Request("GET", "/a"))
        await expired.send(Request("GET", "/a"))
        assert seen[3:] == ["Bearer tok1", "Bearer tok2"]  # expired: run again each time
    finally:
        await lasting.aclose()
        await expired.aclose()


async def test_a_failing_exec_plugin_says_which_command_and_why(tmp_path: Path) -> None:
    credentials = credential_source(
        User(
            exec=UserExec(
                apiVersion="client.authentication.k8s.io/v1",
                command=sys.executable,
                args=["-c", "import sys; sys.stderr.write('login expired'); sys.exit(3)"],
            )
        )
    )
    with pytest.raises(CredentialError, match="exited with 3: login expired"):
        await credentials.header()


def test_basic_auth_and_the_unsupported_auth_provider() -> None:
    basic = credential_source(User(username="u", password="p"))
    assert asyncio.run(basic.header()) == "Basic " + base64.b64encode(b"u:p").decode()
    with pytest.raises(CredentialError, match="auth-provider"):
        credential_source(User(auth_provider={"name": "gcp"}))


async def _dropping_server(answered: list[str]) -> asyncio.Server:
    """Answers the first request of each connection and keeps it alive; the second
    request on a connection is read and the connection closed without an answer,
    as a restarting API server does."""

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for turn in (1, 2):
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                (
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                ),
                0,
            )
            await reader.readexactly(length)
            if turn == 2:
                writer.close()
                return
            answered.append(head.split(b" ")[1].decode())
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
            await writer.drain()

    return await asyncio.start_server(connection, "127.0.0.1", 0)


@pytest.mark.parametrize(("method", "retried"), [("GET", True), ("POST", False)])
async def test_a_read_is_sent_again_when_a_kept_alive_connection_drops_it(
    kind: Kind, method: str, retried: bool
) -> None:
    """Go's transport sends a replayable request again on a fresh connection; a write
    the server may have acted on is not sent twice."""
    answered: list[str] = []
    server = await _dropping_server(answered)
    port = server.sockets[0].getsockname()[1]
    transport = kind(f"http://127.0.0.1:{port}")
    try:
        await transport.send(Request("GET", "/first"))
        second = Request(method, "/second", content=b"{}" if method == "POST" else None)
        if retried:
            assert (await transport.send(second)).status == 200
        else:
            with pytest.raises(TransportError, match="POST"):
                await transport.send(second)
    finally:
        await transport.aclose()
        server.close()
    assert answered == (["/first", "/second"] if retried else ["/first"])


async def test_a_cancelled_or_timed_out_request_leaves_the_transport_usable(
    kind: Kind, serve: Callable[[Handler], Awaitable[str]]
) -> None:
    async def handle(request: web.Request) -> web.Response:
        if request.path == "/slow":
            await asyncio.sleep(1.5)  # past the client's patience, not the test's
        return web.json_response({"path": request.path})

    transport = kind(await serve(handle))
    try:
        slow = asyncio.create_task(transport.send(Request("GET", "/slow")))
        await asyncio.sleep(0.2)
        slow.cancel()
        with pytest.raises(asyncio.CancelledError):
            await slow
        with pytest.raises(TransportError, match="/slow"):
            await transport.send(Request("GET", "/slow", timeout=0.2))
        answer = await transport.send(Request("GET", "/fast"))
        assert json.loads(answer.content) == {"path": "/fast"}
        assert answer.headers["content-type"].startswith("application/json")
    finally:
        await transport.aclose()


async def test_a_refused_connection_is_a_transport_error_naming_the_server(kind: Kind) -> None:
    transport = kind("http://127.0.0.1:9")
    try:
        with pytest.raises(TransportError, match=r"GET http://127.0.0.1:9/api"):
            await transport.send(Request("GET", "/api"))
    finally:
        await transport.aclose()


async def test_a_watch_streams_events_as_they_are_written(
    kind: Kind,
    serve: Callable[[Handler], Awaitable[str]],
) -> None:
    release = asyncio.Event()

    async def handle(request: web.Request) -> web.StreamResponse:
        assert request.query["watch"] == "true"
        response = web.StreamResponse()
        await response.prepare(request)
        event = {"type": "ADDED", "object": {"metadata": {"name": "a"}}}
        await response.write(json.dumps(event).encode() + b"\n")
        await release.wait()  # the second event only after the first was seen
        event = {"type": "DELETED", "object": {"metadata": {"name": "a"}}}
        # split across writes, as a proxy may
        line = json.dumps(event).encode() + b"\n"
        await response.write(line[:7])
        await response.write(line[7:])
        return response

    server = await serve(handle)
    client = KubeClient(kind(server))
    types: list[str] = []
    try:
        async for event in client.watch("/api/v1/nodes", resource_version="1"):
            types.append(event.type)
            release.set()
    finally:
        await client.aclose()
    assert types == ["ADDED", "DELETED"]


def _pair(common_name: str, usage: ObjectIdentifier, directory: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / f"{common_name}.crt", directory / f"{common_name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


async def test_tls_and_a_client_certificate_from_a_kubeconfig(kind: Kind, tmp_path: Path) -> None:
    """The kubeconfig's CA verifies the server, and its client certificate is presented."""
    server_cert, server_key = _pair("apiserver", ExtendedKeyUsageOID.SERVER_AUTH, tmp_path)
    client_cert, client_key = _pair("the-ccm", ExtendedKeyUsageOID.CLIENT_AUTH, tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(server_cert, server_key)
    context.load_verify_locations(client_cert)
    context.verify_mode = ssl.CERT_REQUIRED

    async def handle(request: web.Request) -> web.Response:
        peer = request.transport.get_extra_info("peercert")  # type: ignore[union-attr]
        names = [value for part in peer["subject"] for key, value in part if key == "commonName"]
        return web.json_response({"names": names})

    app = web.Application()
    app.router.add_get("/who", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "clusters": [
                    {
                        "name": "c",
                        "cluster": {
                            "server": f"https://127.0.0.1:{port}",
                            "certificate-authority": str(server_cert),
                        },
                    }
                ],
                "users": [
                    {
                        "name": "u",
                        "user": {
                            "client-certificate": str(client_cert),
                            "client-key": str(client_key),
                        },
                    }
                ],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    transport = kind.from_config(load_config(kubeconfig))
    stranger = kind(f"https://127.0.0.1:{port}")  # no CA: refuses the server
    try:
        answer = json.loads((await transport.send(Request("GET", "/who"))).content)
        with pytest.raises(TransportError, match="certificate"):
            await stranger.send(Request("GET", "/who"))
    finally:
        await transport.aclose()
        await stranger.aclose()
        await runner.cleanup()
    assert answer == {"names": ["the-ccm"]}
