"""SPEC §4, §9: a tool_use block whose arguments never form a complete JSON value keeps the
blocks behind it waiting until the message ends, and then every block goes out, in order
(the mutation audit found the end-of-message start of a waiting block unpinned)."""

from __future__ import annotations

from typing import Any

from tests.bridge.anthropic_chat.bridge_wire import (
    BASH_TOOL,
    call_header,
    chat_stream,
    chunk,
    new_exchange,
    parse_events,
    play,
)

JSON = dict[str, Any]


def test_blocks_behind_an_unfinished_call_go_out_whole_at_the_end() -> None:
    request: JSON = {
        "model": "kimi-k2",
        "max_tokens": 512,
        "stream": True,
        "messages": [{"role": "user", "content": "look"}],
        "tools": [BASH_TOOL],
    }
    upstream = chat_stream(
        call_header(0, "call_a", "Bash", '{"command":"ls"'),  # never completed
        chunk({"content": "and"}),
        call_header(1, "call_b", "Bash", '{"command":"pwd"}'),
        chunk({}, "tool_calls"),
    )
    events = parse_events(play(new_exchange(request), [upstream]).client)
    shapes = [
        (e["type"], e.get("index"), e.get("content_block", e.get("delta")))
        for e in events
        if e["type"].startswith("content_block")
    ]
    assert shapes == [
        (
            "content_block_start",
            0,
            {"type": "tool_use", "id": "toolu_a", "name": "Bash", "input": {}},
        ),
        ("content_block_delta", 0, {"type": "input_json_delta", "partial_json": '{"command":"ls"'}),
        ("content_block_stop", 0, None),
        ("content_block_start", 1, {"type": "text", "text": ""}),
        ("content_block_delta", 1, {"type": "text_delta", "text": "and"}),
        ("content_block_stop", 1, None),
        (
            "content_block_start",
            2,
            {"type": "tool_use", "id": "toolu_b", "name": "Bash", "input": {}},
        ),
        (
            "content_block_delta",
            2,
            {"type": "input_json_delta", "partial_json": '{"command":"pwd"}'},
        ),
        ("content_block_stop", 2, None),
    ]
    assert events[-2]["delta"]["stop_reason"] == "tool_use"
