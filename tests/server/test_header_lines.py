"""The lean protocol's check of a response's header lines (`proxy.server.response_head`): a name
checked once and remembered, the lines counted and stripped of control characters in C. It
answers as uvicorn's own check of each header (its two regular expressions), with an empty
name refused too. The one regular expression over all the lines that it replaced was more
lenient in one corner: a name holding `: ` passed, read as a shorter name and a value."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from uvicorn.protocols.http.httptools_impl import HEADER_RE, HEADER_VALUE_RE

from proxy.server.response_head import _valid_lines, _valid_name

# Bytes that matter to the rule, more often than uniform bytes would give them.
TRICKY = st.sampled_from(
    [b"\r", b"\n", b"\r\n", b"\t", b" ", b":", b"\x00", b"\x7f", b"\x80", b"a"]
)
PIECE = st.lists(st.one_of(TRICKY, st.binary(max_size=4)), max_size=6).map(b"".join)
HEADERS = st.lists(st.tuples(PIECE, PIECE), max_size=5)


def reference(headers: list[tuple[bytes, bytes]]) -> bool:
    """uvicorn's rule, header by header (`HttpToolsProtocol`'s response head)."""
    return all(
        name and HEADER_RE.search(name) is None and HEADER_VALUE_RE.search(value) is None
        for name, value in headers
    )


def checked(headers: list[tuple[bytes, bytes]]) -> bool:
    if not all(_valid_name(name) for name, _ in headers):
        return False
    block = b"".join(name + b": " + value + b"\r\n" for name, value in headers)
    return _valid_lines(block, len(headers))


@settings(max_examples=3000, deadline=None)
@given(headers=HEADERS)
def test_the_check_answers_as_uvicorns(headers: list[tuple[bytes, bytes]]) -> None:
    assert checked(headers) == reference(headers)
    assert checked(headers) == reference(headers)  # names remembered: the same answer


def test_examples() -> None:
    assert checked([(b"content-type", b"text/plain\tx"), (b"x-caf\xc3\xa9", b"\xff")])
    assert not checked([(b"x-a", b"1\r\nx-injected: 1")])
    assert not checked([(b"x-a", b"1\n")])
    assert not checked([(b"x-a", b"\x00")])
    assert not checked([(b"x a", b"1")])
    assert not checked([(b"", b"1")])
    assert not checked([(b"x-a:", b"1")])
    assert not checked([(b"\x80: ", b"")])  # the old expression's corner: name `\x80`, value `: `
