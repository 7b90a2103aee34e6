"""SPEC §9: Responses `input` items as a Chat history, at the edges the mutation audit found
unpinned: an item without a type, unknown items and roles, calls with odd names, inputs and
arguments, a call id missing or empty, one turn made of several messages and reasoning
items, and an output for no call among others."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.bridge.responses_chat import responses_to_chat
from proxy.bridge.responses_chat.reasoning import seal
from proxy.core.errors import ClientRequestError
from tests.bridge.responses_chat.wire import body, call, output, user

JSON = dict[str, Any]


def history(*items: JSON) -> tuple[list[JSON], tuple[str, ...]]:
    chat, dropped = responses_to_chat(body(*items))
    messages: list[JSON] = chat["messages"]
    return messages, dropped


def test_an_item_without_a_type_is_a_message_and_an_unknown_role_a_user() -> None:
    messages, dropped = history(
        {"role": "user", "content": "hi"},
        {"type": "message", "role": "critic", "content": "hm"},
        {"type": "web_search_call", "id": "ws_1"},
    )
    assert messages == [{"role": "user", "content": "hi"}, {"role": "user", "content": "hm"}]
    assert dropped == ("web_search_call",)


def assistant_of(*items: JSON) -> JSON:
    answers = [output(item["call_id"]) for item in items if "call_id" in item]
    messages, _ = history(user("q"), *items, *answers)
    return messages[1]


def test_one_turn_of_several_messages_and_reasoning_items() -> None:
    said = {"type": "message", "role": "assistant", "content": "A"}
    again = {"type": "message", "role": "assistant", "content": "B"}
    thought = {"type": "reasoning", "summary": [], "encrypted_content": seal("R1")}
    more = {"type": "reasoning", "summary": [], "encrypted_content": seal("R2")}
    assert assistant_of(thought, said, more, again) == {
        "role": "assistant",
        "content": "AB",
        "reasoning_content": "R1R2",
    }


@pytest.mark.parametrize(
    ("item", "name", "arguments"),
    [
        (call("c1", name="shell"), "shell", '{"cmd":"ls"}'),
        ({**call("c1"), "name": 5}, "", '{"cmd":"ls"}'),
        ({**call("c1"), "arguments": {"cmd": "pwd"}}, "shell", '{"cmd":"pwd"}'),
        ({**call("c1"), "arguments": None}, "shell", "{}"),
        (
            {"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": 5},
            "apply_patch",
            '{"input":""}',
        ),
    ],
    ids=[
        "as-sent",
        "name-not-a-string",
        "arguments-object",
        "arguments-null",
        "input-not-a-string",
    ],
)
def test_a_calls_name_and_arguments_upstream(item: JSON, name: str, arguments: str) -> None:
    assert assistant_of(item)["tool_calls"] == [
        {"id": "c1", "type": "function", "function": {"name": name, "arguments": arguments}}
    ]


@pytest.mark.parametrize("call_id", [None, ""], ids=["missing", "empty"])
@pytest.mark.parametrize("kind", ["function_call", "function_call_output"])
def test_a_call_or_output_without_a_call_id_is_refused(kind: str, call_id: object) -> None:
    item = call("c1") if kind == "function_call" else output("c1")
    item["call_id"] = call_id
    with pytest.raises(ClientRequestError) as raised:
        history(user("q"), item)
    assert raised.value.message == f"every {kind} item needs a `call_id` string"
    assert raised.value.code == "invalid_call_id"


def test_an_output_for_no_call_among_others_is_refused_in_the_clients_words() -> None:
    with pytest.raises(ClientRequestError) as raised:
        history(user("q"), call("c1"), output("c1"), output("c9"))
    assert raised.value.message.startswith(
        "No tool call found for function call output with call_id 'c9'."
    )


def test_a_second_output_for_one_call_is_refused_in_the_clients_words() -> None:
    with pytest.raises(ClientRequestError) as raised:
        history(user("q"), call("c1"), output("c1"), output("c1", text="again"))
    assert raised.value.message.startswith(
        "No tool call found for function call output with call_id 'c1'."
    )
