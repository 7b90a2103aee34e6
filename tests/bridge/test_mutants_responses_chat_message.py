"""SPEC §9: a whole Chat answer as a Responses object: only the choice with index 0 becomes
the response, wherever it stands, and a call the upstream left unnamed keeps an empty name
(the mutation audit found these unpinned)."""

from __future__ import annotations

import json
from typing import Any

from tests.bridge.responses_chat.wire import body, run

JSON = dict[str, Any]


def output_of(choices: list[JSON]) -> list[JSON]:
    completion = {"id": "c", "object": "chat.completion", "created": 1, "model": "m"}
    answer = json.dumps({**completion, "choices": choices}).encode()
    result = run(body(stream=False), [[answer]], stream=False)
    items: list[JSON] = json.loads(result.client)["output"]
    return items


def test_the_choice_with_index_0_is_the_response_wherever_it_stands() -> None:
    def choice(index: int, content: str) -> JSON:
        message = {"role": "assistant", "content": content}
        return {"index": index, "message": message, "finish_reason": "stop"}

    items = output_of([choice(1, "B"), choice(0, "A")])
    assert [(i["type"], i["content"][0]["text"]) for i in items] == [("message", "A")]


def test_a_call_without_a_name_keeps_an_empty_name() -> None:
    call = {"id": "call_x", "type": "function", "function": {"arguments": "{}"}}
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    items = output_of([{"index": 0, "message": message, "finish_reason": "tool_calls"}])
    assert [(i["type"], i["call_id"], i["name"]) for i in items] == [
        ("function_call", "call_x", "")
    ]
