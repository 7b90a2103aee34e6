"""SPEC §4, §8, §9: the Responses bridge writes Chat content deltas from their bytes
(`ChatTextLane`) exactly as its general path (parse, item state, encode) writes them: the
client's bytes, the follow-ups and the report are the same with the lane and without it,
for streams of every shape (texts JSON writes otherwise, other keys, other orders, near-JSON
chunks, calls, reasoning, usage, framings), read whole, cut anywhere or one event a read.
The bridge's own stream (`ResponsesOverChatStream`) is also fed Chat bytes directly, in
framings the Chat exchange itself would not hand it."""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.bridge.responses_chat.output import ResponseHead
from proxy.bridge.responses_chat.stream import ResponsesOverChatStream
from proxy.bridge.responses_chat.tools import ToolTable
from tests.bridge.lane_streams import chat_events, no_lane, reads_of
from tests.bridge.responses_chat.wire import body, entropy_source, run
from tests.chat.helpers import chunk, role, sse, text
from tests.responses.helpers import parse

JSON = dict[str, Any]


def outcome(reads: list[bytes]) -> tuple[Any, ...]:
    got = run(body(), [reads])
    return got.client, got.followups, type(got.end), got.exchange.report()


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_deltas_taken_from_their_bytes_give_what_the_general_path_gives(
    data: st.DataObject,
) -> None:
    reads = data.draw(reads_of(data.draw(chat_events())))
    with no_lane():
        expected = outcome(reads)
    assert outcome(reads) == expected


def _bridge_stream() -> ResponsesOverChatStream:
    head = ResponseHead.for_request(body(), ToolTable(), entropy_source())
    return ResponsesOverChatStream(head, entropy_source())


def _fed(reads: list[bytes]) -> bytes:
    stream = _bridge_stream()
    return b"".join(stream.feed(read) for read in reads) + stream.finish()


@settings(max_examples=200, deadline=None)
@given(data=st.data(), eol=st.sampled_from([b"\n", b"\r\n", b"\r"]))
def test_the_bridge_stream_fed_chat_bytes_directly_gives_the_general_path_s_bytes(
    data: st.DataObject, eol: bytes
) -> None:
    """Framings and pieces the Chat exchange never hands on (CR line ends, events cut
    anywhere) reach the same bytes: such reads are decoded, not split at blank lines."""
    events = [event.replace(b"\n", eol) for event in data.draw(chat_events())]
    reads = data.draw(reads_of(events))
    with no_lane():
        expected = _fed(reads)
    assert _fed(reads) == expected


def test_plain_deltas_after_the_first_two_are_not_parsed() -> None:
    """Paced reads: the first delta opens the message (parsed), the second opens the lane
    (parsed), the rest are written from their bytes."""
    head, paced = (
        sse(role(), text("one "), text("two "), done=False),
        [sse(text(f"w{n} "), done=False) for n in range(5)],
    )
    stream = _bridge_stream()
    stream.feed(head)
    with mock.patch("orjson.loads", side_effect=AssertionError("parsed")):
        sent = [stream.feed(read) for read in paced]
    events = parse(b"".join(sent))
    assert [e["delta"] for e in events] == [f"w{n} " for n in range(5)]
    assert [e["sequence_number"] for e in events] == list(range(6, 11))  # after 0-5
    done = parse(stream.finish())
    final = done[-1]["response"]["output"][0]["content"][0]["text"]
    assert final == "one two " + "".join(f"w{n} " for n in range(5))


@pytest.mark.parametrize(
    "later",
    [
        b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"a\\"b"},"finish_reason":null}]}\n\n',
        b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"caf\\u00e9"},"finish_reason":null}]}\n\n',
        b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"\xff"},"finish_reason":null}]}\n\n',
        b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":""},"finish_reason":null}]}\n\n',
        b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"stop"}]}\n\n',
        b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}]}}\n\n',
    ],
    ids=["quote", "escape", "not-utf8", "empty", "finish", "extra-brace"],
)
def test_a_delta_the_lane_cannot_vouch_for_is_written_as_the_general_path_writes_it(
    later: bytes,
) -> None:
    reads = [sse(role(), text("one "), text("two "), done=False), later, sse(text("end"))]
    with no_lane():
        expected = _fed(reads)
    assert _fed(reads) == expected
    assert _fed([b"".join(reads)]) == expected


def test_a_text_written_twice_in_the_lane_s_chunk_does_not_open_the_lane() -> None:
    """The chunk that would open the lane holds its content's text twice (once in a key of
    its own): which of the two is the delta, the bytes alone do not say."""
    first = {"meta": {"content": "ab"}, **chunk({"content": "ab"})}  # the other one first
    later = {"meta": {"content": "zz"}, **chunk({"content": "ab"})}
    reads = [sse(role(), text("one "), first, done=False), sse(later, later)]
    with no_lane():
        expected = _fed(reads)
    assert _fed(reads) == expected
    assert [e.get("delta") for e in parse(expected)].count("ab") == 3


def test_a_whole_delta_read_after_a_line_the_decoder_holds_is_read_with_that_line() -> None:
    """Only where the decoder holds nothing are a read's events split at their blank lines:
    a data line before it (no blank line yet) belongs to the same event."""
    reads = [sse(role(), text("one "), text("two "), done=False), b'data: {"x":1}\n']
    reads += [sse(text("three "), done=False), sse(text("end"))]
    with no_lane():
        expected = _fed(reads)
    assert _fed(reads) == expected
