"""A `data:` line that starts with `{` but is not JSON never leaves as it came (SPEC §4): on
every path of the Chat Completions core, the hot path's unparsed reads included, it becomes a
comment carrying its text, in place, and is counted. The openai SDK raises on such a line."""

from __future__ import annotations

import orjson
import pytest

from proxy.chat.stream import StreamSanitizer
from proxy.core.notes import DeltaRepaired
from proxy.core.sse import utf8_safe
from tests.chat.helpers import (
    Setup,
    assistant,
    calls,
    feed_reads,
    hcall,
    header,
    request,
    role,
    sse,
    text,
    tool_msg,
)

# Lines that start as an OpenAI chunk does and that orjson refuses.
NOT_JSON = [
    b"{not json",
    b'{"id":1,',  # a truncated event
    b"{",
    b'{"a":1}}',  # a byte after the object
    b'{"a":1} x',
    b'{"a":"}',  # the closing brace inside a string
    b'{"a":NaN}',
    b'{"a":Infinity}',
    b'{"a":1e999}',  # infinite as a double
    b'{"a":"\\ud800"}',  # a lone surrogate escape
    b'{"a":"\xff"}',  # not UTF-8
    b'{"a":"\xe2\x82',  # cut inside a character (and truncated)
    b'{"a":"\xed\xa0\x80"}',  # an encoded surrogate
    b'{"a":"tab\there"}',  # a raw control character
    b'{"a":01}',
    b'{"a":[1,]}',
    b"{" * 1025 + b"}" * 1025,  # deeper than orjson reads
]
CONTENT = text("hi")
TOOLS = [{"type": "function", "function": {"name": "read_file", "parameters": {}}}]
NATIVE = "call_Ab3De5Gh7Jk9Lm1No3Pq5Rs"
ANSWERED = [
    {"role": "user", "content": "hi"},
    assistant(hcall(NATIVE, "read_file", "{}")),
    tool_msg(NATIVE),
]
# The hot path's variants: what its scan looks for besides calls and finishes.
SETUPS = {
    "plain": lambda: Setup().core(),
    "usage held": lambda: Setup(body=request(ANSWERED)).core(),
    "text calls": lambda: StreamSanitizer(
        Setup(body=request(ANSWERED, tools=TOOLS)).ids(), text_tool_calls=True
    ),
}


def assert_only_json_data(out: bytes) -> None:
    """Every data line the client gets parses (or is `[DONE]`), and every line is UTF-8 (a
    comment made of a line cut inside a character too): what the SDKs need."""
    out.decode("utf-8")  # strict, as the openai SDK decodes each line
    for line in out.split(b"\n"):
        if line.startswith(b"data:") and line != b"data: [DONE]":
            orjson.loads(line[6:])


def non_json_notes(core: StreamSanitizer) -> int:
    return sum(isinstance(n, DeltaRepaired) and n.kind == "non_json_data" for n in core.notes)


def comment(line: bytes) -> bytes:
    """The comment a non-JSON line becomes: its text, any invalid UTF-8 replaced."""
    return b": " + utf8_safe(line) + b"\n\n"


def data(line: bytes) -> bytes:
    """The event body `sse` frames as given."""
    return b"data: " + line


@pytest.mark.parametrize("setup", SETUPS)
@pytest.mark.parametrize("line", NOT_JSON, ids=[repr(line[:12]) for line in NOT_JSON])
def test_a_non_json_event_in_a_hot_read_becomes_a_comment_in_place(line: bytes, setup: str) -> None:
    # The first read names the response (parsed); the second is the hot path's, whole.
    first = sse(role(), done=False)
    second = sse(CONTENT, data(line), CONTENT, done=False) + b"data: [DONE]\n\n"
    core = SETUPS[setup]()
    out = feed_reads(core, [first, second])
    assert_only_json_data(out)
    assert comment(line) in out
    # in place: between the two contents
    hi = sse(CONTENT, done=False)
    assert out.index(hi) < out.index(comment(line)) < out.rindex(hi)
    assert core.non_json.count == 1 and non_json_notes(core) == 1


@pytest.mark.parametrize("line", NOT_JSON[:4])
def test_the_issue_s_read_keeps_both_bad_lines_as_comments(line: bytes) -> None:
    body = sse(CONTENT, data(b"{not json"), data(line))
    core = Setup().core()
    out = feed_reads(core, [body])
    assert_only_json_data(out)
    assert comment(b"{not json") + comment(line) in out
    assert core.non_json.count == 2


@pytest.mark.parametrize("line", NOT_JSON[:6])
def test_a_non_json_event_after_a_refused_event_in_the_same_read(line: bytes) -> None:
    # The call refuses the read at its event; the events after it are asked again one run
    # at a time (`_refused_read`): the non-JSON one must not ride along in a run.
    call = calls(header(0, NATIVE, "read_file", "{}"))
    body = sse(role(), CONTENT, call, CONTENT, data(line), CONTENT)
    core = Setup().core()
    out = feed_reads(core, [body])
    assert_only_json_data(out)
    assert comment(line) in out
    assert core.non_json.count == 1


@pytest.mark.parametrize("line", NOT_JSON[:6])
def test_a_non_json_event_split_over_reads_becomes_a_comment(line: bytes) -> None:
    # Cut inside the bad event: the decoder completes it and the rule is asked of it alone.
    event = b"data: " + line + b"\n\n"
    body = sse(role(), CONTENT, done=False) + event + sse(CONTENT)
    cut = len(body) - len(sse(CONTENT)) - len(event) // 2
    core = Setup().core()
    out = feed_reads(core, [body[:cut], body[cut:]])
    assert_only_json_data(out)
    assert comment(line) in out
    assert core.non_json.count == 1


def test_a_truncated_first_content_is_not_taken_from_its_bytes() -> None:
    # With tools offered, a round's first content may be taken from its bytes (the plain
    # start): a cut event whose text reads plainly must still be refused as not JSON.
    cut = orjson.dumps(text("Hello"))[:-10]
    body = sse(role(), data(cut), text(" there"))
    core = SETUPS["text calls"]()
    out = feed_reads(core, [body])
    assert_only_json_data(out)
    assert comment(cut) in out
    assert core.non_json.count == 1
