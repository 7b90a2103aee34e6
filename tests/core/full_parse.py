"""The references of the differential tests: each surface with its shortcuts off, every event
parsed, so that a fast path's client bytes can be compared with the full parse's."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from unittest import mock

from proxy.anthropic.texts import TextBlocks
from proxy.core.sse import SSEDecoder
from proxy.responses.lane import TextLane


class DecoderReader:
    """The generic SSE decoder in the shape of the surfaces' `EventReader`
    (`proxy.core.framing`)."""

    def __init__(self) -> None:
        self._decoder = SSEDecoder()

    def feed(self, data: bytes) -> list[tuple[bytes | None, tuple[bytes, ...]]]:
        return [(e.data, e.other) for e in self._decoder.feed(data)]

    def end(self) -> list[tuple[bytes | None, tuple[bytes, ...]]]:
        return [(e.data, e.other) for e in self._decoder.end()]


@contextlib.contextmanager
def anthropic_parsing_every_event() -> Iterator[None]:
    """No text lane (not even for a read that is one delta), no run, the generic decoder."""
    with (
        mock.patch.object(TextBlocks, "as_came", lambda self, data: False),
        mock.patch.object(TextBlocks, "take_whole", lambda self, data: False),
        mock.patch.object(TextBlocks, "take_run", lambda self, data, at: at),
        mock.patch("proxy.anthropic.stream.EventReader", DecoderReader),
    ):
        yield


@contextlib.contextmanager
def responses_parsing_every_event() -> Iterator[None]:
    """No lane (not even for a read that is one delta), no run, no cut delta held for the
    next read, the generic decoder."""
    with (
        mock.patch("proxy.responses.stream._cut_delta", lambda piece: False),
        mock.patch.object(TextLane, "take", lambda self, data, carry, out: False),
        mock.patch.object(TextLane, "take_whole", lambda self, data, carry: False),
        mock.patch.object(TextLane, "take_run", lambda self, data, pos, carry, out: pos),
        mock.patch("proxy.responses.stream.EventReader", DecoderReader),
    ):
        yield
