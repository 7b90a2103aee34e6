"""Output that shows the user nothing waits for output that does (SPEC §5): until then a replay
loop can still be answered with a plain 422. Events the hot path forwards unparsed are held to
that too: an empty content delta is such output whichever path it takes. Found by the near-JSON
differential fuzz (tests/core/test_near_json.py): the hot path let the response's head go with
an empty content delta, which the general path holds."""

from __future__ import annotations

import pytest

from tests.chat.helpers import (
    Setup,
    assistant,
    calls,
    chunk,
    feed_reads,
    hcall,
    header,
    request,
    role,
    sse,
    text,
    tool_msg,
)

NATIVE = "call_Ab3De5Gh7Jk9Lm1No3Pq5Rs"
ARGS = '{"path":"a.py"}'
# The history answered this call: the round's only call repeats it (a replay), so the round
# ends in a follow-up request, and nothing of it may have reached the client.
ANSWERED = request(
    [
        {"role": "user", "content": "hi"},
        assistant(hcall(NATIVE, "read_file", ARGS)),
        tool_msg(NATIVE),
    ]
)
REPLAY = calls(header(0, NATIVE, "read_file", ARGS))
HEAD = sse(role(), done=False)
QUIET = sse(text(""), chunk({"content": None}), done=False)
ROUND = HEAD + QUIET + sse(REPLAY, chunk({}, "tool_calls"))
SHAPES = {
    "one read": [ROUND],
    "the role first": [HEAD, ROUND[len(HEAD) :]],
    "an event a read": [
        HEAD,
        *(sse(e, done=False) for e in (text(""), chunk({"content": None}))),
        ROUND[len(HEAD + QUIET) :],
    ],
    "CRLF": [ROUND.replace(b"\n", b"\r\n")],  # the decoder's path
}


@pytest.mark.parametrize("shape", SHAPES)
def test_empty_content_forwarded_unparsed_waits_with_the_head(shape: str) -> None:
    core = Setup(body=ANSWERED).core()
    out = feed_reads(core, SHAPES[shape])
    assert core.followup is not None
    assert out == b"" and core.nothing_released


def test_the_head_leaves_with_the_first_content_that_shows() -> None:
    core = Setup(body=ANSWERED).core()
    data = HEAD + QUIET + sse(text("hi"), done=False)
    assert b"".join(core.feed(data)) == data
    assert not core.nothing_released
