"""SPEC §8, §9, streaming: the Chat exchange's stream in Anthropic's grammar, at the edges the
mutation audit found unpinned (the upstream's model, other choices, `reasoning` and `refusal`
deltas, comments of several lines, error chunks, and an error after the end)."""

from __future__ import annotations

import json
from typing import Any

from proxy.core.errors import UpstreamStreamError
from proxy.core.events import Forward
from tests.bridge.anthropic_chat.bridge_wire import (
    BASH_TOOL,
    call_args,
    call_header,
    chat_stream,
    chunk,
    new_exchange,
    parse_events,
    play,
)

JSON = dict[str, Any]


def request() -> JSON:
    return {
        "model": "kimi-k2",
        "max_tokens": 512,
        "stream": True,
        "messages": [{"role": "user", "content": "look around"}],
        "tools": [BASH_TOOL],
    }


def client_of(*events: bytes) -> bytes:
    return play(new_exchange(request()), [chat_stream(*events)]).client


def raw_chunk(body: JSON) -> bytes:
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def texts(client: bytes) -> list[tuple[str, str]]:
    """(block type, its streamed text) per block."""
    out: list[tuple[str, str]] = []
    for event in parse_events(client):
        if event["type"] == "content_block_start":
            out.append((event["content_block"]["type"], ""))
        elif event["type"] == "content_block_delta":
            delta = event["delta"]
            value = delta.get("text", delta.get("thinking", ""))
            out[-1] = (out[-1][0], out[-1][1] + value)
    return out


def test_the_upstreams_model_names_the_message() -> None:
    client = client_of(chunk({"role": "assistant", "content": "hi"}, model="kimi-k2-0905"))
    start = parse_events(client)[0]
    assert start["message"]["model"] == "kimi-k2-0905"


def test_a_model_that_is_no_string_leaves_the_requests() -> None:
    first = raw_chunk(
        {
            "id": "c",
            "object": "chat.completion.chunk",
            "model": 5,
            "choices": [
                {"index": 0, "delta": {"role": "assistant", "content": "hi"}, "finish_reason": None}
            ],
        }
    )
    assert parse_events(client_of(first))[0]["message"]["model"] == "kimi-k2"


def test_reasoning_and_refusal_under_their_other_names() -> None:
    client = client_of(
        chunk({"role": "assistant", "reasoning": "why"}),
        chunk({"refusal": "no."}),
        chunk({}, "stop"),
    )
    assert texts(client) == [("thinking", "why"), ("text", "no.")]


def test_only_the_first_choice_is_the_message_and_a_choice_without_index_is_it() -> None:
    def choice(index: int | None, content: str) -> JSON:
        out: JSON = {"delta": {"content": content}, "finish_reason": None}
        if index is not None:
            out["index"] = index
        return out

    body = {"id": "c", "object": "chat.completion.chunk", "model": "kimi-k2"}
    client = client_of(
        chunk({"role": "assistant", "content": "a"}),
        raw_chunk({**body, "choices": [choice(1, "X"), choice(None, "b")]}),
        chunk({}, "stop"),
    )
    assert texts(client) == [("text", "ab")]


def test_a_comment_of_several_lines_passes_as_it_came() -> None:
    client = client_of(b": one\n: two\n\n", chunk({"role": "assistant", "content": "hi"}))
    assert b"\n: one\n: two\n\n" in b"\n" + client


def test_an_error_chunk_with_choices_is_content_not_an_error() -> None:
    body = {
        "id": "c",
        "object": "chat.completion.chunk",
        "model": "kimi-k2",
        "error": {"message": "ignored"},
        "choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": None}],
    }
    client = client_of(chunk({"role": "assistant", "content": ""}), raw_chunk(body))
    events = parse_events(client)
    assert [e["type"] for e in events if e["type"] == "error"] == []
    assert texts(client) == [("text", "hi")]


def test_an_error_chunk_without_a_message_says_upstream_stream_error() -> None:
    played = play(
        new_exchange(request()),
        [raw_chunk({"error": {"code": 500}}) + b"data: [DONE]\n\n"],
    )
    errors = [e for e in parse_events(played.client) if e["type"] == "error"]
    assert errors == [
        {"type": "error", "error": {"type": "api_error", "message": "upstream stream error"}}
    ]


def test_an_error_after_the_stream_ended_adds_nothing_and_an_error_is_said_once() -> None:
    exchange = new_exchange(request())
    play(exchange, [chat_stream(chunk({"role": "assistant", "content": "hi"}), chunk({}, "stop"))])
    assert exchange.stream_error(UpstreamStreamError("late")) == b""
    cut = new_exchange(request())
    first = cut.stream_error(UpstreamStreamError("cut"))
    assert [e["type"] for e in parse_events(first)][-1] == "error"
    assert cut.stream_error(UpstreamStreamError("again")) == b""


def test_a_thinking_block_starts_empty_and_is_signed_at_its_stop() -> None:
    client = client_of(chunk({"role": "assistant", "reasoning_content": "why"}), chunk({}, "stop"))
    starts = [
        e["content_block"] for e in parse_events(client) if e["type"] == "content_block_start"
    ]
    assert starts == [{"type": "thinking", "thinking": "", "signature": ""}]


def test_text_that_waits_behind_an_open_call_goes_out_as_it_came() -> None:
    """The call's arguments are not complete JSON yet, so the text block behind it keeps its
    fragments; they go out together once the call stops."""
    client = client_of(
        chunk({"role": "assistant", "content": ""}),
        call_header(0, "call_1", "Bash", '{"command": '),
        chunk({"content": "a"}),
        chunk({"content": "b"}),
        call_args(0, '"ls"}'),
        chunk({}, "tool_calls"),
    )
    assert texts(client)[-1] == ("text", "ab")


def stop_reason_of(client: bytes) -> object:
    (delta,) = [e["delta"] for e in parse_events(client) if e["type"] == "message_delta"]
    return delta["stop_reason"]


def test_a_finish_of_no_known_kind_stops_for_tool_use_only_after_a_call() -> None:
    text_only = client_of(chunk({"role": "assistant", "content": "hi"}), chunk({}, "weird"))
    assert stop_reason_of(text_only) == "end_turn"
    with_call = client_of(
        chunk({"role": "assistant", "content": ""}),
        call_header(0, "call_1", "Bash", '{"command": "ls"}'),
        chunk({}, "weird"),
    )
    assert stop_reason_of(with_call) == "tool_use"


def test_a_call_stops_once_its_arguments_are_whole_json_and_the_text_behind_it_goes_on() -> None:
    client = client_of(
        chunk({"role": "assistant", "content": ""}),
        call_header(0, "call_1", "Bash", '{"command": '),
        chunk({"content": "a"}),
        call_args(0, '"ls"}'),
        chunk({"content": "b"}),
        chunk({}, "tool_calls"),
    )
    deltas = [
        e["delta"].get("text")
        for e in parse_events(client)
        if e["type"] == "content_block_delta" and e["delta"]["type"] == "text_delta"
    ]
    assert deltas == ["a", "b"]


def test_the_message_start_event_in_full() -> None:
    start = parse_events(client_of(chunk({"role": "assistant", "content": "hi"})))[0]
    assert start == {
        "type": "message_start",
        "message": {
            "id": "msg_" + "ab" * 12,
            "type": "message",
            "role": "assistant",
            "model": "kimi-k2",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        },
    }


def usage_of(usage: JSON) -> object:
    events = parse_events(
        client_of(chunk({"role": "assistant", "content": "hi"}), chunk(usage=usage))
    )
    (delta,) = [e for e in events if e["type"] == "message_delta"]
    return delta["usage"]


def test_single_tokens_count_and_deepseeks_cache_hits_are_read_from_the_cache() -> None:
    assert usage_of({"prompt_tokens": 1, "completion_tokens": 1}) == {
        "input_tokens": 1,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": 1,
    }
    deepseek = {"prompt_tokens": 10, "completion_tokens": 2, "prompt_cache_hit_tokens": 4}
    assert usage_of(deepseek) == {
        "input_tokens": 6,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 4,
        "output_tokens": 2,
    }


def test_the_last_forward_is_marked_last_and_a_stream_without_done_is_completed() -> None:
    for stream in (True, False):
        exchange = new_exchange({**request(), "stream": stream})
        exchange.begin_round(stream=stream)
        if stream:
            upstream = chunk({"role": "assistant", "content": "hi"}) + chunk({}, "stop")
        else:
            upstream = json.dumps(
                {
                    "id": "c",
                    "object": "chat.completion",
                    "model": "kimi-k2",
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": "hi"},
                            "finish_reason": "stop",
                        }
                    ],
                }
            ).encode()
        events = exchange.feed(upstream) + exchange.end()
        forwards = [e for e in events if isinstance(e, Forward)]
        assert forwards and forwards[-1].last
        if stream:
            client = b"".join(
                e if isinstance(e, bytes) else e.data
                for e in events
                if isinstance(e, bytes | Forward)
            )
            assert [e["type"] for e in parse_events(client)][-2:] == [
                "message_delta",
                "message_stop",
            ]
