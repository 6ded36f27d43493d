"""KubeClient: errors become typed exceptions, patches carry the right type, fencing holds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kube_ccm.runtime.client import ApiError, ClientFencedError, KubeClient, RestClientMetrics
from kube_ccm.runtime.kubeconfig import KubeConfigError, load_config, load_tool_config
from kube_ccm.runtime.metrics import Metrics
from kube_ccm.runtime.transport import Request, Response, TransportError
from kube_ccm.testing.transport import MockTransport, json_response, text_response


def client_for(transport: MockTransport) -> tuple[KubeClient, list[Request]]:
    return KubeClient(transport, user_agent="kube-ccm-test"), []


def recording(status: int = 200, body: object = None) -> tuple[MockTransport, list[Request]]:
    seen: list[Request] = []

    def handle(request: Request) -> Response:
        seen.append(request)
        return json_response(status, body)

    return MockTransport(handle), seen


async def test_a_status_object_becomes_an_api_error_with_its_reason() -> None:
    transport, _ = recording(
        409,
        {"kind": "Status", "code": 409, "reason": "Conflict", "message": "the object changed"},
    )
    client, _ = client_for(transport)
    with pytest.raises(ApiError) as error:
        await client.replace("/api/v1/nodes/a", {"metadata": {"name": "a"}})
    assert error.value.conflict
    assert not error.value.already_exists
    assert "the object changed" in str(error.value)


async def test_already_exists_is_not_a_conflict() -> None:
    transport, _ = recording(409, {"kind": "Status", "code": 409, "reason": "AlreadyExists"})
    client, _ = client_for(transport)
    with pytest.raises(ApiError) as error:
        await client.create("/api/v1/nodes", {})
    assert error.value.already_exists
    assert not error.value.conflict


async def test_a_status_objects_causes_are_kept() -> None:
    """The namespace lifecycle admission's refusal, as the apiserver sends it."""
    transport, _ = recording(
        403,
        {
            "kind": "Status",
            "code": 403,
            "reason": "Forbidden",
            "message": "unable to create new content in namespace ns because it is being "
            "terminated",
            "details": {
                "name": "e",
                "kind": "events",
                "causes": [
                    {
                        "reason": "NamespaceTerminating",
                        "message": "namespace ns is being terminated",
                        "field": "metadata.namespace",
                    }
                ],
            },
        },
    )
    client, _ = client_for(transport)
    with pytest.raises(ApiError) as error:
        await client.create("/api/v1/namespaces/ns/events", {})
    assert error.value.causes == ("NamespaceTerminating",)


async def test_a_non_status_error_body_is_kept_readable() -> None:
    transport = MockTransport(lambda _: text_response(502, "bad gateway from proxy"))
    client, _ = client_for(transport)
    with pytest.raises(ApiError) as error:
        await client.get("/api/v1/nodes")
    assert error.value.status == 502
    assert "bad gateway from proxy" in error.value.message


@pytest.mark.parametrize(
    ("patch_type", "content_type"),
    [
        ("strategic", "application/strategic-merge-patch+json"),
        ("merge", "application/merge-patch+json"),
        ("json", "application/json-patch+json"),
    ],
)
async def test_patches_carry_their_content_type(patch_type: str, content_type: str) -> None:
    transport, seen = recording(200, {"ok": True})
    client, _ = client_for(transport)
    await client.patch("/api/v1/nodes/a/status", {"x": 1}, patch_type=patch_type)  # type: ignore[arg-type]
    assert seen[0].method == "PATCH"
    assert seen[0].path == "/api/v1/nodes/a/status"
    assert seen[0].headers["Content-Type"] == content_type
    assert json.loads(seen[0].content or b"") == {"x": 1}
    assert seen[0].headers["User-Agent"] == "kube-ccm-test"


async def test_a_fenced_client_refuses_writes_but_still_reads() -> None:
    transport, seen = recording(200, {"items": []})
    client, _ = client_for(transport)
    client.fence("leadership lost")

    assert await client.get("/api/v1/nodes") == {"items": []}
    with pytest.raises(ClientFencedError, match="leadership lost"):
        await client.patch("/api/v1/nodes/a", {})
    with pytest.raises(ClientFencedError):
        await client.delete("/api/v1/nodes/a")
    assert [r.method for r in seen] == ["GET"]


async def test_a_write_guard_is_asked_after_the_waits_just_before_the_write_leaves() -> None:
    """A process stopped while it waited for the rate limiter may have lost its lease
    meanwhile: the guard's answer at the last moment counts, reads never ask it."""
    transport, seen = recording(200, {})
    doubt: list[str | None] = [None]
    asked: list[tuple[str, str]] = []

    waits: list[int] = []

    async def limiter() -> None:
        waits.append(1)
        if len(waits) == 2:  # the PATCH's wait: the lease is lost meanwhile
            doubt[0] = "the lease may be another's"

    client = KubeClient(transport, rate_limiter=limiter)

    def guard(method: str, path: str) -> str | None:
        asked.append((method, path))
        return doubt[0]

    client.set_write_guard(guard)
    await client.get("/api/v1/nodes")
    with pytest.raises(ClientFencedError, match="refused: the lease may be another's"):
        await client.patch("/api/v1/nodes/a", {})
    assert [r.method for r in seen] == ["GET"]
    assert asked == [("PATCH", "/api/v1/nodes/a")] * 2

    doubt[0] = None
    client.set_write_guard(lambda method, path: None)
    await client.delete("/api/v1/nodes/a")
    assert [r.method for r in seen] == ["GET", "DELETE"]


async def test_rate_limiter_is_awaited_before_every_request() -> None:
    transport, _ = recording(200, {})
    calls: list[int] = []

    async def limiter() -> None:
        calls.append(1)

    client = KubeClient(transport, rate_limiter=limiter)
    await client.get("/a")
    await client.create("/b", {})
    assert len(calls) == 2


def test_a_missing_kubeconfig_says_which_flag_to_fix(tmp_path: Path) -> None:
    with pytest.raises(KubeConfigError, match="--kubeconfig"):
        load_config(tmp_path / "nope.yaml")


def test_outside_a_cluster_without_flags_the_error_says_to_pass_kubeconfig(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(KubeConfigError, match="pass --kubeconfig"):
        load_config(None)


def test_master_overrides_the_kubeconfig_server(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        json.dumps(
            {
                "clusters": [{"name": "c", "cluster": {"server": "https://old:6443"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    config = load_config(kubeconfig, master="https://new:6443")
    assert config.cluster.server == "https://new:6443"


def write_kubeconfig(
    path: Path,
    *,
    cluster: str = "c",
    server: str = "https://old:6443",
    context: str = "x",
    current: str | None = "x",
    ca: str | None = None,
) -> Path:
    body: dict[str, object] = {"server": server}
    if ca is not None:
        body["certificate-authority"] = ca
    document: dict[str, object] = {
        "clusters": [{"name": cluster, "cluster": body}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": context, "context": {"cluster": cluster, "user": "u"}}],
    }
    if current is not None:
        document["current-context"] = current
    path.write_text(json.dumps(document))
    return path


def test_the_daemon_does_not_read_kubeconfig_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Upstream's BuildConfigFromFlags: no flags, no cluster → an error, $KUBECONFIG or not."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(tmp_path / "config")))
    with pytest.raises(KubeConfigError, match="pass --kubeconfig"):
        load_config(None)


def test_the_tools_take_the_flag_before_kubeconfig(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    flag = write_kubeconfig(tmp_path / "flag", server="https://flag:6443")
    monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(tmp_path / "env")))
    assert load_tool_config(flag).cluster.server == "https://flag:6443"


def test_the_tools_read_the_first_existing_file_of_kubeconfig(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    env = write_kubeconfig(tmp_path / "env", server="https://env:6443")
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'missing'}:{env}")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert load_tool_config(None).cluster.server == "https://env:6443"


def test_the_tools_merge_the_files_of_kubeconfig_as_kubectl(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The first file to name a cluster wins, the current-context comes from the first
    that sets one, and relative paths are resolved against their own file."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = write_kubeconfig(tmp_path / "a" / "config", cluster="c", current=None)
    second = write_kubeconfig(
        tmp_path / "b" / "config", cluster="c", server="https://second:6443", current="x"
    )
    third = write_kubeconfig(
        tmp_path / "b" / "other", cluster="d", context="y", current="y", ca="ca.crt"
    )
    monkeypatch.setenv("KUBECONFIG", f"{first}:{second}")
    config = load_tool_config(None)
    assert config.context_name == "x"
    assert config.cluster.server == "https://old:6443"  # the first file's cluster c

    monkeypatch.setenv("KUBECONFIG", f"{third}:{first}")
    config = load_tool_config(None)
    assert config.context_name == "y"
    assert config.cluster.certificate_auth == str(tmp_path / "b" / "ca.crt")


def test_the_tools_fall_back_to_the_home_kubeconfig_then_in_cluster(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(KubeConfigError, match=r"~/.kube/config does not exist.*set KUBECONFIG"):
        load_tool_config(None)
    (tmp_path / ".kube").mkdir()
    write_kubeconfig(tmp_path / ".kube" / "config", server="https://home:6443")
    assert load_tool_config(None).cluster.server == "https://home:6443"
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    with pytest.raises(KubeConfigError, match="none of the files \\$KUBECONFIG lists exists"):
        load_tool_config(None)


async def test_rest_client_metrics_count_by_code_method_and_host() -> None:
    def handle(request: Request) -> Response:
        if request.path == "/down":
            raise TransportError("refused")
        return json_response(404 if request.path == "/missing" else 200)

    metrics = Metrics()

    async def limiter() -> None:
        return None

    client = KubeClient(
        MockTransport(handle, server="https://api.test:6443"),
        rate_limiter=limiter,
        metrics=RestClientMetrics(metrics),
    )
    await client.get("/ok")
    await client.patch("/ok", {"a": 1})
    with pytest.raises(ApiError):
        await client.get("/missing")
    with pytest.raises(TransportError):
        await client.get("/down")
    host = "api.test:6443"

    def requests(code: str, method: str) -> float | None:
        return metrics.sample(
            "rest_client_requests_total", {"code": code, "method": method, "host": host}
        )

    assert requests("200", "GET") == 1
    assert requests("200", "PATCH") == 1
    assert requests("404", "GET") == 1
    assert requests("<error>", "GET") == 1
    duration = {"verb": "GET", "host": host}
    assert metrics.sample("rest_client_request_duration_seconds_count", duration) == 3
    assert metrics.sample("rest_client_rate_limiter_duration_seconds_count", duration) == 3
