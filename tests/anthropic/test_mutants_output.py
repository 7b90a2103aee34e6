"""SPEC §8: the client's side of a streamed round (`output.py`) at the edges the mutation
audit found unpinned: blocks that came whole in `message_start` count among the dense
indexes and as completed blocks, a block completed in the looping round itself needs no
empty block before the loop's error, and an event already at its client index goes on as
the bytes that came."""

from __future__ import annotations

from typing import Any

import orjson

from proxy.anthropic.output import RoundOutput
from proxy.core.ids import mint_client_id
from tests.anthropic.anthropic_wire import (
    assistant,
    end,
    ev,
    parse,
    request,
    results,
    run,
    start,
    text,
    tool,
    tool_use,
)

LS = {"command": "ls"}
MINTED = mint_client_id(1, 0, "abcd", "functions.Bash:0", "toolu_")
HISTORY = (assistant(tool_use(MINTED, "Bash", LS)), results(MINTED))
# The same replay twice in one response trips the breaker at once (SPEC §5).
TWO_REPLAYS = tool(1, "functions.Bash:0", "Bash", LS) + tool(2, "functions.Bash:0", "Bash", LS)


def whole_start(*blocks: dict[str, Any]) -> bytes:
    message = {
        "id": "msg_whole",
        "type": "message",
        "role": "assistant",
        "model": "some-model",
        "content": list(blocks),
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 5, "output_tokens": 7},
    }
    return ev({"type": "message_start", "message": message})


def names(client: bytes) -> list[tuple[str | None, object]]:
    return [(n, d.get("index") if isinstance(d, dict) else d) for n, d in parse(client)]


def test_a_block_streamed_after_two_whole_blocks_is_the_third() -> None:
    first, second = {"type": "text", "text": "One."}, {"type": "text", "text": "Two."}
    upstream = whole_start(first, second) + text(0, "Three.") + end("end_turn")
    received = run(request(), [upstream]).read()  # read() holds the indexes dense
    assert [b["text"] for b in received.message["content"]] == ["One.", "Two.", "Three."]


def test_a_whole_block_is_the_completed_block_a_loop_error_needs() -> None:
    upstream = whole_start({"type": "text", "text": "Looking."}) + TWO_REPLAYS + end()
    got = run(request(*HISTORY), [upstream])
    assert got.loop is not None
    assert names(got.client) == [("message_start", None), ("error", None)]
    assert got.read().message["content"] == [{"type": "text", "text": "Looking."}]


def test_a_block_completed_in_the_looping_round_needs_no_empty_block_before_the_error() -> None:
    upstream = start() + text(0, "Again.") + TWO_REPLAYS + end()
    got = run(request(*HISTORY), [upstream])
    assert got.loop is not None
    assert names(got.client) == [
        ("message_start", None),
        ("content_block_start", 0),
        ("content_block_delta", 0),
        ("content_block_stop", 0),
        ("error", None),
    ]


def test_an_event_at_its_client_index_goes_on_as_the_bytes_that_came() -> None:
    # Spaced JSON: re-encoding it would change the bytes the client gets.
    block = {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking"}}
    spaced = orjson.dumps(block, option=orjson.OPT_INDENT_2).replace(b"\n", b"")
    raw = b"event: content_block_start\ndata: " + spaced + b"\n\n"
    stop = ev({"type": "content_block_stop", "index": 0})
    got = run(request(), [start() + raw + stop + end("end_turn")])
    assert raw in got.client


def test_an_open_block_is_no_reason_for_an_empty_block_before_an_error() -> None:
    # The stream closes its blocks before a loop trips today; the output's contract holds
    # anyway: only a message with neither a completed nor an open block gets one.
    output = RoundOutput(0)
    index = output.take_index()
    output.start(index, {"type": "text", "text": ""})
    output.take()
    assert output.block_before_error() == b""
