"""SPEC §9, response direction, streaming: the Chat exchange's canonical stream becomes
Anthropic's full event grammar; the anthropic SDK accumulates it into the message."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from proxy.bridge.anthropic_chat.reasoning import SIGNATURE_PREFIX
from proxy.bridge.anthropic_chat.stream import ChatToAnthropicStream
from proxy.core.errors import ReplayLoopDetected, UpstreamStreamError
from tests.bridge.anthropic_chat.bridge_wire import (
    BASH_TOOL,
    call_args,
    call_header,
    chat_stream,
    chunk,
    new_exchange,
    parse_events,
    play,
    sdk_final_message,
)

JSON = dict[str, Any]
REQUEST: JSON = {
    "model": "kimi-k2",
    "max_tokens": 256,
    "stream": True,
    "messages": [{"role": "user", "content": "list the files"}],
    "tools": [BASH_TOOL],
}
USAGE = {
    "prompt_tokens": 120,
    "completion_tokens": 30,
    "prompt_tokens_details": {"cached_tokens": 100},
}

# Kimi's shape: reasoning, text, then a call under a counter id that recurs every turn.
KIMI_STREAM = chat_stream(
    chunk({"role": "assistant", "content": ""}),
    chunk({"reasoning_content": "The user wants "}),
    chunk({"reasoning_content": "a listing. ✓"}),
    chunk({"content": "Listing"}),
    chunk({"content": " now."}),
    call_header(0, "functions.Bash:0", "Bash"),
    call_args(0, '{"command"'),
    call_args(0, ': "ls -la"}'),
    chunk({}, "tool_calls"),
    usage=USAGE,
)


def client_events(upstream: bytes, request: JSON = REQUEST) -> list[JSON]:
    played = play(new_exchange(request), [upstream])
    return parse_events(played.client)


def test_the_full_grammar() -> None:
    events = client_events(KIMI_STREAM)
    kinds = [(e["type"], e.get("index"), e.get("delta", {}).get("type")) for e in events]
    assert kinds == [
        ("message_start", None, None),
        ("content_block_start", 0, None),
        ("content_block_delta", 0, "thinking_delta"),
        ("content_block_delta", 0, "thinking_delta"),
        ("content_block_delta", 0, "signature_delta"),
        ("content_block_stop", 0, None),
        ("content_block_start", 1, None),
        ("content_block_delta", 1, "text_delta"),
        ("content_block_delta", 1, "text_delta"),
        ("content_block_stop", 1, None),
        ("content_block_start", 2, None),
        ("content_block_delta", 2, "input_json_delta"),
        ("content_block_delta", 2, "input_json_delta"),
        ("content_block_stop", 2, None),
        ("message_delta", None, None),
        ("message_stop", None, None),
    ]
    message = events[0]["message"]
    assert message["id"] == "msg_" + "ab" * 12
    assert message["model"] == "kimi-k2"
    assert message["content"] == [] and message["stop_reason"] is None
    tool = events[10]["content_block"]
    assert tool["type"] == "tool_use" and tool["name"] == "Bash" and tool["input"] == {}
    # A Kimi counter id is never the client's: it gets a minted toolu_ id (SPEC §2, §8).
    assert tool["id"].startswith("toolu_1_0_") and len(tool["id"]) == len("toolu_1_0_") + 8
    assert events[14]["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    # Anthropic's input_tokens excludes what was read from the cache.
    assert events[14]["usage"] == {
        "input_tokens": 20,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 100,
        "output_tokens": 30,
    }


def test_thinking_signature_carries_the_text() -> None:
    signature = client_events(KIMI_STREAM)[4]["delta"]["signature"]
    assert signature.startswith(SIGNATURE_PREFIX)
    text = base64.b64decode(signature[len(SIGNATURE_PREFIX) :]).decode()
    assert text == "The user wants a listing. ✓"


def test_the_sdk_accumulates_the_message() -> None:
    played = play(new_exchange(REQUEST), [KIMI_STREAM])
    request = {k: REQUEST[k] for k in ("model", "max_tokens", "messages", "tools")}
    final = sdk_final_message(played.client, request)
    tool_id = final["content"][2]["id"]
    assert tool_id.startswith("toolu_1_0_")
    assert final["content"] == [
        {
            "type": "thinking",
            "thinking": "The user wants a listing. ✓",
            "signature": SIGNATURE_PREFIX
            + base64.b64encode("The user wants a listing. ✓".encode()).decode(),
        },
        {"type": "text", "text": "Listing now."},
        {"type": "tool_use", "id": tool_id, "name": "Bash", "input": {"command": "ls -la"}},
    ]
    assert final["stop_reason"] == "tool_use"
    assert final["id"] == "msg_" + "ab" * 12
    assert final["usage"]["input_tokens"] == 20
    assert final["usage"]["cache_read_input_tokens"] == 100
    assert final["usage"]["output_tokens"] == 30


def test_split_at_every_byte_gives_the_same_bytes() -> None:
    whole = play(new_exchange(REQUEST), [KIMI_STREAM]).client
    for at in range(1, len(KIMI_STREAM)):
        pieces = [KIMI_STREAM[:at], KIMI_STREAM[at:]]
        split = play(new_exchange(REQUEST), [KIMI_STREAM], pieces=lambda _b, p=pieces: p).client
        assert split == whole, at


def test_byte_by_byte_gives_the_same_bytes() -> None:
    whole = play(new_exchange(REQUEST), [KIMI_STREAM]).client
    one_by_one = play(
        new_exchange(REQUEST),
        [KIMI_STREAM],
        pieces=lambda b: [b[i : i + 1] for i in range(len(b))],
    ).client
    assert one_by_one == whole


@pytest.mark.parametrize(
    ("finish", "reason"),
    [("stop", "end_turn"), ("length", "max_tokens"), ("content_filter", "refusal")],
)
def test_stop_reasons(finish: str, reason: str) -> None:
    events = client_events(chat_stream(chunk({"content": "Hi"}), chunk({}, finish)))
    assert events[-2]["delta"]["stop_reason"] == reason
    assert [e["type"] for e in events[1:4]] == [
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
    ]


def test_parallel_calls_and_a_missing_usage() -> None:
    events = client_events(
        chat_stream(
            call_header(0, "call_Ab12Cd34Ef56Gh78", "Bash", '{"command": "ls"}'),
            call_header(1, "call_Zz99Yy88Xx77Ww66", "Bash", '{"command": "pwd"}'),
            chunk({}, "tool_calls"),
        )
    )
    starts = [e["content_block"] for e in events if e["type"] == "content_block_start"]
    # Native Chat ids keep their random part: call_X -> toolu_X.
    assert [s["id"] for s in starts] == ["toolu_Ab12Cd34Ef56Gh78", "toolu_Zz99Yy88Xx77Ww66"]
    assert events[-2]["usage"] == {
        "input_tokens": 0,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": 0,
    }


def test_interleaved_call_fragments_make_whole_blocks_in_order() -> None:
    """Anthropic sends one block at a time: a call whose arguments are still coming keeps
    the block open, and the next call's fragments wait for it to stop."""
    stream = ChatToAnthropicStream("msg_1", "m")
    out = stream.feed(
        chunk({"role": "assistant", "content": ""})
        + call_header(0, "call_a1", "Bash")
        + call_header(1, "call_b2", "Bash")
        + call_args(0, '{"command":')
        + call_args(1, '{"command": "pwd"}')
        + call_args(0, ' "ls"}')
        + chunk({}, "tool_calls")
        + b"data: [DONE]\n\n"
    )
    events = parse_events(out)
    blocks: dict[int, str] = {}
    order: list[tuple[str, int]] = []
    for event in events:
        if event["type"].startswith("content_block"):
            order.append((event["type"], event["index"]))
        if event["type"] == "content_block_delta":
            blocks[event["index"]] = blocks.get(event["index"], "") + event["delta"]["partial_json"]
    assert order == [
        ("content_block_start", 0),
        ("content_block_delta", 0),
        ("content_block_delta", 0),
        ("content_block_stop", 0),
        ("content_block_start", 1),
        ("content_block_delta", 1),
        ("content_block_stop", 1),
    ]
    assert blocks == {0: '{"command": "ls"}', 1: '{"command": "pwd"}'}


def test_comments_pass_as_comments() -> None:
    played = play(
        new_exchange(REQUEST),
        [chat_stream(chunk({"content": "a"}), b": keep-alive\n\n", chunk({}, "stop"))],
    )
    assert b"\n: keep-alive\n\n" in played.client
    assert [e["type"] for e in parse_events(played.client)][-2:] == [
        "message_delta",
        "message_stop",
    ]


def test_an_upstream_error_inside_the_stream() -> None:
    error = (
        b'data: {"error": {"message": "context length exceeded", "type": "invalid_request"}}\n\n'
    )
    played = play(new_exchange(REQUEST), [chunk({"content": "par"}) + error])
    events = parse_events(played.client)
    assert [e["type"] for e in events] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "error",
    ]
    assert events[-1]["error"] == {"type": "api_error", "message": "context length exceeded"}


def test_stream_error_before_any_event() -> None:
    """A broken upstream before the first event: the error comes inside a message."""
    exchange = new_exchange(REQUEST)
    exchange.begin_round(stream=True)
    events = parse_events(exchange.stream_error(UpstreamStreamError("connection reset")))
    assert [e["type"] for e in events] == ["message_start", "error"]
    assert events[1]["error"] == {"type": "upstream_error", "message": "connection reset"}


def test_loop_error_closes_the_open_block() -> None:
    exchange = new_exchange(REQUEST)
    exchange.begin_round(stream=True)
    sent = b"".join(e for e in exchange.feed(chunk({"content": "Let me"})) if isinstance(e, bytes))
    error = ReplayLoopDetected("Bash", "functions.Bash:0", "test")
    events = parse_events(sent + exchange.stream_error(error))
    assert [e["type"] for e in events] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "error",
    ]
    assert events[-1]["error"]["type"] == "loop_detected"
    assert events[-1]["error"]["message"].startswith("Tool-call replay loop detected")


def test_the_sdks_message_goes_back_upstream_as_it_came() -> None:
    """Thinking round trip (SPEC §9): the message the SDK accumulated, sent back as history,
    reaches the upstream with its reasoning as `reasoning_content` and its call in Kimi's
    numbering."""
    played = play(new_exchange(REQUEST), [KIMI_STREAM])
    request = {k: REQUEST[k] for k in ("model", "max_tokens", "messages", "tools")}
    final = sdk_final_message(played.client, request)
    tool_id = final["content"][2]["id"]
    answer = {"type": "tool_result", "tool_use_id": tool_id, "content": "a.txt"}
    history = [
        *REQUEST["messages"],
        {"role": "assistant", "content": final["content"]},
        {"role": "user", "content": [answer]},
    ]
    upstream = json.loads(new_exchange({**REQUEST, "messages": history}).upstream_request)
    turn = upstream["messages"][1]
    assert turn["reasoning_content"] == "The user wants a listing. ✓"
    assert turn["content"] == "Listing now."
    assert turn["tool_calls"] == [
        {
            "id": "functions.Bash:0",
            "type": "function",
            "function": {"name": "Bash", "arguments": '{"command":"ls -la"}'},
        }
    ]
    assert upstream["messages"][2] == {
        "role": "tool",
        "tool_call_id": "functions.Bash:0",
        "content": "a.txt",
    }
