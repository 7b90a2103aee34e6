"""SPEC §4, §8, §9: the Responses bridge writes Chat content deltas from their bytes
(`ChatTextLane`) exactly as its general path (parse, item state, encode) writes them: the
client's bytes, the follow-ups and the report are the same with the lane and without it,
for streams of every shape (texts JSON writes otherwise, other keys, other orders, near-JSON
chunks, calls, reasoning, usage, framings), read whole, cut anywhere or one event a read.
The bridge's own stream (`ResponsesOverChatStream`) is also fed Chat bytes directly, in
framings the Chat exchange itself would not hand it."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.bridge.responses_chat.output import ResponseHead
from proxy.bridge.responses_chat.stream import ResponsesOverChatStream
from proxy.bridge.responses_chat.text_lane import ChatTextLane
from proxy.bridge.responses_chat.tools import ToolTable
from tests.bridge.responses_chat.wire import body, entropy_source, run
from tests.chat.helpers import chunk, finish, header, role, sse, text, usage_chunk
from tests.core.test_near_json import near_json
from tests.responses.helpers import parse

JSON = dict[str, Any]

TEXTS = st.one_of(
    st.text(alphabet="ab é\u2028\x7f", min_size=1, max_size=6),
    st.sampled_from(['"', "\\", "\n", "\x01", "<", "[", "", "é", "a\tb", "\ue000", "\ue001"]),
)


@contextmanager
def no_lane() -> Iterator[None]:
    """The general path for every chunk: the reference."""
    with mock.patch.object(ChatTextLane, "of", classmethod(lambda cls, *args: None)):
        yield


@st.composite
def chat_events(draw: st.DrawFn) -> list[bytes]:
    """A Chat stream's events (each with its blank line): mostly content deltas alike, and
    among them deltas of other shapes, near-JSON, reasoning, calls, usage and comments."""
    events: list[bytes] = [sse(role(), done=False)]
    for _ in range(draw(st.integers(1, 12))):
        kind = draw(st.integers(0, 9))
        item: Any = text(draw(TEXTS))
        if kind == 1:  # other keys or values beside the content
            extra = draw(st.sampled_from([{"system_fingerprint": "fp"}, {"usage": None}]))
            item = text(draw(TEXTS), **extra)
        elif kind == 2:
            item = chunk({"reasoning_content": draw(TEXTS)})
        elif kind == 3:
            item = chunk({"content": draw(TEXTS), "role": "assistant"})
        elif kind == 4:
            item = draw(near_json(orjson.dumps(text(draw(TEXTS))))).join((b"data: ", b""))
        elif kind == 5:
            item = draw(st.sampled_from([b": keep-alive", b"data: [1]", b"event: x"]))
        elif kind == 6:
            item = text(draw(TEXTS), model=draw(st.sampled_from(["m", "other"])))
        elif kind == 7:  # the same text, written by hand with a space or an escape
            item = orjson.dumps(text("ab")).replace(
                b'"ab"', draw(st.sampled_from([b' "ab"', b'"a\\u0062"']))
            )
            item = b"data: " + item
        events.append(
            item if isinstance(item, bytes) and item.endswith(b"\n\n") else sse(item, done=False)
        )
    if draw(st.booleans()):
        call = header(0, "functions.shell:0", "shell", '{"cmd":"pwd"}')
        events.append(sse(chunk({"tool_calls": [call]}), done=False))
    if draw(st.booleans()):
        events.append(
            sse(finish(draw(st.sampled_from(["stop", "tool_calls", "length"]))), done=False)
        )
    if draw(st.booleans()):
        events.append(sse(usage_chunk(), done=False))
    if draw(st.booleans()):
        events.append(b"data: [DONE]\n\n")
    return events


@st.composite
def reads_of(draw: st.DrawFn, events: list[bytes]) -> list[bytes]:
    """The events read whole, one a read, or cut at any bytes."""
    how = draw(st.integers(0, 2))
    joined = b"".join(events)
    if how == 0:
        return [joined]
    if how == 1:
        return events
    cuts = sorted(draw(st.lists(st.integers(0, len(joined)), max_size=6)))
    return [joined[a:b] for a, b in itertools.pairwise([0, *cuts, len(joined)])]


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
