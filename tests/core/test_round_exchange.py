"""The one round lifecycle (`proxy.core.exchange.RoundExchange`) over a stand-in grammar.

Every surface and bridge runs this lifecycle with its own grammar; here a grammar of a few
lines drives it, so what is the core's (phases, the hot path, notes and non-JSON counts
across rounds, loops before and after the first byte, follow-ups, a follow-up's body that is
not an object) is checked apart from any surface's.
"""

from __future__ import annotations

from enum import Enum, auto
from typing import Any

import orjson
import pytest

from proxy.chat.history import translate_request
from proxy.core.decide import ResponseIds
from proxy.core.errors import ProxyError, ReplayLoopDetected, UpstreamStreamError
from proxy.core.events import Forward, LoopDetected, OpenFollowup, UpstreamBroken
from proxy.core.exchange import FollowupRecord, MessageAnswer, RoundExchange
from proxy.core.guard import GuardState, Replay
from proxy.core.ledger import HistoryFacts
from proxy.core.nonjson import NonJsonRule
from proxy.core.notes import DeltaRepaired, Note
from proxy.core.rounds import ExchangeClosed, RouteRules

LOOP = ReplayLoopDetected("read", "raw-1", "same arguments")
BROKEN = UpstreamStreamError("a line that is not JSON inside an open call")


class Phase(Enum):
    STREAMING = auto()
    DONE = auto()


class Followup:
    def __init__(self) -> None:
        self.replays: list[Replay] = []


class Stream:
    """Reads are commands: `loop`, `quiet-loop`, `done`, `replay`, `note`, `junk`; others pass
    through."""

    def __init__(self) -> None:
        self.phase = Phase.STREAMING
        self.notes: list[Note] = []
        self.error: ReplayLoopDetected | None = None
        self.followup: Followup | None = None
        self.non_json = NonJsonRule(self.notes)

    def feed(self, data: bytes) -> list[bytes]:
        if data == b"loop":
            self.error, self.phase = LOOP, Phase.DONE
            return [b"before-loop"]
        if data == b"quiet-loop":
            self.error, self.phase = LOOP, Phase.DONE
            return []
        if data == b"done":
            self.phase = Phase.DONE
            return [b"last"]
        if data == b"broken":
            self.non_json.broken, self.phase = BROKEN, Phase.DONE
            return [b"before-broken"]
        if data == b"replay":
            self.followup, self.phase = Followup(), Phase.DONE
            return [b"shown"]
        if data == b"note":
            self.notes.append(DeltaRepaired(kind="test"))
        if data == b"junk":
            self.non_json.count += 1
        return [data]

    def end(self) -> list[bytes]:
        self.phase = Phase.DONE
        return []


class Grammar:
    def __init__(self, *, loop_in_stream: bool = False) -> None:
        self.mint_prefix = "call_"
        self.streaming_phase: object = Phase.STREAMING
        self.done_phase: object = Phase.DONE
        self.loop_in_stream = loop_in_stream
        self.followups = 0

    def open_stream(self, ids: ResponseIds) -> Stream:
        return Stream()

    def before_loop(self, out: list[bytes]) -> list[bytes]:
        return out

    def unread(self, raw: bytes, ids: ResponseIds) -> bool:
        return raw == b"unread"

    def as_it_came(self, raw: bytes) -> MessageAnswer:
        return MessageAnswer(body=b"as-it-came:" + raw)

    def answer(
        self, parsed: dict[str, Any], raw: bytes, ids: ResponseIds, first: bool, notes: list[Note]
    ) -> MessageAnswer:
        if parsed.get("loop"):
            raise LOOP
        if parsed.get("replay"):
            return MessageAnswer(followup=Followup())
        if parsed.get("unsayable"):
            return MessageAnswer(broken=UpstreamStreamError("not in the client's grammar"))
        return MessageAnswer(body=b"answered" + (b" first" if first else b" later"))

    def followup_request(
        self,
        record: FollowupRecord,
        upstream_body: dict[str, Any],
        facts: HistoryFacts,
        guard: GuardState,
    ) -> tuple[dict[str, Any], HistoryFacts]:
        self.followups += 1
        if self.followups > 1:
            raise LOOP  # the breaker: one more round is one too many
        return {**upstream_body, "round": self.followups + 1}, facts

    def stream_error(self, error: ProxyError, forwarded: bool) -> bytes:
        return b"error after bytes" if forwarded else b"error first"

    def reached_client(self, forwarded: bool) -> bool:
        return forwarded


def exchange(grammar: Grammar | None = None) -> RoundExchange:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    translated = translate_request(body, "auto", "on", ())
    return RoundExchange(
        grammar or Grammar(),
        RouteRules(),
        translated.facts,
        translated.body,
        translated.to_bytes(orjson.dumps(body)),
        lambda n: b"\x01" * n,
    )


def test_a_stream_goes_out_as_it_comes_and_its_last_read_ends_the_body() -> None:
    ex = exchange()
    ex.begin_round(stream=True)
    assert ex.feed(b"one") == [b"one"]
    assert ex.phase.name == "RECEIVING"
    assert ex.feed(b"done") == [Forward(data=b"last", last=True)]
    assert ex.phase.name == "ENDED"
    with pytest.raises(ExchangeClosed):
        ex.feed(b"more")
    with pytest.raises(ExchangeClosed):
        ex.end()


def test_a_broken_round_relays_what_came_before_then_ends_as_a_broken_upstream() -> None:
    """SPEC §4: a line that is not JSON inside an open call; the shell ends the stream."""
    ex = exchange()
    ex.begin_round(stream=True)
    assert ex.feed(b"one") == [b"one"]
    assert ex.feed(b"broken") == [b"before-broken", UpstreamBroken(error=BROKEN)]
    assert ex.phase.name == "FAILED"
    with pytest.raises(ExchangeClosed):
        ex.feed(b"more")


def test_a_stream_that_ends_without_output_still_ends_the_body() -> None:
    ex = exchange()
    ex.begin_round(stream=True)
    assert ex.end() == [Forward(data=b"", last=True)]


def test_input_before_a_round_began_is_a_shell_bug() -> None:
    with pytest.raises(ExchangeClosed):
        exchange().feed(b"data")


def test_a_loop_comes_after_the_bytes_before_it() -> None:
    ex = exchange()
    ex.begin_round(stream=True)
    # The loop's own read forwarded bytes: a plain HTTP error is no longer possible.
    assert ex.feed(b"loop") == [b"before-loop", LoopDetected(error=LOOP, before_first_byte=False)]
    assert ex.phase.name == "FAILED"
    assert ex.stream_error(LOOP) == b"error after bytes"


@pytest.mark.parametrize(
    ("loop_in_stream", "first_read", "before_first_byte"),
    [(False, None, True), (False, b"shown", False), (True, None, False)],
)
def test_a_loop_before_any_byte_is_a_plain_error_unless_the_grammar_keeps_it_in_stream(
    loop_in_stream: bool, first_read: bytes | None, before_first_byte: bool
) -> None:
    ex = exchange(Grammar(loop_in_stream=loop_in_stream))
    ex.begin_round(stream=True)
    if first_read is not None:
        assert ex.feed(first_read) == [first_read]
    assert ex.feed(b"quiet-loop") == [LoopDetected(error=LOOP, before_first_byte=before_first_byte)]


@pytest.mark.parametrize("loop_in_stream", [False, True])
def test_a_whole_messages_loop_is_before_the_first_byte(loop_in_stream: bool) -> None:
    ex = exchange(Grammar(loop_in_stream=loop_in_stream))
    ex.begin_round(stream=False)
    ex.feed(b'{"loop": true}')
    assert ex.end() == [LoopDetected(error=LOOP, before_first_byte=True)]
    assert ex.phase.name == "FAILED"


def test_the_breaker_at_a_follow_up_ends_the_stream_after_what_it_showed() -> None:
    grammar = Grammar()
    grammar.followups = 1  # the next follow-up is one too many
    ex = exchange(grammar)
    ex.begin_round(stream=True)
    assert ex.feed(b"replay") == [b"shown", LoopDetected(error=LOOP, before_first_byte=False)]
    assert ex.phase.name == "FAILED"


def test_a_replay_round_asks_for_the_grammars_follow_up_and_counts_carry_on() -> None:
    ex = exchange()
    ex.begin_round(stream=True)
    assert ex.feed(b"junk") == [b"junk"]
    assert ex.feed(b"note") == [b"note"]
    events = ex.feed(b"replay")
    assert events[0] == b"shown"
    followup = events[1]
    assert isinstance(followup, OpenFollowup)
    assert orjson.loads(followup.body)["round"] == 2
    assert ex.phase.name == "WAITING"
    ex.begin_round(stream=True)
    assert ex.feed(b"junk") == [b"junk"]
    notes, non_json = ex.report()
    assert [n.kind for n in notes if isinstance(n, DeltaRepaired)] == ["test"]
    assert non_json == 2  # one per round, summed across them
    assert ex.report()[0] == []  # reported once


def test_a_whole_message_is_answered_by_the_grammar_at_its_end() -> None:
    ex = exchange()
    ex.begin_round(stream=False)
    assert ex.feed(b'{"ok":') == []
    assert ex.feed(b" 1}") == []
    assert ex.end() == [Forward(data=b"answered first", last=True)]
    assert ex.phase.name == "ENDED"


@pytest.mark.parametrize("raw", [b"not json", b"[1, 2]"])
def test_the_first_answer_that_is_not_an_object_goes_out_as_it_came(raw: bytes) -> None:
    ex = exchange()
    ex.begin_round(stream=False)
    ex.feed(raw)
    assert ex.end() == [Forward(data=b"as-it-came:" + raw, last=True)]
    assert ex.phase.name == "ENDED"


def test_a_first_answer_the_grammar_leaves_unread_goes_out_unchanged() -> None:
    ex = exchange()
    ex.begin_round(stream=False)
    ex.feed(b"unread")
    assert ex.end() == [Forward(data=b"unread", last=True)]


def test_a_follow_ups_body_that_is_not_an_object_is_a_broken_upstream() -> None:
    ex = exchange()
    ex.begin_round(stream=False)
    ex.feed(b'{"replay": true}')
    (followup,) = ex.end()
    assert isinstance(followup, OpenFollowup)
    ex.begin_round(stream=False)
    ex.feed(b"not json")
    (broken,) = ex.end()
    assert isinstance(broken, UpstreamBroken)
    assert ex.phase.name == "FAILED"


def test_a_follow_ups_answer_is_not_the_first() -> None:
    ex = exchange()
    ex.begin_round(stream=False)
    ex.feed(b'{"replay": true}')
    ex.end()
    ex.begin_round(stream=False)
    ex.feed(b"{}")
    assert ex.end() == [Forward(data=b"answered later", last=True)]


def test_an_answer_the_clients_grammar_cannot_say_is_a_broken_upstream() -> None:
    ex = exchange()
    ex.begin_round(stream=False)
    ex.feed(b'{"unsayable": true}')
    (broken,) = ex.end()
    assert isinstance(broken, UpstreamBroken)
    assert ex.phase.name == "FAILED"


def test_the_stream_error_knows_whether_bytes_went_out() -> None:
    ex = exchange()
    ex.begin_round(stream=True)
    assert ex.stream_error(UpstreamStreamError("gone")) == b"error first"
    ex.feed(b"one")
    assert ex.stream_error(UpstreamStreamError("gone")) == b"error after bytes"
