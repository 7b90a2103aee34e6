"""The lean protocol's check of a response's header lines (`proxy.http_protocol`): a name
checked once and remembered, the lines counted and stripped of control characters in C. It
answers as the one regular expression over all lines it replaced: names of token characters
(uvicorn's rule), values without control characters but HTAB, one CRLF a line."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.http_protocol import _valid_lines, _valid_name

_NAME = rb'[^\x00-\x1f\x7f()<>@,;:\[\]={} \t\\"]+'
_VALUE = rb"[^\x00-\x08\x0a-\x1f\x7f]*"
REFERENCE = re.compile(b"(?:" + _NAME + b": " + _VALUE + b"\r\n)*")

# Bytes that matter to the rule, more often than uniform bytes would give them.
TRICKY = st.sampled_from(
    [b"\r", b"\n", b"\r\n", b"\t", b" ", b":", b"\x00", b"\x7f", b"\x80", b"a"]
)
PIECE = st.lists(st.one_of(TRICKY, st.binary(max_size=4)), max_size=6).map(b"".join)
HEADERS = st.lists(st.tuples(PIECE, PIECE), max_size=5)


def reference(headers: list[tuple[bytes, bytes]]) -> bool:
    block = b"".join(name + b": " + value + b"\r\n" for name, value in headers)
    return REFERENCE.fullmatch(block) is not None and block.count(b"\n") == len(headers)


def checked(headers: list[tuple[bytes, bytes]]) -> bool:
    if not all(_valid_name(name) for name, _ in headers):
        return False
    block = b"".join(name + b": " + value + b"\r\n" for name, value in headers)
    return _valid_lines(block, len(headers))


@settings(max_examples=3000, deadline=None)
@given(headers=HEADERS)
def test_the_check_answers_as_the_regular_expression(headers: list[tuple[bytes, bytes]]) -> None:
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
