"""Answers no client can be given, at the upstream client (SPEC §6): a status line outside
200-599 or a 101, and a body whose content-encoding does not decode. Each comes out of
`map_upstream_errors` as the proxy's own error, over every way `open_upstream` sends (the
fixtures of test_upstream_transport: both event loops, the prebuilt head and httpx's objects,
chunked bodies read by the compiled decoder and by httptools), against a loopback server
that writes the raw bytes.
"""

from __future__ import annotations

import asyncio
import gzip

import httpx
import pytest

from proxy.core.errors import UpstreamError, UpstreamStreamError
from proxy.upstream.client import map_upstream_errors, upstream_failure
from proxy.upstream.decoding import codings, refused
from proxy.upstream.transport import InvalidStatus
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


@pytest.mark.parametrize("status", [b"999", b"600", b"099", b"000", b"101"])
@pytest.mark.parametrize("framing", ["length", "chunked"])
def test_a_status_no_client_can_be_given_is_a_502_upstream_error_naming_it(
    run: Run, status: bytes, framing: str
) -> None:
    body = (
        b"content-length: 2\r\n\r\n{}"
        if framing == "length"
        else (b"transfer-encoding: chunked\r\n\r\n" + chunk(b"{}") + b"0\r\n\r\n")
    )
    head = b"HTTP/1.1 " + status + b" Odd\r\ncontent-type: application/json\r\n"

    async def scenario(client: httpx.AsyncClient) -> None:
        async with upstream(answering(head + body)) as url:
            with pytest.raises(UpstreamError) as caught:
                await open_stream(client, url)
        assert type(caught.value) is UpstreamError  # not unreachable: it answered
        assert (caught.value.status, caught.value.code) == (502, "upstream_error")
        assert f"status {status.decode()}" in caught.value.message

    run(scenario)


def test_an_interim_head_before_a_final_one_is_still_skipped(run: Run) -> None:
    answer = (
        b"HTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\n"
        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
    )

    async def scenario(client: httpx.AsyncClient) -> None:
        async with upstream(answering(answer)) as url:
            response = await open_stream(client, url)
            assert response.status_code == 200
            assert b"".join(await read_all(response)) == b"ok"

    run(scenario)


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


def test_only_codings_the_proxy_cannot_undo_are_refused() -> None:
    for encoding in (b"identity", b"gzip", b"GZip", b"x-gzip", b"deflate", b"gzip, identity"):
        assert refused(codings(encoding)) is None, encoding
    assert refused(codings(b"gzip,")) is None
    assert "'br'" in (refused(codings(b"br, compress")) or "")  # no bounded brotli decoder
    assert "'x-custom'" in (refused(codings(b"x-custom")) or "")


def test_every_mapping_of_a_bad_status_or_body_is_a_502_of_type_upstream_error() -> None:
    for exc in (InvalidStatus(999), httpx.DecodingError("bad gzip")):
        for streaming in (False, True):
            error = upstream_failure(exc, streaming_body=streaming)
            assert (error.status, error.error_type) == (502, "upstream_error")
