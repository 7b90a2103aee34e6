"""SPEC §9, whole messages: a chat.completion as a Responses `response`, at the edges the
mutation audit found unpinned (call items' ids and status, arguments that are no string,
choices that are no list)."""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

from tests.bridge.responses_chat.wire import PATCH, body, run

JSON = dict[str, Any]


def completion(message: JSON | None, finish: str = "tool_calls", **extra: Any) -> bytes:
    out: JSON = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1700000000}
    out["model"] = "kimi-k2-thinking"
    out["choices"] = [{"index": 0, "message": message, "finish_reason": finish}]
    out.update(extra)
    return orjson.dumps(out)


def answer(raw: bytes) -> JSON:
    result = run(body(stream=False), [[raw]], stream=False)
    assert result.last is not None and result.last.last
    response: JSON = orjson.loads(result.client)
    return response


def calls_message(*calls: JSON) -> JSON:
    return {"role": "assistant", "content": None, "tool_calls": list(calls)}


def call(call_id: str, name: str, arguments: object) -> JSON:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def test_call_items_have_their_kinds_ids_and_are_completed() -> None:
    message = calls_message(
        call("call_a", "shell", '{"cmd":"ls"}'),
        call("call_b", "apply_patch", json.dumps({"input": PATCH})),
    )
    function, custom = answer(completion(message))["output"]
    assert re.fullmatch(r"fc_[0-9a-f]{24}", function["id"])
    assert re.fullmatch(r"ctc_[0-9a-f]{24}", custom["id"])
    assert (function["type"], function["status"]) == ("function_call", "completed")
    assert (custom["type"], custom["status"]) == ("custom_tool_call", "completed")
    assert (function["call_id"], custom["call_id"]) == ("call_a", "call_b")


def test_arguments_that_are_no_string_are_their_json_text() -> None:
    message = calls_message(call("call_a", "shell", {"cmd": "ls"}), call("call_b", "shell", None))
    first, second = answer(completion(message))["output"]
    assert json.loads(first["arguments"]) == {"cmd": "ls"}
    assert second["arguments"] == "{}"


def test_choices_that_are_no_list_give_an_empty_response() -> None:
    raw = orjson.dumps({"id": "chatcmpl-1", "object": "chat.completion", "choices": None})
    response = answer(raw)
    assert (response["status"], response["output"]) == ("completed", [])


def test_an_answer_without_choices_is_an_empty_response_and_an_error_with_choices_is_an_answer() -> (
    None
):
    bare = answer(orjson.dumps({"id": "chatcmpl-1", "object": "chat.completion"}))
    assert (bare["object"], bare["output"]) == ("response", [])
    both = completion({"role": "assistant", "content": "hi"}, "stop", error={"message": "x"})
    (message,) = answer(both)["output"]
    assert message["content"][0]["text"] == "hi"


def test_reasoning_refusal_and_empty_text_items() -> None:
    message = {"role": "assistant", "content": "", "reasoning": "why", "refusal": "no."}
    reasoning, refusal = answer(completion(message, "stop"))["output"]
    assert re.fullmatch(r"rs_[0-9a-f]{24}", reasoning["id"])
    assert reasoning["content"] == [{"type": "reasoning_text", "text": "why"}]
    assert re.fullmatch(r"msg_[0-9a-f]{24}", refusal["id"])
    assert refusal["content"] == [{"type": "refusal", "refusal": "no."}]
    quiet = {"role": "assistant", "content": "", "reasoning_content": "", "refusal": ""}
    assert answer(completion(quiet, "stop"))["output"] == []


def test_reasoning_that_is_no_string_is_no_item() -> None:
    message = {"role": "assistant", "content": "hi", "reasoning_content": {"steps": 1}}
    output = answer(completion(message, "stop"))["output"]
    assert [item["type"] for item in output] == ["message"]


def test_a_choice_without_an_index_is_the_first_choice() -> None:
    choice = {"message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
    raw = orjson.dumps({"id": "chatcmpl-1", "object": "chat.completion", "choices": [choice]})
    (message,) = answer(raw)["output"]
    assert message["content"][0]["text"] == "hi"
