"""Answers no client can be given, at the upstream client (SPEC §6): a body whose
content-encoding does not decode comes out of `map_upstream_errors` as the proxy's own error,
over every way `open_upstream` sends (the fixtures of test_upstream_transport: both event
loops, the prebuilt head and httpx's objects, chunked bodies read by the compiled decoder and
by httptools), against a loopback server that writes the raw bytes.
"""

from __future__ import annotations

import asyncio
import gzip

import httpx
import pytest

from proxy.core.errors import UpstreamStreamError
from proxy.upstream.call import _unknown_encoding
from proxy.upstream.client import map_upstream_errors, upstream_failure
from tests.upstream.test_upstream_transport import (
    Run,
    chunk,
    open_stream,
    read_all,
    read_request,
    run,
    upstream,
)

__all__ = ["run"]  # the fixture, imported for pytest to find here


def answering(raw: bytes):  # type: ignore[no-untyped-def]
    """Every request on a connection gets `raw` (until the client closes it)."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await read_request(reader)
            writer.write(raw)
            await writer.drain()

    return handler


GARBAGE = b"\x00\x01 not gzip \xff" * 8


@pytest.mark.parametrize(
    ("encoding", "body", "named"),
    [
        pytest.param(b"gzip", GARBAGE, "decompressing", id="gzip-garbage"),
        pytest.param(b"deflate", GARBAGE, "", id="deflate-garbage"),
        pytest.param(b"gzip", gzip.compress(b"data: {}\n\n")[:-9] + GARBAGE, "", id="gzip-bad-end"),
        pytest.param(b"compress", b"anything", "compress", id="no-decoder"),
        pytest.param(b"gzip, x-custom", gzip.compress(b"{}"), "x-custom", id="one-unknown"),
    ],
)
def test_a_body_that_does_not_decode_is_upstream_stream_error(
    run: Run, encoding: bytes, body: bytes, named: str
) -> None:
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-encoding: %b\r\n" % (
        encoding
    )
    answer = head + b"transfer-encoding: chunked\r\n\r\n" + chunk(body) + b"0\r\n\r\n"

    async def scenario(client: httpx.AsyncClient) -> None:
        async with upstream(answering(answer)) as url:
            response = await open_stream(client, url)
            with pytest.raises(UpstreamStreamError, match="could not be decoded") as caught:
                await read_all(response)
            assert named in caught.value.message
            # A whole body read at once (a non-streaming round) fails the same way.
            response = await open_stream(client, url)
            with pytest.raises(UpstreamStreamError), map_upstream_errors(streaming_body=True):
                try:
                    await response.read()
                finally:
                    await response.aclose()

    run(scenario)


def test_only_codings_httpx_cannot_undo_are_refused() -> None:
    for encoding in (b"identity", b"gzip", b"GZip", b"deflate", b"gzip, identity", b"gzip,"):
        assert _unknown_encoding(encoding) is None, encoding
    assert _unknown_encoding(b"br, compress") in ("'br'", "'compress'")
    assert _unknown_encoding(b"x-custom") == "'x-custom'"


def test_an_undecodable_body_maps_to_a_502_of_type_upstream_error() -> None:
    for streaming in (False, True):
        error = upstream_failure(httpx.DecodingError("bad gzip"), streaming_body=streaming)
        assert (error.status, error.error_type) == (502, "upstream_error")
