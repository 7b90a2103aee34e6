"""An upstream that refuses a follow-up round (SPEC §5) after the client's response began.

A stream gets its in-stream error and then a properly ended body (a body cut off after the
error is a broken connection, which Codex and Claude Code retry: the whole task again); a
non-streamed answer over a bridge gets the refusal in the client's own API shape (SPEC §9),
as a refused first round does. Each on every surface it concerns, on the wire.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import orjson
import pytest

from tests.e2e.conftest import ProxyFactory
from tests.reliability.upstreams import JSON_HEADERS, Script, answer, sequenced, tool_calls

# A native id is kept verbatim, so it is also the upstream id the replay comes back under.
CALL = ("call_Q7vR2kLm9XpT4sWzA1bC3dE5", "run_shell_command", '{"command":"make"}')
REFUSAL = Script(
    status=400,
    headers=JSON_HEADERS,
    pieces=(
        orjson.dumps({"error": {"message": "context too long", "type": "invalid_request_error"}}),
    ),
)
CHAT_HISTORY = [
    {"role": "user", "content": "build it"},
    {"role": "assistant", "content": None, "tool_calls": tool_calls(CALL)},
    {"role": "tool", "tool_call_id": CALL[0], "content": "built"},
]
ANTHROPIC_ID = "toolu_" + CALL[0].removeprefix("call_")
ANTHROPIC_HISTORY = [
    {"role": "user", "content": "build it"},
    {
        "role": "assistant",
        "content": [
            {"type": "tool_use", "id": ANTHROPIC_ID, "name": CALL[1], "input": {"command": "make"}}
        ],
    },
    {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": ANTHROPIC_ID, "content": "built"}],
    },
]
RESPONSES_INPUT = [
    {"type": "message", "role": "user", "content": "build it"},
    {"type": "function_call", "call_id": CALL[0], "name": CALL[1], "arguments": CALL[2]},
    {"type": "function_call_output", "call_id": CALL[0], "output": "built"},
]
TOOL = {"name": CALL[1], "parameters": {"type": "object"}}


def _requests() -> Iterator[tuple[str, str, dict[str, object]]]:
    """(label, path, body) of a streamed request whose answer replays the answered call, on
    each client API over a Chat Completions upstream (the two bridges and Chat itself)."""
    yield (
        "chat",
        "/v1/chat/completions",
        {
            "model": "m",
            "stream": True,
            "messages": CHAT_HISTORY,
            "tools": [{"type": "function", "function": TOOL}],
        },
    )
    yield (
        "anthropic",
        "/v1/messages",
        {
            "model": "m",
            "stream": True,
            "max_tokens": 100,
            "messages": ANTHROPIC_HISTORY,
            "tools": [{"name": CALL[1], "input_schema": {"type": "object"}}],
        },
    )
    yield (
        "responses",
        "/v1/responses",
        {
            "model": "m",
            "stream": True,
            "store": False,
            "input": RESPONSES_INPUT,
            "tools": [{"type": "function", **TOOL}],
        },
    )


@pytest.mark.parametrize(
    ("label", "path", "body"), [pytest.param(*case, id=case[0]) for case in _requests()]
)
def test_a_stream_whose_followup_is_refused_ends_its_body(
    make_proxy: ProxyFactory, label: str, path: str, body: dict[str, object]
) -> None:
    with (
        sequenced(answer(CALL, stream=True), REFUSAL) as (upstream, seen),
        make_proxy(upstream=upstream.url + "/v1", upstream_api="chat_completions") as proxy,
        httpx.stream("POST", proxy.url + path, json=body, timeout=10) as response,
    ):
        assert response.status_code == 200
        # A body cut off after the error event raises here (the connection's end is not the
        # chunked body's end).
        text = b"".join(response.iter_bytes()).decode()
    assert len(seen.chat_requests()) == 2, "the replay's follow-up round was sent"
    assert "HTTP 400" in text, text[-500:]


def test_a_bridged_message_whose_followup_is_refused_gets_anthropics_error_shape(
    make_proxy: ProxyFactory,
) -> None:
    body = {
        "model": "m",
        "max_tokens": 100,
        "messages": ANTHROPIC_HISTORY,
        "tools": [{"name": CALL[1], "input_schema": {"type": "object"}}],
    }
    with (
        sequenced(answer(CALL, stream=False), REFUSAL) as (upstream, seen),
        make_proxy(upstream=upstream.url + "/v1", upstream_api="chat_completions") as proxy,
    ):
        response = httpx.post(proxy.url + "/v1/messages", json=body, timeout=10)
    assert len(seen.chat_requests()) == 2, "the replay's follow-up round was sent"
    assert response.status_code == 400
    error = response.json()
    assert error["type"] == "error", error
    assert error["error"]["type"] == "invalid_request_error"
    assert "context too long" in error["error"]["message"]


def test_a_bridged_response_whose_followup_is_refused_gets_openais_error_shape(
    make_proxy: ProxyFactory,
) -> None:
    body = {
        "model": "m",
        "store": False,
        "input": RESPONSES_INPUT,
        "tools": [{"type": "function", **TOOL}],
    }
    with (
        sequenced(answer(CALL, stream=False), REFUSAL) as (upstream, seen),
        make_proxy(upstream=upstream.url + "/v1", upstream_api="chat_completions") as proxy,
    ):
        response = httpx.post(proxy.url + "/v1/responses", json=body, timeout=10)
    assert len(seen.chat_requests()) == 2, "the replay's follow-up round was sent"
    assert response.status_code == 400
    assert "context too long" in response.json()["error"]["message"]
