"""SPEC §9: a Responses message's content and a call's output as Chat content, at the edges
the mutation audit found unpinned: content that is neither a string nor a list, parts that
are not objects, an output that is no string or list, and an output part of an unknown
type before a text part."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.bridge.responses_chat import responses_to_chat
from tests.bridge.responses_chat.wire import body, call, output, user

JSON = dict[str, Any]


def upstream_messages(*items: JSON) -> tuple[list[JSON], tuple[str, ...]]:
    chat, dropped = responses_to_chat(body(*items))
    messages: list[JSON] = chat["messages"]
    return messages, dropped


@pytest.mark.parametrize("content", [None, 5], ids=["null", "number"])
def test_message_content_that_is_no_string_or_list_is_empty(content: object) -> None:
    messages, _ = upstream_messages({"type": "message", "role": "user", "content": content})
    assert messages == [{"role": "user", "content": ""}]


def test_parts_that_are_not_objects_are_left_out() -> None:
    parts = ["stray", {"type": "input_text", "text": "hi"}, 7]
    messages, _ = upstream_messages({"type": "message", "role": "user", "content": parts})
    assert messages == [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("result", "content"),
    [(None, ""), ({"ok": True}, '{"ok":true}'), (5, "5")],
    ids=["null", "object", "number"],
)
def test_an_output_that_is_no_string_or_list(result: object, content: str) -> None:
    answer = {"type": "function_call_output", "call_id": "call_1", "output": result}
    messages, _ = upstream_messages(user("q"), call("call_1"), answer)
    assert messages[-1] == {"role": "tool", "tool_call_id": "call_1", "content": content}


def test_an_output_part_of_unknown_type_is_named_and_the_text_after_it_kept() -> None:
    parts = ["stray", {"type": "weird"}, {"type": "input_text", "text": "after"}]
    answer = output("call_1", text="")
    answer["output"] = parts
    messages, dropped = upstream_messages(user("q"), call("call_1"), answer)
    assert messages[-1] == {"role": "tool", "tool_call_id": "call_1", "content": "after"}
    assert dropped == ("weird",)
