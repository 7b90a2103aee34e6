"""SPEC §9: a Chat `finish_reason` that is not a string (an upstream's odd value passes the
Chat exchange unchanged) reads as the end of the turn in Anthropic's `stop_reason`, streamed
or whole (the mutation audit found only strings and null tested)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.bridge.anthropic_chat.bridge_wire import (
    chunk,
    completion,
    new_exchange,
    parse_events,
    play,
)

JSON = dict[str, Any]
ODD = [["stop"], {"reason": "stop"}]


def request(*, stream: bool) -> JSON:
    messages = [{"role": "user", "content": "hi"}]
    return {"model": "kimi-k2", "max_tokens": 64, "stream": stream, "messages": messages}


@pytest.mark.parametrize("finish", ODD, ids=["list", "object"])
def test_a_streamed_finish_reason_that_is_no_string_ends_the_turn(finish: object) -> None:
    choice = {"index": 0, "delta": {}, "finish_reason": finish}
    end = {"id": "c", "object": "chat.completion.chunk", "model": "kimi-k2", "choices": [choice]}
    upstream = chunk({"role": "assistant", "content": "Hi"})
    upstream += b"data: " + json.dumps(end).encode() + b"\n\ndata: [DONE]\n\n"
    events = parse_events(play(new_exchange(request(stream=True)), [upstream]).client)
    assert events[-2]["type"] == "message_delta"
    assert events[-2]["delta"]["stop_reason"] == "end_turn"


@pytest.mark.parametrize("finish", ODD, ids=["list", "object"])
def test_a_whole_answers_finish_reason_that_is_no_string_ends_the_turn(finish: object) -> None:
    body = json.loads(completion({"role": "assistant", "content": "Hi"}, "stop"))
    body["choices"][0]["finish_reason"] = finish
    played = play(new_exchange(request(stream=False)), [json.dumps(body).encode()], stream=False)
    message = json.loads(played.client)
    assert (message["content"], message["stop_reason"]) == (
        [{"type": "text", "text": "Hi"}],
        "end_turn",
    )
