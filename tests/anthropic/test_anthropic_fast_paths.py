"""The stream core's shortcuts decide exactly as its general path: an event leaves as the bytes
that came only when the general path would write the same event, and the client reads the
same message either way (SPEC §8)."""

from __future__ import annotations

import json
from unittest import mock

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.anthropic.exchange import AnthropicExchange
from proxy.anthropic.texts import TextBlocks
from proxy.core.ids import mint_client_id
from proxy.core.rounds import RouteRules
from tests.anthropic.anthropic_wire import (
    assistant,
    end,
    ev,
    parse,
    request,
    results,
    run,
    start,
    text,
    thinking,
    tool,
    tool_use,
)
from tests.core.full_parse import anthropic_parsing_every_event

JSON = dict[str, object]
LS = {"command": "ls"}


def delta_event(index: object, delta: JSON, **extra: object) -> bytes:
    return ev({"type": "content_block_delta", "index": index, "delta": delta, **extra})


def text_start(index: object) -> bytes:
    block = {"type": "text", "text": ""}
    return ev({"type": "content_block_start", "index": index, "content_block": block})


def client_deltas(client: bytes) -> list[JSON]:
    return [d for name, d in parse(client) if name == "content_block_delta"]  # type: ignore[misc]


def test_a_plain_text_delta_reaches_the_client_as_the_bytes_that_came() -> None:
    # Escaped as the upstream wrote it: the proxy's own serializer would write `é` itself.
    raw = b'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"caf\\u00e9"}}\n\n'
    upstream = start() + text(0, stop=False) + raw + end("end_turn")
    got = run(request(), [upstream])
    assert b"event: content_block_delta\n" + raw in got.client
    assert got.read().message["content"] == [{"type": "text", "text": "café"}]


def test_a_text_delta_at_a_drifted_index_goes_out_at_the_client_index() -> None:
    upstream = start() + text_start(0)
    upstream += delta_event(7, {"type": "text_delta", "text": "drifted"})
    got = run(request(), [upstream + end("end_turn")])
    assert [d["index"] for d in client_deltas(got.client)] == [0]
    assert got.read().message["content"] == [{"type": "text", "text": "drifted"}]


def test_a_text_block_after_others_goes_out_at_its_dense_index() -> None:
    upstream = start() + thinking(0, "hm", "sig") + text_start(5)
    upstream += delta_event(5, {"type": "text_delta", "text": "five"})
    got = run(request(), [upstream + end("end_turn")])
    assert [d["index"] for d in client_deltas(got.client)] == [0, 0, 1]


def test_a_boolean_index_is_written_as_the_block_index() -> None:
    # `true == 1` in Python, but a client reading `"index": true` has no block 1.
    upstream = start() + thinking(0, "hm", "sig") + text_start(1)
    upstream += delta_event(True, {"type": "text_delta", "text": "one"})
    got = run(request(), [upstream + end("end_turn")])
    last = client_deltas(got.client)[-1]
    assert last["index"] == 1 and last["index"] is not True


def test_extra_keys_of_a_text_delta_event_are_written_as_the_general_path_writes_them() -> None:
    upstream = start() + text_start(0)
    upstream += delta_event(0, {"type": "text_delta", "text": "a", "x": 1})
    upstream += delta_event(0, {"type": "text_delta", "text": "b"}, extra=2)
    got = run(request(), [upstream + end("end_turn")])
    assert client_deltas(got.client) == [
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": t}}
        for t in "ab"
    ]


def test_text_the_scanner_holds_back_goes_out_when_resolved_not_as_it_came() -> None:
    pieces = ["look <", "b> here ", "and [", "TOOL", " no"]
    upstream = start() + text(0, *pieces) + end("end_turn")
    got = run(request(), [upstream])
    texts = [d["delta"]["text"] for d in client_deltas(got.client)]  # type: ignore[index]
    assert texts == ["look ", "<b> here ", "and ", "[TOOL no"]
    assert got.read().message["content"] == [{"type": "text", "text": "".join(pieces)}]


def test_markup_in_one_delta_becomes_a_tool_use_block_and_the_text_around_it_stays() -> None:
    markup = '<tool_call>{"name": "Bash", "arguments": {"command": "ls"}}</tool_call>'
    upstream = start() + text(0, "before ", markup, " after") + end("end_turn")
    got = run(request(), [upstream]).read()
    content = got.message["content"]
    assert [b["type"] for b in content] == ["text", "tool_use", "text"]
    assert content[0]["text"] == "before " and content[2]["text"] == " after"
    assert content[1]["input"] == {"command": "ls"}


def test_leading_whitespace_held_for_a_whole_json_call_goes_out_with_the_next_text() -> None:
    upstream = start() + text(0, "  ", "hi") + end("end_turn")
    got = run(request(), [upstream])
    assert [d["delta"]["text"] for d in client_deltas(got.client)] == ["  hi"]  # type: ignore[index]


def test_a_whole_message_json_call_split_over_deltas_is_recovered() -> None:
    call = orjson.dumps({"name": "Bash", "arguments": {"command": "ls"}}).decode()
    upstream = start() + text(0, call[:5], call[5:]) + end("end_turn")
    got = run(request(), [upstream]).read()
    assert [b["type"] for b in got.message["content"]] == ["tool_use"]


def test_plain_text_deltas_are_recorded_for_a_follow_up() -> None:
    """A replay-only round's follow-up repeats the text the client already read."""
    minted = mint_client_id(1, 0, "abcd", "functions.Bash:0", "toolu_")
    history = [assistant(tool_use(minted, "Bash", LS)), results(minted)]
    replay = tool(1, "functions.Bash:0", "Bash", LS)
    first = start() + text(0, "plain ", "words") + replay + end()
    second = start() + text(0, "done") + end("end_turn")
    got = run(request(*history), [first, second])
    [followup] = got.followups
    asked = followup["messages"][-2]
    assert asked["content"][0] == {"type": "text", "text": "plain words"}
    content = got.read().message["content"]
    assert [b["text"] for b in content] == ["plain words", "done"]


# -- text deltas taken from their bytes, against the parse ----------------------------------

LANE_PREFIX = b'{"type":"content_block_delta","index":%d,"delta":{"type":"text_delta","text":"'
TEXTS = st.one_of(
    st.text(max_size=8),
    st.sampled_from(["<", "[", "[TOOL", "<tool_call>", '"', "\\", "\n", "\x00", "é", "\u2028"]),
)
# Bodies written between the lane's quotes as bytes: escapes, invalid UTF-8, raw controls.
BODIES = st.lists(
    st.sampled_from(
        [b"a", b" ", b"\\u003c", b"\\n", b'\\"', b"\xc3\xa9", b"\xff", b"\xed\xa0\x80", b"\x01"]
    ),
    max_size=4,
).map(b"".join)


ENDS = st.sampled_from([b'"}}', b'"}}', b'"} }', b"}}", b'"}', b'"}}}'])


@st.composite
def text_delta_events(draw: st.DrawFn, key: int, index: int) -> bytes:
    """A delta for the block open upstream at `key`, which the client knows as `index`."""
    kind = draw(st.integers(0, 4))
    at = draw(st.sampled_from([key, index, index, key + 1, 0]))
    if kind == 0:  # as an upstream writes them
        return delta_event(at, {"type": "text_delta", "text": draw(TEXTS)})
    if kind == 1:  # written by hand between the quotes, ended in any way
        return b"data: " + LANE_PREFIX % at + draw(BODIES) + draw(ENDS) + b"\n\n"
    if kind == 2:  # with spaces, or an extra key
        data = {"type": "content_block_delta", "index": at}
        delta = {"type": "text_delta", "text": draw(TEXTS)}
        if draw(st.booleans()):
            delta["x"] = 1
        body = json.dumps({**data, "delta": delta}).encode()
        return b"event: content_block_delta\ndata: " + body + b"\n\n"
    if kind == 3:
        return ev({"type": "ping"})
    return delta_event(at, {"type": "citations_delta", "citation": {"cited_text": "c"}})


@st.composite
def text_streams(draw: st.DrawFn) -> bytes:
    """Text and thinking blocks in any order, at their own upstream indexes or drifted ones,
    each with deltas of every shape (the stop, too, may be missing)."""
    out = [start()]
    for index in range(draw(st.integers(1, 4))):
        key = draw(st.sampled_from([index, index, index + 2]))
        if draw(st.booleans()):
            block = {"type": "thinking", "thinking": "", "signature": ""}
            out.append(ev({"type": "content_block_start", "index": key, "content_block": block}))
        else:
            out.append(text_start(key))
        out += draw(st.lists(text_delta_events(key, index), max_size=8))
        if draw(st.booleans()):
            out.append(ev({"type": "content_block_stop", "index": key}))
    # A replay ends the round: its follow-up repeats the text blocks as they were recorded.
    out.append(tool(draw(st.integers(5, 9)), "functions.Bash:0", "Bash", LS))
    return b"".join(out) + end()


MINTED = mint_client_id(1, 0, "abcd", "functions.Bash:0", "toolu_")
HISTORY = [assistant(tool_use(MINTED, "Bash", LS)), results(MINTED)]
FINAL = start("msg_final") + text(0, "done") + end("end_turn")


def _outcome(upstream: bytes, read_size: int) -> tuple[object, ...]:
    """Read `read_size` bytes at a time, or (0) one event a read, as a paced model sends."""
    rounds = [upstream, FINAL]
    got = run(request(*HISTORY), rounds, read_size=read_size or None, paced=not read_size)
    assert got.exchange is not None
    return got.client, got.followups, got.exchange.report()


@settings(max_examples=500, deadline=None)
@given(upstream=text_streams(), read_size=st.sampled_from([0, 7, 64, 16384]))
def test_deltas_taken_from_their_bytes_give_what_their_parse_gives(
    upstream: bytes, read_size: int
) -> None:
    with anthropic_parsing_every_event():
        expected = _outcome(upstream, read_size)
    assert _outcome(upstream, read_size) == expected


def test_plain_deltas_after_the_first_are_not_parsed() -> None:
    """The first text opens the client block (parsed); the ones after it skip the parse."""
    exchange = AnthropicExchange(request(), b"{}", RouteRules())
    exchange.begin_round(stream=True)
    exchange.feed(start() + text(0, "plain ", stop=False))
    read = delta_event(0, {"type": "text_delta", "text": "words"})
    with mock.patch.object(TextBlocks, "delta", side_effect=AssertionError("parsed")):
        [sent] = exchange.feed(read)
    assert sent is read  # a read that is one such delta: handed on itself, not copied


@pytest.mark.parametrize("held", [b'data: {"type":"ping"}\n', b"event: ping\n", b": note\n"])
def test_a_delta_read_after_a_line_the_reader_holds_is_read_with_that_line(held: bytes) -> None:
    """A read that is one whole plain delta is handed on as it came only where the reader
    holds nothing: a line before it (no blank line yet) belongs to the same event."""
    reads = [start() + text(0, "plain ", stop=False), held]
    reads += [delta_event(0, {"type": "text_delta", "text": "words"}), end("end_turn")]

    def client() -> bytes:
        exchange = AnthropicExchange(request(), b"{}", RouteRules())
        exchange.begin_round(stream=True)
        sent = [event for read in reads for event in exchange.feed(read)]
        if exchange.phase.name == "RECEIVING":
            sent += exchange.end()
        return b"".join(e if isinstance(e, bytes) else repr(e).encode() for e in sent)

    with anthropic_parsing_every_event():
        expected = client()
    assert client() == expected


@pytest.mark.parametrize(
    "body",
    [
        b"abc",  # plain: taken from its bytes
        b"a\\u003cb",  # an escaped `<`: a marker may start
        b"line\\nbreak",  # an escape: the text is not the bytes
        b'say \\"hi\\"',
        b"\x01",  # a raw control character: not JSON
        b"\xff",  # not UTF-8: not JSON
        b"\xed\xa0\x80",  # an encoded surrogate: not UTF-8
        b"",  # no text
        b"<tool_call>",  # markup
    ],
)
@pytest.mark.parametrize("ending", [b'"}}', b'"} }', b"}}", b'"}}}', b'"},"x":1}'])
def test_a_delta_after_the_first_is_sent_as_its_parse_says(body: bytes, ending: bytes) -> None:
    data = LANE_PREFIX % 0 + body + ending
    upstream = start() + text(0, "plain ", stop=False) + b"data: " + data + b"\n\n"
    upstream += text(1, "next") + tool(2, "functions.Bash:0", "Bash", LS) + end()
    for read_size in (16384, 0):  # one read, and one event a read
        with anthropic_parsing_every_event():
            expected = _outcome(upstream, read_size)
        assert _outcome(upstream, read_size) == expected
