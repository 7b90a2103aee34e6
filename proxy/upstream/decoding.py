"""A compressed upstream body, decoded a bounded piece at a time (SPEC §6).

The proxy asks for `accept-encoding: identity`; an upstream that compresses anyway gets its
body decoded here, never through a decoder that hands back all a chunk inflates to at once
(httpx's: 512 KiB of gzip took the proxy to 2.1 GiB of RSS). Each step decodes at most
`STEP_BYTES` (zstd: at most one `ZSTD_SLICE_BYTES` slice of input's worth, see below), every
coding's output counts toward `MAX_DECODED_BYTES` as it is made, and past it the body fails
with `DecodedTooLarge`, an `httpx.DecodingError` (so `map_upstream_errors` makes it the
client's `upstream_stream_error`, counted among the upstream errors). A piece decoded from
bytes already held, rather than just read, first lets the event loop run: a client that left
is seen between pieces, not after the whole body.

Codings, as httpx undoes them (the last listed first): `gzip` and `x-gzip`, `deflate` with or
without its zlib wrapper (told apart by its first two bytes), `zstd` when the `zstandard`
module is importable, `identity`. Data after a gzip or deflate stream's end is dropped, as
httpx drops it, and a stream cut short ends without an error (the transport's framing says
whether the body was cut); a zstd body cut inside a frame is an error, as in httpx. Not a
module mypyc compiles (setup.py): `zstandard` is optional.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

import httpx

try:
    import zstandard
except ImportError:  # pragma: no cover - an install without it refuses zstd
    zstandard = None  # type: ignore[assignment]

# The decoded bytes one body may come to, all its codings' output together (docs/reliability.md,
# "The decoded size of a compressed body", says why this much): as much as one event of an
# uncompressed stream may hold (MAX_EVENT_BYTES, proxy/core/sse.py), more than twice the
# longest stream an LLM API sends.
MAX_DECODED_BYTES = 64 * 1024 * 1024
# What one step decodes at most (gzip, deflate), and the input a zlib step is given at most
# (CPython copies what it leaves unconsumed at every step: a whole 10 MiB read would be copied
# at each of its steps).
STEP_BYTES = 64 * 1024
# zstandard's decompressobj has no output bound per call: it is given this much input at a time.
# A zstd block decodes to at most 128 KiB from as little as 4 bytes (an RLE block), so one
# slice decodes to at most 4 blocks and the one it completes: 640 KiB.
ZSTD_SLICE_BYTES = 16
# RFC 9659: a zstd content-coding's window is at most 8 MB; a decoder need not accept more
# (zstandard's default allows 128 MiB, which a frame header alone would make it allocate).
ZSTD_MAX_WINDOW = 8 * 1024 * 1024
# More codings than any server applies (one, rarely two): each is a decoder's state.
MAX_CODINGS = 4
# zlib's window bits per coding: gzip framing; deflate's is chosen by its first bytes (None).
_ZLIB_BITS: dict[str, int | None] = {
    "gzip": zlib.MAX_WBITS | 16,
    "x-gzip": zlib.MAX_WBITS | 16,
    "deflate": None,
}


class DecodedTooLarge(httpx.DecodingError):
    """The decoded body went past MAX_DECODED_BYTES (a compression bomb, or a body no upstream
    of an LLM API sends)."""


def codings(header: bytes) -> list[str]:
    """A content-encoding header's codings, in the order they were applied (`identity`, which
    changes nothing, left out)."""
    named = (coding.strip().lower() for coding in header.decode("latin-1").split(","))
    return [name for name in named if name and name != "identity"]


def refused(applied: list[str]) -> str | None:
    """Why `decoded` cannot undo these codings (a coding it has no decoder for, or too many of
    them), or None."""
    for coding in applied:
        if coding not in _ZLIB_BITS and (coding != "zstd" or zstandard is None):
            return f"no decoder for content-encoding {coding!r}"
    if len(applied) > MAX_CODINGS:
        return f"more than {MAX_CODINGS} content-encodings"
    return None


def decoded(
    source: AsyncIterable[bytes], applied: list[str], limit: int | None = None
) -> AsyncIterator[bytes]:
    """`source` with the `applied` codings (none `refused`) undone, a bounded piece at a time;
    failures raise httpx.DecodingError. `limit`: MAX_DECODED_BYTES unless given."""
    stages = [_stage(coding) for coding in reversed(applied)]
    return _Decoded(source, stages, MAX_DECODED_BYTES if limit is None else limit)


class _Stage:
    """One coding's decoder: given input (`feed`, when `idle`), it hands back its output a
    bounded piece at a time (`pull`), b"" once it needs more input."""

    __slots__ = ()

    def feed(self, data: bytes) -> None:
        raise NotImplementedError

    def pull(self, limit: int) -> bytes:
        raise NotImplementedError

    def idle(self) -> bool:
        raise NotImplementedError

    def finish(self) -> None:
        """The input ended (and all of it was pulled): raise if that cut the stream short."""


def _stage(coding: str) -> _Stage:
    if coding == "zstd":
        return _Zstd()
    return _Inflate(_ZLIB_BITS[coding])


class _Inflate(_Stage):
    """gzip or deflate, through zlib's `max_length`: never more than the limit per step,
    looping over what zlib left unconsumed (and over what it still holds when a step filled
    the limit)."""

    __slots__ = ("_at", "_full", "_held", "_inflate", "_tail", "_wbits")

    def __init__(self, wbits: int | None) -> None:
        self._wbits = wbits  # None: deflate, its wrapper not known yet
        self._inflate: Any = zlib.decompressobj(wbits) if wbits is not None else None
        self._held = memoryview(b"")
        self._at = 0
        self._tail = b""
        self._full = False  # the last step filled its limit: zlib may hold more output

    def feed(self, data: bytes) -> None:
        if self._inflate is None:  # deflate: its first two bytes say whether it is wrapped
            data = bytes(self._held) + data
            if len(data) < 2:
                self._held = memoryview(data)
                return
            self._choose(data)
        self._held = memoryview(data)
        self._at = 0

    def _choose(self, data: bytes) -> None:
        """RFC 1950: a zlib header is CM 8 with a window of at most 32 KiB, and a multiple of 31
        as a 16-bit number; anything else is raw deflate (which httpx also accepts)."""
        wrapped = len(data) >= 2 and data[0] & 0x0F == 8 and data[0] >> 4 <= 7
        wrapped = wrapped and (data[0] << 8 | data[1]) % 31 == 0
        self._inflate = zlib.decompressobj(zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS)

    def idle(self) -> bool:
        if self._inflate is None:
            return True  # deflate waiting for its second byte takes more
        return not self._tail and not self._full and self._at >= len(self._held)

    def pull(self, limit: int) -> bytes:
        inflate = self._inflate
        if inflate is None:
            return b""  # deflate waiting for its second byte
        while True:
            if inflate.eof:  # what follows the stream's end is dropped, unread (httpx's way)
                self._drop()
                return b""
            if self._tail:
                data: bytes | memoryview = self._tail
            elif self._at < len(self._held):
                data = self._held[self._at : self._at + STEP_BYTES]
                self._at += len(data)
            elif self._full:
                data = b""
            else:
                return b""
            try:
                out = inflate.decompress(data, limit)
            except zlib.error as exc:
                raise httpx.DecodingError(str(exc)) from exc
            self._tail = inflate.unconsumed_tail
            self._full = len(out) == limit
            if out:
                return out  # type: ignore[no-any-return]

    def _drop(self) -> None:
        self._held = memoryview(b"")
        self._at = 0
        self._tail = b""
        self._full = False


class _Zstd(_Stage):
    """zstd, fed `ZSTD_SLICE_BYTES` of input at a time (its decompressobj takes no output
    bound), with a frame after a frame decoded too (as httpx does)."""

    __slots__ = ("_at", "_held", "_obj", "_seen")

    def __init__(self) -> None:
        self._obj = self._new()
        self._held = memoryview(b"")
        self._at = 0
        self._seen = False  # the current frame's decoder was given data

    @staticmethod
    def _new() -> Any:
        assert zstandard is not None
        return zstandard.ZstdDecompressor(max_window_size=ZSTD_MAX_WINDOW).decompressobj()

    def feed(self, data: bytes) -> None:
        self._held = memoryview(data)
        self._at = 0

    def idle(self) -> bool:
        return self._at >= len(self._held)

    def pull(self, limit: int) -> bytes:
        """At least `limit` bytes when the input held has them, in slices (so a step can go past
        `limit` by one slice's output, at most 640 KiB)."""
        assert zstandard is not None
        parts: list[bytes] = []
        made = 0
        while made < limit and self._at < len(self._held):
            data: bytes | memoryview = self._held[self._at : self._at + ZSTD_SLICE_BYTES]
            self._at += len(data)
            try:
                while data:
                    if self._obj.eof:  # a frame ended: another follows
                        self._obj = self._new()
                    self._seen = True
                    out = self._obj.decompress(data)
                    data = self._obj.unused_data if self._obj.eof else b""
                    parts.append(out)
                    made += len(out)
            except zstandard.ZstdError as exc:
                raise httpx.DecodingError(str(exc)) from exc
        return b"".join(parts)

    def finish(self) -> None:
        if self._seen and not self._obj.eof:
            raise httpx.DecodingError("Zstandard data is incomplete")


class _Decoded:
    """`decoded`'s iterator: a class, as every body source here (see call.py)."""

    __slots__ = ("_ended", "_limit", "_made", "_source", "_stages")

    def __init__(self, source: AsyncIterable[bytes], stages: list[_Stage], limit: int) -> None:
        self._source = source.__aiter__()
        self._stages = stages  # the last coding applied first
        self._limit = limit
        self._made = 0  # bytes every stage made so far
        self._ended = False

    def __aiter__(self) -> _Decoded:
        return self

    async def __anext__(self) -> bytes:
        read = False  # did this step wait for the source (and so let the loop run)?
        last = len(self._stages) - 1
        while True:
            out = self._pull(last)
            if out:
                if not read:
                    await asyncio.sleep(0)  # a client's disconnect is seen between pieces
                return out
            if self._ended:
                raise StopAsyncIteration
            try:
                data = await self._source.__anext__()
            except StopAsyncIteration:
                self._ended = True
                for stage in self._stages:
                    stage.finish()
                continue
            read = True
            if data:
                self._stages[0].feed(data)

    def _pull(self, index: int) -> bytes:
        """Stage `index`'s next piece, fed from the stages before it; b"" when the source must
        be read first. Every piece counts toward the bound as it is made."""
        stage = self._stages[index]
        while True:
            out = stage.pull(STEP_BYTES)
            if out:
                self._made += len(out)
                if self._made > self._limit:
                    raise DecodedTooLarge(
                        f"it decodes to more than {self._limit} bytes (the proxy's bound)"
                    )
                return out
            if index == 0 or not stage.idle():
                return b""
            data = self._pull(index - 1)
            if not data:
                return b""
            stage.feed(data)
