"""CORS allow-list: preflights answered by the proxy, Access-Control-Allow-Origin only for the
configured origins, and the allow-list as the only authority over upstream headers."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route as StarletteRoute

from proxy.cli.main import settings_from_argv
from proxy.config.load import ConfigError, Route, Settings
from proxy.server.app import ProxyApp, create_app
from proxy.server.cors import CORSMiddleware
from proxy.simulator import SimulatorLog, create_simulator_app

ALLOWED = "https://app.example.com"
OTHER = "https://evil.example.net"
CHAT = {"model": "kimi", "messages": [{"role": "user", "content": "hi"}]}

Client = Callable[..., Any]


def _permissive_upstream() -> Starlette:
    """An upstream that allows every origin itself, as some providers do."""

    async def models(request: Request) -> JSONResponse:
        return JSONResponse(
            {"object": "list", "data": []},
            headers={
                "access-control-allow-origin": "*",
                "access-control-allow-credentials": "true",
            },
        )

    return Starlette(routes=[StarletteRoute("/v1/models", models)])


@pytest.fixture
async def make_client() -> AsyncIterator[Client]:
    """An in-process client for the proxy (CORS as configured) in front of an upstream app."""
    opened: list[httpx.AsyncClient] = []

    async def factory(
        origins: tuple[str, ...] = (ALLOWED,),
        upstream_app: Any = None,
        log: SimulatorLog | None = None,
        proxy_keys: tuple[str, ...] = (),
    ) -> tuple[httpx.AsyncClient, Any]:
        upstream_app = upstream_app or create_simulator_app(log)
        upstream = httpx.AsyncClient(transport=httpx.ASGITransport(app=upstream_app))
        settings = Settings(
            routes=(Route(name="r", upstream="http://upstream/v1"),),
            cors_origins=origins,
            proxy_keys=proxy_keys,
        )
        app = create_app(settings, client=upstream)
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy")
        opened.extend((upstream, client))
        return client, app

    yield factory
    for client in opened:
        await client.aclose()


def _preflight_headers(origin: str, **extra: str) -> dict[str, str]:
    return {
        "origin": origin,
        "access-control-request-method": "POST",
        "access-control-request-headers": "authorization, content-type",
        **extra,
    }


async def test_preflight_from_an_allowed_origin_is_answered_by_the_proxy(
    make_client: Client,
) -> None:
    log = SimulatorLog()
    client, app = await make_client(log=log)
    assert isinstance(app, CORSMiddleware)
    reply = await client.options("/v1/chat/completions", headers=_preflight_headers(ALLOWED))
    assert reply.status_code == 204
    assert reply.headers["access-control-allow-origin"] == ALLOWED
    assert "POST" in reply.headers["access-control-allow-methods"]
    assert reply.headers["access-control-allow-headers"] == "authorization, content-type"
    assert int(reply.headers["access-control-max-age"]) > 0
    assert "Origin" in reply.headers["vary"]
    assert "access-control-allow-credentials" not in reply.headers
    assert log.paths == []  # never forwarded upstream


async def test_preflight_from_another_origin_is_refused_without_allow_headers(
    make_client: Client,
) -> None:
    log = SimulatorLog()
    client, _ = await make_client(log=log)
    reply = await client.options("/v1/chat/completions", headers=_preflight_headers(OTHER))
    assert reply.status_code == 403
    assert "access-control-allow-origin" not in reply.headers
    assert reply.json()["error"]["code"] == "cors_origin_not_allowed"
    assert log.paths == []


async def test_preflight_needs_no_proxy_key_but_the_request_does(make_client: Client) -> None:
    client, _ = await make_client(proxy_keys=("pk-test",))
    preflight = await client.options("/v1/chat/completions", headers=_preflight_headers(ALLOWED))
    assert preflight.status_code == 204
    refused = await client.post("/v1/chat/completions", json=CHAT, headers={"origin": ALLOWED})
    assert refused.status_code == 401
    # Even the error is readable by the allowed page, so it can show why.
    assert refused.headers["access-control-allow-origin"] == ALLOWED


async def test_allowed_origin_gets_allow_origin_on_the_response(make_client: Client) -> None:
    client, _ = await make_client()
    reply = await client.post("/v1/chat/completions", json=CHAT, headers={"origin": ALLOWED})
    assert reply.status_code == 200
    assert reply.headers["access-control-allow-origin"] == ALLOWED
    assert "x-request-id" in reply.headers["access-control-expose-headers"]
    assert "Origin" in reply.headers["vary"]
    assert reply.json()["choices"][0]["message"]["tool_calls"]


async def test_allowed_origin_matches_whatever_its_case(make_client: Client) -> None:
    client, _ = await make_client(origins=("HTTPS://App.Example.com/",))
    reply = await client.post("/v1/chat/completions", json=CHAT, headers={"origin": ALLOWED})
    assert reply.headers["access-control-allow-origin"] == ALLOWED


async def test_streamed_responses_get_the_header_too(make_client: Client) -> None:
    client, _ = await make_client()
    body = {**CHAT, "stream": True}
    reply = await client.post("/v1/chat/completions", json=body, headers={"origin": ALLOWED})
    assert reply.status_code == 200
    assert reply.headers["content-type"].startswith("text/event-stream")
    assert reply.headers["access-control-allow-origin"] == ALLOWED
    assert reply.text.rstrip().endswith("data: [DONE]")


async def test_other_origin_gets_no_allow_origin(make_client: Client) -> None:
    client, _ = await make_client()
    reply = await client.post("/v1/chat/completions", json=CHAT, headers={"origin": OTHER})
    assert reply.status_code == 200  # the browser, not the proxy, withholds the response
    assert "access-control-allow-origin" not in reply.headers
    assert "Origin" in reply.headers["vary"]


async def test_requests_without_origin_are_untouched(make_client: Client) -> None:
    client, _ = await make_client()
    reply = await client.post("/v1/chat/completions", json=CHAT)
    assert reply.status_code == 200
    assert not any(name.startswith("access-control-") for name in reply.headers)
    assert "vary" not in reply.headers


async def test_upstream_cors_headers_never_widen_the_allow_list(make_client: Client) -> None:
    client, _ = await make_client(upstream_app=_permissive_upstream())
    other = await client.get("/v1/models", headers={"origin": OTHER})
    assert other.status_code == 200
    assert "access-control-allow-origin" not in other.headers
    assert "access-control-allow-credentials" not in other.headers
    allowed = await client.get("/v1/models", headers={"origin": ALLOWED})
    assert allowed.headers.get_list("access-control-allow-origin") == [ALLOWED]
    assert "access-control-allow-credentials" not in allowed.headers


async def test_star_allows_any_origin(make_client: Client) -> None:
    client, _ = await make_client(origins=("*",))
    reply = await client.options("/v1/chat/completions", headers=_preflight_headers(OTHER))
    assert reply.status_code == 204
    assert reply.headers["access-control-allow-origin"] == "*"
    simple = await client.post("/v1/chat/completions", json=CHAT, headers={"origin": OTHER})
    assert simple.headers["access-control-allow-origin"] == "*"


async def test_without_cors_origins_the_app_is_not_wrapped(make_client: Client) -> None:
    log = SimulatorLog()
    client, app = await make_client(origins=(), log=log)
    assert isinstance(app, ProxyApp)
    reply = await client.options("/v1/chat/completions", headers=_preflight_headers(ALLOWED))
    assert "access-control-allow-origin" not in reply.headers
    assert log.paths == ["/v1/chat/completions"]  # an ordinary request, passed through


async def test_health_endpoints_carry_the_header_too(
    make_client: Client,
) -> None:
    client, _ = await make_client()
    reply = await client.get("/healthz", headers={"origin": ALLOWED})
    assert reply.status_code == 200
    assert reply.headers["access-control-allow-origin"] == ALLOWED


def test_cors_origins_come_from_the_environment_over_the_yaml(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "routes.yaml"
    config.write_text(
        "cors_origins:\n  - https://from-yaml.example.com\n"
        "routes:\n  - upstream: http://127.0.0.1:9/v1\n",
        encoding="utf-8",
    )
    monkeypatch.delenv("TOOLCALL_PROXY_CORS_ORIGINS", raising=False)
    assert settings_from_argv(["--config", str(config)]).cors_origins == (
        "https://from-yaml.example.com",
    )
    monkeypatch.setenv("TOOLCALL_PROXY_CORS_ORIGINS", "https://A.example.com, http://b.test:3000")
    assert settings_from_argv(["--config", str(config)]).cors_origins == (
        "https://a.example.com",
        "http://b.test:3000",
    )
    monkeypatch.setenv("TOOLCALL_PROXY_CORS_ORIGINS", "app.example.com")
    with pytest.raises(ConfigError, match="TOOLCALL_PROXY_CORS_ORIGINS"):
        settings_from_argv(["--config", str(config)])
