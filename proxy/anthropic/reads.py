"""An upstream's reads as events for the stream core, except runs of plain text deltas.

While a scanned text block's client block is open (its lane, texts.py), a read from an event
boundary on may begin with a run of that block's plain text deltas: `TextBlocks.take_run`
sends such a run on as the bytes that came, and nothing parses it (runs.py says how it is
proved). The rest of a read goes to the event reader, cut where a run may begin, so that the
reader is idle there: a piece that ends with a blank line leaves it holding nothing (the
line before it was complete, and no CR waits for its LF).
"""

from __future__ import annotations

from collections.abc import Iterator

from proxy.anthropic.texts import TextBlocks
from proxy.core.framing import Event, EventReader

# A run this long (bytes) shows the stream's deltas are plain: runs are tried at every chance.
_LONG_RUN = 1024
_MAX_MISSES = 7  # a try at least every 64 events


class UpstreamReads:
    """Feed it reads; it yields the events the stream core must decide, piece by piece."""

    __slots__ = ("_idle", "_misses", "_reader", "_texts")

    def __init__(self, reader: EventReader, texts: TextBlocks | None) -> None:
        self._reader = reader
        self._texts = texts  # None: no text is scanned, so there are no runs
        self._idle = True  # the reader holds no part of an event
        self._misses = 0  # runs tried in a row that did not begin (or were short)

    def feed(self, data: bytes) -> Iterator[list[Event]]:
        """The events of `data`, in pieces: the caller decides each piece's events before the
        next is cut, since they open and close the lane the next run belongs to."""
        texts = self._texts
        if texts is None:
            yield self._reader.feed(data)
            return
        at, size = 0, len(data)
        while at < size:
            if self._idle and texts.lane is not None:
                end = texts.take_run(data, at)
                if end > at:
                    if end - at >= _LONG_RUN:
                        self._misses = 0
                    at = end
                    continue
                self._misses = min(self._misses + 1, _MAX_MISSES)
            # After runs that did not begin, the next try comes later (1, 2, 4, ... events on):
            # a stream whose deltas are seldom plain is read in pieces of many events.
            cut = texts.next_run(data, at, max(1, 1 << self._misses >> 1))
            piece = data[at:cut] if at or cut < size else data  # offsets: the rest not copied
            at = cut
            self._idle = piece.endswith(b"\n\n")
            yield self._reader.feed(piece)

    def whole_delta(self, data: bytes) -> bool:
        """Did the lane take this read whole, as one plain text delta (`take_whole`)? Only
        where the reader holds nothing: else the read's bytes may end its event."""
        texts = self._texts
        return texts is not None and self._idle and texts.take_whole(data)

    def end(self) -> list[Event]:
        return self._reader.end()
