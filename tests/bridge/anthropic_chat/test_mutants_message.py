"""SPEC §9, whole messages: a chat.completion as an Anthropic `message`, at the edges the
mutation audit found unpinned (the upstream's model, `reasoning`, refusals, odd calls, and
the words of a failure)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.bridge.anthropic_chat.bridge_wire import BASH_TOOL, new_exchange, play

JSON = dict[str, Any]


def request() -> JSON:
    return {
        "model": "kimi-k2",
        "max_tokens": 512,
        "messages": [{"role": "user", "content": "look around"}],
        "tools": [BASH_TOOL],
    }


def answer(message: JSON, finish: str | None = "stop", **top: Any) -> bytes:
    body: JSON = {"id": "chatcmpl-9", "object": "chat.completion", "created": 1}
    body["model"] = "kimi-k2"
    body["choices"] = [{"index": 0, "message": message, "finish_reason": finish}]
    body.update(top)
    return json.dumps(body).encode()


def whole(body: bytes) -> JSON:
    played = play(new_exchange(request()), [body], stream=False)
    assert played.broken is None
    message: JSON = json.loads(played.client)
    return message


def broken_message(body: bytes) -> str:
    played = play(new_exchange(request()), [body], stream=False)
    assert played.broken is not None
    assert played.client == b""
    return played.broken.error.message


def test_the_upstreams_model_is_the_messages_model() -> None:
    body = answer({"role": "assistant", "content": "hi"}, model="kimi-k2-0905")
    assert whole(body)["model"] == "kimi-k2-0905"
    assert whole(answer({"role": "assistant", "content": "hi"}, model=""))["model"] == "kimi-k2"


def test_reasoning_under_its_other_name_is_a_thinking_block() -> None:
    content = whole(answer({"role": "assistant", "content": "hi", "reasoning": "why"}))["content"]
    assert [block["type"] for block in content] == ["thinking", "text"]
    assert content[0]["thinking"] == "why"


def test_empty_reasoning_is_no_thinking_block() -> None:
    message = {"role": "assistant", "content": "hi", "reasoning_content": ""}
    assert whole(answer(message))["content"] == [{"type": "text", "text": "hi"}]


def test_content_and_refusal_are_one_text_block() -> None:
    message = {"role": "assistant", "content": "I can't ", "refusal": "do that."}
    assert whole(answer(message))["content"] == [{"type": "text", "text": "I can't do that."}]


def test_without_a_finish_reason_a_text_answer_ends_the_turn() -> None:
    body = answer({"role": "assistant", "content": "hi"}, finish=None)
    assert whole(body)["stop_reason"] == "end_turn"


def test_a_calls_arguments_that_are_no_object_give_an_empty_input() -> None:
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "Bash", "arguments": "[1, 2]"},
    }
    content = whole(answer({"role": "assistant", "content": "", "tool_calls": [call]}))["content"]
    assert [(block["type"], block["input"]) for block in content] == [("tool_use", {})]


def test_a_body_that_is_no_json_object_is_a_broken_upstream_in_these_words() -> None:
    assert broken_message(b"<html>bad gateway</html>") == (
        "the upstream answered with a body that is not a JSON object"
    )


def test_an_error_object_in_a_2xx_answer_keeps_its_message() -> None:
    assert broken_message(b'{"error": {"message": "model overloaded"}}') == "model overloaded"


@pytest.mark.parametrize(
    "body",
    [
        b'{"choices": [{"index": 0, "finish_reason": "stop"}]}',
        b'{"choices": [], "error": "not an object"}',
    ],
)
def test_an_answer_without_a_message_says_so(body: bytes) -> None:
    assert broken_message(body) == "the upstream answered without a message"


def bash_call(arguments: object) -> JSON:
    return {
        "id": "call_1",
        "type": "function",
        "function": {"name": "Bash", "arguments": arguments},
    }


def test_calls_with_a_finish_reason_of_no_known_kind_stop_for_tool_use() -> None:
    message = {"role": "assistant", "content": "", "tool_calls": [bash_call('{"command": "ls"}')]}
    assert whole(answer(message, finish="weird"))["stop_reason"] == "tool_use"


def test_arguments_sent_as_an_object_are_the_input() -> None:
    message = {"role": "assistant", "content": "", "tool_calls": [bash_call({"command": "ls"})]}
    (block,) = whole(answer(message))["content"]
    assert block["input"] == {"command": "ls"}
