"""SPEC §4, §8: an upstream's reads cut for runs of plain text deltas (`reads.py`) at the edge
the mutation audit found unpinned: a run is tried only where the event reader holds nothing,
so an event the upstream left without its blank line at the end of a read takes the next
read's first lines, as one event, wherever the reads are cut."""

from __future__ import annotations

import orjson

from proxy.anthropic.exchange import AnthropicExchange
from proxy.core.events import Forward
from proxy.core.rounds import RouteRules
from tests.anthropic.anthropic_wire import end, ev, parse, request, start


def delta(text: str) -> dict[str, object]:
    return {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "text_delta", "text": text},
    }


BLOCK = ev(
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
)
# A data line whose blank line never comes: the lines after it are the same event.
UNENDED = b'event: ping\ndata: {"type":"ping"}\n'
FIRST = start() + BLOCK + ev(delta("hello ")) + UNENDED  # the text block's lane is open
SECOND = ev(delta("more")) + ev({"type": "content_block_stop", "index": 0}) + end("end_turn")


def client(reads: list[bytes]) -> bytes:
    exchange = AnthropicExchange(request(), b"{}", RouteRules())
    exchange.begin_round(stream=True)
    out = b""
    for data in reads:
        for event in exchange.feed(data):
            assert isinstance(event, (bytes, Forward)), event
            out += event if isinstance(event, bytes) else event.data
    return out


def test_a_read_that_ends_inside_an_event_joins_the_next_reads_first_lines_to_it() -> None:
    split = client([FIRST, SECOND])
    assert split == client([FIRST + SECOND])
    # The ping's data and the next delta's are one event's two data lines: not JSON.
    texts = [data for name, data in parse(split) if name is None]
    # Its two `event:` lines become comments with it (SPEC §4).
    names = ": event: ping\n: event: content_block_delta\n"
    assert texts == [names + ': {"type":"ping"}\n: ' + orjson.dumps(delta("more")).decode()]
