"""What a read of upstream SSE bytes holds, without parsing it: the hot path's one question.

`scan(data, want)` answers for StreamSanitizer whether a read can be forwarded as the bytes
that arrived. It is the compiled `proxy.chat._sse_scan` when that was built (memchr walks:
about 27K instructions for a 23 KB read of the benchmark's events, 60K when usage and markup
are looked for too; memmem walks took 92K and 219K), else `scan_py` below, which is
the reference: both give the same flags for any input (tests/chat/test_sse_scan.py).

The flags:
- PLAIN: the read is whole one-line `data: {...}` events (it starts with `data: {`, ends with
  a blank line, has no CR, and every newline belongs to an event's closing blank line), and
  each event's data is one JSON object (`json_line`): SPEC §4 makes a data line that is not
  JSON a comment, so the hot path may skip the parse, never that rule. Starting with `{`
  proves nothing (`{not json`, a truncated `{"id":1,`, `{"a":1}}`);
- TOOL_CALLS: `tool_calls` occurs;
- LIVE_FINISH: some `"finish_reason"` (found left to right, not overlapping) is not followed
  by `:null`, i.e. not the compact `"finish_reason":null`;
- USAGE: `"usage"` occurs (looked for only when `want` has USAGE);
- MARKUP: the start of a tool-call marker may occur (`<`, `[T`, `["`, `\\u003c`; looked for
  only when `want` has MARKUP);
- CONTENT: some `"content"` key holds a non-empty string (looked for only when `want` has
  CONTENT). While a choice's text-call scanner must see all of its content (it holds text
  back, or has seen no content yet, since the whole message may turn out to be one JSON call),
  StreamSanitizer asks for this instead of MARKUP, so reads that carry no content (reasoning,
  role, usage) keep the hot path.
The answer is 0 unless PLAIN. TOOL_CALLS, then LIVE_FINISH, end the scan when found, since
either alone sends the read down the general path.

`run_end(data, pos, want)` is the same rule asked of the run of events from `pos`: where the
run that the scan would forward ends. `event_at(data, pos)` is how a read the rule refused is
walked event by event: where the event at `pos` ends, and whether it is one `data: {...}` line
(the decoder's view; whether it is JSON is the general path's parse to tell). Each has its
`_py` reference here, held to the compiled one by the tests.

`json_line(data)`: is `data` one JSON object on one line, exactly as the general path's parser
(orjson) reads it? The reference asks orjson; the compiled twin validates the bytes without
building anything (RFC 8259, valid UTF-8, no lone surrogate escape, numbers finite as a double,
orjson's 1,024 levels), and its scan compares each event with the last one it proved whole,
walking only the strings that differ: about 75 to 110 instructions an OpenAI-shaped event,
where a walk of the whole event costs about 1.4K. Without the compiled module, the scan parses
each event with orjson to prove it (the parse the general path would make anyway).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import NamedTuple

import orjson

PLAIN = 1
TOOL_CALLS = 2
LIVE_FINISH = 4
USAGE = 8
MARKUP = 16
CONTENT = 32

# Any `"finish_reason"` not followed by `:null`: the same answer as the C twin's left-to-right
# walk, since a key that walk skips overlaps one it took, which is then followed by `finish`.
_LIVE_FINISH = re.compile(rb'"finish_reason"(?!:null)')
# JSON whitespace, as the C twin skips it.
_CONTENT_STRING = re.compile(rb'"content"[ \t\r\n]*:[ \t\r\n]*"[^"]')


def scan_py(data: bytes, want: int) -> int:
    if (
        data[:7] != b"data: {"
        or data[-2:] != b"\n\n"
        or b"\r" in data
        # If there are exactly 2 newlines per event start, every newline is in a
        # `\n\ndata: {` separator or the final blank line (the separator cannot overlap
        # itself), so each event is one `data: {...}` line.
        or data.count(b"\n") != 2 * (data.count(b"\n\ndata: {") + 1)
        # SPEC §4: each event's data (after `data: `) must be JSON to leave unparsed.
        or not all(json_line_py(event[6:]) for event in data[:-2].split(b"\n\n"))
    ):
        return 0
    if b"tool_calls" in data:
        return PLAIN | TOOL_CALLS
    if _LIVE_FINISH.search(data):
        return PLAIN | LIVE_FINISH
    flags = PLAIN
    if want & USAGE and b'"usage"' in data:
        flags |= USAGE
    if want & MARKUP and may_hold_markup(data):
        flags |= MARKUP
    if want & CONTENT and may_hold_content(data):
        flags |= CONTENT
    return flags


def json_line_py(data: bytes) -> bool:
    """Is `data` one JSON object on one line (no LF), as the general path's parser reads it?"""
    if data.find(b"\n") >= 0:
        return False
    try:
        return type(orjson.loads(data)) is dict
    except orjson.JSONDecodeError:
        return False


def may_hold_markup(data: bytes) -> bool:
    """Could this raw chunk's content start (part of) a tool-call marker? No JSON parse.

    Every marker starts with `<` or `[` (`\\u003c` when a server escapes it); `["` catches a
    content string that ends in `[`, since the envelope itself never contains that pair.
    """
    return b"<" in data or b"[T" in data or b'["' in data or b"\\u003c" in data


def may_hold_content(data: bytes) -> bool:
    """Does some `"content"` key hold a non-empty string? No JSON parse.

    Inside a JSON string a quote is escaped, so `"content"` followed by a colon is a key
    (`"reasoning_content"` does not contain it); `"content":null` and `""` carry nothing.
    """
    return _CONTENT_STRING.search(data) is not None


def run_end_py(data: bytes, pos: int, want: int) -> int:
    """Where the run of whole events from `pos` that `scan` forwards ends (`pos`: none). The
    rule holds for a run exactly when it holds for each event (no key it looks for can span
    an event boundary, which holds a newline): each event is asked once, in order."""
    size = len(data)
    while pos < size:
        end = data.find(b"\n\n", pos) + 2
        if end == 1 or scan_py(data[pos:end], want) != PLAIN:
            break
        pos = end
    return pos


def event_at_py(data: bytes, pos: int) -> int:
    """The end of the event at `pos` (just past the first blank line from `pos`): positive
    when that event is one whole `data: {...}` line with no CR, as the SSE decoder would read
    it (its data is then `data[pos + 6:end - 2]`, with no other lines), negative for any other
    event; `-len(data)` when no blank line follows. `pos` must lie inside `data`."""
    if not 0 <= pos < len(data):
        raise ValueError("event_at() position out of range")
    found = data.find(b"\n\n", pos)
    if found < 0:
        return -len(data)
    end = found + 2
    event = data[pos:end]
    one_line = (
        event.startswith(b"data: {") and b"\r" not in event and event.find(b"\n") == found - pos
    )
    return end if one_line else -end


class _Native(NamedTuple):
    scan: Callable[[bytes, int], int]
    run_end: Callable[[bytes, int, int], int]
    event_at: Callable[[bytes, int], int]
    json_line: Callable[[bytes], bool]


def _native() -> _Native | None:
    try:
        from proxy.chat import _sse_scan  # type: ignore[attr-defined]
    except ImportError:  # not compiled here (no C compiler at install time): the _py ones serve
        return None
    if not hasattr(_sse_scan, "json_line"):
        # Built from a source before the JSON proof (a stale build): its scan would forward
        # events that are not JSON (SPEC §4), so the _py ones serve.
        return None
    return _Native(_sse_scan.scan, _sse_scan.run_end, _sse_scan.event_at, _sse_scan.json_line)


_compiled = _native()
native_scan = _compiled.scan if _compiled is not None else None
native_run_end = _compiled.run_end if _compiled is not None else None
native_event_at = _compiled.event_at if _compiled is not None else None
native_json_line = _compiled.json_line if _compiled is not None else None
scan: Callable[[bytes, int], int] = native_scan or scan_py
run_end: Callable[[bytes, int, int], int] = native_run_end or run_end_py
event_at: Callable[[bytes, int], int] = native_event_at or event_at_py
json_line: Callable[[bytes], bool] = native_json_line or json_line_py
