"""SPEC §4, last paragraph: non-streaming responses get the same rules on
`choices[].message.tool_calls` (and a missing `type` becomes "function")."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from proxy.chat.message import sanitize_completion
from tests.chat.helpers import USER, Setup, assistant, hcall, minted, request, tool_msg

NATIVE = "call_Ab3De5Gh7Jk9Lm1No3Pq5Rs"


def completion(*messages: dict[str, Any], finish: Any = "tool_calls") -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {"index": i, "message": m, "finish_reason": finish} for i, m in enumerate(messages)
        ],
    }


def msg(*tool_calls: Any, content: str | None = None) -> dict[str, Any]:
    m: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        m["tool_calls"] = list(tool_calls)
    return m


def sanitize(body: dict[str, Any], setup: Setup | None = None) -> Any:
    return sanitize_completion(body, (setup or Setup()).ids())


def summary(body: dict[str, Any], choice: int = 0) -> list[tuple[Any, ...]]:
    message = body["choices"][choice]["message"]
    return [
        (c["id"], c["type"], c["function"]["name"], c["function"]["arguments"])
        for c in message.get("tool_calls") or ()
    ]


def test_ids_follow_section_2() -> None:
    body = completion(
        msg(
            hcall(NATIVE, "a", "{}"),
            hcall("functions.b:1", "b", "{}"),
            hcall(7, "c", "{}"),
            hcall(365174485, "d", "{}"),
            {"type": "function", "function": {"name": "e", "arguments": "{}"}},
            hcall("null", "f", "{}"),
            hcall("chatcmpl-tool-" + "a" * 32, "g", "{}"),
        )
    )
    result = sanitize(body)
    assert [c[0] for c in summary(result.body)] == [
        NATIVE,
        minted(1, 1),
        minted(1, 2),
        "365174485",
        minted(1, 4),
        minted(1, 5),
        minted(1, 6),
    ]
    assert result.changed


def test_missing_or_null_type_becomes_function_and_arguments_become_strings() -> None:
    body = completion(
        msg(
            {"id": NATIVE, "function": {"name": "a", "arguments": {"x": 1}}},
            {"id": "aB3dE5gH9", "type": None, "function": {"name": "b", "arguments": ""}},
            {"id": "bB3dE5gH9", "function": {"name": "c", "arguments": None}},
            {"id": "cB3dE5gH9", "function": {"name": "d"}},
        )
    )
    assert summary(sanitize(body).body) == [
        (NATIVE, "function", "a", '{"x":1}'),
        ("aB3dE5gH9", "function", "b", "{}"),
        ("bB3dE5gH9", "function", "c", "{}"),
        ("cB3dE5gH9", "function", "d", "{}"),
    ]


def test_same_raw_id_same_arguments_is_delivered_once() -> None:
    body = completion(
        msg(hcall("grep:3", "grep", '{"q":1}'), hcall("grep:3", "grep", '{ "q": 1 }'))
    )
    assert summary(sanitize(body).body) == [(minted(1, 0), "function", "grep", '{"q":1}')]


def test_same_raw_id_different_arguments_both_with_distinct_ids() -> None:
    body = completion(msg(hcall(NATIVE, "grep", '{"q":1}'), hcall(NATIVE, "grep", '{"q":2}')))
    assert summary(sanitize(body).body) == [
        (NATIVE, "function", "grep", '{"q":1}'),
        (minted(1, 1), "function", "grep", '{"q":2}'),
    ]


def test_finish_reason_is_made_truthful() -> None:
    with_calls = sanitize(completion(msg(hcall(NATIVE, "f")), finish="stop")).body
    assert with_calls["choices"][0]["finish_reason"] == "tool_calls"
    without = sanitize(completion(msg(content="hi"), finish="tool_calls")).body
    assert without["choices"][0]["finish_reason"] == "stop"
    empty = sanitize(completion(msg(hcall(NATIVE, "f")), finish="")).body
    assert empty["choices"][0]["finish_reason"] == "tool_calls"
    length = sanitize(completion(msg(hcall(NATIVE, "f")), finish="length")).body
    assert length["choices"][0]["finish_reason"] == "length"


def test_empty_tool_calls_list_is_removed() -> None:
    body = completion(msg(content="hi"), finish="stop")
    body["choices"][0]["message"]["tool_calls"] = []
    result = sanitize(body)
    assert "tool_calls" not in result.body["choices"][0]["message"]
    assert result.body["choices"][0]["finish_reason"] == "stop"


def test_message_without_calls_is_unchanged() -> None:
    body = completion(msg(content="hello"), finish="stop")
    before = copy.deepcopy(body)
    result = sanitize(body)
    assert not result.changed
    assert result.body == before


def test_other_fields_of_calls_and_messages_are_kept() -> None:
    call = {**hcall(NATIVE, "f", "{}"), "extra": 1}
    message = {**msg(call, content="x"), "reasoning_content": "why", "refusal": None}
    body = completion(message)
    body["system_fingerprint"] = "fp"
    out = sanitize(body).body
    assert out["system_fingerprint"] == "fp"
    assert out["choices"][0]["message"]["reasoning_content"] == "why"
    assert out["choices"][0]["message"]["tool_calls"][0]["extra"] == 1


def test_choices_are_independent_and_idx_is_per_choice() -> None:
    body = completion(msg(hcall("call_0", "f")), msg(hcall("call_0", "g"), hcall("call_1", "h")))
    setup = Setup(body=request(n=2), hex_values=("aaaa", "bbbb"))
    out = sanitize(body, setup).body
    assert [c[0] for c in summary(out, 0)] == [minted(1, 0, hex4="aaaa")]
    assert [c[0] for c in summary(out, 1)] == [minted(1, 0, hex4="bbbb"), minted(1, 1, hex4="bbbb")]


def test_turn_comes_from_the_history() -> None:
    history = request([USER, assistant(hcall("x1", "f")), tool_msg("x1"), {"role": "user"}])
    out = sanitize(completion(msg(hcall("call_0", "f"))), Setup(body=history)).body
    assert summary(out)[0][0] == minted(2, 0, "call_0")


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"choices": None},
        {"choices": "x"},
        {"choices": [None, 1, {"message": None}, {"message": {"tool_calls": "x"}}]},
        {"choices": [{"message": {"tool_calls": [None, 1, {"function": "x"}, {"id": []}]}}]},
        {"choices": [{"index": "0", "message": {"tool_calls": {"id": "a", "function": {}}}}]},
    ],
)
def test_odd_bodies_do_not_raise(body: dict[str, Any]) -> None:
    sanitize(body)
