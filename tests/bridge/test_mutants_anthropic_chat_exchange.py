"""SPEC §5, §9: the Anthropic bridge's message names the request's model (or none) until the
upstream names its own, and a loop's error names the call as the client knows it, with the
tool, the model's raw id and the reason (the mutation audit found these unpinned)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from proxy.core.ids import mint_client_id
from tests.bridge.anthropic_chat.bridge_wire import new_exchange, parse_events, play
from tests.bridge.anthropic_chat.test_bridge_anthropic_exchange import (
    FIRST,
    HEX4,
    LS,
    kimi_call,
    request,
    turn,
)

JSON = dict[str, Any]


@pytest.mark.parametrize(
    ("model", "named"),
    [({"model": "kimi-k2"}, "kimi-k2"), ({}, ""), ({"model": 7}, "")],
    ids=["string", "missing", "not-a-string"],
)
def test_the_message_names_the_requests_model_when_the_upstream_names_none(
    model: JSON, named: str
) -> None:
    body: JSON = {"max_tokens": 64, "stream": True, **model}
    body["messages"] = [{"role": "user", "content": "hi"}]
    choice = {"index": 0, "delta": {"content": "Hi"}, "finish_reason": None}
    upstream = b"data: " + json.dumps({"id": "c", "choices": [choice]}).encode()
    events = parse_events(play(new_exchange(body), [upstream + b"\n\ndata: [DONE]\n\n"]).client)
    assert events[0]["type"] == "message_start"
    assert events[0]["message"]["model"] == named


def test_a_loops_error_names_the_tool_the_clients_id_the_raw_id_and_the_reason() -> None:
    first_id = mint_client_id(1, 0, HEX4, "functions.Bash:0", "toolu_")
    exchange = new_exchange(request(FIRST + turn(first_id, LS, "a.txt")))
    played = play(exchange, [kimi_call(LS)] * 2)
    assert played.loop is not None
    expected = (
        'Tool-call replay loop detected: the model replayed tool call "Bash" '
        f'(id "{first_id}" in the conversation) after it was already answered, sending it '
        'as "functions.Bash:0" (the proxy already answered this replay once). '
        "The response was stopped so the call is not executed again."
    )
    assert played.loop.error.message == expected
    error = parse_events(played.client)[-1]
    assert error == {"type": "error", "error": {"type": "loop_detected", "message": expected}}
