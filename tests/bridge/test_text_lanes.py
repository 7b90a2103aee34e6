"""SPEC §4, §8, §9: both bridges write Chat content deltas from their bytes (`ChatTextLane`,
proxy/bridge/text_lane.py) exactly as their general paths (parse, item or block state,
encode) write them: the client's bytes, the follow-ups and the report are the same with the
lanes and without them, for Chat streams of every shape (texts JSON writes otherwise, other
keys, near-JSON chunks, reasoning, calls, usage), read whole, cut anywhere or one event a
read. Each bridge's stream is also fed Chat bytes directly, in framings the Chat exchange
itself would not hand it (CR line ends, lines the decoder holds)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.bridge.anthropic_chat.stream import ChatToAnthropicStream
from proxy.bridge.responses_chat.output import ResponseHead
from proxy.bridge.responses_chat.stream import ResponsesOverChatStream
from proxy.bridge.responses_chat.tools import ToolTable
from tests.bridge.anthropic_chat.bridge_wire import BASH_TOOL, new_exchange, parse_events, play
from tests.bridge.lane_streams import chat_events, no_lane, reads_of
from tests.bridge.responses_chat import wire
from tests.chat.helpers import chunk, role, sse, text
from tests.responses.helpers import parse

ANTHROPIC_REQUEST = {
    "model": "kimi-k2",
    "max_tokens": 512,
    "stream": True,
    "messages": [{"role": "user", "content": "list files"}],
    "tools": [BASH_TOOL],
}


def _responses_outcome(reads: list[bytes]) -> tuple[object, ...]:
    got = wire.run(wire.body(), [reads])
    return got.client, got.followups, type(got.end), got.exchange.report()


def _anthropic_outcome(reads: list[bytes]) -> tuple[object, ...]:
    played = play(new_exchange(ANTHROPIC_REQUEST), [b"".join(reads)], pieces=lambda _: reads)
    broken = None if played.broken is None else str(played.broken.error)
    return played.client, played.followups, played.loop, broken


def _responses_fed(reads: list[bytes]) -> bytes:
    head = ResponseHead.for_request(wire.body(), ToolTable(), wire.entropy_source())
    stream = ResponsesOverChatStream(head, wire.entropy_source())
    return b"".join(stream.feed(read) for read in reads) + stream.finish()


def _anthropic_fed(reads: list[bytes]) -> bytes:
    stream = ChatToAnthropicStream("msg_1", "m")
    return b"".join(stream.feed(read) for read in reads) + stream.close()


@dataclass(frozen=True)
class Bridge:
    name: str
    outcome: Callable[[list[bytes]], tuple[object, ...]]  # through the whole exchange
    fed: Callable[[list[bytes]], bytes]  # through the bridge's stream alone
    deltas: Callable[[bytes], list[str]]  # the client's text deltas' texts

    def __str__(self) -> str:
        return self.name


BRIDGES = [
    Bridge(
        "responses",
        _responses_outcome,
        _responses_fed,
        lambda out: [e["delta"] for e in parse(out) if e["type"].endswith("output_text.delta")],
    ),
    Bridge(
        "anthropic",
        _anthropic_outcome,
        _anthropic_fed,
        lambda out: [
            e["delta"]["text"]
            for e in parse_events(out)
            if e["type"] == "content_block_delta" and e["delta"]["type"] == "text_delta"
        ],
    ),
]
each_bridge = pytest.mark.parametrize("bridge", BRIDGES, ids=str)


def _same_fed(bridge: Bridge, reads: list[bytes]) -> bytes:
    with no_lane():
        expected = bridge.fed(reads)
    assert bridge.fed(reads) == expected
    return expected


@each_bridge
@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_deltas_taken_from_their_bytes_give_what_the_general_path_gives(
    bridge: Bridge, data: st.DataObject
) -> None:
    reads = data.draw(reads_of(data.draw(chat_events())))
    with no_lane():
        expected = bridge.outcome(reads)
    assert bridge.outcome(reads) == expected


@each_bridge
@settings(max_examples=150, deadline=None)
@given(data=st.data(), eol=st.sampled_from([b"\n", b"\r\n", b"\r"]))
def test_the_bridge_stream_fed_chat_bytes_directly_gives_the_general_path_s_bytes(
    bridge: Bridge, data: st.DataObject, eol: bytes
) -> None:
    """Framings and pieces the Chat exchange never hands on (CR line ends, events cut
    anywhere) reach the same bytes."""
    events = [event.replace(b"\n", eol) for event in data.draw(chat_events())]
    _same_fed(bridge, data.draw(reads_of(events)))


def test_the_responses_lane_numbers_its_events_and_keeps_their_text_for_the_output() -> None:
    """Paced reads: the first delta opens the message, the second the lane (both parsed);
    the rest are written from their bytes, numbered on, their text in the final output."""
    head = ResponseHead.for_request(wire.body(), ToolTable(), wire.entropy_source())
    stream = ResponsesOverChatStream(head, wire.entropy_source())
    stream.feed(sse(role(), text("one "), text("two "), done=False))
    with mock.patch("orjson.loads", side_effect=AssertionError("parsed")):
        sent = [stream.feed(sse(text(f"w{n} "), done=False)) for n in range(5)]
    events = parse(b"".join(sent))
    assert [e["delta"] for e in events] == [f"w{n} " for n in range(5)]
    assert [e["sequence_number"] for e in events] == list(range(6, 11))  # after 0-5
    final = parse(stream.finish())[-1]["response"]["output"][0]["content"][0]["text"]
    assert final == "one two " + "".join(f"w{n} " for n in range(5))


def test_the_anthropic_lane_writes_its_deltas_unparsed_in_the_live_block() -> None:
    """Paced reads: the first delta starts the text block, the second opens the lane (both
    parsed); the rest are written from their bytes at the block's index."""
    stream = ChatToAnthropicStream("msg_1", "m")
    stream.feed(sse(role(), text("one "), text("two "), done=False))
    with mock.patch("orjson.loads", side_effect=AssertionError("parsed")):
        sent = b"".join(stream.feed(sse(text(f"w{n} "), done=False)) for n in range(5))
    events = parse_events(sent)
    assert [e["delta"]["text"] for e in events] == [f"w{n} " for n in range(5)]
    assert {e["index"] for e in events} == {0}


LATER = {
    "quote": sse(text('a"b'), done=False),
    "escape": sse(text("café"), done=False).replace("é".encode(), b"\\u00e9"),
    "not-utf8": sse(text("x"), done=False).replace(b'"x"', b'"\xff"'),
    "empty": sse(text(""), done=False),
    "finish": sse(text("x", "stop"), done=False),
    "reasoning": sse(chunk({"content": "x", "reasoning_content": "why"}), done=False),
    "extra-brace": sse(text("x"), done=False).replace(b"}\n\n", b"}}\n\n"),
}


@each_bridge
@pytest.mark.parametrize("later", LATER.values(), ids=LATER.keys())
def test_a_delta_the_lane_cannot_vouch_for_is_written_as_the_general_path_writes_it(
    bridge: Bridge, later: bytes
) -> None:
    reads = [sse(role(), text("one "), text("two "), done=False), later, sse(text("end"))]
    expected = _same_fed(bridge, reads)
    assert _same_fed(bridge, [b"".join(reads)]) == expected


@each_bridge
def test_a_text_written_twice_in_the_lane_s_chunk_does_not_open_the_lane(bridge: Bridge) -> None:
    """The chunk that would open the lane holds its content's text twice (once in a key of
    its own, first): which of the two is the delta, the bytes alone do not say."""
    first = {"meta": {"content": "ab"}, **chunk({"content": "ab"})}
    later = {"meta": {"content": "zz"}, **chunk({"content": "ab"})}
    expected = _same_fed(bridge, [sse(role(), text("one "), first, done=False), sse(later, later)])
    assert bridge.deltas(expected).count("ab") == 3


@each_bridge
def test_a_whole_delta_read_after_a_line_the_decoder_holds_is_read_with_it(
    bridge: Bridge,
) -> None:
    """Only where the decoder holds nothing are a read's events split at their blank lines:
    a data line before it (no blank line yet) belongs to the same event."""
    reads = [sse(role(), text("one "), text("two "), done=False), b'data: {"x":1}\n']
    _same_fed(bridge, [*reads, sse(text("three "), done=False), sse(text("end"))])


@each_bridge
def test_a_chunk_of_reasoning_and_text_does_not_open_the_lane(bridge: Bridge) -> None:
    """Such a chunk writes more than its text's delta (on Anthropic a thinking block's
    events too): the next like it is not the lane's."""
    both = chunk({"reasoning_content": "why", "content": "a"})
    expected = _same_fed(bridge, [sse(role(), both, done=False), sse(both, done=False)])
    assert bridge.deltas(expected) == ["a", "a"]
