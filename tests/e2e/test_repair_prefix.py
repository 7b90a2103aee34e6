"""SPEC §11's prefix stability, end to end: a repaired history, then the same history with two
more turns appended (what an agent sends next), through the real proxy on loopback. The bytes
the upstream received for the first request's history are, byte for byte, the start of what it
received for the second: appending never changes how earlier messages were repaired, so a
provider's prompt cache keeps its prefix. The upstream records each request body as it arrived
(the simulator's log keeps them parsed, which would hide a change of bytes)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import orjson
import pytest

from proxy.core.request_repair import MISSING_RESULT
from proxy.simulator import SimulatorLog, create_simulator_app
from tests.e2e.conftest import ProxyFactory
from tests.e2e.test_repair_reporting import ANTHROPIC_HISTORY, ANTHROPIC_TOOLS
from tests.e2e.test_request_repair import HISTORY, MODEL, TOOLS, call
from tests.e2e.test_strict_surfaces import (
    RESPONSES_HISTORY,
    RESPONSES_TOOLS,
    function_call,
    tool_result,
    tool_use,
)
from tests.servers import ServerThread, serving

Scope = dict[str, Any]
Receive = Callable[[], Any]
Send = Callable[[dict[str, Any]], Any]


class Recording:
    """An ASGI app in front of another that keeps each request's body, as it arrived."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.bodies: list[bytes] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        parts: list[bytes] = []

        async def recorded() -> Any:
            message = await receive()
            if message["type"] == "http.request":
                parts.append(message.get("body", b""))
                if not message.get("more_body"):
                    self.bodies.append(b"".join(parts))
            return message

        await self.app(scope, recorded, send)


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[ServerThread, Recording]]:
    recording = Recording(create_simulator_app(SimulatorLog()))
    with serving(recording) as server:
        yield server, recording


# (path, the history's key, the first request, the two turns an agent appends next)
def _chat() -> tuple[str, str, dict[str, Any], list[Any]]:
    more = [
        {"role": "assistant", "content": None, "tool_calls": [call("call_ls02", "ls -a")]},
        {"role": "tool", "tool_call_id": "call_ls02", "content": ". .. a.py b.py"},
    ]
    body = {"model": MODEL, "messages": HISTORY, "tools": TOOLS}
    return "/v1/chat/completions", "messages", body, more


def _anthropic() -> tuple[str, str, dict[str, Any], list[Any]]:
    more = [
        {"role": "assistant", "content": [tool_use("toolu_ls02", "ls -a")]},
        {"role": "user", "content": [tool_result("toolu_ls02", ". .. a.py b.py")]},
    ]
    body = {
        "model": MODEL,
        "max_tokens": 256,
        "messages": ANTHROPIC_HISTORY,
        "tools": ANTHROPIC_TOOLS,
    }
    return "/v1/messages", "messages", body, more


def _responses() -> tuple[str, str, dict[str, Any], list[Any]]:
    more = [
        function_call("call_ls02", "ls -a"),
        {"type": "function_call_output", "call_id": "call_ls02", "output": ". .. a.py b.py"},
    ]
    body = {"model": MODEL, "input": RESPONSES_HISTORY, "tools": RESPONSES_TOOLS, "store": False}
    return "/v1/responses", "input", body, more


SESSIONS = {"chat": _chat, "anthropic": _anthropic, "responses": _responses}


def _history_bytes(body: bytes, key: str) -> bytes:
    """The body's bytes from its history's key to the end of its last item (the closing
    bracket not included), found by matching brackets outside strings."""
    start = body.index(b'"' + key.encode() + b'":[')
    depth, in_string, escaped = 0, False, False
    for at in range(start + len(key) + 4, len(body)):  # after `"key":[`
        char = body[at : at + 1]
        if in_string:
            escaped, in_string = (False, True) if escaped else (char == b"\\", char != b'"')
        elif char == b'"':
            in_string = True
        elif char in b"[{":
            depth += 1
        elif char in b"]}":
            if depth == 0:
                return body[start:at]
            depth -= 1
    raise AssertionError("the history's list does not end")


# Every API on its own, and each over a bridge to Chat Completions (the bridges' upstream API,
# so Chat has no bridged case).
PAIRINGS = [
    pytest.param(api, bridged, id=f"{api}-{'bridge' if bridged else 'own-api'}")
    for api in list(SESSIONS)
    for bridged in (False, True)
    if not (api == "chat" and bridged)
]


@pytest.mark.parametrize(("api", "bridged"), PAIRINGS)
def test_appending_turns_keeps_the_repaired_prefix_byte_for_byte(
    make_proxy: ProxyFactory,
    upstream: tuple[ServerThread, Recording],
    api: str,
    bridged: bool,
) -> None:
    server, recording = upstream
    path, key, body, more = SESSIONS[api]()
    longer = body | {key: [*body[key], *more]}
    route = {"upstream_api": "chat_completions"} if bridged else {}
    recording.bodies.clear()
    with make_proxy(upstream=server.url + "/v1", **route) as proxy:
        for sent in (body, longer):
            response = httpx.post(proxy.url + path, json=sent, timeout=30)
            assert response.status_code == 200, response.text
            assert response.headers["x-toolcall-proxy-repaired"]  # both were repaired
    first, second = recording.bodies
    history_key = "messages" if bridged else key
    prefix = _history_bytes(first, history_key)
    assert len(orjson.loads(b"{" + prefix + b"]}")[history_key]) >= len(body[key]) - 1
    assert MISSING_RESULT.encode() in prefix  # the repair is inside the common prefix
    assert _history_bytes(second, history_key).startswith(prefix + b",")
    # The upstream's prefix is the whole request up to the history's end, when nothing
    # before the history differs (the same model, system and options).
    assert second.startswith(first[: first.index(prefix)] + prefix)
