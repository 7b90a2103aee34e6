"""SPEC §9: the Responses request's fields the bridge maps, skips or names, at the edges the
mutation audit found unpinned: a call left without output refused with its whole message
and code, unset values among set ones, a `json_object` format, fields that ask for
nothing, and `include` values of every shape."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.bridge.responses_chat import responses_to_chat
from proxy.core.errors import ClientRequestError
from tests.bridge.responses_chat.wire import body, call, user

JSON = dict[str, Any]


def test_a_call_without_output_is_refused_with_the_whole_message_and_code() -> None:
    with pytest.raises(ClientRequestError) as raised:
        responses_to_chat(body(user("q"), call("c1")))
    assert raised.value.message == (
        "No tool output found for function call 'c1'. "
        "Every call in `input` needs its output right after the call's turn."
    )
    assert raised.value.code == "invalid_tool_output"


def test_unset_values_among_set_ones_skip_only_themselves() -> None:
    chat, dropped = responses_to_chat(
        body(
            reasoning={"summary": None, "effort": "high", "generate_summary": "auto"},
            text={"verbosity": None, "format": {"type": "json_object"}, "extra": 1},
        )
    )
    assert chat["reasoning_effort"] == "high"
    assert chat["response_format"] == {"type": "json_object"}
    assert dropped == ("reasoning.generate_summary", "text.extra")


def named(**fields: Any) -> tuple[str, ...]:
    request = body()
    request.update(fields)
    return responses_to_chat(request)[1]


def test_fields_that_ask_for_nothing_are_not_named_and_the_rest_are() -> None:
    assert named(
        background=False,
        truncation="disabled",
        stream_options={"include_obfuscation": False},
        odd=1,
    ) == ("odd",)
    assert named(truncation="auto") == ("truncation",)


@pytest.mark.parametrize(
    ("include", "dropped"),
    [
        ("file_search_call.results", ("include:file_search_call.results",)),
        (
            ["file_search_call.results", 5, {"x": 1}],
            ("include:file_search_call.results", "include"),
        ),
    ],
    ids=["one-string", "a-list-of-anything"],
)
def test_include_values_are_named_one_by_one(include: object, dropped: tuple[str, ...]) -> None:
    assert named(include=include) == dropped


@pytest.mark.parametrize(
    ("instructions", "system"),
    [
        ([{"type": "message", "role": "developer", "content": "Be brief."}], ["Be brief."]),
        ({"text": "not a prompt"}, []),
        ("", []),
    ],
    ids=["items", "object", "empty"],
)
def test_instructions_as_items_or_nothing(instructions: object, system: list[str]) -> None:
    chat, _ = responses_to_chat(body(user("q"), instructions=instructions))
    said = [m["content"] for m in chat["messages"] if m["role"] == "system"]
    assert said == system
    assert chat["messages"][-1] == {"role": "user", "content": "q"}


def test_input_that_is_no_string_or_list_is_refused() -> None:
    request = body()
    request["input"] = 5
    with pytest.raises(ClientRequestError) as raised:
        responses_to_chat(request)
    assert raised.value.message == "'input' must be a string or a list of items"
    assert raised.value.code == "invalid_input"


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"background": True}, "background"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "item_reference"),
    ],
    ids=["background", "item-reference"],
)
def test_a_request_that_needs_stored_state_is_refused_naming_it(fields: JSON, named: str) -> None:
    request = body()
    request.update(fields)
    with pytest.raises(ClientRequestError) as raised:
        responses_to_chat(request)
    assert raised.value.message == (
        f"This endpoint keeps no stored responses, so `{named}` cannot be served: "
        "send the whole conversation in `input` with `store: false` instead."
    )
