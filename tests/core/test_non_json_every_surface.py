"""SPEC §4's non-JSON rule, one test over every surface and bridge.

Each of the five pairings (Chat Completions, Anthropic Messages, Responses, Responses over
Chat, Anthropic over Chat) is driven through its codec's exchange, as the shell drives it,
with an upstream stream in the upstream's own grammar:

- a data line that is not a JSON object (`42`, `"x"`, `[1]`, `null`, `{x`), with an `event:`
  line naming it, between two text deltas: the client gets a comment carrying its text and
  its `event:` line, in its place (after the first text, before the second), counted and
  noted once;
- a broken line inside an open tool call (invalid UTF-8 in a fragment, a truncated event,
  garbage), in reads cut at every byte: the stream ends with the surface's
  `upstream_stream_error` (Anthropic: its `error` event), and the client never receives the call completed without the
  fragment (no finish, no `.done`, no `message_stop`);
- the same broken line once the call's arguments are complete is a comment: the call
  reaches the client whole.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from proxy.anthropic.codec import ANTHROPIC_CODEC
from proxy.bridge.codecs import BRIDGES
from proxy.chat.codec import CHAT_CODEC
from proxy.core.events import Forward, OpenFollowup, UpstreamBroken
from proxy.core.notes import DeltaRepaired
from proxy.core.rounds import RouteRules
from proxy.core.surface_codec import Exchange, SurfaceCodec
from proxy.responses.codec import RESPONSES_CODEC

JSON = dict[str, Any]
FIRST, SECOND = "Hello", " world"
ARGS_START, ARGS_END = '{"command": "rm -rf build', '/cache-x"}'
SCHEMA = {"type": "object", "properties": {"command": {"type": "string"}}}


def framed(data: JSON | bytes, name: str | None = None) -> bytes:
    head = b"event: " + name.encode() + b"\n" if name else b""
    body = data if isinstance(data, bytes) else orjson.dumps(data)
    return head + b"data: " + body + b"\n\n"


# -- the upstreams' streams, in three grammars ---------------------------------------------------


def chat_chunk(delta: JSON, finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return framed(
        {"id": "c1", "object": "chat.completion.chunk", "model": "m", "choices": [choice]}
    )


def chat_tool(arguments: str, *, header: bool) -> JSON:
    call: JSON = {"index": 0, "function": {"arguments": arguments}}
    if header:
        call = {**call, "id": "call_Ab3De5Gh7Jk9Lm1No3Pq5Rs", "type": "function"}
        call["function"] = {"name": "bash", "arguments": arguments}
    return {"tool_calls": [call]}


def chat_text(bad: bytes, first: str = FIRST, second: str = SECOND) -> list[bytes]:
    return [
        chat_chunk({"role": "assistant", "content": ""}),
        chat_chunk({"content": first}),
        bad,
        chat_chunk({"content": second}),
        chat_chunk({}, "stop"),
        b"data: [DONE]\n\n",
    ]


def chat_call(bad: bytes, *, bad_at: int) -> list[bytes]:
    events = [
        chat_chunk({"role": "assistant", "content": None}),
        chat_chunk(chat_tool(ARGS_START, header=True)),
        chat_chunk(chat_tool(ARGS_END, header=False)),
        chat_chunk({}, "tool_calls"),
        b"data: [DONE]\n\n",
    ]
    events.insert(bad_at, bad)
    return events


def anthropic_event(data: JSON) -> bytes:
    return framed(data, data["type"])


def anthropic_start() -> bytes:
    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": []}
    usage = {"input_tokens": 3, "output_tokens": 1}
    return anthropic_event({"type": "message_start", "message": {**message, "usage": usage}})


def anthropic_delta(delta: JSON) -> bytes:
    return anthropic_event({"type": "content_block_delta", "index": 0, "delta": delta})


def anthropic_end(reason: str) -> list[bytes]:
    delta = {
        "type": "message_delta",
        "delta": {"stop_reason": reason},
        "usage": {"output_tokens": 2},
    }
    return [
        anthropic_event({"type": "content_block_stop", "index": 0}),
        anthropic_event(delta),
        anthropic_event({"type": "message_stop"}),
    ]


def anthropic_text(bad: bytes, first: str = FIRST, second: str = SECOND) -> list[bytes]:
    block = {"type": "text", "text": ""}
    return [
        anthropic_start(),
        anthropic_event({"type": "content_block_start", "index": 0, "content_block": block}),
        anthropic_delta({"type": "text_delta", "text": first}),
        bad,
        anthropic_delta({"type": "text_delta", "text": second}),
        *anthropic_end("end_turn"),
    ]


def anthropic_call(bad: bytes, *, bad_at: int) -> list[bytes]:
    block = {"type": "tool_use", "id": "toolu_01A", "name": "bash", "input": {}}
    events = [
        anthropic_start(),
        anthropic_event({"type": "content_block_start", "index": 0, "content_block": block}),
        anthropic_delta({"type": "input_json_delta", "partial_json": ARGS_START}),
        anthropic_delta({"type": "input_json_delta", "partial_json": ARGS_END}),
        *anthropic_end("tool_use"),
    ]
    events.insert(bad_at, bad)
    return events


def responses_event(kind: str, **fields: Any) -> bytes:
    return framed({"type": kind, **fields}, kind)


def responses_head() -> list[bytes]:
    response = {"id": "resp_1", "object": "response", "created_at": 1, "model": "m"}
    return [
        responses_event("response.created", response={**response, "status": "in_progress"}),
        responses_event("response.in_progress", response={**response, "status": "in_progress"}),
    ]


def responses_completed() -> bytes:
    response = {"id": "resp_1", "object": "response", "created_at": 1, "model": "m"}
    return responses_event("response.completed", response={**response, "status": "completed"})


def responses_text(bad: bytes, first: str = FIRST, second: str = SECOND) -> list[bytes]:
    item = {"type": "message", "id": "msg_1", "role": "assistant", "content": []}
    ref = {"item_id": "msg_1", "output_index": 0, "content_index": 0}
    return [
        *responses_head(),
        responses_event("response.output_item.added", output_index=0, item=item),
        responses_event("response.content_part.added", **ref, part={"type": "output_text"}),
        responses_event("response.output_text.delta", **ref, delta=first),
        bad,
        responses_event("response.output_text.delta", **ref, delta=second),
        responses_event("response.output_text.done", **ref, text=first + second),
        responses_completed(),
    ]


def responses_call(bad: bytes, *, bad_at: int) -> list[bytes]:
    item = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "bash"}
    ref = {"item_id": "fc_1", "output_index": 0}
    whole = ARGS_START + ARGS_END
    done_item = {**item, "arguments": whole, "status": "completed"}
    events = [
        *responses_head(),
        responses_event("response.output_item.added", output_index=0, item=item),
        responses_event("response.function_call_arguments.delta", **ref, delta=ARGS_START),
        responses_event("response.function_call_arguments.delta", **ref, delta=ARGS_END),
        responses_event("response.function_call_arguments.done", **ref, arguments=whole),
        responses_event("response.output_item.done", output_index=0, item=done_item),
        responses_completed(),
    ]
    events.insert(bad_at, bad)
    return events


# -- the five pairings ----------------------------------------------------------------------------


def chat_request() -> JSON:
    tool = {"type": "function", "function": {"name": "bash", "parameters": SCHEMA}}
    return {"model": "m", "messages": [{"role": "user", "content": "go"}], "tools": [tool]}


def anthropic_request() -> JSON:
    tool = {"name": "bash", "input_schema": SCHEMA}
    messages = [{"role": "user", "content": "go"}]
    return {"model": "m", "max_tokens": 100, "messages": messages, "tools": [tool]}


def responses_request() -> JSON:
    return {
        "model": "m",
        "input": "go",
        "tools": [{"type": "function", "name": "bash", "parameters": SCHEMA}],
    }


Stream = Callable[..., list[bytes]]
# name -> (codec, request, text stream, call stream, where the call's arguments are open,
# where they are complete: the indexes at which the bad line is inserted)
PAIRINGS: dict[str, tuple[SurfaceCodec, JSON, Stream, Stream, int, int]] = {
    "chat": (CHAT_CODEC, chat_request(), chat_text, chat_call, 2, 3),
    "anthropic": (ANTHROPIC_CODEC, anthropic_request(), anthropic_text, anthropic_call, 3, 4),
    "responses": (RESPONSES_CODEC, responses_request(), responses_text, responses_call, 4, 5),
    "responses over chat": (
        BRIDGES[("responses", "chat_completions")],
        responses_request(),
        chat_text,
        chat_call,
        2,
        3,
    ),
    "anthropic over chat": (
        BRIDGES[("anthropic_messages", "chat_completions")],
        anthropic_request(),
        chat_text,
        chat_call,
        2,
        3,
    ),
}


def entropy_source() -> Callable[[int], bytes]:
    counter = itertools.count(1)
    return lambda n: next(counter).to_bytes(8, "big")[-n:].rjust(n, b"\x01")


def exchange_for(pairing: str) -> Exchange:
    codec, request = PAIRINGS[pairing][:2]
    raw = orjson.dumps({**request, "stream": True})
    return codec.new_exchange(codec.parse_body(raw), raw, RouteRules(), entropy_source())


def client_bytes(pairing: str, reads: list[bytes]) -> tuple[bytes, Exchange, bool]:
    """What the client receives for the upstream's `reads`, the exchange, and whether the
    stream ended broken (the shell writes the exchange's `stream_error` then)."""
    exchange = exchange_for(pairing)
    exchange.begin_round(stream=True)
    out = bytearray()
    events: list[Any] = []
    for read in reads:
        events = exchange.feed(read)
        if not all(type(event) is bytes for event in events):
            break
        out += b"".join(events)
    else:
        events = exchange.end()
    broken = False
    for event in events:
        if type(event) is bytes:
            out += event
        elif isinstance(event, Forward):
            out += event.data
        elif isinstance(event, UpstreamBroken):
            out += exchange.stream_error(event.error)
            broken = True
        else:
            assert not isinstance(event, OpenFollowup), "no replay here"
            raise AssertionError(event)
    return bytes(out), exchange, broken


# -- a line that is not a JSON object, outside any call -------------------------------------------

NOT_OBJECTS = [b"42", b'"x"', b"[1]", b"null", b"{x"]


@pytest.mark.parametrize("line", NOT_OBJECTS, ids=lambda line: line.decode())
@pytest.mark.parametrize("pairing", sorted(PAIRINGS))
def test_a_line_that_is_not_a_json_object_is_a_comment_in_its_place(
    pairing: str, line: bytes
) -> None:
    stream = PAIRINGS[pairing][2](b"event: odd\ndata: " + line + b"\n\n")
    out, exchange, broken = client_bytes(pairing, [b"".join(stream)])
    assert not broken
    comment = b": event: odd\n: " + line + b"\n\n"
    assert out.count(comment) == 1, out
    at = out.index(comment)
    assert 0 <= out.find(FIRST.encode()) < at < out.find(SECOND.strip().encode())
    assert b"data: " + line + b"\n" not in out, "never forwarded as an event"
    notes, count = exchange.report()
    assert count == 1
    assert [n for n in notes if isinstance(n, DeltaRepaired) and n.kind == "non_json_data"]


# -- a broken line inside an open call --------------------------------------------------------------

BROKEN_LINES = {
    "invalid utf-8": b'data: {"x": "/cache-\xff"}\n\n',
    "truncated": b'data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"fun\n\n',
    "garbage": b"data: \x00garbage\n\n",
}
COMPLETIONS = [b"[DONE]", b'"finish_reason":"tool_calls"', b"message_stop", b"response.completed"]


@pytest.mark.parametrize("bad", sorted(BROKEN_LINES))
@pytest.mark.parametrize("pairing", sorted(PAIRINGS))
def test_a_broken_line_inside_an_open_call_ends_the_stream(pairing: str, bad: str) -> None:
    open_at = PAIRINGS[pairing][4]
    body = b"".join(PAIRINGS[pairing][3](BROKEN_LINES[bad], bad_at=open_at))
    whole, exchange, broken = client_bytes(pairing, [body])
    assert broken
    last = whole[: -len(b"\n\n")].rsplit(b"\n\n", 1)[-1]
    assert b"may have carried part of the call" in last
    # the surface's own error: its code on Chat and Responses, Anthropic's `error` event
    assert b"upstream_stream_error" in last or last.startswith(b"event: error\n")
    for marker in COMPLETIONS:
        assert marker not in whole, marker
    assert b"cache-x" not in whole, "nothing after the broken line reaches the client"
    assert exchange.report()[1] == 0, "not counted as a comment"
    for at in range(1, len(body)):
        assert client_bytes(pairing, [body[:at], body[at:]])[0] == whole, at


@pytest.mark.parametrize("pairing", sorted(PAIRINGS))
def test_a_broken_line_after_the_arguments_completed_is_a_comment(pairing: str) -> None:
    complete_at = PAIRINGS[pairing][5]
    body = b"".join(PAIRINGS[pairing][3](BROKEN_LINES["garbage"], bad_at=complete_at))
    out, exchange, broken = client_bytes(pairing, [body])
    assert not broken
    assert b": \x00garbage\n" in out
    assert b"cache-x" in out, "the call reaches the client whole"
    assert exchange.report()[1] == 1


# The client's first event, as the upstream's first event becomes it. A bridge writes its
# client's first events itself, with the first content (the upstream's role chunk has no
# counterpart): a comment before that content goes out before them, as a keep-alive does.
FIRST_EVENT_MARKS = {
    "chat": b'"role":"assistant"',
    "anthropic": b"event: message_start\n",
    "responses": b"event: response.created\n",
    "responses over chat": b"",
    "anthropic over chat": b"",
}


@pytest.mark.parametrize("pairing", sorted(PAIRINGS))
def test_a_comment_is_never_moved_ahead_of_a_held_first_event(pairing: str) -> None:
    """The first events wait for something visible (SPEC §5: the head); a line that is not
    JSON right after them waits with them and leaves behind them, in every read cut."""
    stream = PAIRINGS[pairing][2](b"data: 42\n\n")
    stream.insert(1, stream.pop(stream.index(b"data: 42\n\n")))  # right after the first
    body = b"".join(stream)
    for at in range(len(body) + 1):
        out = client_bytes(pairing, [body[:at], body[at:]] if at else [body])[0]
        comment = out.index(b": 42\n\n")
        assert out.index(FIRST_EVENT_MARKS[pairing]) <= comment < out.index(FIRST.encode())


# Leaked markup the text-call scanner holds: a whole message that is one JSON call, and a
# Hermes block. A line lost inside either would change the call it becomes.
LEAKED = {
    "whole message": ('{"name": "bash", "arguments": {"command": "rm -rf build', '/cache-x"}}'),
    "hermes block": (
        'Sure. <tool_call>{"name": "bash", "arguments": {"command": "rm -rf build',
        '/cache-x"}}</tool_call>',
    ),
}


@pytest.mark.parametrize("leak", sorted(LEAKED))
@pytest.mark.parametrize("pairing", sorted(PAIRINGS))
def test_a_broken_line_inside_leaked_markup_ends_the_stream(pairing: str, leak: str) -> None:
    first, second = LEAKED[leak]
    body = b"".join(PAIRINGS[pairing][2](BROKEN_LINES["truncated"], first, second))
    out, exchange, broken = client_bytes(pairing, [body])
    assert broken
    assert b"cache-x" not in out and b"rm -rf build" not in out, "the held markup stays held"
    assert exchange.report()[1] == 0
