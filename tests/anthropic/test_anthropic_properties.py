"""Whatever shape an upstream's Anthropic stream takes (the quirks of QUIRKS.md in any mix,
split at any byte), the client reads a well-formed message: every block started once with
`input: {}`, dense indexes, inputs that parse, unique valid ids, one message_delta and one
message_stop (or one error event)."""

from __future__ import annotations

import re

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.anthropic.anthropic_wire import end, ev, read, request, run, start, text, tool

ID = re.compile(r"^[a-zA-Z0-9_-]+$")
RAW_IDS = st.sampled_from(
    ["functions.Bash:0", "functions.Bash:1", "grep:3", "Bash_0", "toolu_01AbC", "", None, 3]
)
ARGS = st.dictionaries(
    st.sampled_from(["command", "pattern", "ü"]), st.text(max_size=6), max_size=2
)


@st.composite
def blocks(draw: st.DrawFn) -> bytes:
    out = []
    for index in range(draw(st.integers(0, 4))):
        if draw(st.booleans()):
            out.append(
                text(
                    index,
                    *draw(st.lists(st.text(max_size=5), max_size=3)),
                    stop=draw(st.booleans()),
                )
            )
        else:
            out.append(
                tool(
                    index,
                    draw(RAW_IDS),
                    draw(st.sampled_from(["Bash", "grep"])),
                    draw(ARGS),
                    whole=draw(st.booleans()),
                    deltas=draw(st.booleans()),
                    stop=draw(st.booleans()),
                    pieces=draw(st.integers(1, 4)),
                )
            )
    if draw(st.booleans()):
        out.insert(draw(st.integers(0, len(out))), ev({"type": "ping"}))
    return b"".join(out)


@settings(max_examples=150, deadline=None)
@given(
    body=blocks(),
    reason=st.sampled_from(["tool_use", "end_turn", "max_tokens", None]),
    finished=st.booleans(),
    read_size=st.integers(1, 200),
)
def test_any_stream_reaches_the_client_well_formed(
    body: bytes, reason: str | None, finished: bool, read_size: int
) -> None:
    upstream = start() + body + (end(reason) if finished else b"")
    got = run(request(), [upstream], read_size=read_size)
    received = read(got.client)
    ids = [b["id"] for b in received.tools]
    assert len(ids) == len(set(ids)) and all(ID.match(i) for i in ids)
    for block in received.tools:
        assert isinstance(block["input"], dict)
    if received.tools and reason in ("tool_use", "end_turn", None):
        assert received.message["stop_reason"] == "tool_use"
    # Split reads never change what the client gets.
    assert got.client == run(request(), [upstream]).client
    assert orjson.loads(orjson.dumps(received.message))
