"""SPEC §4, §8, §9: the Anthropic bridge writes Chat content deltas from their bytes
(`ChatTextLane`) exactly as its general path (parse, block queue, encode) writes them: the
client's bytes and the follow-ups are the same with the lane and without it, for streams of
every shape, read whole, cut anywhere or one event a read; and its stream fed Chat bytes
directly, in framings the Chat exchange itself would not hand it."""

from __future__ import annotations

from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.bridge.anthropic_chat.stream import ChatToAnthropicStream
from tests.bridge.anthropic_chat.bridge_wire import BASH_TOOL, new_exchange, parse_events, play
from tests.bridge.lane_streams import chat_events, no_lane, reads_of
from tests.chat.helpers import chunk, role, sse, text

REQUEST = {
    "model": "kimi-k2",
    "max_tokens": 512,
    "stream": True,
    "messages": [{"role": "user", "content": "list files"}],
    "tools": [BASH_TOOL],
}


def outcome(reads: list[bytes]) -> tuple[object, ...]:
    played = play(new_exchange(REQUEST), [b"".join(reads)], pieces=lambda _: reads)
    return played.client, played.followups, played.loop, played.broken


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_deltas_taken_from_their_bytes_give_what_the_general_path_gives(
    data: st.DataObject,
) -> None:
    reads = data.draw(reads_of(data.draw(chat_events())))
    with no_lane():
        expected = outcome(reads)
    assert outcome(reads) == expected


def _fed(reads: list[bytes]) -> bytes:
    stream = ChatToAnthropicStream("msg_1", "m")
    return b"".join(stream.feed(read) for read in reads) + stream.close()


@settings(max_examples=200, deadline=None)
@given(data=st.data(), eol=st.sampled_from([b"\n", b"\r\n", b"\r"]))
def test_the_bridge_stream_fed_chat_bytes_directly_gives_the_general_path_s_bytes(
    data: st.DataObject, eol: bytes
) -> None:
    events = [event.replace(b"\n", eol) for event in data.draw(chat_events())]
    reads = data.draw(reads_of(events))
    with no_lane():
        expected = _fed(reads)
    assert _fed(reads) == expected


def test_plain_deltas_after_the_first_two_are_not_parsed() -> None:
    """Paced reads: the first delta starts the text block, the second opens the lane (both
    parsed), the rest are written from their bytes."""
    stream = ChatToAnthropicStream("msg_1", "m")
    stream.feed(sse(role(), text("one "), text("two "), done=False))
    paced = [sse(text(f"w{n} "), done=False) for n in range(5)]
    with mock.patch("orjson.loads", side_effect=AssertionError("parsed")):
        sent = [stream.feed(read) for read in paced]
    deltas = [e["delta"]["text"] for e in parse_events(b"".join(sent))]
    assert deltas == [f"w{n} " for n in range(5)]
    assert all(e["index"] == 0 for e in parse_events(b"".join(sent)))
    assert b'"text":"one two w0 w1 w2 w3 w4 "' not in stream.close()  # text went out as deltas


@pytest.mark.parametrize(
    "later",
    [
        sse(text('a"b'), done=False),
        sse(text("caf\u00e9"), done=False).replace("é".encode(), b"\\u00e9"),
        sse(text("x"), done=False).replace(b'"x"', b'"\xff"'),
        sse(text(""), done=False),
        sse(text("x", "stop"), done=False),
        sse(chunk({"content": "x", "reasoning_content": "why"}), done=False),
    ],
    ids=["quote", "escape", "not-utf8", "empty", "finish", "reasoning"],
)
def test_a_delta_the_lane_cannot_vouch_for_is_written_as_the_general_path_writes_it(
    later: bytes,
) -> None:
    reads = [sse(role(), text("one "), text("two "), done=False), later, sse(text("end"))]
    with no_lane():
        expected = _fed(reads)
    assert _fed(reads) == expected
    assert _fed([b"".join(reads)]) == expected


def test_a_whole_delta_read_after_a_line_the_decoder_holds_is_read_with_that_line() -> None:
    """Only where the decoder holds nothing are a read's events split at their blank lines:
    a data line before it (no blank line yet) belongs to the same event."""
    reads = [sse(role(), text("one "), text("two "), done=False), b'data: {"x":1}\n']
    reads += [sse(text("three "), done=False), sse(text("end"))]
    with no_lane():
        expected = _fed(reads)
    assert _fed(reads) == expected


def test_a_chunk_of_reasoning_and_text_does_not_open_the_lane() -> None:
    """Such a chunk writes the thinking block's events and the text's: the next like it
    begins a new thinking block, which the lane would not write."""
    both = chunk({"reasoning_content": "why", "content": "a"})
    reads = [sse(role(), both, done=False), sse(both, done=False), sse(text("end"))]
    with no_lane():
        expected = _fed(reads)
    assert _fed(reads) == expected
    assert [e["type"] for e in parse_events(expected)].count("content_block_start") == 4
