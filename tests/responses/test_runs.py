"""Runs of a text part's deltas taken from a read at once (proxy/responses/runs.py) give the
client byte for byte what parsing every event gives (SPEC §4, §8): the events sent, their
numbers, the text the scanner and the final item see, the follow-up and the notes."""

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
from proxy.responses import runs
from proxy.responses.exchange import ResponsesExchange
from tests.core.full_parse import responses_parsing_every_event as parsing_every_event
from tests.responses.helpers import Upstream, answered_call, parse, request

OLD = '{"command":"ls"}'
HISTORY = request(*answered_call("call_0badf00d_functions.bash:0", OLD), model="kimi-k2")
FINAL = Upstream().created().message("done").completed().numbered()
DELTA = "response.output_text.delta"
# Texts a run must take, or leave to the general path, as the parse would write them.
TEXTS = [
    "plain ",
    "é ",
    "\u2028",
    "\x7f",
    "a\nb",
    'say "hi"',
    "back\\slash",
    "tab\there",
    "\b\f\r",
    "\x01",
    "<",
    "[TOOL",
    "",
    '","sequence_number":7}',
    '"type":"response.output_text.delta"',
    "\n\nevent: response.output_text.delta\ndata: {",
    "\x00",
    "😀",
]


def outcome(rounds: list[list[bytes]], rules: RouteRules | None = None) -> tuple[Any, ...]:
    """Everything the exchange hands the shell over its rounds, and its report."""
    counter = itertools.count(1)

    def entropy(n: int) -> bytes:  # the same ids in every run
        return next(counter).to_bytes(8, "big")[-n:].rjust(n, b"\x01")

    raw = orjson.dumps(HISTORY)
    exchange = ResponsesExchange(HISTORY, raw, rules or RouteRules(), entropy=entropy)
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
    if isinstance(event, LoopDetected | UpstreamBroken):
        return type(event), event.error.message, event.error.code
    return event


def client_bytes(got: tuple[Any, ...]) -> bytes:
    return b"".join(e if isinstance(e, bytes) else bytes(getattr(e, "data", b"")) for e in got[0])


def same_as_parsed(rounds: list[list[bytes]], rules: RouteRules | None = None) -> None:
    with parsing_every_event():
        expected = outcome(rounds, rules)
    assert outcome(rounds, rules) == expected


def delta(text: bytes, seq: bytes, *, ref: bytes = b"", extra: bytes = b"") -> bytes:
    """A text delta of message 0's part 0, its JSON written by hand."""
    ref = ref or b'"item_id":"msg_0","output_index":0,"content_index":0'
    data = b'{"type":"response.output_text.delta",' + ref + b',"delta":"' + text
    return b"event: " + DELTA.encode() + b"\ndata: " + data + b'","sequence_number":' + seq + extra


def message(deltas: list[bytes], *, replay: bool = True) -> bytes:
    """A message whose first delta (`plain `, numbered 4) opens the lane, then `deltas` (whole
    events), then maybe a replayed call (the follow-up repeats the text the client read)."""
    head = Upstream().created().message("plain ", done=False).numbered()
    tail = Upstream(index=1)
    if replay:
        tail.call("functions.bash:0", OLD)
    return head + b"".join(deltas) + tail.completed().body()


def numbered(texts: list[str], start: int = 5) -> list[bytes]:
    return [
        delta(orjson.dumps(text)[1:-1], b"%d" % n, extra=b"}\n\n")
        for n, text in enumerate(texts, start)
    ]


# -- the runs are taken -----------------------------------------------------------------------


def test_a_long_answer_is_read_in_runs_without_parsing_its_deltas() -> None:
    words = [f"word{i} " for i in range(200)]
    body = Upstream().created().message(*words).completed().numbered()
    reads = [body[k : k + 16384] for k in range(0, len(body), 16384)]
    taken: list[int] = []
    read = runs.TextRun.read

    def counting(self: runs.TextRun, data: bytes, pos: int, seq: int) -> runs.Run | None:
        found = read(self, data, pos, seq)
        taken.append(found.count if found is not None else 0)
        return found

    with (
        mock.patch.object(runs.TextRun, "read", counting),
        mock.patch("proxy.core.nonjson.orjson.loads", wraps=orjson.loads) as loads,
    ):
        got = outcome([reads])
    assert sum(taken) >= 190  # all but the deltas that open a lane or end a read's run
    assert loads.call_count <= 15
    texts = [e["delta"] for e in parse(client_bytes(got)) if e["type"] == DELTA]
    assert texts == words
    same_as_parsed([reads])


# -- what a run takes is what the parse would write ---------------------------------------------


@pytest.mark.parametrize("text", TEXTS)
def test_a_text_in_a_run_is_sent_as_its_parse_says(text: str) -> None:
    texts = ["one ", "two ", text, "three ", text, "four "]
    same_as_parsed([[message(numbered(texts))], [FINAL]])


@pytest.mark.parametrize(
    "raw",
    [
        b"a\\u003cb",  # an escape orjson does not write: the parse writes it otherwise
        b"a\\/b",
        b'a"b',  # a quote that ends the string: not JSON
        b"a\\",  # an escape that eats the closing quote
        b"a\\\\",  # an escaped backslash
        b"a\\x",
        b"\xff",
        b"\xc3",
        b"\xed\xa0\x80",
        b"a\x00b",
        b"a\nb",  # a raw line break splits the event
        b"a\r\nb",
    ],
)
def test_a_raw_text_in_a_run_is_sent_as_its_parse_says(raw: bytes) -> None:
    deltas = numbered(["one ", "two "])
    deltas.append(delta(raw, b"7", extra=b"}\n\n"))
    deltas += numbered(["three ", "four "], start=8)
    same_as_parsed([[message(deltas)], [FINAL]])


@pytest.mark.parametrize(
    "number", [b"6", b"7", b"06", b"-7", b"7.0", b"1e1", b"true", b'"7"', b"9" * 19, b"9" * 18]
)
def test_a_number_in_a_run_is_sent_as_its_parse_says(number: bytes) -> None:
    deltas = numbered(["one ", "two "])
    deltas.append(delta(b"x", number, extra=b"}\n\n"))
    deltas += numbered(["three ", "four "], start=8)
    same_as_parsed([[message(deltas)], [FINAL]])


@pytest.mark.parametrize(
    "event",
    [
        delta(b"x", b"7", extra=b"}"),  # truncated: no blank line
        delta(b"x", b"7", extra=b"} \n\n"),
        delta(b"x", b"7", extra=b"}}\n\n"),
        delta(b"x", b"7", extra=b',"x":1}\n\n'),
        delta(b"x", b"7", extra=b"\n\n"),
        delta(b"x", b"7", ref=b'"item_id":"msg_1","output_index":0,"content_index":0') + b"}\n\n",
        delta(b"x", b"7", ref=b'"item_id":"msg_0","output_index":0,"content_index":1') + b"}\n\n",
        delta(b"x", b"7", ref=b'"item\\u005fid":"msg_0","output_index":0,"content_index":0')
        + b"}\n\n",
        delta(b"x", b"7", ref=b'"item_id":"msg_0","item_id":"msg_0","output_index":0') + b"}\n\n",
        delta(b"x", b"7", extra=b"}\n\n").replace(b"event: ", b"event:"),
        delta(b"x", b"7", extra=b"}\n\n").replace(b"data: ", b"data:"),
        delta(b"x", b"7", extra=b"}\n\n").replace(b"\n", b"\r\n"),
        delta(b"x", b"7", extra=b"}\n\n").replace(b"event: response.output_text.delta", b"id: 1"),
        b"event: response.output_text.delta\ndata: {not json\n\n",
        b"event: response.output_text.delta\ndata: {\n\n",
        b"event: response.output_text.delta\ndata: {}\n\n",
        b": keep-alive\n\n",
        b"event: response.output_text.delta\nid: 1\n" + delta(b"x", b"7", extra=b"}\n\n")[35:],
        b"\n",
    ],
)
def test_an_odd_event_in_a_run_is_sent_as_its_parse_says(event: bytes) -> None:
    deltas = [*numbered(["one ", "two "]), event, *numbered(["three ", "four "], start=8)]
    body = message(deltas)
    same_as_parsed([[body], [FINAL]])
    same_as_parsed([[body[:k], body[k:]] for k in range(len(body) - 400, len(body), 7)][0:1])


def test_obfuscated_deltas_in_a_run_are_sent_as_their_parse_says() -> None:
    """OpenAI's order (the number first) with an `obfuscation` in every delta."""
    deltas = []
    for n, (text, copy) in enumerate(
        [("one ", "Zx9"), ("two ", ""), ("t\\nhree", "abc"), ("four", "\\u0041"), ("5", "ok")], 5
    ):
        deltas.append(
            b"event: response.output_text.delta\ndata: "
            + b'{"type":"response.output_text.delta","sequence_number":%d,' % n
            + b'"item_id":"msg_0","output_index":0,"content_index":0,"delta":"'
            + text.encode()
            + b'","logprobs":[],"obfuscation":"'
            + copy.encode()
            + b'"}\n\n'
        )
    first = deltas[0].replace(b'"one "', b'"plain "').replace(b":5,", b":4,")
    head = Upstream().created().message(done=False).numbered_events()[:-1]
    body = b"".join([*head, first, *deltas]) + Upstream(index=1).completed().body()
    same_as_parsed([[body]])


def test_a_follow_up_round_s_runs_are_renumbered_as_the_parse_renumbers_them() -> None:
    """The second round's events follow the first's numbers: each run is rebuilt."""
    texts = [f"w{i} " for i in range(40)]
    second = Upstream().created().message(*texts).completed().numbered()
    rounds = [[message(numbered(["one ", "two "]))], [second[: len(second) // 2]]]
    rounds[1].append(second[len(second) // 2 :])
    same_as_parsed(rounds)
    got = outcome(rounds)
    numbers = [e["sequence_number"] for e in parse(client_bytes(got))]
    assert numbers == list(range(len(numbers)))


def test_runs_without_tools_offered_take_markup_as_text() -> None:
    texts = ["one ", "<tool_call>", "[TOOL_CALLS]", "two "]
    same_as_parsed([[message(numbered(texts), replay=False)]], RouteRules(text_tool_calls=False))


def test_a_stream_split_at_every_byte_is_sent_as_its_parse_says() -> None:
    deltas = numbered(["one ", 'q"', "<", "a\nb", "", "é"])
    deltas.insert(3, delta(b"\\u0041", b"8", extra=b"}\n\n"))
    body = message(deltas)
    for k in range(len(body) + 1):
        rounds = [[body[:k], body[k:]], [FINAL]]
        with parsing_every_event():
            expected = outcome(rounds)
        assert outcome(rounds) == expected, k


def test_a_body_that_ends_inside_a_delta_is_sent_as_its_parse_says_wherever_it_is_cut() -> None:
    """The start of a delta a read cut waits for the next read (`_cut_delta`); when the body
    ends instead, it goes to the reader as the general path would have had it."""
    body = message(numbered(["one ", "two ", "three "]), replay=False)
    cut = body[: body.rindex(b"event: response.output_text.delta") + 60]
    at = cut.rindex(b"event: ")
    for k in range(at - 5, len(cut) + 1):
        same_as_parsed([[cut[:k], cut[k:]]])


def test_a_delta_longer_than_a_held_cut_is_sent_as_its_parse_says() -> None:
    long = "x" * (70 * 1024)
    body = message(numbered(["one ", long, "two "]), replay=False)
    at = body.index(b"x" * 10)
    for k in (at - 30, at + 10, at + 66 * 1024, at + 70 * 1024 - 3):
        same_as_parsed([[body[:k], body[k:]]])


# -- any such stream, cut anywhere ------------------------------------------------------------


@st.composite
def run_streams(draw: st.DrawFn) -> list[bytes]:
    """Deltas of one part (texts of every kind, numbers as upstreams write them or not, odd
    events among them), maybe a replayed call, cut at any bytes."""
    events = []
    seq = 5
    for _ in range(draw(st.integers(1, 30))):
        kind = draw(st.integers(0, 19))
        if kind == 0:
            events.append(draw(st.sampled_from([b": ping\n\n", b"data: [DONE]\n\n", b"\n"])))
            continue
        text = draw(st.sampled_from(TEXTS)) if kind < 4 else draw(st.text(max_size=6))
        seq = draw(st.sampled_from([seq, seq + 1, seq + 1, seq + 1, 0]))
        events.append(delta(orjson.dumps(text)[1:-1], b"%d" % seq, extra=b"}\n\n"))
    body = message(events, replay=draw(st.booleans()))
    cuts = sorted(draw(st.lists(st.integers(0, len(body)), max_size=5)))
    return [body[a:b] for a, b in pairwise([0, *cuts, len(body)])]


@settings(max_examples=300, deadline=None)
@given(reads=run_streams())
def test_runs_give_what_parsing_every_event_gives(reads: list[bytes]) -> None:
    same_as_parsed([reads, [FINAL]])


# -- where a run ends -------------------------------------------------------------------------


def runs_taken(rounds: list[list[bytes]]) -> list[int]:
    """How many events each run that was looked for took (0: none began there)."""
    taken: list[int] = []
    read = runs.TextRun.read

    def counting(self: runs.TextRun, data: bytes, pos: int, seq: int) -> runs.Run | None:
        found = read(self, data, pos, seq)
        taken.append(found.count if found is not None else 0)
        return found

    with mock.patch.object(runs.TextRun, "read", counting):
        outcome(rounds)
    return taken


def with_odd(odd: bytes) -> bytes:
    """Ten deltas (numbered 5 to 14: the first is the lane's own, the run takes the other
    nine), `odd`, then ten more (numbered 16 on)."""
    before = numbered([f"b{i} " for i in range(10)])
    after = numbered([f"a{i} " for i in range(10)], start=16)
    return message([*before, odd, *after])


# Events after which a run ends, and how many events the run that begins after the lane's
# own delta takes: the nine before them, and more where the odd event is a delta after all.
BREAKS = [
    (delta(b"a\nb", b"15", extra=b"}\n\n"), 9),  # a raw line break: the values out of step
    (delta(b'a","delta":"b', b"15", extra=b"}\n\n"), 9),  # a key twice: one value more
    (delta(b"x", b'15,"sequence_number":16', extra=b"}\n\n"), 9),
    (delta(b"x", b"15", extra=b"}}\n\n"), 9),  # proven, but the number is `15}`
    (delta(b"x", b"15", extra=b',"x":1}\n\n'), 9),
    (delta(b"x", b"15", extra=b"}\n") + b"event: response.output_text.delta\n\n", 9),
    (delta(b"x", b"15", extra=b"}")[:-12] + b"\n\n", 9),  # truncated
    (b"event: response.output_text.delta\ndata: {\n\n", 9),  # `{` and garbage
    (b"event: response.output_text.delta\ndata: {" + b"\x00" * 7 + b"\n\n", 9),
    (b": keep-alive\n\n", 9),
    (delta(b"x", b"15", extra=b"}\n\n\n"), 10),  # an empty line after it: a delta all the same
    (delta(b"x", b"15", extra=b"}\n\n"), 20),  # no break at all: the run goes on
]


@pytest.mark.parametrize(("odd", "count"), BREAKS)
def test_a_run_takes_the_deltas_before_an_odd_event_and_no_more(odd: bytes, count: int) -> None:
    body = with_odd(odd)
    assert runs_taken([[body], [FINAL]])[0] == count
    same_as_parsed([[body], [FINAL]])


@pytest.mark.parametrize("odd", [odd for odd, _ in BREAKS[:8]])
def test_a_run_that_breaks_is_sent_as_its_parse_says_wherever_the_reads_cut(odd: bytes) -> None:
    body = with_odd(odd)
    at = body.index(odd)
    for k in range(at - 200, at + len(odd) + 200):
        rounds = [[body[:k], body[k:]], [FINAL]]
        with parsing_every_event():
            expected = outcome(rounds)
        assert outcome(rounds) == expected, k


def obfuscated(n: int, text: bytes, copy: bytes, *, tail: bytes = b'"}\n\n') -> bytes:
    """A delta in OpenAI's order: the number first, an `obfuscation` copied as it came."""
    return (
        b"event: response.output_text.delta\ndata: "
        + b'{"type":"response.output_text.delta","sequence_number":%d,' % n
        + b'"item_id":"msg_0","output_index":0,"content_index":0,"delta":"'
        + text
        + b'","logprobs":[],"obfuscation":"'
        + copy
        + tail
    )


@pytest.mark.parametrize(
    "odd",
    [
        obfuscated(15, b"x", b"ab"),
        obfuscated(15, b"x", b"a\nb"),
        obfuscated(15, b"x", b"a\\u0041"),
        obfuscated(15, b"x", b'a","obfuscation":"b'),
        obfuscated(15, b"x", b"ab", tail=b'","x":1}\n\n'),
        obfuscated(15, b"x\\n", b"ab"),
        obfuscated(15, b"", b"ab"),
        obfuscated(16, b"x", b"ab"),  # numbered otherwise: rebuilt with the client's
        obfuscated(15, b"x", b"ab")[:-9] + b"\n\n",
    ],
)
def test_obfuscated_runs_end_where_the_parse_would_read_an_event(odd: bytes) -> None:
    """Three holes a delta (OpenAI's, read by the general reader): what the runs take around
    an odd event is what the parse gives, wherever the reads cut."""
    deltas = [obfuscated(n, b"w%d " % n, b"Zx%d" % n) for n in range(4, 15)]
    deltas[0] = deltas[0].replace(b'"w4 "', b'"plain "')
    deltas += [odd, *(obfuscated(n, b"w%d " % n, b"Q%d" % n) for n in range(16, 26))]
    head = Upstream().created().message(done=False).numbered_events()
    body = b"".join([*head, *deltas]) + Upstream(index=1).completed().body()
    same_as_parsed([[body]])
    at = body.index(odd)
    for k in range(at - 150, at + len(odd) + 150, 3):
        same_as_parsed([[body[:k], body[k:]]])
