"""Near-JSON upstream events against every fast path (SPEC §4, §6).

Each surface forwards some events as the bytes that came, without parsing them: Chat
Completions' hot path (`sse_scan`, the fragment lane, the plain start), the Anthropic text lane
(`TextBlocks.as_came`), its runs of plain deltas taken from a read (`TextBlocks.take_run`)
and event splitter (`framing.EventReader`), the Responses text lane
(`TextLane.take`) and splitter. Here their input is events that are almost JSON (truncated,
with bytes after the object, `{` then garbage, invalid UTF-8, lone surrogate escapes, NaN and
Infinity, numbers past a double, duplicate keys, nesting at orjson's limit) among well-formed
ones, in reads cut anywhere. Each run is held to a reference that parses every event (the
shortcuts off), and to SPEC §4: every data line the client gets is JSON or `[DONE]`, a data
line that is not JSON comes back as a comment carrying its text, and nothing raises.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.anthropic.exchange import AnthropicExchange
from proxy.chat import sse_scan, stream
from proxy.chat.sse_scan import json_line_py
from proxy.chat.stream import StreamSanitizer
from proxy.core.events import Forward, LoopDetected, UpstreamBroken
from proxy.core.ids import mint_client_id
from proxy.core.rounds import RouteRules
from proxy.core.sse import utf8_safe
from proxy.responses.exchange import ResponsesExchange
from tests.anthropic import anthropic_wire as aw
from tests.chat.helpers import (
    Setup,
    assistant,
    calls,
    chunk,
    feed_reads,
    frag,
    hcall,
    header,
    request,
    role,
    text,
    tool_msg,
    usage_chunk,
)
from tests.core.full_parse import (
    anthropic_parsing_every_event,
    responses_parsing_every_event,
)
from tests.responses.helpers import Upstream, answered_call
from tests.responses.helpers import request as responses_request

# NEAR_JSON_SCALE=20 for a deeper local run: every test's examples times 20 (the default keeps
# this file well under half a minute).
SCALE = int(os.environ.get("NEAR_JSON_SCALE", "1"))


def fuzz(examples: int) -> settings:
    return settings(
        max_examples=examples * SCALE,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )


# -- near-JSON: an event's JSON as a broken or odd upstream may write it ----------------------

TRAILING = [b"}", b"]", b",", b" x", b"\x00", b"{}", b'"', b" ", b"\t", b"}}"]
GARBAGE = [
    b"{not json",
    b"{",
    b"{}}",
    b"{'a': 1}",
    b"{a:1}",
    b'{"a":1,}',
    b'{"a" 1}',
    b'{"a":}',
    b'{"a":[1,2}',
    b'{"a":"b"',
    b'{"a":tru}',
    b'{"a":nul}',
    b'{"a":"\\x"}',
    b"{\xef\xbb\xbf}",
    b"{}",  # JSON after all
]
# Written inside a string value: invalid UTF-8, controls, escapes (lone surrogates among them).
IN_STRING = [
    b"\xff",
    b"\xc3",
    b"\xc0\x80",
    b"\xed\xa0\x80",
    b"\xf4\x90\x80\x80",
    b"\x01",
    b"\t",
    b"\\ud800",
    b"\\udc00",
    b"\\ud800\\u0041",
    b"\\ud800\\n",
    b"\\uD83D",
    b"\\x41",
    b"\\u12",
    b"\\",
    b'"',
    # well-formed
    b"\\ud800\\udc00",
    b"\\ud83d\\ude00",
    b"\\u00e9",
    b"\\/",
    b"\xc3\xa9",
    "😀".encode(),
    b"\xe2\x80\xa8",
    b"\x7f",
]
NUMBERS = [
    b"NaN",
    b"Infinity",
    b"-Infinity",
    b"1e999",
    b"-1e400",
    b"1.7976931348623159e308",
    b"1" + b"0" * 400,
    b"01",
    b"1.",
    b".5",
    b"+1",
    b"0x10",
    b"1e",
    b"--1",
    # well-formed
    b"1e308",
    b"1.7976931348623157e308",
    b"18446744073709551616",
    b"-9223372036854775809",
    b"0." + b"0" * 400 + b"1",
    b"1.5e-400",
    b"1E5",
    b"-0",
]
# Keys a chunk holds again (JSON: the last one counts).
DUPLICATES = [b'"id":"chatcmpl-2"', b'"choices":null', b'"object":1', b'"model":{}']
# `"deep":` nested this deep, inside the event's object: 1,024 levels in all parse, 1,025 do not.
DEPTHS = [1, 1022, 1023, 1024, 2000]
VALID_ODDITIES = [b"{ ", b"{\t", b", ", b" }"]

_STRING_VALUE = re.compile(rb'":"')
_NUMBER_VALUE = re.compile(rb":-?[0-9]+")


@st.composite
def near_json(draw: st.DrawFn, data: bytes) -> bytes:
    """`data` (one JSON object) broken, or odd but well-formed, in one of the ways above."""
    how = draw(st.integers(0, 9))
    if how == 0 and len(data) > 1:  # truncated
        return data[: draw(st.integers(1, len(data) - 1))]
    if how == 1:
        return data + draw(st.sampled_from(TRAILING))
    if how == 2:
        return draw(st.sampled_from(GARBAGE))
    if how == 3 and (strings := [m.end() for m in _STRING_VALUE.finditer(data)]):
        at = draw(st.sampled_from(strings))
        return data[:at] + draw(st.sampled_from(IN_STRING)) + data[at:]
    if how == 4 and (numbers := list(_NUMBER_VALUE.finditer(data))):
        found = draw(st.sampled_from(numbers))
        return data[: found.start() + 1] + draw(st.sampled_from(NUMBERS)) + data[found.end() :]
    if how == 5:
        return b"{" + draw(st.sampled_from(DUPLICATES)) + b"," + data[1:]
    if how == 6:
        depth = draw(st.sampled_from(DEPTHS))
        return b'{"deep":' + b"[" * depth + b"]" * depth + b"," + data[1:]
    if how == 7:
        return data.replace(b",", draw(st.sampled_from(VALID_ODDITIES)), 1)
    return data


def framed(data: bytes) -> bytes:
    return b"data: " + data + b"\n\n"


@st.composite
def cut(draw: st.DrawFn, body: bytes) -> list[bytes]:
    """`body` as reads cut at any bytes (or whole)."""
    cuts = sorted(draw(st.lists(st.integers(0, len(body)), max_size=5)))
    return [body[a:b] for a, b in itertools.pairwise([0, *cuts, len(body)])]


@st.composite
def cut_or_paced(draw: st.DrawFn, events: list[bytes]) -> list[bytes]:
    """The events as reads cut at any bytes, or one read each (a paced model's stream)."""
    return events if draw(st.booleans()) else draw(cut(b"".join(events)))


# -- what the client may get ----------------------------------------------------------------


def data_lines(out: bytes) -> Iterator[bytes]:
    """Each event's data (its `data:` lines joined), as an SSE client reads them."""
    for block in out.split(b"\n\n"):
        lines = [line[6:] for line in block.split(b"\n") if line.startswith(b"data: ")]
        if lines:
            yield b"\n".join(lines)
        assert not any(
            line.startswith(b"data:") and line[5:6] != b" " for line in block.split(b"\n")
        )


def assert_spec4(out: bytes, sent: list[bytes]) -> None:
    """SPEC §4: every data line the client gets is JSON or `[DONE]`; a comment carries the
    text of a data line the upstream sent (as valid UTF-8)."""
    for data in data_lines(out):
        if data != b"[DONE]":
            orjson.loads(data)
    sent_text = b"\n".join(sent).replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    # A data line made a comment has any invalid UTF-8 replaced (the SDKs decode strictly);
    # the upstream's own comments pass as they came.
    lines = set(sent_text.split(b"\n")) | set(utf8_safe(sent_text).split(b"\n"))
    payloads = {line[6:] if line[5:6] == b" " else line[5:] for line in lines}
    for line in out.split(b"\n"):
        if line.startswith(b": "):
            # a data line's text, another line of its event, or the upstream's own comment
            assert line[2:] in payloads or line[2:] in lines or line in lines, line


# -- Chat Completions -------------------------------------------------------------------------

HELD_ID = "functions.read_file:0"
NATIVE = "call_Ab3De5Gh7Jk9Lm1No3Pq5Rs"
ARGS = '{"path":"a.py"}'
READ_FILE = {"type": "function", "function": {"name": "read_file", "parameters": {}}}
HISTORY = [
    {"role": "user", "content": "hi"},
    assistant(hcall(NATIVE, "read_file", ARGS)),
    tool_msg(NATIVE),
]
# A held call (the lane) and text calls (the plain start; content and markup looked for), both
# after an answered call (usage may be held for a follow-up), and the plainest hot path.
CHAT_SETUPS: dict[str, Callable[[], StreamSanitizer]] = {
    "held call": lambda: Setup(body=request(HISTORY, model="kimi-k2"), dialect="kimi").core(),
    "text calls": lambda: StreamSanitizer(
        Setup(body=request(HISTORY, tools=[READ_FILE])).ids(), text_tool_calls=True
    ),
    "plain": lambda: Setup(guard=False).core(),
}
FRAMINGS = [b"data: "] * 6 + [b"data:", b": keep-alive\ndata: ", b"event: x\ndata: "]
TEXTS = ["Hello", " world", "é", "<tool_call>", "[", "{", "", "a\nb", '"q"', "\u2028"]
PIECES = ['{"path":', '"b.py"', "}", " ", "é", ARGS]
# A held call's arguments in fragments none of which completes them but the last.
HELD_PIECES = ['{"pa', 'th":', ' "b', "é.", 'py"', "}"]


def fragment(piece: str) -> dict[str, Any]:
    return calls(frag(0, piece))


@st.composite
def chat_event(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.integers(0, 9))
    if kind <= 4:
        return text(draw(st.sampled_from(TEXTS)))
    if kind == 5:
        return calls(header(0, draw(st.sampled_from([HELD_ID, NATIVE, "0"])), "read_file"))
    if kind <= 7:
        return calls(frag(0, draw(st.sampled_from(PIECES))))
    if kind == 8:
        return chunk({"reasoning_content": draw(st.sampled_from(TEXTS))})
    return usage_chunk(choices=draw(st.sampled_from([(), None])))


@st.composite
def chat_streams(draw: st.DrawFn) -> tuple[list[bytes], list[bytes]]:
    """A round's events, some of them near-JSON, and the round ended or not."""
    events = [framed(orjson.dumps(role()))]
    chosen = draw(st.lists(chat_event(), min_size=1, max_size=8))
    if draw(st.booleans()):  # a first content that reads plainly: the plain start's
        chosen.insert(0, text(draw(st.sampled_from(["Hello", "Sure", "é"]))))
    if draw(st.booleans()):  # a held call's fragments, one at a time: the lane's
        at = draw(st.integers(0, len(chosen)))
        chosen[at:at] = [calls(header(0, HELD_ID, "read_file")), *map(fragment, HELD_PIECES)]
    for event in chosen:
        data = orjson.dumps(event)
        if draw(st.integers(0, 2)) == 0:
            data = draw(near_json(data))
        # now and then framed otherwise (SPEC §4 tolerates it): the decoder's path
        event_bytes = framed(data).replace(b"data: ", draw(st.sampled_from(FRAMINGS)), 1)
        if draw(st.integers(0, 7)) == 0:
            event_bytes = event_bytes.replace(b"\n", b"\r\n")
        events.append(event_bytes)
    if draw(st.booleans()):
        events.append(
            framed(orjson.dumps(chunk({}, draw(st.sampled_from(["stop", "tool_calls"])))))
        )
    if draw(st.booleans()):
        events.append(b"data: [DONE]\n\n")
    return events, draw(cut(b"".join(events)))


@contextlib.contextmanager
def parsing_every_event() -> Iterator[None]:
    """The Chat core with its shortcuts off: no run forwarded unparsed (`run_end`, `scan`),
    no fragment taken from its bytes, no first content read from its bytes."""
    with (
        mock.patch.object(stream, "run_end", lambda data, pos, want: pos),
        mock.patch.object(stream, "scan", lambda data, want: 0),
        mock.patch.object(stream, "FRAGMENT_LANE", False),
        mock.patch.object(stream, "PLAIN_START", False),
    ):
        yield


def chat_outcome(setup: str, reads: list[bytes]) -> tuple[Any, ...]:
    core = CHAT_SETUPS[setup]()
    out = feed_reads(core, reads)
    broken = None if core.non_json.broken is None else str(core.non_json.broken)
    return out, core.non_json.count, core.followup, core.error is None, broken


@fuzz(400)
@given(case=chat_streams(), setup=st.sampled_from(sorted(CHAT_SETUPS)))
def test_chat_fast_paths_give_what_parsing_every_event_gives(
    case: tuple[list[bytes], list[bytes]], setup: str
) -> None:
    events, reads = case
    with parsing_every_event():
        expected = chat_outcome(setup, [b"".join(events)])
    got = chat_outcome(setup, reads)
    assert got == expected
    assert_spec4(got[0], events)


# Streams whose near-JSON event sits where each shortcut looks: in a hot read after content, as
# a held call's fragment, as the round's first content; each cut in two at every byte.
BYTEWISE = [
    (
        "plain",
        [
            role(),
            text("a"),
            b'{"id":"chatcmpl-1","choices":[{"index":0,"delta":{"content":"b"}',
            text("c"),
        ],
    ),
    ("plain", [role(), text("a"), b'{"a":"\\ud800"}', text("b"), b'{"a":1}}']),
    (
        "held call",
        [
            role(),
            calls(header(0, HELD_ID, "read_file")),
            calls(frag(0, '{"path":')),
            orjson.dumps(calls(frag(0, '"b.py"')))[:-3],
            calls(frag(0, "}")),
        ],
    ),
    ("text calls", [role(), orjson.dumps(text("Hello"))[:-12], text(" there"), b'{"a":NaN}']),
]


@pytest.mark.parametrize(("setup", "events"), BYTEWISE)
def test_chat_near_json_split_at_every_byte(setup: str, events: list[Any]) -> None:
    body = b"".join(framed(e if isinstance(e, bytes) else orjson.dumps(e)) for e in events)
    body += framed(orjson.dumps(chunk({}, "stop"))) + b"data: [DONE]\n\n"
    with parsing_every_event():
        expected = chat_outcome(setup, [body])
        # the reference really parses every event (the switches reach the core)
        reference = CHAT_SETUPS[setup]()
        feed_reads(reference, [body])
    parsed = [e for e in events if not isinstance(e, bytes) or json_line_py(e)]
    # SPEC §4: a near-JSON line inside the held call's open arguments ends the round there
    # (it may have carried a fragment); anywhere else it is a comment, counted.
    assert (reference.non_json.broken is not None) == (setup == "held call")
    if reference.non_json.broken is None:
        assert reference.parsed_chunks == len(parsed) + 1  # and the finish
        assert expected[1] == len(events) - len(parsed)  # each near-JSON event counted
    else:
        bad = next(i for i, e in enumerate(events) if isinstance(e, bytes) and not json_line_py(e))
        assert reference.parsed_chunks == bad
        assert expected[1] == 0
    assert_spec4(expected[0], [body])
    for at in range(1, len(body)):
        assert chat_outcome(setup, [body[:at], body[at:]]) == expected, at


# -- the scan's proof, against orjson ---------------------------------------------------------


# JSON objects of every kind of value, as the surfaces' events and odder ones hold them.
OBJECTS = [
    orjson.dumps(value)
    for value in [
        text("word0 "),
        calls(header(0, HELD_ID, "read_file", ARGS)),
        usage_chunk(),
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "é"}},
        {"a": [1, -2.5e-3, 3e100, None, True, False, "", {}, []], "b": {"c": [[{"d": "😀"}]]}},
        {"": '\u2028\x7f\\"', "n": -0, "big": 18446744073709551615, "f": 1.5, "s": "\x00\x1f"},
    ]
]


@st.composite
def json_objects(draw: st.DrawFn) -> bytes:
    """One of OBJECTS, or a value of any kind put in its place."""
    data = draw(st.sampled_from(OBJECTS))
    if draw(st.booleans()):
        value = draw(
            st.one_of(
                st.none(),
                st.integers(-(2**63), 2**64 - 1),
                st.floats(allow_nan=False, allow_infinity=False),
                st.text(max_size=6),
            )
        )
        data = b'{"v":' + orjson.dumps(value) + b"," + data[1:]
    return data


@fuzz(1000)
@given(data=json_objects().flatmap(near_json))
def test_the_compiled_proof_is_orjson(data: bytes) -> None:
    assert sse_scan.native_json_line is not None
    assert sse_scan.native_json_line(data) == json_line_py(data)


@fuzz(300)
@given(
    lines=st.lists(json_objects().flatmap(near_json), min_size=1, max_size=6),
    want=st.sampled_from([0, sse_scan.USAGE, sse_scan.MARKUP | sse_scan.CONTENT]),
    at=st.integers(0, 3000),
)
def test_the_compiled_scan_proves_runs_as_the_reference(
    lines: list[bytes], want: int, at: int
) -> None:
    # Events alike but for their strings are proven against each other: alike or not, the
    # answers are the reference's (each event parsed).
    data = b"".join(framed(line) for line in lines)
    assert sse_scan.native_scan is not None and sse_scan.native_run_end is not None
    assert sse_scan.native_scan(data, want) == sse_scan.scan_py(data, want)
    pos = min(at, len(data))
    assert sse_scan.native_run_end(data, pos, want) == sse_scan.run_end_py(data, pos, want)


# What may take a string's place in an event alike the one before it: the compiled scan walks
# only the strings that differ (`like_proven` in _sse_scan.c), so these reach inside escapes
# and characters, end early, run on, or hold what no string may.
STRING_BODIES = [
    b"",
    b"word",
    b"word7 ",
    b"w",
    b"\\\\u00e9",
    b"\\u00e9",
    b"\\u00e8",
    b"\\u00zz",
    b"\\ud800",
    b"\\ud800\\udc00",
    b"\\ud800\\udc0",
    b'\\"',
    b"\\",
    b"\\n",
    b"\\q",
    b"\\/",
    b"\xc3\xa9",
    b"\xc3\xa8",
    b"\xc3\x28",
    b"\xc3",
    b"\xe2\x82\xac",
    b"\xe2\x82",
    b"\xf0\x9f\x98\x80",
    b"\xed\xa0\x80",
    b"\x7f",
    b"\x1f",
    b"\t",
    b"\n",
    b'"',
    b'","x":"',
    b'"}',
    b"a" * 40,
    b"\\u0041" * 3,
]
_STRING = re.compile(rb'"((?:[^"\\]|\\.)*)"')


# Well-formed events the rule refuses (a call, a finish, usage, markup, content, a CR) or that
# end a run of `data: {` events (a comment, `[DONE]`), put among the alike ones.
OTHERS = [
    orjson.dumps(calls(header(0, NATIVE, "read_file", ARGS))),
    orjson.dumps(chunk({}, "stop")),
    orjson.dumps(usage_chunk()),
    orjson.dumps(text("<tool_call>")),
    orjson.dumps(text("x")),
    b'{"a":\r1}',
    b": keep-alive",
    b"[DONE]",
]


@st.composite
def alike_events(draw: st.DrawFn) -> list[bytes]:
    """Events alike but for some strings (as a stream's content deltas are), now and then one
    near-JSON or otherwise different."""
    base = orjson.dumps(
        chunk({"content": "word0 "}, system_fingerprint="fp_x", obfuscation="Zx9", logprobs=None)
    )
    strings = [m.span(1) for m in _STRING.finditer(base)]
    events = []
    for _ in range(draw(st.integers(1, 6))):
        event = base
        spans = sorted(draw(st.sets(st.sampled_from(strings), max_size=3)), reverse=True)
        for start, stop in spans:
            event = event[:start] + draw(st.sampled_from(STRING_BODIES)) + event[stop:]
        kind = draw(st.integers(0, 9))
        if kind == 0:
            event = draw(near_json(event))
        elif kind == 1:
            event = draw(st.sampled_from(OTHERS))
        events.append(event)
    return events


@fuzz(300)
@given(
    events=alike_events(),
    want=st.sampled_from([0, sse_scan.USAGE, sse_scan.MARKUP | sse_scan.CONTENT]),
    at=st.integers(0, 7),
)
def test_events_alike_are_proven_as_the_reference(events: list[bytes], want: int, at: int) -> None:
    reads = [b": keep-alive\n\n" if e == b": keep-alive" else framed(e) for e in events]
    data = b"".join(reads)
    assert sse_scan.native_scan is not None and sse_scan.native_run_end is not None
    assert sse_scan.native_scan(data, want) == sse_scan.scan_py(data, want)
    # from an event's start, where the stream's loop asks
    pos = len(b"".join(reads[: min(at, len(reads))]))
    assert sse_scan.native_run_end(data, pos, want) == sse_scan.run_end_py(data, pos, want)
    # one event a read, as a paced upstream sends them: each compared with the one before
    for read in reads:
        assert sse_scan.native_scan(read, want) == sse_scan.scan_py(read, want)


@pytest.mark.parametrize("depth", [1022, 1023, 1024, 1025])
@pytest.mark.parametrize("inner", [b"[", b'{"a":'])
def test_nesting_at_orjson_s_limit(depth: int, inner: bytes) -> None:
    closer = b"]" if inner == b"[" else b"}"
    data = b'{"a":' + inner * depth + (b"" if inner == b"[" else b"1") + closer * depth + b"}"
    assert sse_scan.native_json_line is not None
    assert sse_scan.native_json_line(data) == json_line_py(data) == (depth < 1024)


@pytest.mark.parametrize(
    "number",
    [
        b"1.7976931348623157e308",
        b"1.7976931348623158e308",
        b"1.7976931348623159e308",
        b"179769313486231580793728971405301e276",
        b"179769313486231580793728971405302e276",
        b"-1" + b"0" * 308,
        b"1" + b"0" * 309,
        b"0." + b"0" * 500 + b"1e810",
        b"0." + b"0" * 500 + b"1e809",
        b"1e-99999999999999999999",
        b"0e99999999",
    ],
)
def test_numbers_near_a_double_s_limit(number: bytes) -> None:
    data = b'{"n":' + number + b"}"
    assert sse_scan.native_json_line is not None
    assert sse_scan.native_json_line(data) == json_line_py(data)


# -- Anthropic Messages -----------------------------------------------------------------------

LS = {"command": "ls"}
# The history answered `functions.Bash:0`: a call under that raw id again is a replay.
A_MINTED = mint_client_id(1, 0, "abcd", "functions.Bash:0", "toolu_")
A_TEXTS = ["plain ", "words", "é", "<", "[TOOL", "a\\b", '"', ""]
# For the runs taken unparsed: escapes of two characters (taken), `\u0001` (not), the event's
# type as text.
A_TEXTS += ["line\nbreak", 'say "hi"', "\x7f", "\u2028", "\x01", "content_block_delta"]


@st.composite
def anthropic_streams(draw: st.DrawFn) -> tuple[list[bytes], list[bytes]]:
    """A text block's deltas (some near-JSON) between other events, ended or not."""
    events = [aw.start(), aw.text(0, draw(st.sampled_from(A_TEXTS)), stop=False)]
    for _ in range(draw(st.integers(1, 8))):
        delta = {"type": "text_delta", "text": draw(st.sampled_from(A_TEXTS))}
        data = orjson.dumps({"type": "content_block_delta", "index": 0, "delta": delta})
        if draw(st.integers(0, 2)) == 0:
            data = draw(near_json(data))
        named = draw(st.booleans())
        events.append((b"event: content_block_delta\n" if named else b"") + framed(data))
    if draw(st.booleans()):
        events.append(aw.ev({"type": "content_block_stop", "index": 0}))
    if draw(st.booleans()):
        events.append(aw.tool(1, "functions.Bash:0", "Bash", LS))
    events.append(aw.end(draw(st.sampled_from(["end_turn", "tool_use"]))))
    return events, draw(cut_or_paced(events))


def anthropic_outcome(reads: list[bytes]) -> tuple[Any, ...]:
    """As `anthropic_wire.run` drives a streaming exchange, over reads cut anywhere; a
    replay-only round's follow-up gets a final answer."""
    final = aw.start("msg_final") + aw.text(0, "done") + aw.end("end_turn")
    body = aw.request(aw.assistant(aw.tool_use(A_MINTED, "Bash", LS)), aw.results(A_MINTED))
    exchange = AnthropicExchange(body, orjson.dumps(body), RouteRules(), aw.entropy)
    result = aw.Run(exchange=exchange)
    for round_reads in (reads, [final]):
        exchange.begin_round(stream=True)
        events: list[Any] = []
        for read in round_reads:
            events += exchange.feed(read)
            if any(not isinstance(e, bytes) for e in events):
                break
        else:
            events += exchange.end()
        if aw._act(result, events, exchange) != "followup":
            break
    return result.client, result.followups, exchange.report()


@fuzz(200)
@given(case=anthropic_streams())
def test_anthropic_fast_paths_give_what_parsing_every_event_gives(
    case: tuple[list[bytes], list[bytes]],
) -> None:
    events, reads = case
    with anthropic_parsing_every_event():
        expected = anthropic_outcome([b"".join(events)])
    got = anthropic_outcome(reads)
    assert got == expected
    assert_spec4(got[0], events)


# -- Responses --------------------------------------------------------------------------------

R_HISTORY = responses_request(
    *answered_call("call_0badf00d_functions.bash:0", '{"command":"ls"}'), model="kimi-k2"
)
R_TEXTS = ["plain ", "words", "é", "<", "[TOOL", ""]


@st.composite
def responses_streams(draw: st.DrawFn) -> tuple[list[bytes], list[bytes]]:
    """A message's text deltas (some near-JSON), then maybe a replayed call, ended or not."""
    up = Upstream().created().message(draw(st.sampled_from(R_TEXTS)), done=False)
    head = up.numbered_events()
    ref = {"item_id": "msg_0", "output_index": 0, "content_index": 0}
    deltas = []
    for n in range(draw(st.integers(1, 8))):
        delta = {
            "type": "response.output_text.delta",
            **ref,
            "delta": draw(st.sampled_from(R_TEXTS)),
            "sequence_number": len(head) + n,
        }
        data = orjson.dumps(delta)
        if draw(st.integers(0, 2)) == 0:
            data = draw(near_json(data))
        deltas.append(b"event: response.output_text.delta\n" + framed(data))
    tail = Upstream(index=1)
    if draw(st.booleans()):
        tail.call("functions.bash:0", '{"command":"ls"}')
    if draw(st.booleans()):
        tail.completed()
    events = [*head, *deltas, *tail.events]
    return events, draw(cut_or_paced(events))


def responses_outcome(reads: list[bytes]) -> tuple[Any, ...]:
    counter = itertools.count(1)

    def entropy(n: int) -> bytes:  # the same ids in every run
        return next(counter).to_bytes(8, "big")[-n:].rjust(n, b"\x01")

    final = Upstream().created().message("done").completed().numbered()
    exchange = ResponsesExchange(R_HISTORY, orjson.dumps(R_HISTORY), RouteRules(), entropy=entropy)
    got: list[Any] = []
    for round_reads in (reads, [final]):
        exchange.begin_round(stream=True)
        for read in round_reads:
            if exchange.phase.name != "RECEIVING":
                break
            got += exchange.feed(read)
        if exchange.phase.name == "RECEIVING":
            got += exchange.end()
        if not (got and type(got[-1]).__name__ == "OpenFollowup"):
            break
    return _comparable(got), exchange.report()


def _comparable(events: list[Any]) -> list[object]:
    """The exchange's events as values, the client's bytes joined (reads cut elsewhere hand
    them out in other pieces, a last read's bytes in its `Forward`)."""
    out: list[object] = []
    for event in events:
        data = event.data if isinstance(event, Forward) else event
        if isinstance(data, bytes):
            if out and isinstance(out[-1], bytes):
                out[-1] += data
            else:
                out.append(data)
        if isinstance(event, Forward):
            out.append(("last", event.last))
        elif isinstance(event, LoopDetected | UpstreamBroken):
            out.append((type(event), event.error.message, event.error.code))
        elif not isinstance(event, bytes):
            out.append(event)
    return out


def _client_bytes(events: list[Any]) -> bytes:
    return b"".join(e if isinstance(e, bytes) else getattr(e, "data", b"") for e in events)


@fuzz(200)
@given(case=responses_streams())
def test_responses_fast_paths_give_what_parsing_every_event_gives(
    case: tuple[list[bytes], list[bytes]],
) -> None:
    events, reads = case
    with responses_parsing_every_event():
        expected = responses_outcome([b"".join(events)])
    got = responses_outcome(reads)
    assert got == expected
    assert_spec4(_client_bytes(got[0]), events)


# Runs of deltas taken from a read at once (proxy/responses/runs.py): long runs, near-JSON
# events and texts that look like the events' own bytes among them.
R_RUN_TEXTS = [
    *R_TEXTS,
    'a"b',
    "a\\b",
    "a\nb",
    '","sequence_number":3}',
    '"type":"response.output_text.delta"',
    "\n\nevent: response.output_text.delta\ndata: {",
]


@st.composite
def responses_runs(draw: st.DrawFn) -> tuple[list[bytes], list[bytes]]:
    """A message's many text deltas (a few near-JSON, some numbered otherwise), ended or not."""
    up = Upstream().created().message(draw(st.sampled_from(R_TEXTS)), done=False)
    head = up.numbered_events()
    ref = {"item_id": "msg_0", "output_index": 0, "content_index": 0}
    deltas = []
    seq = len(head)
    for _ in range(draw(st.integers(2, 40))):
        seq = draw(st.sampled_from([seq, seq + 1, seq + 1, seq + 1, seq + 1, 0]))
        fields = {"delta": draw(st.sampled_from(R_RUN_TEXTS)), "sequence_number": seq}
        data = orjson.dumps({"type": "response.output_text.delta", **ref, **fields})
        if draw(st.integers(0, 9)) == 0:
            data = draw(near_json(data))
        deltas.append(b"event: response.output_text.delta\n" + framed(data))
    tail = Upstream(index=1)
    if draw(st.booleans()):
        tail.call("functions.bash:0", '{"command":"ls"}')
    if draw(st.booleans()):
        tail.completed()
    events = [*head, *deltas, *tail.events]
    return events, draw(cut_or_paced(events))


@fuzz(200)
@given(case=responses_runs())
def test_responses_runs_give_what_parsing_every_event_gives(
    case: tuple[list[bytes], list[bytes]],
) -> None:
    events, reads = case
    with responses_parsing_every_event():
        expected = responses_outcome(reads)
    got = responses_outcome(reads)
    assert got == expected
    assert_spec4(_client_bytes(got[0]), events)
