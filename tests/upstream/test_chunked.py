"""The compiled chunked decoder (proxy/upstream/_chunked.c) against httptools, which it stands in for
on response bodies: the same body bytes for any chunked body split any way across reads, the
same refusals, and reads cut at chunk boundaries once they reach the limit."""

from __future__ import annotations

import itertools

import httptools
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.upstream._chunked import Dechunker  # compiled by the project install (setup.py)

HEAD = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"


class _Body:
    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.complete = False

    def on_body(self, body: bytes) -> None:
        self.parts.append(body)

    def on_message_complete(self) -> None:
        self.complete = True


def by_httptools(body: bytes) -> tuple[bytes, bool] | str:
    seen = _Body()
    try:
        httptools.HttpResponseParser(seen).feed_data(HEAD + body)
    except httptools.HttpParserError:
        return "refused"
    return b"".join(seen.parts), seen.complete


def by_dechunker(pieces: list[bytes], limit: int = 1 << 20) -> tuple[bytes, bool] | str:
    decoder = Dechunker(limit)
    out: list[bytes] = []
    try:
        for piece in pieces:
            out += decoder.feed(piece)
    except ValueError:
        return "refused"
    return b"".join(out), decoder.done


def encode(chunks: list[bytes], extension: bytes = b"", trailers: bytes = b"") -> bytes:
    body = b"".join(b"%x%b\r\n%b\r\n" % (len(c), extension, c) for c in chunks if c)
    return body + b"0\r\n" + trailers + b"\r\n"


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(c, len(data)) for c in cuts})
    edges = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges)]


@settings(max_examples=300, deadline=None)
@given(
    chunks=st.lists(st.binary(min_size=1, max_size=300), max_size=12),
    extension=st.sampled_from([b"", b";a=b", b';name="v"']),
    trailers=st.sampled_from([b"", b"x-trailer: 1\r\n", b"a: b\r\nc: d\r\n"]),
    cuts=st.lists(st.integers(min_value=0, max_value=4000), max_size=8),
)
def test_any_body_split_any_way_decodes_as_httptools_does(
    chunks: list[bytes], extension: bytes, trailers: bytes, cuts: list[int]
) -> None:
    data = encode(chunks, extension, trailers)
    expected = by_httptools(data)
    assert expected == (b"".join(chunks), True)
    assert by_dechunker(split(data, cuts)) == expected


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=80))
def test_arbitrary_bytes_never_crash_and_whatever_completes_matches_httptools(
    data: bytes,
) -> None:
    ours, theirs = by_dechunker([data]), by_httptools(data)
    if ours != "refused" and ours[1]:
        assert theirs == ours
    if theirs != "refused" and theirs[1]:
        assert ours == theirs  # nothing httptools reads whole is refused here


@pytest.mark.parametrize(
    "body",
    [
        b"5 \r\nhello\r\n0\r\n\r\n",  # whitespace after the size
        b"+5\r\nhello\r\n0\r\n\r\n",
        b"\r\n",  # no size at all
        b"5\nhello\r\n0\r\n\r\n",  # bare LF after the size
        b"5\r\nhello\n0\r\n\r\n",  # bare LF after the data
        b"5\r\nhelloXY0\r\n\r\n",  # no CRLF after the data
        b"0\r\nA: b\n\r\n",  # bare LF in the trailers
        b"1" * 17 + b"\r\n",  # a size over 64 bits
    ],
)
def test_refuses_what_httptools_refuses(body: bytes) -> None:
    assert by_httptools(body) == "refused"
    assert by_dechunker([body]) == "refused"


def test_reads_are_cut_after_the_chunk_that_reaches_the_limit() -> None:
    chunks = [bytes([65 + n]) * 40 for n in range(10)]
    reads = Dechunker(100).feed(encode(chunks))
    # 40 + 40 = 80 < 100, + 40 = 120 >= 100: three chunks a read, whole chunks only
    assert [len(r) for r in reads] == [120, 120, 120, 40]
    assert b"".join(reads) == b"".join(chunks)


def test_a_chunk_split_across_feeds_leaves_in_pieces_as_it_arrives() -> None:
    decoder = Dechunker(1000)
    assert decoder.feed(b"a\r\n01234") == [b"01234"]
    assert decoder.feed(b"56789\r\n0\r\n") == [b"56789"]
    assert not decoder.done
    assert decoder.feed(b"\r\n") == []
    assert decoder.done


def test_bytes_after_the_end_are_counted_not_decoded() -> None:
    decoder = Dechunker(1000)
    assert decoder.feed(b"2\r\nok\r\n0\r\n\r\nHTTP/1.1 200 OK\r\n") == [b"ok"]
    assert decoder.done
    assert decoder.excess == len(b"HTTP/1.1 200 OK\r\n")


def test_the_limit_must_be_positive() -> None:
    with pytest.raises(ValueError):
        Dechunker(0)
