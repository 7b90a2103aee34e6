"""Runs of plain text deltas sent on unparsed (`TextBlocks.take_run`, runs.py, reads.py) give
the client exactly what parsing every event gives (SPEC §4, §8): the same bytes, the same
follow-up (the recorded text), the same notes. The reference parses every event with the
generic SSE decoder, and neither the run nor the one-event lane (`as_came`) is taken."""

from __future__ import annotations

import itertools
from typing import Any
from unittest import mock

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.anthropic.exchange import AnthropicExchange
from proxy.anthropic.runs import EVENT_HEAD, LANE_HEAD, TextRun
from proxy.anthropic.stream import AnthropicStream
from proxy.anthropic.texts import TextBlocks
from proxy.core.ids import mint_client_id
from proxy.core.rounds import RouteRules
from tests.anthropic.anthropic_wire import (
    Run,
    _act,
    assistant,
    end,
    entropy,
    ev,
    request,
    results,
    start,
    text,
    thinking,
    tool,
    tool_use,
)
from tests.core.full_parse import anthropic_parsing_every_event as parsing_every_event

LS = {"command": "ls"}
MINTED = mint_client_id(1, 0, "abcd", "functions.Bash:0", "toolu_")
HISTORY = [assistant(tool_use(MINTED, "Bash", LS)), results(MINTED)]
FINAL = start("msg_final") + text(0, "done") + end("end_turn")
MARKUP = '<tool_call>{"name": "Bash", "arguments": {"command": "ls"}}</tool_call>'


def outcome(reads: list[bytes]) -> tuple[Any, ...]:
    """The client's bytes, the follow-ups asked for and the report, over these reads; a
    replay-only round's follow-up gets a final answer."""
    body = request(*HISTORY)
    exchange = AnthropicExchange(body, orjson.dumps(body), RouteRules(), entropy)
    result = Run(exchange=exchange)
    for round_reads in (reads, [FINAL]):
        exchange.begin_round(stream=True)
        events: list[Any] = []
        for read in round_reads:
            events += exchange.feed(read)
            if any(not isinstance(e, bytes) for e in events):
                break
        else:
            events += exchange.end()
        if _act(result, events, exchange) != "followup":
            break
    return result.client, result.followups, exchange.report()


def reference(upstream: bytes) -> tuple[Any, ...]:
    with parsing_every_event():
        return outcome([upstream])


def cut_at(body: bytes, cuts: list[int]) -> list[bytes]:
    return [body[a:b] for a, b in itertools.pairwise([0, *sorted(cuts), len(body)])]


# -- upstream deltas: plain ones, and every way one can differ from them -----------------------

# Written between the text's quotes, as bytes.
BODIES = [
    b"plain words ",
    b"caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80",
    b'line\\nbreak\\ttab\\\\back\\/slash \\"q\\"',
    b"\\b\\f\\r",
    b"content_block_delta",  # the event's type as text
    b'\\"type\\":\\"content_block_stop\\"}}',  # an event's look, escaped
    b"{not json",
    b"{",
    b"}}",
    b"\\u003c",  # an escaped `<`: markup may start
    b"\\u0041",
    b"\\ud83d\\ude00",
    b"\\ud800",  # a lone surrogate escape
    b"<",
    b"[TOOL",
    b"a<b",
    b"\xc3",  # half of a character: this event's text is not UTF-8
    b"\xa9",  # a continuation byte first
    b"\xff",
    b"\xed\xa0\x80",  # an encoded surrogate
    b"\x01",
    b"\t",
    b"\x7f",
    b"\\",
    b"\\x41",
    b"\\u12",
    b"",
    b'"',
]
# What follows the text: the plain end, and ends of events that are not that object.
ENDS = [b'"}}', b'"}}', b'"}}', b'"} }', b"}}", b'"}', b'"}}}', b'"}},', b'"},"x":1}', b'"}} ']
# Keys and values before the text, spelled otherwise than the lane's head.
HEADS = [
    LANE_HEAD % 0,
    LANE_HEAD % 0,
    LANE_HEAD % 0,
    LANE_HEAD % 1,
    b'{"type":"content_block_delta","index":0.0,"delta":{"type":"text_delta","text":"',
    b'{"type":"content_block_delta","index":00,"delta":{"type":"text_delta","text":"',
    b'{"type":"content_block_delta","index":true,"delta":{"type":"text_delta","text":"',
    b'{"type":"content_block_delta","index":"0","delta":{"type":"text_delta","text":"',
    b'{"type":"content_block_delta","ind\\u0065x":0,"delta":{"type":"text_delta","text":"',
    b'{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","t\\u0065xt":"',
    b'{"type":"content_block_delta","index":0,"index":1,"delta":{"type":"text_delta","text":"',
    b'{"type":"content_block_delta","index":1,"index":0,"delta":{"type":"text_delta","text":"',
    b'{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x","text":"',
    b'{"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "',
    b'{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"',
    b'{"type":"ping","index":0,"delta":{"type":"text_delta","text":"',
    b'{{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"',
]
# The lines around the data line.
FRAMES = [
    (EVENT_HEAD, b"\n\n"),
    (EVENT_HEAD, b"\n\n"),
    (EVENT_HEAD, b"\n\n"),
    (b"data: ", b"\n\n"),
    (b"event: ping\ndata: ", b"\n\n"),
    (b"id: 7\n" + EVENT_HEAD, b"\n\n"),
    (b": comment\n" + EVENT_HEAD, b"\n\n"),
    (b"event: content_block_delta\r\ndata: ", b"\r\n\r\n"),
    (EVENT_HEAD, b"\n\n\n"),
]


def plain(body: bytes, index: int = 0) -> bytes:
    return EVENT_HEAD + LANE_HEAD % index + body + b'"}}\n\n'


@st.composite
def delta_events(draw: st.DrawFn) -> bytes:
    """Mostly plain deltas (the runs), some of them different in one way or several."""
    if draw(st.integers(0, 2)):
        body = draw(st.sampled_from(BODIES[:6]))
        return plain(body)
    head = draw(st.sampled_from(HEADS))
    body = b"".join(draw(st.lists(st.sampled_from(BODIES), min_size=1, max_size=3)))
    before, after = draw(st.sampled_from(FRAMES))
    data = head + body + draw(st.sampled_from(ENDS))
    if draw(st.integers(0, 9)) == 0:  # a data line cut in two
        at = draw(st.integers(0, len(data)))
        data = data[:at] + b"\ndata: " + data[at:]
    if draw(st.integers(0, 9)) == 0:  # truncated
        data = data[: draw(st.integers(0, len(data)))]
    return before + data + after


@st.composite
def upstreams(draw: st.DrawFn) -> bytes:
    """A text block of many deltas, maybe markup in it (the lane closes and opens again at
    the next client index), maybe a second text block after a thinking block, and maybe a
    replay (its follow-up repeats the text recorded)."""
    out = [start(), text(0, stop=False)]
    out += draw(st.lists(delta_events(), min_size=1, max_size=30))
    if draw(st.booleans()):
        out.append(text(0, MARKUP, stop=False)[len(text(0, stop=False)) :])
        out += [plain(b) for b in draw(st.lists(st.sampled_from(BODIES[:6]), max_size=5))]
    if draw(st.booleans()):
        out.append(ev({"type": "content_block_stop", "index": 0}))
    if draw(st.booleans()):
        out += [thinking(1, "hm", "sig"), text(2, stop=False)]
        out += [plain(b, 2) for b in draw(st.lists(st.sampled_from(BODIES[:6]), max_size=5))]
        out += draw(st.lists(delta_events(), max_size=5))
    if draw(st.booleans()):
        out.append(tool(3, "functions.Bash:0", "Bash", LS))
    out.append(end(draw(st.sampled_from(["end_turn", "tool_use"]))))
    return b"".join(out)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(upstream=upstreams(), data=st.data())
def test_runs_give_what_parsing_every_event_gives(upstream: bytes, data: st.DataObject) -> None:
    expected = reference(upstream)
    cuts = data.draw(st.lists(st.integers(0, len(upstream)), max_size=6))
    assert outcome(cut_at(upstream, cuts)) == expected


SAMPLE = (
    start()
    + text(0, "plain ", stop=False)
    + plain(b"one ")
    + plain(b"two\\n")
    + plain(b"caf\xc3\xa9 ")
    + plain(b"\\u003c")  # parsed: an escaped `<`
    + plain(b"three ")
    + plain(b"\xc3")  # not UTF-8: a comment
    + plain(b"\xa9")
    + plain(b"four ")
    + b"data: "
    + (LANE_HEAD % 0)
    + b'five"}}\n\n'  # no event line
    + plain(b"six ")
    + b'data: {"type":"ping"}\n'  # one event with the next: its data is not JSON
    + plain(b"merged ")
    + b"id: 7\n"  # a line of the next event
    + plain(b"with an id ")
    + plain(b"x", 1)  # a drifted index: rewritten
    + plain(b"seven ")
    + text(0, MARKUP, stop=False)[len(text(0, stop=False)) :]
    + plain(b"eight ", 2)  # the lane after the recovered call is at client index 2
    + plain(b"nine")
    + ev({"type": "content_block_stop", "index": 0})
    + tool(1, "functions.Bash:0", "Bash", LS)
    + end()
)


def test_a_stream_split_at_every_byte_gives_what_parsing_every_event_gives() -> None:
    expected = reference(SAMPLE)
    assert b"event: content_block_delta\ndata: " + LANE_HEAD % 2 + b'eight "}}' in expected[0]
    for at in range(len(SAMPLE) + 1):
        assert outcome(cut_at(SAMPLE, [at])) == expected, at


def test_a_stream_in_reads_of_every_size_gives_what_parsing_every_event_gives() -> None:
    expected = reference(SAMPLE)
    for size in range(1, 200):
        reads = [SAMPLE[i : i + size] for i in range(0, len(SAMPLE), size)]
        assert outcome(reads) == expected, size


# -- the runs are taken: what is not parsed ---------------------------------------------------


def _exchange() -> AnthropicExchange:
    exchange = AnthropicExchange(request(), b"{}", RouteRules(), entropy)
    exchange.begin_round(stream=True)
    return exchange


def test_a_read_of_plain_deltas_is_sent_on_as_it_came_without_a_parse() -> None:
    exchange = _exchange()
    exchange.feed(start() + text(0, "first ", stop=False))
    run = b"".join(plain(b) for b in [b"one ", b"two\\n", b"caf\xc3\xa9", b'\\"q\\"'] * 50)
    with (
        mock.patch.object(TextBlocks, "delta", side_effect=AssertionError("parsed")),
        mock.patch.object(TextBlocks, "as_came", side_effect=AssertionError("one by one")),
        mock.patch.object(AnthropicStream, "_event", side_effect=AssertionError("parsed")),
    ):
        assert exchange.feed(run) == [run]
    [done] = exchange.feed(ev({"type": "content_block_stop", "index": 0}) + end("end_turn"))
    assert b'"stop_reason":"end_turn"' in done.data  # type: ignore[union-attr]


def test_an_event_that_is_not_plain_is_parsed_and_the_run_goes_on_after_it() -> None:
    exchange = _exchange()
    exchange.feed(start() + text(0, "first ", stop=False))
    odd = [plain(b"\\u0041"), plain(b"caf\\u00e9"), plain(b"x", 1), plain(b"\xff")]
    between = b"".join(plain(b"a %d " % i) for i in range(20))  # a long run: tries go on
    reads = between + b"".join(event + between for event in odd * 3)
    parsed: list[bytes] = []
    real = TextBlocks.as_came

    def as_came(self: TextBlocks, data: bytes) -> bool:
        parsed.append(data)
        return real(self, data)

    with mock.patch.object(TextBlocks, "as_came", as_came):
        exchange.feed(reads)
    assert parsed == [event[len(EVENT_HEAD) : -2] for event in odd * 3]


def test_a_run_ends_before_the_event_whose_text_is_not_utf8() -> None:
    good = b"".join(plain(b"caf\xc3\xa9 %d " % i) for i in range(20))
    data = b"ahead" + good + plain(b"\xc3") + plain(b"\xa9") + good
    found = TextRun(0).match(data, 5)
    assert found is not None
    end, value = found
    assert data[5:end] == good and value == "".join(f"café {i} " for i in range(20))


NOT_PLAIN = [b"", b"<", b"a[b", b"\\u0041", b"\\", b'"', b"\x00", b"\n", b"\xa9", b"\\x"]


@pytest.mark.parametrize("body", NOT_PLAIN)
def test_a_run_does_not_begin_with_an_event_that_is_not_plain(body: bytes) -> None:
    assert TextRun(0).match(plain(body) + plain(b"then"), 0) is None


@pytest.mark.parametrize("body", NOT_PLAIN)
def test_a_run_ends_before_an_event_that_is_not_plain(body: bytes) -> None:
    assert TextRun(0).match(plain(b"a ") + plain(body) + plain(b"c"), 0) == (
        len(plain(b"a ")),
        "a ",
    )


@pytest.mark.parametrize("bad", [1, 15, 16, 17, 40, 63, 64, 99, 150])
@pytest.mark.parametrize("body", [b"<", b"\\u0041", b"\xff"])
def test_a_long_run_ends_at_its_first_event_that_is_not_plain(bad: int, body: bytes) -> None:
    """Across the regions the read is split in (they double from 2 KiB), wherever it ends."""
    events = [plain(b"word %d \\n" % i) for i in range(150)]
    data = b"".join(events[:bad]) + plain(body) + b"".join(events[bad:])
    found = TextRun(0).match(data, 0)
    assert found is not None
    assert found == (len(b"".join(events[:bad])), "".join(f"word {i} \n" for i in range(bad)))


def test_a_long_run_is_all_of_a_read_of_plain_deltas() -> None:
    data = b"".join(plain(b"w%d " % i) for i in range(300))
    assert TextRun(0).match(data, 0) == (len(data), "".join(f"w{i} " for i in range(300)))
    cut = data + data[:-3]  # the read ends inside an event: the run ends before it
    found = TextRun(0).match(cut, 0)
    assert found is not None and found[0] == 2 * len(data) - len(plain(b"w299 "))


def test_texts_the_decoder_refuses_for_another_reason_than_utf8_are_left_to_the_parse() -> None:
    """No such text is known (the run's grammar leaves none); if one were, it is parsed."""
    refused = orjson.JSONDecodeError("refused", "", 0)
    with mock.patch("proxy.anthropic.runs.orjson.loads", side_effect=refused):
        assert TextRun(0).match(plain(b"a\\n") + plain(b"b"), 0) is None
