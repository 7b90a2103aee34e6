"""The references' event splitter: the generic SSE decoder in the shape of the surfaces'
`EventReader` (`proxy.core.framing`), for the differential tests that compare a fast path
with every event parsed."""

from __future__ import annotations

from proxy.core.sse import SSEDecoder


class DecoderReader:
    def __init__(self) -> None:
        self._decoder = SSEDecoder()

    def feed(self, data: bytes) -> list[tuple[bytes | None, tuple[bytes, ...]]]:
        return [(e.data, e.other) for e in self._decoder.feed(data)]

    def end(self) -> list[tuple[bytes | None, tuple[bytes, ...]]]:
        return [(e.data, e.other) for e in self._decoder.end()]
