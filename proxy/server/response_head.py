"""The lean protocol's response head (`http_protocol.RequestCycle`): the app's
`http.response.start` checked and framed as HTTP/1.1 bytes.

One check of all the response's header lines at once, not two regular expressions per header
(the values include what the upstream sent, so they are checked); uvicorn's default headers
joined once per list; the framing the app did not give (chunked for a body of unknown length,
`connection: close` when the connection will close). It changes when what a head says
changes, apart from how the cycle writes it (held for the first body bytes) and its body.
"""

from __future__ import annotations

from collections.abc import Iterable

from uvicorn.protocols.http.httptools_impl import HEADER_RE, STATUS_LINE

# A response header's name: token characters, by uvicorn's own expression for what a name may
# not hold (HEADER_RE). Each name is matched once and remembered (`_valid_name`): a response's
# names are nearly always ones the process has sent before.
_NAMES_KEPT = 512  # names remembered at most: an upstream's headers pass through
_valid_names: set[bytes] = set()
# What no header line may hold but its CRLF: control characters but HTAB (uvicorn's rule for a
# value; a name holds none of them either).
_CONTROLS = bytes(range(0x09)) + bytes(range(0x0A, 0x20)) + b"\x7f"
_CLOSE_LINE = b"connection: close\r\n"
_CHUNKED_LINE = b"transfer-encoding: chunked\r\n"


def response_head(
    status: int,
    headers: Iterable[tuple[bytes, bytes]],
    keep_alive: bool,
    head_only: bool,
    default_headers: list[tuple[bytes, bytes]],
) -> tuple[bytes, bool | None, int, bool]:
    """The head's bytes, and how its body is framed: (head, chunked, the Content-Length's
    bytes, keep-alive). `chunked` is None when the body has no framing (a HEAD request's, or
    a 204 or 304 that gave none); keep-alive turns false when the app says close.
    RuntimeError for a header name or value that may not be sent."""
    chunked: bool | None = None
    length = 0
    close_sent = False
    lines: list[bytes] = []
    for name, value in headers:
        name = name.lower()
        if name == b"content-length" and chunked is None:
            length = int(value)
            chunked = False
        elif name == b"transfer-encoding" and value.lower() == b"chunked":
            length = 0
            chunked = True
        elif name == b"connection" and _says_close(value):
            keep_alive = False
            close_sent = True
        if name not in _valid_names and not _valid_name(name):
            raise RuntimeError("Invalid HTTP header name or value.")
        lines += (name, b": ", value, b"\r\n")
    block = b"".join(lines)
    if not _valid_lines(block, len(lines) >> 2):
        raise RuntimeError("Invalid HTTP header name or value.")
    end, chunked = _head_end(status, chunked, head_only, not keep_alive and not close_sent)
    head = STATUS_LINE[status] + _default_headers(default_headers) + block + end
    return head, chunked, length, keep_alive


def _head_end(
    status: int, chunked: bool | None, head_only: bool, unannounced_close: bool
) -> tuple[bytes, bool | None]:
    """The head's last lines and the body's framing: the chunked framing of a body of unknown
    length, the close the app did not announce (the connection closes after this response,
    and no header said so), the blank line."""
    end = b"\r\n"
    if chunked is None and not head_only and status not in (204, 304):
        chunked = True  # neither Content-Length nor Transfer-Encoding given
        end = _CHUNKED_LINE + end
    if unannounced_close:
        end = _CLOSE_LINE + end
    return end, chunked


def _valid_name(name: bytes) -> bool:
    """Is `name` a header name (token characters)? Remembered when it is."""
    if not name or HEADER_RE.search(name) is not None:
        return False
    if len(_valid_names) < _NAMES_KEPT:
        _valid_names.add(name)
    return True


def _valid_lines(block: bytes, count: int) -> bool:
    """Are the `count` header lines of `block` (names already checked) well formed: no
    control character but HTAB and each line's CRLF? A CR or LF inside a value would make
    lines of its own: more of them than `count`. Counted in C, a few hundred instructions,
    where one regular expression over the lines cost about 6K (bench.serverprocess)."""
    if block.count(b"\n") != count or block.count(b"\r") != count:
        return False
    return len(block.translate(None, _CONTROLS)) == len(block) - 2 * count


def _says_close(value: bytes) -> bool:
    return b"close" in [token.lower().strip() for token in value.split(b",")]


_defaults_cache: tuple[object, bytes] = (None, b"")


def _default_headers(headers: list[tuple[bytes, bytes]]) -> bytes:
    """uvicorn's default headers (its Date, renewed every second: a new list then) as head
    lines, joined once per list rather than once per response."""
    global _defaults_cache
    cached = _defaults_cache  # read once: servers in other threads may replace it
    if cached[0] is not headers:
        cached = _defaults_cache = (headers, b"".join(b"%s: %s\r\n" % pair for pair in headers))
    return cached[1]
