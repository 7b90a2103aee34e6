"""The Anthropic core's event splitter gives, read by read, exactly the events the generic SSE
decoder gives (SPEC §4 framing), whatever the bytes and wherever the reads split them."""

from __future__ import annotations

from itertools import pairwise
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core import framing
from proxy.core.framing import Event, EventReader
from proxy.core.sse import SSEDecoder

# Well-formed events, and every piece that can make a run not one: CRs, unnamed and
# multi-line data, data without its space, comments, id lines, blank lines, stray newlines.
PIECES = st.sampled_from(
    [
        b'event: content_block_delta\ndata: {"type":"content_block_delta"}\n\n',
        b'event: ping\ndata: {"type": "ping"}\n\n',
        b"event: x\ndata:  two spaces\n\n",
        b"data: unnamed\n\n",
        b"event: a\ndata: one\ndata: two\n\n",
        b"event: b\ndata:nospace\n\n",
        b"event: data: x\ndata: y\n\n",
        b"data: first\nevent: second\n\n",
        b"\ndata: lead\n\n",
        b": comment\ndata: z\n\n",
        b"id: 7\n",
        b"event: only\n\n",
        b"\n",
        b"\n\n",
        b"\r\n",
        b"\r",
        b"data: ",
        b"event: ",
        b"{}",
        b"x",
    ]
)


def decoded(reads: list[bytes]) -> list[list[Event]]:
    decoder = SSEDecoder()
    out = [[(e.data, e.other) for e in decoder.feed(r)] for r in reads]
    return [*out, [(e.data, e.other) for e in decoder.end()]]


def split(reads: list[bytes]) -> list[list[Event]]:
    reader = EventReader()
    return [*(reader.feed(r) for r in reads), reader.end()]


@st.composite
def reads(draw: st.DrawFn) -> list[bytes]:
    stream = b"".join(draw(st.lists(PIECES, max_size=14)))
    cuts = sorted(draw(st.lists(st.integers(0, len(stream)), max_size=5)))
    bounds = [0, *cuts, len(stream)]
    return [stream[a:b] for a, b in pairwise(bounds)]


@settings(max_examples=600, deadline=None)
@given(reads=reads())
def test_each_read_gives_the_decoders_events(reads: list[bytes]) -> None:
    assert split(reads) == decoded(reads)


def test_a_run_of_two_line_events_is_split_without_the_decoder() -> None:
    run = b'event: ping\ndata: {"type":"ping"}\n\n' * 3
    reader = EventReader()
    with mock.patch.object(SSEDecoder, "feed", side_effect=AssertionError("decoder used")):
        events = reader.feed(run)
    assert events == [(b'{"type":"ping"}', (b"event: ping",))] * 3


@pytest.mark.parametrize(
    "run",
    [
        b"event: a\ndata: one\ndata: two\n\n",  # two data lines: joined
        b"data: x\n\ndata: y\n\ndata: z\n\n",  # unnamed events: three lines per two events
        b"event: a\ndata:x\n\n",  # no space after the colon
        b"\nevent: a\ndata: x\n\n",  # a blank line first
        b"\ndata: x\n\n",  # a blank line first, where the other line goes
        b"data: a\ndata: b\n\n",  # a data line where the other line goes
        b"event: a\ndata: x\n\nevent: b\n\ndata: y\n\n",  # three newlines in a row
        b"event: a\ndata: x\n\ndata: b\ndata: y\n\n",  # a later data line in other's place
    ],
)
def test_runs_of_any_other_shape_are_not_split_here(run: bytes) -> None:
    assert framing._split(run) is None
    assert split([run]) == decoded([run])
