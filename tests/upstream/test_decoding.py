"""proxy.upstream.decoding (SPEC §6): a compressed upstream body decoded a bounded piece at a
time. A correct body decodes to exactly its bytes however it is split; a bomb ends with
`DecodedTooLarge` once its decoded bytes pass the bound, each step's output and the memory
held staying small; and the event loop runs between pieces.
"""

from __future__ import annotations

import asyncio
import gzip
import tracemalloc
import zlib
from collections.abc import AsyncIterator, Iterable, Iterator

import httpx
import orjson
import pytest

from proxy.upstream import decoding
from proxy.upstream.decoding import (
    MAX_DECODED_BYTES,
    STEP_BYTES,
    DecodedTooLarge,
    codings,
    decoded,
    refused,
)

try:
    import zstandard
except ImportError:  # pragma: no cover
    zstandard = None
needs_zstd = pytest.mark.skipif(zstandard is None, reason="the zstandard module is not installed")

# A body like an upstream's: SSE events, partly repetitive.
BODY = b"".join(
    b"data: "
    + orjson.dumps({"id": "chatcmpl-1", "choices": [{"delta": {"content": f"token {i} "}}]})
    + b"\n\n"
    for i in range(40)
)
# Largest output of one step: zstd can go past STEP_BYTES by one input slice's blocks.
ZSTD_STEP_MAX = STEP_BYTES + 5 * 128 * 1024


class Source:
    """A body source: the given pieces, one per read."""

    def __init__(self, pieces: Iterable[bytes]) -> None:
        self._pieces = iter(pieces)
        self.reads = 0

    def __aiter__(self) -> Source:
        return self

    async def __anext__(self) -> bytes:
        self.reads += 1
        try:
            return next(self._pieces)
        except StopIteration:
            raise StopAsyncIteration from None


async def _collect(body: AsyncIterator[bytes]) -> list[bytes]:
    return [piece async for piece in body]


def decode(pieces: Iterable[bytes], header: bytes) -> list[bytes]:
    applied = codings(header)
    assert refused(applied) is None
    return asyncio.run(_collect(decoded(Source(pieces), applied)))


def deflate(data: bytes, *, wrapped: bool) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS)
    return packer.compress(data) + packer.flush()


def zstd(data: bytes) -> bytes:
    assert zstandard is not None
    return zstandard.ZstdCompressor().compress(data)  # type: ignore[no-any-return]


def splits(packed: bytes) -> Iterator[list[bytes]]:
    """`packed` cut in two at every byte, and one byte per read."""
    for cut in range(len(packed) + 1):
        yield [packed[:cut], packed[cut:]]
    yield [packed[i : i + 1] for i in range(len(packed))]


ENCODED = [
    pytest.param(b"gzip", gzip.compress(BODY), id="gzip"),
    pytest.param(b"x-gzip", gzip.compress(BODY), id="x-gzip"),
    pytest.param(b"deflate", deflate(BODY, wrapped=True), id="deflate-zlib"),
    pytest.param(b"deflate", deflate(BODY, wrapped=False), id="deflate-raw"),
    pytest.param(b"GZip, identity", gzip.compress(BODY), id="gzip-identity"),
    pytest.param(b"gzip, deflate", deflate(gzip.compress(BODY), wrapped=True), id="gzip-deflate"),
    pytest.param(b"deflate,gzip", gzip.compress(deflate(BODY, wrapped=False)), id="deflate-gzip"),
]
if zstandard is not None:
    ENCODED += [
        pytest.param(b"zstd", zstd(BODY), id="zstd"),
        pytest.param(b"zstd", zstd(BODY[:500]) + zstd(BODY[500:]), id="zstd-two-frames"),
        pytest.param(b"gzip, zstd", zstd(gzip.compress(BODY)), id="gzip-zstd"),
        pytest.param(b"zstd, x-gzip", gzip.compress(zstd(BODY)), id="zstd-gzip"),
    ]


@pytest.mark.parametrize(("header", "packed"), ENCODED)
def test_a_correct_body_decodes_to_exactly_its_bytes_however_it_is_split(
    header: bytes, packed: bytes
) -> None:
    for pieces in splits(packed):
        assert b"".join(decode(pieces, header)) == BODY, [len(piece) for piece in pieces]


# What httpx's own decoders undo: not zstd beside another coding (its zstd decoder then
# fails, "cannot use a decompressobj multiple times"), which the proxy's decoder undoes.
HTTPX_DECODES = [p for p in ENCODED if not (b"zstd" in p.values[0] and b"," in p.values[0])]


@pytest.mark.parametrize(("header", "packed"), HTTPX_DECODES)
def test_it_decodes_what_httpx_decodes(header: bytes, packed: bytes) -> None:
    """The codings httpx undid before, undone the same way (its decoders were the proxy's).
    httpx skips `x-gzip` (RFC 9110 §8.4.1.3: the same as gzip), which was then refused."""
    if b"x-gzip" in header:
        header = header.replace(b"x-gzip", b"gzip")
    # httpx decodes a body given whole as it makes the response
    response = httpx.Response(200, headers={"content-encoding": header.decode()}, content=packed)
    assert response.content == BODY == b"".join(decode([packed], header))


def test_a_large_correct_body_comes_in_bounded_pieces() -> None:
    body = b"".join(b"data: %d\n\n" % i for i in range(300_000))  # 3.3 MB
    pieces = decode([gzip.compress(body)], b"gzip")
    assert b"".join(pieces) == body
    assert max(map(len, pieces)) <= STEP_BYTES


def test_an_empty_body_decodes_to_nothing() -> None:
    assert decode([], b"gzip") == []
    assert decode([b""], b"deflate") == []


def test_data_after_the_end_of_a_gzip_stream_is_dropped_unread() -> None:
    """As httpx drops it; and a bomb there is never inflated."""
    after = gzip.compress(bytes(50 * 1024 * 1024))
    assert b"".join(decode([gzip.compress(BODY) + after], b"gzip")) == BODY


@pytest.mark.parametrize(
    ("header", "packed"),
    [
        pytest.param(b"gzip", b"\x00\x01 not gzip \xff" * 8, id="gzip-garbage"),
        pytest.param(b"deflate", b"\xff\xff not deflate" * 8, id="deflate-garbage"),
        pytest.param(b"gzip", gzip.compress(BODY)[:40] + b"\xff" * 64, id="gzip-garbage-later"),
    ],
)
def test_what_does_not_decode_is_a_decoding_error(header: bytes, packed: bytes) -> None:
    with pytest.raises(httpx.DecodingError):
        decode([packed], header)


@needs_zstd
def test_a_zstd_body_cut_inside_a_frame_is_a_decoding_error() -> None:
    with pytest.raises(httpx.DecodingError, match="incomplete"):
        decode([zstd(BODY)[:-5]], b"zstd")


def test_codings_without_a_bounded_decoder_or_too_many_are_refused() -> None:
    assert "'br'" in (refused(codings(b"br")) or "")
    assert "'compress'" in (refused(codings(b"gzip, compress")) or "")
    assert refused(codings(b", ".join([b"gzip"] * decoding.MAX_CODINGS))) is None
    assert "more than" in (refused(codings(b", ".join([b"gzip"] * 1000))) or "")


# -- bombs -----------------------------------------------------------------------------------

MIB = 1024 * 1024


def gzip_bomb(mebibytes: int, unit: bytes = bytes(MIB)) -> Iterator[bytes]:
    """`mebibytes` MiB of `unit` gzipped, made lazily: after a full flush the compressor starts
    afresh, so every MiB after the first compresses to the same bytes (about 1 KiB for zeros)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    first = packer.compress(unit) + packer.flush(zlib.Z_FULL_FLUSH)
    again = packer.compress(unit) + packer.flush(zlib.Z_FULL_FLUSH)
    yield first
    for _ in range(mebibytes - 1):
        yield again
    yield packer.flush()  # the trailer's length and CRC are wrong past the first two: unread


async def _bounded_run(body: AsyncIterator[bytes]) -> tuple[int, int, BaseException | None]:
    """Read `body` to its end or failure: (bytes decoded, largest piece, the failure)."""
    total = largest = 0
    try:
        async for piece in body:
            total += len(piece)
            largest = max(largest, len(piece))
    except httpx.DecodingError as exc:
        return total, largest, exc
    return total, largest, None


def run_bounded(
    pieces: Iterable[bytes], header: bytes
) -> tuple[int, int, BaseException | None, int]:
    """`_bounded_run` of the decoded pieces, and the peak of memory traced meanwhile."""
    tracemalloc.start()
    try:
        total, largest, failure = asyncio.run(
            _bounded_run(decoded(Source(pieces), codings(header)))
        )
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return total, largest, failure, peak


def test_a_gzip_bomb_fails_at_the_bound_in_small_steps_and_little_memory() -> None:
    """1 GiB of zeros in about 1 MiB of gzip (httpx's decoder made each 16 KiB read 16 MiB)."""
    total, largest, failure, peak = run_bounded(gzip_bomb(1024), b"gzip")
    assert isinstance(failure, DecodedTooLarge)
    assert "could not" not in str(failure) and str(MAX_DECODED_BYTES) in str(failure)
    assert MAX_DECODED_BYTES - STEP_BYTES <= total <= MAX_DECODED_BYTES
    assert largest <= STEP_BYTES
    assert peak < 2 * MIB, peak


def test_a_bomb_read_whole_is_one_piece_of_compressed_bytes() -> None:
    """All of a bomb's compressed bytes in one read: decoded a step at a time all the same."""
    packed = b"".join(gzip_bomb(128))
    total, largest, failure, peak = run_bounded([packed], b"gzip")
    assert isinstance(failure, DecodedTooLarge) and largest <= STEP_BYTES
    assert total <= MAX_DECODED_BYTES
    assert peak < 2 * MIB + 2 * len(packed), peak


def test_a_bomb_inside_another_coding_fails_at_the_bound() -> None:
    packed = b"".join(gzip_bomb(128))
    total, largest, failure, peak = run_bounded([deflate(packed, wrapped=True)], b"gzip, deflate")
    assert isinstance(failure, DecodedTooLarge) and largest <= STEP_BYTES
    assert total <= MAX_DECODED_BYTES
    assert peak < 4 * MIB, peak


@needs_zstd
def test_a_zstd_bomb_fails_at_the_bound_in_bounded_steps() -> None:
    assert zstandard is not None
    packer = zstandard.ZstdCompressor(level=3).compressobj()
    packed = b"".join(packer.compress(bytes(MIB)) for _ in range(128)) + packer.flush()
    assert len(packed) < 64 * 1024  # a ratio past 2000:1
    total, largest, failure, peak = run_bounded([packed], b"zstd")
    assert isinstance(failure, DecodedTooLarge) and total <= MAX_DECODED_BYTES
    assert largest <= ZSTD_STEP_MAX
    # Its window (at most 8 MiB, decoding.ZSTD_MAX_WINDOW) is zstd's own memory, not traced.
    assert peak < 4 * MIB, peak


@needs_zstd
def test_a_zstd_frame_asking_for_a_huge_window_is_refused() -> None:
    """A frame header can ask for a window of up to 2 GiB, which the decoder would allocate."""
    assert zstandard is not None
    params = zstandard.ZstdCompressionParameters.from_level(1, window_log=27)
    packer = zstandard.ZstdCompressor(compression_params=params).compressobj()
    packed = packer.compress(bytes(MIB)) + packer.flush()  # no content size: the window says
    assert zstandard.get_frame_parameters(packed).window_size == 128 * MIB
    with pytest.raises(httpx.DecodingError, match="memory"):
        decode([packed], b"zstd")


def test_the_event_loop_runs_between_the_pieces_of_a_bomb() -> None:
    """Decoding from bytes already read, each piece first lets other tasks run: the app's
    watch for a client's disconnect is one (it was seen 11 s late)."""
    packed = b"".join(list(gzip_bomb(32))[:-1])  # no trailer: it ends without a word

    async def scenario() -> tuple[int, int]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        task = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        pieces = 0
        async for _ in decoded(Source([packed]), ["gzip"]):
            pieces += 1
        task.cancel()
        return pieces, ticks

    pieces, ticks = asyncio.run(scenario())
    assert pieces == 32 * MIB // STEP_BYTES
    assert ticks >= pieces - 1


def test_a_body_read_as_it_arrives_adds_no_wait_per_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """A piece decoded right after a read of the source needs no extra turn of the loop (the
    read was one): a small compressed answer costs no more awaits than before."""

    async def scenario() -> int:
        turns = 0
        original = asyncio.sleep

        async def counting(delay: float, result: object = None) -> object:
            nonlocal turns
            turns += 1
            return await original(delay, result)

        monkeypatch.setattr(asyncio, "sleep", counting)
        await _collect(decoded(Source([gzip.compress(BODY)]), ["gzip"]))
        return turns

    assert asyncio.run(scenario()) == 0
