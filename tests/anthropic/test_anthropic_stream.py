"""SPEC §8, Anthropic Messages streams: the canonical event grammar whatever the upstream sent
(one line of QUIRKS.md's Anthropic section per test where it names one)."""

from __future__ import annotations

import re

import orjson
import pytest

from proxy.core.ids import raw_id_digest
from proxy.core.rounds import RouteRules
from tests.anthropic.anthropic_wire import (
    end,
    ev,
    read,
    request,
    run,
    start,
    text,
    thinking,
    tool,
)

ANTHROPIC_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
MINTED = re.compile(r"^toolu_(\d+)_(\d+)_([0-9a-f]{4})([0-9a-f]{4})$")
LS = {"command": "ls -la"}


def test_kimi_ids_reach_the_client_as_valid_unique_minted_ids_carrying_the_raw_digest() -> None:
    """QUIRKS: `functions.Bash:0` is not valid for Anthropic's `^[a-zA-Z0-9_-]+$`."""
    upstream = start() + text(0, "Let me ", "look.") + tool(1, "functions.Bash:0", "Bash", LS)
    got = run(request(), [upstream + end()]).read()
    [call] = got.tools
    match = MINTED.match(call["id"])
    assert match and ANTHROPIC_ID.match(call["id"])
    assert (match.group(1), match.group(2)) == ("1", "0")  # turn 1, first call
    assert match.group(4) == raw_id_digest("functions.Bash:0")
    assert call["input"] == LS and call["name"] == "Bash"
    assert got.message["stop_reason"] == "tool_use"


def test_anthropic_own_ids_are_native_and_kept() -> None:
    upstream = start() + tool(0, "toolu_01A09q90qw90lq917835lq9", "Bash", LS) + end()
    got = run(request(model="claude-x"), [upstream]).read()
    assert got.tools[0]["id"] == "toolu_01A09q90qw90lq917835lq9"


def test_counter_ids_restarting_every_turn_never_repeat_a_history_id() -> None:
    """QUIRKS: Kimi behind vLLM restarts `functions.Bash:0` every turn; Claude Code drops a
    tool_use whose id the conversation already had."""
    history = [
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_1_0_abcd1234", "name": "Bash", "input": LS}
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1_0_abcd1234", "content": "x"}
            ],
        },
    ]
    upstream = start() + tool(0, "functions.Bash:0", "Bash", {"command": "pwd"}) + end()
    got = run(request(*history), [upstream]).read()
    [call] = got.tools
    assert call["id"].startswith("toolu_2_0_") and call["id"] != "toolu_1_0_abcd1234"


def test_whole_input_in_content_block_start_moves_into_one_delta() -> None:
    """QUIRKS: translators put the whole `input` in content_block_start and send no delta."""
    upstream = start() + tool(0, "toolu_01X", "Bash", LS, whole=True, deltas=False) + end()
    got = run(request(), [upstream]).read()
    deltas = [e for e in got.events if e["type"] == "content_block_delta"]
    assert [d["delta"] for d in deltas] == [
        {"type": "input_json_delta", "partial_json": orjson.dumps(LS).decode()}
    ]
    assert got.tools[0]["input"] == LS


def test_whole_input_then_the_same_deltas_reaches_the_client_once() -> None:
    """QUIRKS: ... or both: the input whole in the start and again as deltas."""
    upstream = start() + tool(0, "toolu_01X", "Bash", LS, whole=True, pieces=4) + end()
    got = run(request(), [upstream]).read()
    partial = "".join(
        e["delta"]["partial_json"] for e in got.events if e["type"] == "content_block_delta"
    )
    assert orjson.loads(partial) == LS  # `{...}{...}` would not parse
    assert got.tools[0]["input"] == LS


def test_missing_content_block_stop_is_added_for_every_block() -> None:
    """QUIRKS: translators forget content_block_stop."""
    upstream = (
        start()
        + text(0, "Running.", stop=False)
        + tool(1, "toolu_01A", "Bash", LS, stop=False)
        + tool(2, "toolu_01B", "grep", {"pattern": "x"}, stop=False)
        + end()
    )
    got = run(request(), [upstream]).read()  # read() fails on an unclosed or interleaved block
    assert [b["type"] for b in got.message["content"]] == ["text", "tool_use", "tool_use"]
    assert got.types().count("content_block_stop") == 3


def test_end_turn_after_tool_use_becomes_tool_use() -> None:
    """QUIRKS: stop_reason `end_turn` after tool_use: agent loops stop and never run the tool."""
    upstream = start() + tool(0, "toolu_01A", "Bash", LS) + end("end_turn")
    assert run(request(), [upstream]).read().message["stop_reason"] == "tool_use"


def test_tool_use_claimed_without_a_tool_use_block_becomes_end_turn() -> None:
    upstream = start() + text(0, "Nothing to run.") + end("tool_use")
    assert run(request(), [upstream]).read().message["stop_reason"] == "end_turn"


@pytest.mark.parametrize("reason", ["max_tokens", "stop_sequence", "pause_turn", "refusal"])
def test_other_stop_reasons_are_kept(reason: str) -> None:
    upstream = start() + tool(0, "toolu_01A", "Bash", LS) + end(reason)
    assert run(request(), [upstream]).read().message["stop_reason"] == reason


def test_a_body_that_ends_without_message_stop_is_completed() -> None:
    upstream = start() + text(0, "Half", stop=False) + tool(1, "toolu_01A", "Bash", LS, stop=False)
    got = run(request(), [upstream]).read()
    assert got.types()[-2:] == ["message_delta", "message_stop"]
    assert got.message["stop_reason"] == "tool_use"
    # No message_delta came: message_start's count stands, as it would straight from the
    # upstream (the SDKs keep message_start's usage until a message_delta changes it).
    assert got.message["usage"]["output_tokens"] == 1


def test_a_body_without_message_stop_keeps_its_message_delta() -> None:
    upstream = start() + tool(0, "toolu_01A", "Bash", LS) + end("tool_use", 42, stop=False)
    got = run(request(), [upstream]).read()
    assert got.types()[-2:] == ["message_delta", "message_stop"]
    assert got.message["usage"]["output_tokens"] == 42


def test_indexes_are_dense_when_a_duplicate_is_dropped() -> None:
    """QUIRKS: the Kimi coding endpoint reused `grep:3` on two parallel tool_use blocks."""
    args = {"pattern": "TODO"}
    upstream = (
        start()
        + tool(0, "grep:3", "grep", args)
        + tool(1, "grep:3", "grep", args)
        + text(2, "done")
        + end()
    )
    got = run(request(), [upstream]).read()
    assert [b["type"] for b in got.message["content"]] == ["tool_use", "text"]


def test_the_same_raw_id_with_other_input_gives_two_calls_with_distinct_ids() -> None:
    upstream = (
        start()
        + tool(0, "grep:3", "grep", {"pattern": "a"})
        + tool(1, "grep:3", "grep", {"pattern": "b"})
        + end()
    )
    got = run(request(), [upstream]).read()
    ids = [t["id"] for t in got.tools]
    assert len(set(ids)) == 2 and all(ANTHROPIC_ID.match(i) for i in ids)
    assert [t["input"] for t in got.tools] == [{"pattern": "a"}, {"pattern": "b"}]


@pytest.mark.parametrize("raw_id", ["", None, 7, "null", "   "])
def test_absent_or_odd_ids_are_minted(raw_id: object) -> None:
    upstream = start() + tool(0, raw_id, "Bash", LS) + end()
    [call] = run(request(), [upstream]).read().tools
    assert MINTED.match(call["id"])


def test_a_block_without_input_gets_an_empty_object() -> None:
    upstream = start() + tool(0, "toolu_01A", "Bash", {}, deltas=False) + end()
    got = run(request(), [upstream]).read()
    assert got.tools[0]["input"] == {}
    partial = [e["delta"]["partial_json"] for e in got.events if e["type"] == "content_block_delta"]
    assert partial == ["{}"]


THINKING = thinking(0, "Hmm.", "EqQBCgIYAh==")
REDACTED = ev(
    {
        "type": "content_block_start",
        "index": 1,
        "content_block": {"type": "redacted_thinking", "data": "EmwKAhgB"},
    }
) + ev({"type": "content_block_stop", "index": 1})
SERVER_TOOL = (
    ev(
        {
            "type": "content_block_start",
            "index": 2,
            "content_block": {
                "type": "server_tool_use",
                "id": "srvtoolu_014hJH82Qum7Td6UV8gDXThB",
                "name": "web_search",
                "input": {},
            },
        }
    )
    + ev(
        {
            "type": "content_block_delta",
            "index": 2,
            "delta": {"type": "input_json_delta", "partial_json": '{"query": "x"}'},
        }
    )
    + ev({"type": "content_block_stop", "index": 2})
)
UNKNOWN = ev({"type": "some_future_event", "payload": {"a": [1, 2]}})
PING = ev({"type": "ping"})


def test_thinking_signatures_redacted_thinking_server_tools_ping_and_unknown_pass_unchanged() -> (
    None
):
    upstream = (
        start()
        + PING
        + THINKING
        + REDACTED
        + SERVER_TOOL
        + UNKNOWN
        + tool(3, "functions.Bash:0", "Bash", LS)
        + end()
    )
    got = run(request(), [upstream])
    sent = got.client
    for event in (PING, THINKING, REDACTED, SERVER_TOOL, UNKNOWN):
        assert event in sent  # byte for byte: their indexes were already dense
    received = got.read()
    assert [b["type"] for b in received.message["content"]] == [
        "thinking",
        "redacted_thinking",
        "server_tool_use",
        "tool_use",
    ]
    assert received.message["content"][0]["signature"] == "EqQBCgIYAh=="
    assert received.message["content"][2]["id"] == "srvtoolu_014hJH82Qum7Td6UV8gDXThB"


def test_passed_blocks_follow_dense_indexes_after_a_dropped_block() -> None:
    args = {"pattern": "x"}
    upstream = (
        start()
        + tool(0, "grep:3", "grep", args)
        + tool(1, "grep:3", "grep", args)
        + THINKING.replace(b'"index":0', b'"index":2')
        + end()
    )
    got = run(request(), [upstream]).read()
    thinking = got.message["content"][1]
    assert thinking["type"] == "thinking" and thinking["signature"] == "EqQBCgIYAh=="


def test_events_without_an_event_line_get_one() -> None:
    """The anthropic SDKs dispatch on the `event:` line; a stream of bare data lines would be
    read as nothing."""
    bare = b"".join(
        ev(e, named=False)
        for e in [
            {
                "type": "message_start",
                "message": {
                    "id": "m",
                    "type": "message",
                    "role": "assistant",
                    "model": "k",
                    "content": [],
                    "usage": {"input_tokens": 1, "output_tokens": 1},
                },
            },
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "hi"},
            },
            {"type": "content_block_stop", "index": 0},
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn"},
                "usage": {"output_tokens": 1},
            },
            {"type": "message_stop"},
        ]
    )
    got = run(request(), [bare]).read()  # read() checks every event's name
    assert got.message["content"] == [{"type": "text", "text": "hi"}]


def test_non_json_data_becomes_a_comment_and_is_counted() -> None:
    upstream = (
        start()
        + b"data: not json\n\n"
        + b": keep-alive\n\n"
        + tool(0, "toolu_01A", "Bash", LS)
        + end()
    )
    got = run(request(), [upstream])
    received = got.read()
    assert any("not json" in c for c in received.comments)
    assert got.exchange is not None and got.exchange.report()[1] == 1


@pytest.mark.parametrize("read_size", [1, 7, 64])
def test_reads_split_anywhere_give_the_same_client_stream(read_size: int) -> None:
    upstream = (
        start()
        + text(0, "Löst ", "✓ ")
        + tool(1, "functions.Bash:0", "Bash", {"command": "echo ü"}, whole=True)
        + tool(2, "grep:1", "grep", {"pattern": "é"}, stop=False)
        + end("end_turn")
    )
    whole = run(request(), [upstream]).client
    assert run(request(), [upstream], read_size=read_size).client == whole
    read(whole)


def test_crlf_framing_is_read() -> None:
    upstream = (start() + tool(0, "functions.Bash:0", "Bash", LS) + end()).replace(b"\n", b"\r\n")
    assert run(request(), [upstream]).read().tools[0]["input"] == LS


def test_leaked_kimi_markup_in_text_becomes_a_tool_use_block() -> None:
    markup = (
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.Bash:0"
        '<|tool_call_argument_begin|>{"command": "ls -la"}<|tool_call_end|>'
        "<|tool_calls_section_end|>"
    )
    pieces = ["Let me look. ", *(markup[i : i + 9] for i in range(0, len(markup), 9))]
    upstream = start() + text(0, *pieces) + end("end_turn")
    got = run(request(), [upstream]).read()
    assert [b["type"] for b in got.message["content"]] == ["text", "tool_use"]
    assert got.message["content"][0]["text"] == "Let me look. "
    assert got.tools[0]["input"] == LS and MINTED.match(got.tools[0]["id"])
    assert got.message["stop_reason"] == "tool_use"


def test_leaked_markup_naming_a_tool_not_offered_stays_text() -> None:
    markup = '<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>'
    upstream = start() + text(0, markup) + end("end_turn")
    got = run(request(), [upstream]).read()
    assert got.message["content"] == [{"type": "text", "text": markup}]


def test_text_recovery_off_leaves_the_markup() -> None:
    markup = '<tool_call>{"name": "Bash", "arguments": {"command": "ls"}}</tool_call>'
    upstream = start() + text(0, markup) + end("end_turn")
    got = run(request(), [upstream], RouteRules(text_tool_calls=False)).read()
    assert got.message["content"] == [{"type": "text", "text": markup}]


def test_ids_off_leaves_raw_ids() -> None:
    upstream = start() + tool(0, "functions.Bash:0", "Bash", LS) + end()
    got = run(request(), [upstream], RouteRules(ids="off")).read()
    assert got.tools[0]["id"] == "functions.Bash:0"


def test_an_upstream_error_event_ends_the_stream_as_it_came() -> None:
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    upstream = start() + text(0, "par", stop=False) + ev(error)
    got = run(request(), [upstream])
    assert got.client.endswith(ev(error))
    assert read(got.client).error == error


def test_indexes_no_block_can_have_are_read_as_missing() -> None:
    """An upstream's index may be any JSON value; the core must not fail on a list."""
    upstream = (
        start()
        + ev(
            {
                "type": "content_block_start",
                "index": [1],
                "content_block": {"type": "text", "text": ""},
            }
        )
        + ev(
            {
                "type": "content_block_delta",
                "index": {},
                "delta": {"type": "text_delta", "text": "x"},
            }
        )
        + ev({"type": "content_block_stop", "index": None})
        + ev({"type": "some_event", "index": [2]})
        + end("end_turn")
    )
    got = run(request(), [upstream]).read()
    assert got.message["content"] == [{"type": "text", "text": "x"}]


def _split_data(event: bytes) -> bytes:
    """The event with its JSON data split over two `data:` lines (SSE joins them with a
    newline, which JSON reads as whitespace)."""
    head, _, data = event.partition(b"\ndata: ")
    cut = data.index(b",") + 1
    return head + b"\ndata: " + data[:cut] + b"\ndata: " + data[cut:]


def test_events_of_several_data_lines_reach_the_client_readable() -> None:
    """An event the upstream wrote over several `data:` lines goes on as that many lines: as
    one line with a newline inside, the client would read only its first line."""
    upstream = (
        _split_data(start())
        + ev(
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            }
        )
        + _split_data(
            ev(
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": "hi"},
                }
            )
        )
        + _split_data(
            ev({"type": "ping"}) if False else ev({"type": "content_block_stop", "index": 0})
        )
        + end("end_turn")
    )
    got = run(request(), [upstream]).read()
    assert got.message["content"] == [{"type": "text", "text": "hi"}]
    assert got.message["id"] == "msg_up1"


def test_an_index_of_true_is_not_taken_for_block_one() -> None:
    """`true == 1` in Python: a passed-through block's events must still carry the integer."""
    upstream = (
        start()
        + text(0, "a")
        + ev(
            {
                "type": "content_block_start",
                "index": True,
                "content_block": {"type": "thinking", "thinking": "", "signature": ""},
            }
        )
        + ev(
            {
                "type": "content_block_delta",
                "index": True,
                "delta": {"type": "thinking_delta", "thinking": "hm"},
            }
        )
        + ev({"type": "content_block_stop", "index": True})
        + end("end_turn")
    )
    got = run(request(), [upstream])
    indexes = [e.get("index") for e in read(got.client).events if "index" in e]
    assert all(type(i) is int for i in indexes), indexes
    assert read(got.client).message["content"][1]["thinking"] == "hm"
