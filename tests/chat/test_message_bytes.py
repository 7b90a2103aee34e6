"""A non-streaming answer with nothing to decide goes out as it came, decided on its bytes
(`holds_no_call`); every answer the full check would change must still reach it."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.chat.exchange import ChatExchange
from proxy.chat.message import holds_no_call
from proxy.core.events import Forward
from proxy.core.rounds import RouteRules

USER = {"role": "user", "content": "hi"}
TOOLS = [{"type": "function", "function": {"name": "read_file", "parameters": {}}}]


def answer(request: dict[str, Any], raw: bytes, rules: RouteRules | None = None) -> bytes:
    """What the client gets for the upstream's `raw` answer to `request`."""
    exchange = ChatExchange(
        request, orjson.dumps(request), rules or RouteRules(), entropy=lambda n: b"\xde\xad" * n
    )
    exchange.begin_round(stream=False)
    assert exchange.feed(raw) == []
    events = exchange.end()
    assert len(events) == 1 and isinstance(events[0], Forward) and events[0].last
    return events[0].data


def completion(message: str, finish: str = "stop") -> bytes:
    return (
        b'{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,'
        b'"message":%s,"finish_reason":"%s"}]}' % (message.encode(), finish.encode())
    )


def test_a_plain_answer_goes_out_byte_for_byte() -> None:
    raw = completion('{"role":"assistant","content":"Hello  there."}')
    assert holds_no_call(raw)
    assert answer({"messages": [USER]}, raw) == raw


def test_an_escaped_tool_calls_finish_is_still_made_truthful() -> None:
    # `tool\u005fcalls` is `tool_calls` once parsed: no call came, so the finish is `stop`.
    raw = completion('{"role":"assistant","content":"done"}', finish="tool\\u005fcalls")
    out = orjson.loads(answer({"messages": [USER]}, raw))
    assert out["choices"][0]["finish_reason"] == "stop"


def test_an_escaped_tool_calls_key_still_gets_client_ids() -> None:
    call = '{"id":"functions.read_file:0","type":"function","function":{"name":"read_file","arguments":"{}"}}'
    raw = completion(
        '{"role":"assistant","content":null,"tool\\u005fcalls":[' + call + "]}", finish="stop"
    )
    no_markup = RouteRules(text_tool_calls=False)  # the bytes alone decide this answer
    out = orjson.loads(answer({"messages": [USER], "tools": TOOLS}, raw, no_markup))
    (delivered,) = out["choices"][0]["message"]["tool_calls"]
    assert delivered["id"] != "functions.read_file:0"
    assert delivered["function"]["name"] == "read_file"
    assert out["choices"][0]["finish_reason"] == "tool_calls"


def test_markup_in_the_content_is_still_recovered_when_tools_are_offered() -> None:
    content = '<tool_call>{\\"name\\": \\"read_file\\", \\"arguments\\": {}}</tool_call>'
    raw = completion('{"role":"assistant","content":"' + content + '"}')
    assert holds_no_call(raw)  # the bytes alone do not decide this one: the route's rule does
    out = orjson.loads(answer({"messages": [USER], "tools": TOOLS}, raw))
    choice = out["choices"][0]
    assert choice["message"]["tool_calls"][0]["function"]["name"] == "read_file"
    assert choice["finish_reason"] == "tool_calls"
    # With recovery off for the route, the same answer is left as it came.
    off = RouteRules(text_tool_calls=False)
    assert answer({"messages": [USER], "tools": TOOLS}, raw, off) == raw


@pytest.mark.parametrize(
    "raw",
    [
        completion('{"role":"assistant","content":"say tool_calls"}'),
        completion('{"role":"assistant","content":"caf\\u00e9"}'),
        b"not json at all",
        b"[1, 2]",
    ],
)
def test_answers_the_full_check_leaves_alone_are_unchanged_either_way(raw: bytes) -> None:
    assert answer({"messages": [USER]}, raw) == raw
