"""The Responses stream core's shortcuts decide exactly as its general path (SPEC §4, §8):
reads split by bytes methods give the generic SSE decoder's events, whatever the framing and
wherever the reads cut it, and the client, the follow-up and the notes are the same."""

from __future__ import annotations

import itertools
from itertools import pairwise
from typing import Any
from unittest import mock

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.chat.exchange import RouteRules
from proxy.core.events import ExchangeEvent, LoopDetected, OpenFollowup, UpstreamBroken
from proxy.responses.exchange import ResponsesExchange
from proxy.sse import SSEDecoder
from responses_api.helpers import Upstream, answered_call, request

KIMI = (
    "<|tool_calls_section_begin|><|tool_call_begin|>functions.bash:0"
    '<|tool_call_argument_begin|>{"command":"ls"}<|tool_call_end|><|tool_calls_section_end|>'
)
TEXTS = st.one_of(
    st.text(max_size=8),
    st.sampled_from(["<", "[", "[TOOL", "<tool_call>", '"', "\\", "\n", "\x00", "é", "\u2028"]),
    st.sampled_from([KIMI, KIMI[:20], KIMI[20:]]),
)
OLD = '{"command":"ls"}'
# The history answered `functions.bash:0` with OLD: a call repeating it is a replay.
HISTORY = request(*answered_call("call_0badf00d_functions.bash:0", OLD), model="kimi-k2")
FINAL = Upstream().created().message("done").completed().numbered()


class DecoderReader:
    """The generic decoder in the shape of the stream's reader: the reference."""

    def __init__(self) -> None:
        self._decoder = SSEDecoder()

    def feed(self, data: bytes) -> list[tuple[bytes | None, tuple[bytes, ...]]]:
        return [(e.data, e.other) for e in self._decoder.feed(data)]

    def end(self) -> list[tuple[bytes | None, tuple[bytes, ...]]]:
        return [(e.data, e.other) for e in self._decoder.end()]


def reframed(event: bytes, how: int) -> bytes:
    """One `event:` + `data:` event in another framing an upstream may use."""
    if how == 1:
        return event.replace(b"\n", b"\r\n")
    if how == 2:
        return event.replace(b"\n", b"\r")
    if how == 3:
        return event.partition(b"\n")[2]  # no `event:` line
    if how == 4:
        return event.replace(b"data: ", b"data:")
    if how == 5:
        return b": keep-alive\n\n" + event
    if how == 6:
        return b"id: 3\n" + event
    if how == 7:  # the JSON over several data lines (joined with newlines, it is the same)
        head, _, data = event.partition(b"\ndata: ")
        pretty = orjson.dumps(orjson.loads(data), option=orjson.OPT_INDENT_2)
        return head + b"\n" + b"".join(b"data: " + line + b"\n" for line in pretty.split(b"\n"))
    return event


ODD = st.sampled_from([b"data: [DONE]\n\n", b"data: not json\n\n", b"event: x\ndata: 42\n\n"])


@st.composite
def upstream_events(draw: st.DrawFn) -> list[bytes]:
    """A round of messages and calls (a replay among them), numbered as upstreams do or not."""
    up = Upstream().created()
    for _ in range(draw(st.integers(0, 3))):
        if draw(st.booleans()):
            up.message(*draw(st.lists(TEXTS, min_size=1, max_size=5)), done=draw(st.booleans()))
        else:
            call_id = draw(st.sampled_from(["functions.bash:0", "functions.bash:1", None]))
            up.call(call_id, draw(st.sampled_from([OLD, '{"command":"pwd"}'])))
    if draw(st.booleans()):
        up.completed()
    return up.numbered_events() if draw(st.booleans()) else up.events


@st.composite
def framed_reads(draw: st.DrawFn) -> list[bytes]:
    """A round's events in any framing, with odd events among them, cut at any bytes."""
    events = draw(upstream_events())
    out = []
    for event in events:
        if draw(st.integers(0, 9)) == 0:
            out.append(draw(ODD))
        out.append(reframed(event, draw(st.integers(0, 12))))
    stream = b"".join(out)
    cuts = sorted(draw(st.lists(st.integers(0, len(stream)), max_size=6)))
    return [stream[a:b] for a, b in pairwise([0, *cuts, len(stream)])]


def outcome(rounds: list[list[bytes]]) -> tuple[Any, ...]:
    """Everything the exchange hands the shell over its rounds, and its report."""
    counter = itertools.count(1)

    def entropy(n: int) -> bytes:  # the same ids in every run
        return next(counter).to_bytes(8, "big")[-n:].rjust(n, b"\x01")

    exchange = ResponsesExchange(HISTORY, orjson.dumps(HISTORY), RouteRules(), entropy=entropy)
    got: list[ExchangeEvent] = []
    for reads in rounds:
        exchange.begin_round(stream=True)
        for read in reads:
            if exchange.phase.name != "RECEIVING":
                break
            got += exchange.feed(read)
        if exchange.phase.name == "RECEIVING":
            got += exchange.end()
        if not (got and isinstance(got[-1], OpenFollowup)):
            break
    return [_comparable(event) for event in got], exchange.report()


def _comparable(event: ExchangeEvent) -> object:
    """An event as a value (errors are exceptions, equal only to themselves)."""
    if isinstance(event, LoopDetected | UpstreamBroken):
        error = event.error
        return type(event), type(error), error.message, error.code, repr(event)
    return event


@settings(max_examples=400, deadline=None)
@given(reads=framed_reads())
def test_reads_split_by_bytes_methods_give_what_the_decoder_gives(reads: list[bytes]) -> None:
    with mock.patch("proxy.responses.stream.EventReader", DecoderReader):
        expected = outcome([reads, [FINAL]])
    assert outcome([reads, [FINAL]]) == expected
