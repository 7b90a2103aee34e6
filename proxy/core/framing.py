"""An Anthropic upstream's reads as events: exactly what `SSEDecoder` makes of them, faster for
the reads Anthropic-style upstreams send.

Those reads are runs of `event: NAME\\ndata: {...}\\n\\n` events, and the generic decoder spends
a Python call on every line of them. A run of such events is split here with a few bytes
methods over the whole run instead; anything else (a CR anywhere, a data line without its
`event:` line, more lines per event, an event the previous read began) goes to the decoder,
and so does the tail of a read after its last blank line. Both give an event as its data (data
lines joined, as the decoder joins them) and its other lines; the tests hold this splitter to
the decoder's answer for any bytes split at any points.
"""

from __future__ import annotations

from proxy.core.sse import SSEDecoder, SSEEvent

# An event as the stream core reads it: its data (None: no data line) and its other lines.
Event = tuple[bytes | None, tuple[bytes, ...]]


class EventReader:
    """Feed it reads; it returns the events each completes (as `SSEDecoder` would)."""

    __slots__ = ("_decoder",)

    def __init__(self) -> None:
        self._decoder = SSEDecoder()

    def feed(self, data: bytes) -> list[Event]:
        decoder = self._decoder
        if data.find(b"\r") >= 0:  # line ends to normalize, maybe across reads: the decoder's
            return _pairs(decoder.feed(data))
        events: list[Event] = []
        start, end = whole_events(data, decoder.idle)
        if start < 0:
            return _pairs(decoder.feed(data))
        if start:
            # The decoder finishes the event it holds; after that blank line it holds nothing.
            events = _pairs(decoder.feed(data[:start]))
        run = _split(data[start:end]) if end > start else None
        if run is None:
            end = start  # not a run of two-line events: the decoder reads all of it
        else:
            events += run
        if end < len(data):
            # After a run, the tail has no blank line: the decoder keeps it, and returns none.
            events += _pairs(decoder.feed(data[end:]))
        return events

    def end(self) -> list[Event]:
        return _pairs(self._decoder.end())


def whole_events(data: bytes, idle: bool) -> tuple[int, int]:
    """Where a read's whole events lie (`data[start:end]`) for a decoder that is `idle` or
    holds part of an event: `start` is 0, or just past the blank line that ends the held
    event (-1: the read does not end it); `end` is just past the read's last blank line
    (`start` when there is none). Before them the decoder finishes its event, after them it
    keeps the cut tail. A blank line (`\\n\\n`) always ends an event; reads with a CR are the
    decoder's alone, since `\\r\\n\\r\\n` ends one too."""
    start = 0 if idle else data.find(b"\n\n") + 2
    if start == 1:
        return -1, -1
    last = data.rfind(b"\n\n", start)
    return start, last + 2 if last >= 0 else start


def _pairs(events: list[SSEEvent]) -> list[Event]:
    return [(event.data, event.other) for event in events]


def _split(run: bytes) -> list[Event] | None:
    """The events of `run` (no CR, ends with a blank line) if every one is an `other` line and
    a `data: ` line, else None.

    Split on newlines, such a run is (other, data, blank) triples and a last empty piece. The
    checks make sure of it without a Python step per line: every third line is blank; the
    first line is neither blank nor begins with `data:`; no line after a blank one begins
    with `data:`; and as many lines begin with `data: ` as there are triples. Those can then
    only be the second of each triple, all of them, so no other line after the first is
    blank either (the data line after it would follow a blank line).
    """
    lines = run.split(b"\n")
    count = len(lines) // 3
    if (
        len(lines) != 3 * count + 1
        or any(lines[2::3])
        or not lines[0]
        or lines[0][:5] == b"data:"
        or run.find(b"\n\ndata:") >= 0
        or run.count(b"\ndata: ") != count
    ):
        return None
    return [(data[6:], (other,)) for other, data in zip(lines[:-1:3], lines[1::3], strict=True)]
