"""Settings resolution (flags > environment > YAML > defaults) and header hygiene."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from proxy.cli import settings_from_argv
from proxy.config import SIMULATOR_MOUNT, ConfigError, Route
from proxy.upstream import client_response_headers, upstream_request_headers, upstream_url


def test_defaults_without_upstream_serve_the_simulator(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOOLCALL_PROXY_UPSTREAM", raising=False)
    settings = settings_from_argv([])
    assert (settings.host, settings.port) == ("127.0.0.1", 8787)
    assert settings.simulated
    [route] = settings.routes
    assert route.upstream == f"http://127.0.0.1:8787{SIMULATOR_MOUNT}/v1"
    assert (route.connect_timeout, route.read_timeout) == (10.0, 300.0)
    assert (route.ids, route.dialect, route.replay_guard, route.max_followups) == (
        "auto",
        "auto",
        True,
        2,
    )


def test_flags_win_over_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLCALL_PROXY_UPSTREAM", "http://env:1/v1")
    monkeypatch.setenv("TOOLCALL_PROXY_READ_TIMEOUT", "7")
    monkeypatch.setenv("TOOLCALL_PROXY_IDS", "always")
    settings = settings_from_argv(
        [
            "--upstream",
            "http://flag:2/v1/",
            "--port",
            "9999",
            "--replay-guard",
            "off",
            "--max-followups",
            "5",
        ]
    )
    [route] = settings.routes
    assert route.upstream == "http://flag:2/v1"
    assert route.read_timeout == 7.0 and route.ids == "always"
    assert route.replay_guard is False and route.max_followups == 5
    assert settings.port == 9999 and not settings.simulated


def test_yaml_routes_and_selection(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOOLCALL_PROXY_UPSTREAM", raising=False)
    config = tmp_path / "routes.yaml"
    config.write_text(
        "routes:\n"
        "  - name: kimi\n"
        "    match: {path_prefix: /kimi}\n"
        "    upstream: http://k:1/v1\n"
        "    dialect: kimi\n"
        "  - name: qwen\n"
        "    match: {model: 'qwen*'}\n"
        "    upstream: http://q:1/v1\n"
        "    replay_guard: off\n"
        "  - name: rest\n"
        "    upstream: http://r:1/v1\n"
    )
    settings = settings_from_argv(["--config", str(config), "--read-timeout", "9"])
    assert settings.route_for("/kimi", None).name == "kimi"  # type: ignore[union-attr]
    assert settings.route_for("", "Qwen3-Coder").name == "qwen"  # type: ignore[union-attr]
    assert settings.route_for("", "gpt-4o").name == "rest"  # type: ignore[union-attr]
    assert settings.route_for("/nope", None) is None
    assert all(r.read_timeout == 9.0 for r in settings.routes), "flags set route defaults"


def test_bad_upstream_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="upstream"):
        settings_from_argv(["--upstream", "ftp://x"])


ROUTE = Route(name="r", upstream="http://up:1/v1")


def test_request_headers_drop_hop_by_hop_and_host() -> None:
    headers = upstream_request_headers(
        [
            (b"host", b"proxy"),
            (b"connection", b"keep-alive, x-secret-hop"),
            (b"x-secret-hop", b"1"),
            (b"te", b"trailers"),
            (b"authorization", b"Bearer user"),
            (b"x-keep", b"yes"),
            (b"content-length", b"10"),
            (b"x-request-id", b"client-id"),
        ],
        ROUTE,
        "req_1",
        strip_authorization=False,
        identity_encoding=True,
    )
    names = [n for n, _ in headers]
    assert b"host" not in names and b"connection" not in names and b"te" not in names
    assert b"x-secret-hop" not in names and b"content-length" not in names
    assert (b"authorization", b"Bearer user") in headers and (b"x-keep", b"yes") in headers
    assert (b"x-request-id", b"req_1") in headers
    assert (b"accept-encoding", b"identity") in headers


def test_route_key_replaces_client_authorization(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UPSTREAM_SECRET", "sk-upstream")
    route = Route(name="r", upstream="http://up:1/v1", upstream_key_env="UPSTREAM_SECRET")
    headers = upstream_request_headers(
        [(b"authorization", b"Bearer client")],
        route,
        "r",
        strip_authorization=False,
        identity_encoding=False,
    )
    assert [v for n, v in headers if n == b"authorization"] == [b"Bearer sk-upstream"]
    assert "sk-upstream" not in repr(route), "the secret never sits in the settings"


def test_response_headers_keep_rate_limits_drop_hop_by_hop() -> None:
    upstream = httpx.Headers(
        [
            ("retry-after", "7"),
            ("x-ratelimit-remaining", "0"),
            ("transfer-encoding", "chunked"),
            ("connection", "close"),
            ("content-length", "5"),
        ]
    )
    kept = dict(client_response_headers(upstream, keep_length=False))
    assert kept == {b"retry-after": b"7", b"x-ratelimit-remaining": b"0"}
    assert b"content-length" in dict(client_response_headers(upstream, keep_length=True))


def test_upstream_url_appends_path_and_query() -> None:
    assert upstream_url(ROUTE, "/chat/completions", b"") == "http://up:1/v1/chat/completions"
    assert upstream_url(ROUTE, "/models", b"a=1") == "http://up:1/v1/models?a=1"
