"""SPEC §6, issue #52 finding 9: one call's arguments and the calls of one response are
bounded (proxy/core/bounds.py), checked as they arrive.

Over every surface and bridge (driven through its codec's exchange, as the shell drives it):
- a call whose arguments go past `CALL_ARGUMENTS_LIMIT` (in 1 MiB fragments) ends the
  client's stream with the surface's `upstream_stream_error`, and the call never completes:
  no finish, no `.done`, no `message_stop`;
- a response with more than `CALLS_LIMIT` calls ends the same way, at the call past it;
- arguments up to the bound, and calls up to it, pass (the bound is not off by one);
- a call held as a possible replay (its raw id is an answered call's) never holds more than
  the bound plus the event that crossed it: 300 MiB of arguments took the proxy's memory to
  1.5 GiB and would have reached the client as one 300 MiB event.
"""

from __future__ import annotations

import tracemalloc
from typing import Any

import orjson
import pytest

from proxy.chat.codec import CHAT_CODEC
from proxy.core.bounds import CALL_ARGUMENTS_LIMIT, CALLS_LIMIT
from proxy.core.events import UpstreamBroken
from proxy.core.rounds import RouteRules
from tests.core.test_non_json_every_surface import (
    COMPLETIONS,
    PAIRINGS,
    anthropic_end,
    anthropic_event,
    anthropic_start,
    chat_chunk,
    client_bytes,
    entropy_source,
    responses_completed,
    responses_event,
    responses_head,
)

MIB = 1024 * 1024
TAIL = b'"\\"}"'  # the arguments' last fragment, `"}`, as a JSON string in an event
JSON = dict[str, Any]
SURFACE = {
    "chat": "chat",
    "anthropic": "anthropic",
    "responses": "responses",
    "responses over chat": "chat",
    "anthropic over chat": "chat",
}


def fragments(total: int) -> list[str]:
    """Arguments of `total` characters: `{"content": "xxx..."}` in 1 MiB pieces."""
    head, tail = '{"content": "', '"}'
    body = total - len(head) - len(tail)
    pieces = [head] + ["x" * MIB] * (body // MIB) + ["x" * (body % MIB), tail]
    assert sum(map(len, pieces)) == total
    return [piece for piece in pieces if piece]


def chat_call_stream(
    pieces: list[str], raw_id: str = "call_Ab3De5Gh7Jk9Lm1No3Pq5Rs"
) -> list[bytes]:
    header = {
        "index": 0,
        "id": raw_id,
        "type": "function",
        "function": {"name": "bash", "arguments": ""},
    }
    events = [
        chat_chunk({"role": "assistant", "content": None}),
        chat_chunk({"tool_calls": [header]}),
    ]
    for piece in pieces:
        events.append(chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}))
    return [*events, chat_chunk({}, "tool_calls"), b"data: [DONE]\n\n"]


def anthropic_call_stream(pieces: list[str]) -> list[bytes]:
    block = {"type": "tool_use", "id": "toolu_01A", "name": "bash", "input": {}}
    events = [
        anthropic_start(),
        anthropic_event({"type": "content_block_start", "index": 0, "content_block": block}),
    ]
    for piece in pieces:
        delta = {"type": "input_json_delta", "partial_json": piece}
        events.append(anthropic_event({"type": "content_block_delta", "index": 0, "delta": delta}))
    return [*events, *anthropic_end("tool_use")]


def responses_call_stream(pieces: list[str]) -> list[bytes]:
    item = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "bash"}
    ref = {"item_id": "fc_1", "output_index": 0}
    events = [
        *responses_head(),
        responses_event("response.output_item.added", output_index=0, item=item),
    ]
    for piece in pieces:
        events.append(responses_event("response.function_call_arguments.delta", **ref, delta=piece))
    whole = "".join(pieces)
    events.append(responses_event("response.function_call_arguments.done", **ref, arguments=whole))
    done = {**item, "arguments": whole, "status": "completed"}
    return [
        *events,
        responses_event("response.output_item.done", output_index=0, item=done),
        responses_completed(),
    ]


def chat_many_calls(n: int) -> list[bytes]:
    events = [chat_chunk({"role": "assistant", "content": None})]
    for i in range(n):
        call = {"index": i, "id": f"call_{i:08d}x", "type": "function"}
        events.append(
            chat_chunk({"tool_calls": [{**call, "function": {"name": "bash", "arguments": "{}"}}]})
        )
    return [*events, chat_chunk({}, "tool_calls"), b"data: [DONE]\n\n"]


def anthropic_many_calls(n: int) -> list[bytes]:
    events = [anthropic_start()]
    for i in range(n):
        block = {"type": "tool_use", "id": f"toolu_{i:08d}x", "name": "bash", "input": {}}
        events.append(
            anthropic_event({"type": "content_block_start", "index": i, "content_block": block})
        )
        events.append(anthropic_event({"type": "content_block_stop", "index": i}))
    return [*events, *anthropic_end("tool_use")[1:]]


def responses_many_calls(n: int) -> list[bytes]:
    events = responses_head()
    for i in range(n):
        item = {
            "type": "function_call",
            "id": f"fc_{i}",
            "call_id": f"call_{i:08d}x",
            "name": "bash",
        }
        done = {**item, "arguments": "{}", "status": "completed"}
        events.append(responses_event("response.output_item.added", output_index=i, item=item))
        events.append(responses_event("response.output_item.done", output_index=i, item=done))
    return [*events, responses_completed()]


CALL_STREAMS = {
    "chat": chat_call_stream,
    "anthropic": anthropic_call_stream,
    "responses": responses_call_stream,
}
MANY_CALLS = {
    "chat": chat_many_calls,
    "anthropic": anthropic_many_calls,
    "responses": responses_many_calls,
}


def ended_with_stream_error(out: bytes) -> bytes:
    last = out[: -len(b"\n\n")].rsplit(b"\n\n", 1)[-1]
    # the surface's own error: its code on Chat and Responses, Anthropic's `error` event
    assert b"upstream_stream_error" in last or last.startswith(b"event: error\n"), last[-300:]
    for marker in COMPLETIONS:
        assert marker not in out, marker
    return last


@pytest.mark.parametrize("pairing", sorted(PAIRINGS))
def test_a_call_past_the_arguments_bound_ends_the_stream(pairing: str) -> None:
    reads = CALL_STREAMS[SURFACE[pairing]](fragments(CALL_ARGUMENTS_LIMIT + 1))
    out, _, broken = client_bytes(pairing, [b"".join(reads)])
    assert broken
    last = ended_with_stream_error(out)
    assert b"exceed" in last and str(CALL_ARGUMENTS_LIMIT).encode() in last
    assert TAIL not in out, "the rest of the call never reaches the client"


@pytest.mark.parametrize("pairing", sorted(PAIRINGS))
def test_a_call_at_the_arguments_bound_passes(pairing: str) -> None:
    reads = CALL_STREAMS[SURFACE[pairing]](fragments(CALL_ARGUMENTS_LIMIT))
    out, _, broken = client_bytes(pairing, reads)
    assert not broken
    assert TAIL in out


@pytest.mark.parametrize("pairing", sorted(PAIRINGS))
def test_calls_past_the_bound_of_one_response_end_the_stream(pairing: str) -> None:
    reads = MANY_CALLS[SURFACE[pairing]](CALLS_LIMIT + 1)
    out, _, broken = client_bytes(pairing, [b"".join(reads)])
    assert broken
    assert str(CALLS_LIMIT).encode() + b" tool calls" in ended_with_stream_error(out)
    assert (
        f"call_{CALLS_LIMIT:08d}x".encode() not in out
        and f"toolu_{CALLS_LIMIT:08d}x".encode() not in out
    )


@pytest.mark.parametrize("pairing", sorted(PAIRINGS))
def test_calls_up_to_the_bound_pass(pairing: str) -> None:
    reads = MANY_CALLS[SURFACE[pairing]](CALLS_LIMIT)
    assert not client_bytes(pairing, [b"".join(reads)])[2]


def test_a_held_call_holds_no_more_than_the_bound_and_one_event() -> None:
    """A call whose raw id is an answered call's waits, unseen, for complete arguments
    (SPEC §4): it holds them all. Past the bound the stream ends; the memory it held never
    went past the bound plus the event that crossed it (and that event's parse)."""
    raw_id = "call_Zz9Yy8Xx7Ww6Vv5Uu4Tt3Ss"
    answered = {"id": raw_id, "type": "function", "function": {"name": "bash", "arguments": "{}"}}
    request: JSON = {
        "model": "m",
        "stream": True,
        "messages": [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": None, "tool_calls": [answered]},
            {"role": "tool", "tool_call_id": raw_id, "content": "done"},
        ],
        "tools": [
            {"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}
        ],
    }
    raw = orjson.dumps(request)
    exchange = CHAT_CODEC.new_exchange(
        CHAT_CODEC.parse_body(raw), raw, RouteRules(), entropy_source()
    )
    exchange.begin_round(stream=True)
    reads = chat_call_stream(fragments(3 * CALL_ARGUMENTS_LIMIT), raw_id=raw_id)
    tracemalloc.start()
    try:
        sent = 0
        for n, read in enumerate(reads):
            events = exchange.feed(read)
            reads[n] = b""  # what the test holds is not the proxy's
            if events and type(events[-1]) is UpstreamBroken:
                break
            sent += sum(len(event) for event in events if type(event) is bytes)
        else:
            raise AssertionError("the stream went past the bound")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert n == CALL_ARGUMENTS_LIMIT // MIB + 2, "broken at the fragment that crossed the bound"
    assert sent < 1000, "nothing of the held call reached the client"
    # Two copies at most: the call's arguments, and the round's reads that a follow-up's text
    # is taken from (a round that may end in one keeps them, proxy/chat/continuation.py);
    # both end with the stream at the bound. Unbounded, 48 MiB of arguments were held twice.
    assert peak < 2 * CALL_ARGUMENTS_LIMIT + 4 * MIB, peak
