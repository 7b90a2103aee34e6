"""The hot path's byte scan: the compiled scan and the pure-Python reference agree on any input.

StreamSanitizer only acts on the flags `scan` returns, so agreement here means the proxy
behaves the same whether or not the C module could be built.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.chat import sse_scan
from proxy.chat.sse_scan import CONTENT, LIVE_FINISH, MARKUP, PLAIN, TOOL_CALLS, USAGE, scan_py

ALL_WANTS = [0, USAGE, MARKUP, USAGE | MARKUP, CONTENT, USAGE | CONTENT, USAGE | MARKUP | CONTENT]


def test_the_project_install_compiled_the_native_scan() -> None:
    # `make test` installs the project, which compiles proxy/chat/_sse_scan.c; without it the
    # fallback would serve silently and the agreement tests below would compare nothing.
    assert sse_scan.native_scan is not None
    assert sse_scan.scan is sse_scan.native_scan


IMPLEMENTATIONS: list[tuple[str, Callable[[bytes, int], int]]] = [("python", scan_py)]
if sse_scan.native_scan is not None:
    IMPLEMENTATIONS.append(("native", sse_scan.native_scan))


@pytest.fixture(params=[impl for _, impl in IMPLEMENTATIONS], ids=[n for n, _ in IMPLEMENTATIONS])
def scan(request: pytest.FixtureRequest) -> Callable[[bytes, int], int]:
    return request.param  # type: ignore[no-any-return]


NULL_CHUNK = b'data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}\n\n'
STOP_CHUNK = b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (NULL_CHUNK, PLAIN),
        (NULL_CHUNK * 3, PLAIN),
        (b"data: {}\n\n", PLAIN),
        # not JSON (SPEC §4: the general path makes it a comment), whatever it starts with
        (b"data: {\n\n", 0),
        # not whole one-line data events
        (NULL_CHUNK[:-1], 0),
        (NULL_CHUNK + b"data: [DONE]\n\n", 0),
        (b": keep-alive\n\n" + NULL_CHUNK, 0),
        (NULL_CHUNK.replace(b"\n\n", b"\r\n\r\n"), 0),
        (NULL_CHUNK.replace(b"\n\n", b"\n\n\n"), 0),
        (b"event: x\n" + NULL_CHUNK, 0),
        (b'data: {"a":1}\ndata: {"b":2}\n\n', 0),
        (NULL_CHUNK.replace(b"}\n\n", b"}\nid: 1\n\n"), 0),
        (b"data:{}\n\n", 0),
        (b"", 0),
        (b"\n\n", 0),
        # what sends a plain read down the general path
        (b'data: {"delta":{"tool_calls":[]}}\n\n', PLAIN | TOOL_CALLS),
        (NULL_CHUNK + STOP_CHUNK, PLAIN | LIVE_FINISH),
        (b'data: {"finish_reason": null}\n\n', PLAIN | LIVE_FINISH),
        (b'data: {"finish_reason":"tool_calls","tool_calls":1}\n\n', PLAIN | TOOL_CALLS),
        # a finish_reason value inside content is escaped, so it is not a key
        (b'data: {"content":"\\"finish_reason\\":\\"stop\\""}\n\n', PLAIN),
        # two keys sharing a quote: not JSON, so refused before any key is looked for
        (b'data: {"finish_reason"finish_reason":null}\n\n', 0),
        (b'data: {"finish_reason":null,"finish_reason":null}\n\n', PLAIN),
    ],
)
def test_flags_on_examples(scan: Callable[[bytes, int], int], data: bytes, expected: int) -> None:
    assert scan(data, USAGE | MARKUP) == expected


@pytest.mark.parametrize(
    ("content", "markup"),
    [
        (b"plain words", False),
        (b"a <tool_call> b", True),
        (b"[TOOL_CALLS]", True),
        (b'[\\"x\\"]', False),  # escaped quote: `[\"`, not `["`
        (b"\\u003c|tool", True),
        (b"[1, 2]", False),
    ],
)
def test_markup_is_looked_for_only_when_wanted(
    scan: Callable[[bytes, int], int], content: bytes, markup: bool
) -> None:
    data = b'data: {"delta":{"content":"' + content + b'"},"finish_reason":null}\n\n'
    assert scan(data, MARKUP) == PLAIN | (MARKUP if markup else 0)
    assert scan(data, 0) == PLAIN


def test_a_content_string_ending_in_a_bracket_reads_as_markup(
    scan: Callable[[bytes, int], int],
) -> None:
    # `["` appears when a content string ends in `[`: it may open a marker in the next chunk.
    data = b'data: {"delta":{"content":"["},"finish_reason":null}\n\n'
    assert scan(data, MARKUP) == PLAIN | MARKUP


@pytest.mark.parametrize(
    ("delta", "content"),
    [
        (b'{"content":"x"}', True),
        (b'{"content": "x"}', True),
        (b'{"content" :\t"x"}', True),
        (b'{"content":"\\"quoted\\""}', True),  # starts with an escaped quote
        (b'{"content":" "}', True),  # whitespace is content too (the scanner holds it)
        (b'{"content":""}', False),
        (b'{"content":null}', False),
        (b'{"role":"assistant"}', False),
        (b'{"reasoning_content":"thinking"}', False),
        (b'{"reasoning_content":"say \\"content\\": \\"x\\""}', False),  # escaped: not a key
        (b'{"x":"content","content":"y"}', True),
        (b'{"x":"\\"content\\"content\\""}', False),
    ],
)
def test_content_is_looked_for_only_when_wanted(
    scan: Callable[[bytes, int], int], delta: bytes, content: bool
) -> None:
    data = b'data: {"choices":[{"delta":' + delta + b',"finish_reason":null}]}\n\n'
    assert scan(data, CONTENT) == PLAIN | (CONTENT if content else 0)
    assert scan(data, MARKUP | USAGE) & CONTENT == 0


def test_usage_is_looked_for_only_when_wanted(scan: Callable[[bytes, int], int]) -> None:
    data = b'data: {"choices":[],"usage":{"total_tokens":3}}\n\n'
    assert scan(data, USAGE) == PLAIN | USAGE
    assert scan(data, 0) == PLAIN
    assert scan(data, MARKUP) == PLAIN


def test_rejects_what_is_not_bytes() -> None:
    if sse_scan.native_scan is None:
        pytest.fail("the native scan was not compiled")
    with pytest.raises(TypeError):
        sse_scan.native_scan("data: {}\n\n", 0)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        sse_scan.native_scan(b"data: {}\n\n")  # type: ignore[call-arg]


# Pieces that exercise every rule, including the near misses (`data:{`, a spaced null, an
# escaped quote, a lone `[`), put together in any order.
PIECES = [
    b"data: {",
    b"data: [DONE]",
    b"data:{",
    b"}",
    b"\n",
    b"\n\n",
    b"\r",
    b'"finish_reason"',
    b'"finish_reason":null',
    b"finish_reason",
    b'finish_reason"',
    b":null",
    b": null",
    b'"stop"',
    b"tool_calls",
    b"tool_call",
    b'"usage"',
    b"usage",
    b"<",
    b"[",
    b"T",
    b'"',
    b"\\u003c",
    b"\\u003",
    b"x",
    b"word ",
    b'"content"',
    b":",
    b" ",
    b'""',
    # long enough to carry the others across the compiled walk's 16-byte blocks
    b'"system_fingerprint":"fp_bench","logprobs":null,',
    b"x" * 13,
]


@st.composite
def reads(draw: st.DrawFn) -> bytes:
    body = b"".join(draw(st.lists(st.sampled_from(PIECES), max_size=24)))
    shape = draw(st.sampled_from(["free", "framed", "events"]))
    if shape == "framed":
        return b"data: {" + body + b"\n\n"
    if shape == "events":
        count = draw(st.integers(min_value=1, max_value=4))
        return b"".join(b"data: {" + body + b"}\n\n" for _ in range(count))
    return body


@settings(max_examples=3000, deadline=None)
@given(data=reads(), want=st.sampled_from(ALL_WANTS))
def test_native_and_python_agree(data: bytes, want: int) -> None:
    assert sse_scan.native_scan is not None
    assert sse_scan.native_scan(data, want) == scan_py(data, want)


@settings(max_examples=500, deadline=None)
@given(data=st.binary(max_size=200), want=st.sampled_from(ALL_WANTS))
def test_native_and_python_agree_on_any_bytes(data: bytes, want: int) -> None:
    assert sse_scan.native_scan is not None
    assert sse_scan.native_scan(data, want) == scan_py(data, want)


# -- run_end: where the run of events the rule forwards ends -------------------------------


@st.composite
def runs(draw: st.DrawFn) -> bytes:
    """Several events, each its own mix of pieces, some whole and some not."""
    events = []
    for _ in range(draw(st.integers(min_value=1, max_value=5))):
        body = b"".join(draw(st.lists(st.sampled_from(PIECES), max_size=10)))
        events.append(draw(st.sampled_from([b"data: {%b}\n\n", b"data: {%b\n\n", b"%b"])) % body)
    return b"".join(events)


def run_end_by_definition(data: bytes, pos: int, want: int) -> int:
    """The longest run of whole events from `pos` that scan_py forwards as one read."""
    best, end = pos, pos
    while (end := data.find(b"\n\n", end) + 2) > 1:
        if scan_py(data[pos:end], want) == PLAIN:
            best = end
    return best


@settings(max_examples=2000, deadline=None)
@given(data=runs(), want=st.sampled_from(ALL_WANTS), at=st.integers(min_value=0, max_value=300))
def test_run_end_is_the_longest_run_the_scan_forwards(data: bytes, want: int, at: int) -> None:
    pos = min(at, len(data))
    expected = run_end_by_definition(data, pos, want)
    assert sse_scan.run_end_py(data, pos, want) == expected
    assert sse_scan.native_run_end is not None
    assert sse_scan.native_run_end(data, pos, want) == expected


@settings(max_examples=500, deadline=None)
@given(data=st.binary(max_size=200), want=st.sampled_from(ALL_WANTS), at=st.integers(0, 250))
def test_run_end_native_and_python_agree_on_any_bytes(data: bytes, want: int, at: int) -> None:
    pos = min(at, len(data))
    assert sse_scan.native_run_end is not None
    assert sse_scan.native_run_end(data, pos, want) == sse_scan.run_end_py(data, pos, want)


def test_run_end_refuses_a_position_outside_the_read() -> None:
    assert sse_scan.native_run_end is not None
    with pytest.raises(ValueError):
        sse_scan.native_run_end(b"data: {}\n\n", 11, 0)


# -- event_at: where the event at a position ends, and whether it is one data line ----------


def event_at_by_definition(data: bytes, pos: int) -> int:
    """As the stream's loop used to ask it: the first blank line from `pos`, then the SSE
    decoder's view of that event (one `data: {` line, no CR, no other newline)."""
    found = data.find(b"\n\n", pos)
    if found < 0:
        return -len(data)
    end = found + 2
    event = data[pos:end]
    lines = event[:-2].split(b"\n")
    one_line = len(lines) == 1 and lines[0].startswith(b"data: {") and b"\r" not in event
    return end if one_line else -end


@pytest.mark.parametrize(
    ("data", "pos", "expected"),
    [
        (NULL_CHUNK, 0, len(NULL_CHUNK)),
        (NULL_CHUNK * 2, len(NULL_CHUNK), 2 * len(NULL_CHUNK)),
        (b"data: {\n\n", 0, 9),
        (b"data: [DONE]\n\n", 0, -14),
        (b": keep-alive\n\n" + NULL_CHUNK, 0, -14),
        (b'data: {"a":1}\ndata: {"b":2}\n\n', 0, -29),
        (b"data: {\r}\n\n", 0, -11),
        (b"data: {}\r\n\r\n", 0, -12),
        (b"data: {}\n", 0, -9),
        (b"xdata: {}\n\n", 1, 11),
    ],
)
def test_event_at_examples(data: bytes, pos: int, expected: int) -> None:
    assert sse_scan.event_at_py(data, pos) == expected
    assert sse_scan.native_event_at is not None
    assert sse_scan.native_event_at(data, pos) == expected


@settings(max_examples=2000, deadline=None)
@given(data=runs(), at=st.integers(min_value=0, max_value=300))
def test_event_at_matches_the_decoders_view(data: bytes, at: int) -> None:
    if not data:
        return
    pos = min(at, len(data) - 1)
    expected = event_at_by_definition(data, pos)
    assert sse_scan.event_at_py(data, pos) == expected
    assert sse_scan.native_event_at is not None
    assert sse_scan.native_event_at(data, pos) == expected


@settings(max_examples=500, deadline=None)
@given(data=st.binary(min_size=1, max_size=200), at=st.integers(0, 250))
def test_event_at_native_and_python_agree_on_any_bytes(data: bytes, at: int) -> None:
    pos = min(at, len(data) - 1)
    assert sse_scan.native_event_at is not None
    assert sse_scan.native_event_at(data, pos) == sse_scan.event_at_py(data, pos)


@pytest.mark.parametrize("pos", [-1, 10, 11])
def test_event_at_refuses_a_position_outside_the_read(pos: int) -> None:
    assert sse_scan.native_event_at is not None
    with pytest.raises(ValueError):
        sse_scan.native_event_at(b"data: {}\n\n", pos)
    with pytest.raises(ValueError):
        sse_scan.event_at_py(b"data: {}\n\n", pos)
