"""The ASGI shell called with a recording `send` (httpx's ASGITransport would collect whole
responses and hide streaming behaviour).

Streaming runs against a real upstream on loopback through the proxy's own transport. Elsewhere
respx stands in for the upstream, behind a transport that hands each body back unread, as
every network transport does (respx reads its responses ahead, which no real transport does).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import httpx
import orjson
import respx

from proxy.config.load import Route, Settings
from proxy.server.app import create_app
from tests.reliability.upstreams import SSE_HEADERS, Script, scripted

UPSTREAM = "http://upstream.test/v1"


class UnreadBodies(httpx.AsyncBaseTransport):
    """respx's answers as a network transport gives them: the head, and the body unread."""

    def __init__(self, router: respx.MockRouter) -> None:
        self.router = router

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        answer = await self.router.async_handler(request)
        return httpx.Response(
            answer.status_code,
            headers=answer.headers,
            stream=httpx.ByteStream(answer.content),
            request=request,
        )


def make_app(router: respx.MockRouter, **route: Any) -> Any:
    client = httpx.AsyncClient(transport=UnreadBodies(router))
    settings = Settings(routes=(Route(name="r", upstream=UPSTREAM, **route),))
    return create_app(settings, client)


async def call_messages(
    app: Any,
    body: bytes,
    path: str = "/v1/chat/completions",
    headers: list[tuple[bytes, bytes]] | None = None,
    on_send: Callable[[dict[str, Any]], None] = lambda message: None,
) -> list[dict[str, Any]]:
    """Every ASGI message the app sent, in order."""
    sent: list[dict[str, Any]] = []
    messages = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop(0)
        await asyncio.Event().wait()  # the client stays connected
        raise AssertionError

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        on_send(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": path,
        "query_string": b"",
        "headers": [(b"content-type", b"application/json"), *(headers or [])],
    }
    await app(scope, receive, send)
    return sent


async def call(
    app: Any,
    body: bytes,
    path: str = "/v1/chat/completions",
    headers: list[tuple[bytes, bytes]] | None = None,
) -> tuple[int, dict[bytes, bytes], list[bytes]]:
    sent = await call_messages(app, body, path, headers)
    start = sent[0]
    bodies = [m.get("body", b"") for m in sent[1:]]
    return start["status"], dict(start["headers"]), bodies


CHAT = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})


async def test_connect_error_maps_to_502() -> None:
    router = respx.MockRouter()
    router.post(f"{UPSTREAM}/chat/completions").mock(side_effect=httpx.ConnectError("refused"))
    status, _, bodies = await call(make_app(router), CHAT)
    assert status == 502
    assert orjson.loads(b"".join(bodies))["error"]["code"] == "upstream_unreachable"


async def test_read_timeout_before_head_maps_to_504() -> None:
    router = respx.MockRouter()
    router.post(f"{UPSTREAM}/chat/completions").mock(side_effect=httpx.ReadTimeout("slow"))
    status, _, bodies = await call(make_app(router), CHAT)
    assert status == 504
    assert orjson.loads(b"".join(bodies))["error"]["code"] == "upstream_timeout"


async def test_streaming_chunks_are_sent_one_by_one() -> None:
    """Each upstream event leaves as its own ASGI message the moment it arrives: the upstream
    (a real server on loopback, read through the proxy's own transport) writes an event only
    after the previous one reached the client's `send`, so a proxy that waited for more
    before sending would stall here. The message carrying `[DONE]` ends the body."""
    events = [
        b'data: {"id":"a","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}]}\n\n',
        b'data: {"id":"a","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"y"},"finish_reason":null}]}\n\n',
        b'data: {"id":"a","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n',
        b"data: [DONE]\n\n",
    ]
    gate = threading.Semaphore(0)

    def release_next_write(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body" and message.get("body"):
            gate.release()

    script = Script(headers=SSE_HEADERS, pieces=tuple(events), gate=gate)
    with scripted({"/v1/chat/completions": script}) as (upstream, _):
        app = create_app(Settings(routes=(Route(name="r", upstream=upstream.url + "/v1"),)))
        try:
            stream_body = orjson.dumps({**orjson.loads(CHAT), "stream": True})
            sent = await call_messages(app, stream_body, on_send=release_next_write)
        finally:
            await app.client.aclose()
    start, *bodies = sent
    assert start["status"] == 200
    assert dict(start["headers"])[b"content-type"].startswith(b"text/event-stream")
    assert [m["type"] for m in bodies] == ["http.response.body"] * len(events)
    assert [m["body"] for m in bodies] == events, "one message per event, bytes unchanged"
    assert [m.get("more_body", False) for m in bodies] == [True] * (len(events) - 1) + [False]


async def test_non_streaming_ids_are_rewritten_and_request_forwarded_with_kimi_ids() -> None:
    seen: list[httpx.Request] = []

    def upstream(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(
            200,
            json={
                "id": "x",
                "object": "chat.completion",
                "created": 1,
                "model": "kimi-k2",
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {
                            "role": "assistant",
                            "content": None,
                            "tool_calls": [
                                {
                                    "id": "functions.bash:0",
                                    "function": {"name": "bash", "arguments": {"a": 1}},
                                }
                            ],
                        },
                    }
                ],
            },
        )

    router = respx.MockRouter()
    router.post(f"{UPSTREAM}/chat/completions").mock(side_effect=upstream)
    history = {
        "model": "kimi-k2",
        "messages": [
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": "call_1_0_aaaaaaaa",
                        "type": "function",
                        "function": {"name": "bash", "arguments": "{}"},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1_0_aaaaaaaa", "content": "ok"},
        ],
    }
    status, _, bodies = await call(make_app(router), orjson.dumps(history))
    assert status == 200
    sent = orjson.loads(seen[0].content)
    assert sent["messages"][1]["tool_calls"][0]["id"] == "functions.bash:0"
    assert sent["messages"][2]["tool_call_id"] == "functions.bash:0"
    message = orjson.loads(b"".join(bodies))["choices"][0]["message"]
    call0 = message["tool_calls"][0]
    assert call0["id"].startswith("call_2_0_") and call0["type"] == "function"
    assert call0["function"]["arguments"] == '{"a":1}'
    assert orjson.loads(b"".join(bodies))["choices"][0]["finish_reason"] == "tool_calls"


async def test_upstream_error_status_and_headers_are_relayed() -> None:
    router = respx.MockRouter()
    router.post(f"{UPSTREAM}/chat/completions").mock(
        return_value=httpx.Response(
            429,
            headers={"retry-after": "3", "x-request-id": "up-1"},
            json={"error": {"message": "slow down"}},
        )
    )
    status, headers, bodies = await call(make_app(router), CHAT)
    assert status == 429 and headers[b"retry-after"] == b"3" and headers[b"x-request-id"] == b"up-1"
    assert orjson.loads(b"".join(bodies)) == {"error": {"message": "slow down"}}
