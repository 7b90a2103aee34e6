"""The Responses stream core's shortcuts decide exactly as its general path (SPEC §4, §8):
reads split by bytes methods give the generic SSE decoder's events, whatever the framing and
wherever the reads cut it, and the client, the follow-up and the notes are the same."""

from __future__ import annotations

import itertools
from itertools import pairwise
from typing import Any
from unittest import mock

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core.events import ExchangeEvent, LoopDetected, OpenFollowup, UpstreamBroken
from proxy.core.rounds import RouteRules
from proxy.responses.exchange import ResponsesExchange
from tests.core.full_parse import DecoderReader, responses_parsing_every_event
from tests.responses.helpers import KIMI_MARKUP, Upstream, answered_call, parse, request

TEXTS = st.one_of(
    st.text(max_size=8),
    st.sampled_from(["<", "[", "[TOOL", "<tool_call>", '"', "\\", "\n", "\x00", "é", "\u2028"]),
    st.sampled_from([KIMI_MARKUP, KIMI_MARKUP[:20], KIMI_MARKUP[20:]]),
)
OLD = '{"command":"ls"}'
# The history answered `functions.bash:0` with OLD: a call repeating it is a replay.
HISTORY = request(*answered_call("call_0badf00d_functions.bash:0", OLD), model="kimi-k2")
FINAL = Upstream().created().message("done").completed().numbered()


def reframed(event: bytes, how: int) -> bytes:
    """One `event:` + `data:` event in another framing an upstream may use."""
    if how == 1:
        return event.replace(b"\n", b"\r\n")
    if how == 2:
        return event.replace(b"\n", b"\r")
    if how == 3:
        return event.partition(b"\n")[2]  # no `event:` line
    if how == 4:
        return event.replace(b"data: ", b"data:")
    if how == 5:
        return b": keep-alive\n\n" + event
    if how == 6:
        return b"id: 3\n" + event
    if how == 7:  # the JSON over several data lines (joined with newlines, it is the same)
        head, _, data = event.partition(b"\ndata: ")
        pretty = orjson.dumps(orjson.loads(data), option=orjson.OPT_INDENT_2)
        return head + b"\n" + b"".join(b"data: " + line + b"\n" for line in pretty.split(b"\n"))
    return event


ODD = st.sampled_from([b"data: [DONE]\n\n", b"data: not json\n\n", b"event: x\ndata: 42\n\n"])


@st.composite
def upstream_events(draw: st.DrawFn) -> list[bytes]:
    """A round of messages and calls (a replay among them), numbered as upstreams do or not."""
    up = Upstream().created()
    for _ in range(draw(st.integers(0, 3))):
        if draw(st.booleans()):
            up.message(*draw(st.lists(TEXTS, min_size=1, max_size=5)), done=draw(st.booleans()))
        else:
            call_id = draw(st.sampled_from(["functions.bash:0", "functions.bash:1", None]))
            up.call(call_id, draw(st.sampled_from([OLD, '{"command":"pwd"}'])))
    if draw(st.booleans()):
        up.completed()
    return up.numbered_events() if draw(st.booleans()) else up.events


@st.composite
def framed_reads(draw: st.DrawFn) -> list[bytes]:
    """A round's events in any framing, with odd events among them, cut at any bytes."""
    events = draw(upstream_events())
    out = []
    for event in events:
        if draw(st.integers(0, 9)) == 0:
            out.append(draw(ODD))
        out.append(reframed(event, draw(st.integers(0, 12))))
    stream = b"".join(out)
    cuts = sorted(draw(st.lists(st.integers(0, len(stream)), max_size=6)))
    return [stream[a:b] for a, b in pairwise([0, *cuts, len(stream)])]


def outcome(rounds: list[list[bytes]]) -> tuple[Any, ...]:
    """Everything the exchange hands the shell over its rounds, and its report."""
    counter = itertools.count(1)

    def entropy(n: int) -> bytes:  # the same ids in every run
        return next(counter).to_bytes(8, "big")[-n:].rjust(n, b"\x01")

    exchange = ResponsesExchange(HISTORY, orjson.dumps(HISTORY), RouteRules(), entropy=entropy)
    got: list[ExchangeEvent] = []
    for reads in rounds:
        exchange.begin_round(stream=True)
        for read in reads:
            if exchange.phase.name != "RECEIVING":
                break
            got += exchange.feed(read)
        if exchange.phase.name == "RECEIVING":
            got += exchange.end()
        if not (got and isinstance(got[-1], OpenFollowup)):
            break
    return [_comparable(event) for event in got], exchange.report()


def _comparable(event: ExchangeEvent) -> object:
    """An event as a value (errors are exceptions, equal only to themselves)."""
    if isinstance(event, LoopDetected | UpstreamBroken):
        error = event.error
        return type(event), type(error), error.message, error.code, repr(event)
    return event


@settings(max_examples=400, deadline=None)
@given(reads=framed_reads())
def test_reads_split_by_bytes_methods_give_what_the_decoder_gives(reads: list[bytes]) -> None:
    with mock.patch("proxy.responses.stream.EventReader", DecoderReader):
        expected = outcome([reads, [FINAL]])
    assert outcome([reads, [FINAL]]) == expected


# -- text deltas taken from their bytes, against the parse ------------------------------------

DELTA = "response.output_text.delta"
PLAIN = st.text(alphabet="ab é\u2028\x7f", min_size=1, max_size=6)
# Key orders upstreams write: OpenAI's, the builders', and pydantic's alphabetical (vLLM).
ORDERS = st.sampled_from(
    [
        ("type", "sequence_number", "item_id", "output_index", "content_index", "delta"),
        ("type", "item_id", "output_index", "content_index", "delta", "sequence_number"),
        ("content_index", "delta", "item_id", "output_index", "sequence_number", "type"),
    ]
)
EXTRAS = st.sampled_from(
    [{}, {"logprobs": []}, {"logprobs": [], "obfuscation": "Zx9"}, {"obfuscation": ""}]
)
# Written between the delta's quotes as bytes: escapes, invalid UTF-8, raw controls, quotes.
BODIES = st.lists(
    st.sampled_from(
        [
            b"a",
            b" ",
            b"<",
            b"\\u003c",
            b"\\n",
            b'\\"',
            b"\xc3\xa9",
            b"\xff",
            b"\xed\xa0\x80",
            b"\x01",
        ]
    ),
    max_size=4,
).map(b"".join)
# A sequence number as written: JSON integers, and what only looks like one.
NUMBERS = st.sampled_from([b"0", b"7", b"07", b"-1", b"1.0", b"1e2", b"true", b"", b"9" * 19])
OBFUSCATIONS = st.sampled_from(["Zx9", "", "é", '"', "\\", "\x01"])


def _data(event: bytes) -> bytes:
    return event.partition(b"\ndata: ")[2][:-2]


@st.composite
def text_deltas(
    draw: st.DrawFn, ref: dict[str, Any], seq: int, shape: tuple[tuple[str, ...], dict[str, Any]]
) -> bytes:
    """A delta for the part `ref` names, written in the message's key order with its extra
    keys (`shape`), or in any of the other shapes upstreams (and bad ones) write."""
    order, extras = shape
    fields: dict[str, Any] = {
        "type": DELTA,
        **ref,
        "delta": draw(st.one_of(PLAIN, TEXTS)),
        "sequence_number": draw(st.sampled_from([seq, seq, seq + 3, 5])),
    }
    kind = draw(st.integers(-4, 5))  # mostly as an upstream writes them: the lane's own
    if kind == 1:  # another part, item or number type
        key = draw(st.sampled_from(["output_index", "item_id", "content_index", "sequence_number"]))
        fields[key] = draw(st.sampled_from([1, "msg_b", True, None, 0.0]))
    if kind == 2:
        del fields[draw(st.sampled_from(["sequence_number", "delta", "content_index"]))]
    if kind == 3 and "obfuscation" in extras:
        extras = {**extras, "obfuscation": draw(OBFUSCATIONS)}
    event = {key: fields[key] for key in order if key in fields} | extras
    data = orjson.dumps(event)
    if kind == 4:  # the delta and the number written by hand
        text = orjson.dumps(event["delta"]) if "delta" in event else b'""'
        data = data.replace(text, b'"' + draw(BODIES) + b'"', 1)
        number = b'"sequence_number":%d' % event["sequence_number"]
        data = data.replace(number, b'"sequence_number":' + draw(NUMBERS), 1)
    if kind == 5:  # spaces, or an ending that is not the object's
        data = draw(st.sampled_from([data.replace(b",", b", "), data + b" ", data[:-1] + b"}}"]))
    return b"event: " + DELTA.encode() + b"\ndata: " + data + b"\n\n"


@st.composite
def text_rounds(draw: st.DrawFn) -> list[bytes]:
    """Messages (item ids repeated, parts interleaved, ends missing) of deltas of every
    shape, and a replay that ends the round in a follow-up which repeats their text."""
    up = Upstream().created()
    for _ in range(draw(st.integers(1, 3))):
        index = up.index
        item_id = draw(st.sampled_from(["msg_a", "msg_b"]))
        up.message("", done=False)
        shape = (draw(ORDERS), draw(EXTRAS))
        for _ in range(draw(st.integers(0, 8))):
            ref = {"item_id": item_id, "output_index": index, "content_index": 0}
            if draw(st.integers(0, 6)) == 0:  # another part, or the part's end, between deltas
                other = draw(
                    st.sampled_from(["response.content_part.added", "response.output_text.done"])
                )
                up.raw(
                    orjson.dumps(
                        {"type": other, **ref, "content_index": draw(st.sampled_from([0, 1]))}
                    ).join((b"event: " + other.encode() + b"\ndata: ", b"\n\n"))
                )
            up.raw(draw(text_deltas(ref, len(up.events), shape)))
        if draw(st.booleans()):
            up.raw(Upstream(index=index).message(done=True).events[-1])
    up.call("functions.bash:0", OLD)
    return [*up.events, *Upstream().completed().events]


@settings(max_examples=500, deadline=None)
@given(events=text_rounds(), size=st.sampled_from([0, 7, 100, 16384]))
def test_deltas_taken_from_their_bytes_give_what_their_parse_gives(
    events: list[bytes], size: int
) -> None:
    """Read in pieces of `size` bytes, or (0) one event a read, as a paced model sends."""
    upstream = b"".join(events)
    reads = [upstream[k : k + size] for k in range(0, len(upstream), size)] if size else events
    with responses_parsing_every_event():
        expected = outcome([reads, [FINAL]])
    assert outcome([reads, [FINAL]]) == expected


LANE_HEAD = (
    b'{"type":"response.output_text.delta","item_id":"msg_0","output_index":0,"content_index":0'
)


def _lane_outcome(*deltas: bytes) -> tuple[Any, ...]:
    """A message whose first delta opens the lane and whose later ones are `deltas`' data,
    then a replay: the follow-up repeats the message's text as the client read it."""
    head = Upstream().created().message("plain ", done=False).numbered_events()
    tail = Upstream(index=1).call("functions.bash:0", OLD).completed().events
    deltas_ = [b"event: response.output_text.delta\ndata: " + data + b"\n\n" for data in deltas]
    upstream = b"".join([*head, *deltas_, *tail])
    return outcome([[upstream], [FINAL]])


def _same_as_parsed(*deltas: bytes) -> None:
    with responses_parsing_every_event():
        expected = _lane_outcome(*deltas)
    assert _lane_outcome(*deltas) == expected


@pytest.mark.parametrize(
    "body",
    [
        b"abc",  # plain: taken from its bytes
        b"caf\xc3\xa9 \xe2\x80\xa8\x7f",  # plain too: JSON writes these as they are
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
@pytest.mark.parametrize(
    "number", [b"6", b"9", b"0", b"06", b"-1", b"1.0", b"1e2", b"true", b'"6"', b"9" * 400]
)
def test_a_delta_after_the_first_is_sent_as_its_parse_says(body: bytes, number: bytes) -> None:
    _same_as_parsed(LANE_HEAD + b',"delta":"' + body + b'","sequence_number":' + number + b"}")


@pytest.mark.parametrize("before", [b":", b"=", b": ", b"x:"])
@pytest.mark.parametrize("after", [b"}", b"]", b" }", b"}}", b""])
def test_a_number_written_otherwise_is_sent_as_its_parse_says(before: bytes, after: bytes) -> None:
    _same_as_parsed(LANE_HEAD + b',"delta":"abc","sequence_number"' + before + b"6" + after)


@pytest.mark.parametrize(
    "obfuscation", [b"Zx9", b"", b"\\u0041", b"\x01", b"\xff", b'\\"', b"\xc3\xa9"]
)
@pytest.mark.parametrize("ending", [b"}", b"} ", b"}}", b',"x":1}', b""])
def test_a_delta_with_other_values_is_sent_as_its_parse_says(
    obfuscation: bytes, ending: bytes
) -> None:
    """OpenAI's `obfuscation` differs in every delta: the lane copies it as it came."""
    first = LANE_HEAD + b',"delta":"one","sequence_number":5,"obfuscation":"Zx9"'
    later = first.replace(b"one", b"two").replace(b'"Zx9"', b'"' + obfuscation + b'"')
    _same_as_parsed(first + b"}", later + ending)


def test_plain_deltas_after_the_first_are_not_parsed() -> None:
    up = Upstream().created().message(*(f"word{i} " for i in range(5)), done=False)
    *head, last = up.numbered_events()
    exchange = ResponsesExchange(HISTORY, orjson.dumps(HISTORY), RouteRules())
    exchange.begin_round(stream=True)
    exchange.feed(b"".join(head))
    with mock.patch("orjson.loads", side_effect=AssertionError("parsed")):
        [sent] = exchange.feed(last)
    assert sent == b"event: response.output_text.delta\ndata: " + _data(last) + b"\n\n"


def test_a_read_that_is_one_plain_delta_goes_out_as_it_came_unparsed() -> None:
    """A paced model's reads: each the delta's whole event, handed on as the same bytes."""
    up = Upstream().created().message(*(f"word{i} " for i in range(6)), done=False)
    head, paced = up.numbered_events()[:5], up.numbered_events()[5:]
    exchange = ResponsesExchange(HISTORY, orjson.dumps(HISTORY), RouteRules())
    exchange.begin_round(stream=True)
    exchange.feed(b"".join(head))  # through the first delta, which opens the lane
    with mock.patch("orjson.loads", side_effect=AssertionError("parsed")):
        sent = [exchange.feed(read) for read in paced]
    assert all(got == [read] and got[0] is read for got, read in zip(sent, paced, strict=True))


@pytest.mark.parametrize(
    "held",
    [
        b'data: {"type":"x"}\n',
        b"event: x\n",
        b": note\n",
        b'event: response.output_text.delta\ndata: {"ty',  # a delta cut short, held
    ],
)
def test_a_delta_read_after_a_line_the_reader_holds_is_read_with_that_line(held: bytes) -> None:
    """A read that is one whole plain delta is handed on as it came only where the reader
    (or the stream, for a cut delta) holds nothing: a line before it (no blank line yet)
    belongs to the same event."""
    events = Upstream().created().message("one ", "two ", done=False).numbered_events()
    reads = [b"".join(events[:5]), held, events[5], *Upstream().completed().events]
    with responses_parsing_every_event():
        expected = outcome([reads])
    assert outcome([reads]) == expected


def test_paced_deltas_of_a_follow_up_round_are_renumbered_as_their_parse_says() -> None:
    """After a replay's follow-up, the upstream numbers from 0 again and the client goes on
    from its own: a paced delta is not the client's as it came, and is written again."""
    replay = Upstream().created().call("functions.bash:0", OLD).completed().numbered_events()
    answer = Upstream().created().message(*(f"w{i} " for i in range(5))).completed()
    rounds = [replay, answer.numbered_events()]
    with responses_parsing_every_event():
        expected = outcome(rounds)
    got = outcome(rounds)
    assert got == expected
    assert any(isinstance(event, OpenFollowup) for event in got[0])
    client = b"".join(data for data in got[0] if isinstance(data, bytes))
    numbers = [event["sequence_number"] for event in parse(client)]
    assert numbers == list(range(len(numbers)))
    assert b'"delta":"w4 "' in client


def test_a_delta_after_its_item_is_added_again_carries_the_renamed_id() -> None:
    """An item added again at its output index with an id the response already used is
    renamed (the SDKs refuse two items of one id): the deltas after it carry the new id."""
    first = Upstream().created().message("one ", done=False).events
    again = Upstream().message("", done=False).events[0]  # msg_0 again, at output index 0
    later = first[-1].replace(b"one ", b"two ")
    # Numbered as the client's events are: the renamed delta is otherwise the lane's own.
    events = Upstream(events=[*first, later, again, later, later]).numbered_events()
    body = b"".join(events)
    got, paced = outcome([[body]]), outcome([events])  # one read, and one read an event
    with responses_parsing_every_event():
        assert got == outcome([[body]])
        assert paced == outcome([events])
    item_ids = [e["item_id"] for e in parse(got[0][0]) if e["type"] == DELTA]
    assert item_ids[:2] == ["msg_0", "msg_0"] and item_ids[2].startswith("msg_")
    assert item_ids[2] != "msg_0" and item_ids[3] == item_ids[2]


def test_a_percent_sign_in_the_event_is_written_as_it_came() -> None:
    ref = b'{"type":"response.output_text.delta","item_id":"msg_%d%%","output_index":0'
    first = ref + b',"content_index":0,"delta":"one","sequence_number":5}'
    up = Upstream().created().message("", done=False)
    head = [*up.numbered_events(), b"event: x\ndata: " + first + b"\n\n"]
    later = [first.replace(b"one", b"two").replace(b":5}", b":%d}" % n) for n in (5, 6, 7)]
    body = b"".join([*head, *(b"event: x\ndata: " + data + b"\n\n" for data in later)])
    got = outcome([[body]])
    with responses_parsing_every_event():
        assert got == outcome([[body]])
    assert (
        b'"item_id":"msg_%d%%"' in got[0][0] and b'"delta":"two","sequence_number":6' in got[0][0]
    )
