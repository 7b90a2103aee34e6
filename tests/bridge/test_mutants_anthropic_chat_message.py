"""SPEC §9: a whole Chat answer as an Anthropic message: a cut-off or filtered answer keeps
its stop reason, and a call the upstream left unnamed keeps an empty name (the mutation
audit found these unpinned)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.bridge.anthropic_chat.bridge_wire import BASH_TOOL, completion, new_exchange, play

JSON = dict[str, Any]


def message_of(answer: JSON, finish: str) -> JSON:
    request: JSON = {"model": "kimi-k2", "max_tokens": 64, "tools": [BASH_TOOL]}
    request["messages"] = [{"role": "user", "content": "hi"}]
    played = play(new_exchange(request), [completion(answer, finish)], stream=False)
    message: JSON = json.loads(played.client)
    return message


@pytest.mark.parametrize(
    ("finish", "reason"),
    [("length", "max_tokens"), ("content_filter", "refusal"), ("stop", "end_turn")],
)
def test_a_whole_answers_stop_reason(finish: str, reason: str) -> None:
    message = message_of({"role": "assistant", "content": "Hi"}, finish)
    assert (message["content"], message["stop_reason"]) == (
        [{"type": "text", "text": "Hi"}],
        reason,
    )


def test_a_call_without_a_name_keeps_an_empty_name() -> None:
    call = {"id": "call_x", "type": "function", "function": {"arguments": '{"command":"ls"}'}}
    message = message_of({"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls")
    assert message["content"] == [
        {"type": "tool_use", "id": "toolu_x", "name": "", "input": {"command": "ls"}}
    ]
    assert message["stop_reason"] == "tool_use"
