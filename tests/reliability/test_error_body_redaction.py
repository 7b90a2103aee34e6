"""SPEC §6: an upstream error body that echoes the credential the proxy sent (the route's own
upstream key) reaches the client with the key redacted, on every path that relays one: a
repaired surface (relayed as it came), a bridge (put in the client's error shape) and a
passthrough (where the proxy keys are redacted too). Real servers on loopback."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from proxy.config.load import Route, Settings
from proxy.server.app import create_app
from proxy.server.asgi import REDACTED, Redactor
from tests.servers import ServerThread, serving

ROUTE_KEY = "sk-route-key-0123456789abcdef"
PROXY_KEY = "pk-proxy-key-fedcba9876543210"
KEY_ENV = "REDACTION_TEST_UPSTREAM_KEY"


class EchoingUpstream:
    """Answers every request 401 with a body that quotes the Authorization it got (as some
    providers do: "Incorrect API key provided: sk-..."), one byte per write, so the key is
    split across the body's pieces; and the client's body too, which may hold a proxy key."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        auth = dict(scope["headers"]).get(b"authorization", b"").decode()
        echo = {"error": {"message": f"Incorrect API key provided: {auth}", "sent": body.decode()}}
        payload = json.dumps(echo).encode()
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 401, "headers": headers})
        for i in range(len(payload)):
            await send(
                {"type": "http.response.body", "body": payload[i : i + 1], "more_body": True}
            )
        await send({"type": "http.response.body", "body": b""})


@pytest.fixture(scope="module")
def upstream() -> Iterator[ServerThread]:
    with serving(EchoingUpstream()) as server:
        yield server


@pytest.fixture()
def proxy(upstream: ServerThread, monkeypatch: pytest.MonkeyPatch) -> Iterator[ServerThread]:
    monkeypatch.setenv(KEY_ENV, ROUTE_KEY)
    routes = (
        Route(
            name="bridged",
            upstream=upstream.url + "/v1",
            path_prefix="/bridged",
            upstream_key_env=KEY_ENV,
            upstream_api="chat_completions",
        ),
        Route(name="own-key", upstream=upstream.url + "/v1", upstream_key_env=KEY_ENV),
    )
    with serving(create_app(Settings(routes=routes, proxy_keys=(PROXY_KEY,)))) as server:
        yield server


AUTH = {"x-toolcall-proxy-key": PROXY_KEY}
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def assert_redacted(response: httpx.Response) -> None:
    assert response.status_code == 401, response.text
    text = response.text
    assert ROUTE_KEY not in text and PROXY_KEY not in text, text
    assert REDACTED.decode() in text, text


@pytest.mark.parametrize("stream", [False, True])
def test_a_repaired_surface_relays_the_error_with_the_route_key_redacted(
    proxy: ServerThread, stream: bool
) -> None:
    body = {**CHAT, "stream": stream}
    response = httpx.post(proxy.url + "/v1/chat/completions", json=body, headers=AUTH, timeout=30)
    assert_redacted(response)
    assert (
        response.json()["error"]["message"]
        == f"Incorrect API key provided: Bearer {REDACTED.decode()}"
    )


def test_a_bridge_translates_the_error_with_the_route_key_redacted(proxy: ServerThread) -> None:
    body = {"model": "m", "input": "hi"}
    response = httpx.post(proxy.url + "/bridged/v1/responses", json=body, headers=AUTH, timeout=30)
    assert_redacted(response)


def test_a_passthrough_redacts_the_route_key_and_the_proxy_keys(proxy: ServerThread) -> None:
    # The client's own body carries a proxy key, which the upstream echoes back.
    body = {"input": f"my key is {PROXY_KEY}"}
    response = httpx.post(proxy.url + "/v1/embeddings", json=body, headers=AUTH, timeout=30)
    assert_redacted(response)
    assert "content-length" not in response.headers or int(
        response.headers["content-length"]
    ) == len(response.content)


def test_the_redactor_finds_a_secret_however_the_body_is_split() -> None:
    """Streamed in any pieces, the body comes out as redacting it whole gives; no secret is
    left, nor the tail of a long one whose head is a shorter one (`sk-route`)."""
    rng = random.Random(52)
    secrets = [ROUTE_KEY.encode(), PROXY_KEY.encode(), b"sk-route"]
    words = [b"x", b"{", ROUTE_KEY.encode(), PROXY_KEY.encode(), b"sk-", b"sk-route"]
    for _ in range(300):
        body = b"".join(rng.choice(words) for _ in range(20))
        cuts = sorted(rng.sample(range(len(body) + 1), 6))
        pieces = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)], strict=True)]
        streamed = Redactor(secrets)
        out = b"".join(streamed.feed(piece) for piece in pieces) + streamed.end()
        whole = Redactor(secrets)
        assert out == whole.feed(body) + whole.end()
        assert ROUTE_KEY.encode() not in out and PROXY_KEY.encode() not in out
        assert b"sk-route" not in out and b"-key-0123" not in out
