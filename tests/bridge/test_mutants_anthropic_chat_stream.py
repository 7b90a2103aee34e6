"""SPEC §4, §9: the Anthropic bridge's stream: reasoning as a signed thinking block, and a
usage chunk whose `choices` is `null` or missing, as the Chat exchange passes such chunks on
unchanged (the mutation audit found the thinking block's start and only `choices: []`
tested)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from proxy.bridge.anthropic_chat.reasoning import sign_reasoning
from tests.bridge.anthropic_chat.bridge_wire import chunk, new_exchange, parse_events, play

JSON = dict[str, Any]


def request() -> JSON:
    return {
        "model": "kimi-k2",
        "max_tokens": 512,
        "stream": True,
        "messages": [{"role": "user", "content": "hi"}],
    }


@pytest.mark.parametrize("choices", [{"choices": None}, {}], ids=["null", "missing"])
def test_a_usage_chunk_without_a_choices_list_gives_the_usage(choices: JSON) -> None:
    usage = {"prompt_tokens": 11, "completion_tokens": 3}
    body = {"id": "chatcmpl-9", "object": "chat.completion.chunk", "model": "kimi-k2"}
    usage_chunk = b"data: " + json.dumps({**body, **choices, "usage": usage}).encode() + b"\n\n"
    upstream = (
        chunk({"role": "assistant", "content": "Hello"})
        + chunk({}, "stop")
        + usage_chunk
        + b"data: [DONE]\n\n"
    )
    events = parse_events(play(new_exchange(request()), [upstream]).client)
    assert [e["type"] for e in events] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert events[2]["delta"] == {"type": "text_delta", "text": "Hello"}
    assert events[4]["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert events[4]["usage"]["input_tokens"] == 11
    assert events[4]["usage"]["output_tokens"] == 3


def test_reasoning_is_a_thinking_block_signed_with_its_text() -> None:
    upstream = (
        chunk({"role": "assistant", "reasoning_content": "Hm"})
        + chunk({"reasoning_content": "m."})
        + chunk({"content": "Hi"})
        + chunk({}, "stop")
        + b"data: [DONE]\n\n"
    )
    events = parse_events(play(new_exchange(request()), [upstream]).client)
    thinking = [e for e in events if e.get("index") == 0]
    assert thinking == [
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "thinking", "thinking": "", "signature": ""},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "Hm"},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "m."},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "signature_delta", "signature": sign_reasoning("Hmm.")},
        },
        {"type": "content_block_stop", "index": 0},
    ]
