"""One client request across its upstream rounds, for every surface and bridge (sans-IO,
SPEC §2-§6).

The round lifecycle is written here once: `RoundExchange` is what the shell drives (the
`proxy.core.surface_codec.Exchange` protocol: `begin_round`, `feed`, `end`, `report`,
`stream_error`), and what depends on a grammar it asks of a `RoundGrammar`, which each surface
(`proxy.chat`, `proxy.anthropic`, `proxy.responses`) and each bridge supplies:

- a streamed round runs the grammar's `RoundStream` core: its bytes go out as they come, its
  decisions are kept for `report()`, a loop it finds ends the round (the bytes before it go
  first), and when it is done it ends the client's body or asks for a follow-up round;
- a whole message is read to its end and parsed here; the first round's answer that is not a
  JSON object goes out as it came, a follow-up's is a broken upstream (SPEC §6); the grammar
  answers the rest with the client's body or a follow-up (`MessageAnswer`);
- a follow-up request is the grammar's rendering of what the guard planned (SPEC §5), or the
  breaker when one more round is one too many.

A module of its own rather than `rounds.py` grown: `rounds.py` is the vocabulary the shell and
the CLI import too (phases, route rules); this is the lifecycle, compiled with the surfaces'
exchanges that subclass it (setup.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import orjson

from proxy.core.decide import ResponseIds
from proxy.core.errors import ProxyError, ReplayLoopDetected, UpstreamStreamError
from proxy.core.events import ExchangeEvent, Forward, LoopDetected, OpenFollowup, UpstreamBroken
from proxy.core.guard import GuardState, Replay
from proxy.core.jsontext import dumps
from proxy.core.ledger import HistoryFacts
from proxy.core.nonjson import NonJsonRule
from proxy.core.notes import Note, RepeatNoted
from proxy.core.rounds import TRANSITIONS, ExchangeClosed, ExchangePhase, RouteRules, moved

# Read on every streamed read: on Python 3.11 an Enum member read through its class is an
# EnumType.__getattr__ call.
_RECEIVING = ExchangePhase.RECEIVING
_ENDED = ExchangePhase.ENDED
_FAILED = ExchangePhase.FAILED
_WAITING = ExchangePhase.WAITING


class RoundStream(Protocol):
    """A streamed round's core in a surface's grammar: upstream bytes in, client bytes out.
    Read-only members: each core declares them as plain attributes of its own types."""

    @property
    def phase(self) -> object:
        """The core's own phase; the grammar names its streaming and done members."""

    @property
    def notes(self) -> list[Note]:
        """Decisions since the last read; the exchange takes them and empties the list."""

    @property
    def error(self) -> ReplayLoopDetected | None:
        """The breaker tripped in this round (SPEC §5)."""

    @property
    def followup(self) -> FollowupRecord | None:
        """Done with replays only: what the follow-up request repeats."""

    @property
    def non_json(self) -> NonJsonRule:
        """Its data lines that were not JSON (`count`), and `broken`: such a line inside an
        open tool call, or a call past its bounds (SPEC §4, §6), so the round cannot go on
        (the core has then left its streaming phase)."""

    def feed(self, data: bytes) -> list[bytes]: ...

    def end(self) -> list[bytes]: ...


class FollowupRecord(Protocol):
    """A replay-only round, as its grammar keeps it for the follow-up request."""

    @property
    def replays(self) -> list[Replay]: ...


class MessageAnswer:
    """What a grammar makes of a whole message: the client's body (`body`), a follow-up round
    (`followup`), or a body the client's API cannot say (`broken`, a bridge's)."""

    def __init__(
        self,
        body: bytes = b"",
        followup: FollowupRecord | None = None,
        broken: ProxyError | None = None,
    ) -> None:
        self.body = body
        self.followup = followup
        self.broken = broken


class RoundGrammar(Protocol):
    """What a surface or a bridge supplies to `RoundExchange`: its grammar at both ends."""

    @property
    def mint_prefix(self) -> str:
        """The prefix of the client ids it mints (SPEC §8)."""

    @property
    def streaming_phase(self) -> object:
        """Its stream core's phase while the round goes on and decided nothing."""

    @property
    def done_phase(self) -> object:
        """Its stream core's phase once the round is complete."""

    @property
    def loop_in_stream(self) -> bool:
        """A loop on a stream is always an in-stream event, even before any byte (SPEC §8)."""

    def open_stream(self, ids: ResponseIds) -> RoundStream:
        """A streamed round's core, continuing the rounds before it."""

    def before_loop(self, out: list[bytes]) -> list[bytes]:
        """What of a loop's last read goes out before the shell renders the loop."""

    def unread(self, raw: bytes, ids: ResponseIds) -> bool:
        """The first round's whole message is the client's body as it came, unparsed: nothing
        in it to decide, and nothing to render (a bridge's end always renders: False)."""

    def as_it_came(self, raw: bytes) -> MessageAnswer:
        """The first round's whole answer, relayed as it came (in the client's grammar)."""

    def answer(
        self, parsed: dict[str, Any], raw: bytes, ids: ResponseIds, first: bool, notes: list[Note]
    ) -> MessageAnswer:
        """A whole message's answer; its decisions go to `notes`. May raise the breaker."""

    def followup_request(
        self,
        record: FollowupRecord,
        upstream_body: dict[str, Any],
        facts: HistoryFacts,
        guard: GuardState,
    ) -> tuple[dict[str, Any], HistoryFacts]:
        """SPEC §5: the follow-up request and its history's facts. May raise the breaker."""

    def stream_error(self, error: ProxyError, forwarded: bool) -> bytes:
        """The bytes that end the client's stream with `error` (`forwarded`: some bytes of
        the response reached the shell)."""

    def reached_client(self, forwarded: bool) -> bool:
        """Has any byte of the response reached the client (a loop is then in-stream)?"""


class MessageRound:
    def __init__(self, ids: ResponseIds) -> None:
        self.ids = ids
        # The whole body: a message is read before it is answered.
        self.body = bytearray()


class RoundExchange:
    """One client request across its rounds, in the grammar it is given. Its state is
    `ExchangePhase` (every transition in `proxy.core.rounds`); input after the end raises
    `ExchangeClosed`. Randomness comes in through `entropy` only."""

    def __init__(
        self,
        grammar: RoundGrammar,
        rules: RouteRules,
        facts: HistoryFacts,
        upstream_body: dict[str, Any],
        upstream_request: bytes,
        entropy: Callable[[int], bytes],
        dropped: tuple[str, ...] = (),
    ) -> None:
        self.rules = rules
        self.facts = facts  # what the history said; a follow-up replaces them
        # What a bridge's mapping left out (SPEC §9); empty on the client's own API.
        self.dropped = dropped
        self.upstream_request = upstream_request  # the first round's body
        self.guard = GuardState(
            enabled=rules.replay_guard, max_followups=rules.max_followups, entropy=entropy
        )
        self.phase = ExchangePhase.WAITING
        self._grammar = grammar
        self._streaming = grammar.streaming_phase
        self._done = grammar.done_phase
        self._upstream_body = upstream_body
        self._notes: list[Note] = []
        if facts.repeat is not None:  # SPEC §10: the request carries the note
            tools = ", ".join(facts.repeat.names)
            self._notes.append(RepeatNoted(count=facts.repeat.count, tools=tools))
        self._non_json_before = 0  # data lines that were not JSON, in the rounds before this
        self._forwarded = False  # some bytes of the response reached the shell
        self._rounds = 0
        # The round being fed: a stream's core, or a whole message's body (never both).
        self._stream: RoundStream | None = None
        self._message: MessageRound | None = None

    # -- the shell's calls ---------------------------------------------------------------------

    def begin_round(self, *, stream: bool) -> None:
        """An upstream response head arrived: its body is an event stream or one message."""
        self._move(_RECEIVING)
        self._non_json_before = self._non_json_now()
        self._rounds += 1
        grammar = self._grammar
        ids = ResponseIds(self.facts, self.rules.ids, self.guard, mint_prefix=grammar.mint_prefix)
        if stream:
            self._stream = grammar.open_stream(ids)
            self._message = None
        else:
            self._message = MessageRound(ids)
            self._stream = None

    def feed(self, data: bytes) -> list[ExchangeEvent]:
        core = self._stream
        if core is None or self.phase is not _RECEIVING:
            return self._feed_message(data)
        out = core.feed(data)
        if core.phase is self._streaming and not core.notes:
            # The hot path: the round goes on and decided nothing worth a note.
            if out:
                self._forwarded = True
                return [out[0] if len(out) == 1 else b"".join(out)]
            return []
        return self._stream_events(core, out)

    def end(self) -> list[ExchangeEvent]:
        """The round's upstream body ended cleanly."""
        self._check_receiving()
        if self._message is not None:
            return self._message_events(self._message)
        assert self._stream is not None  # begin_round set one of the two
        return self._stream_events(self._stream, self._stream.end())

    def report(self) -> tuple[list[Note], int]:
        """The decisions not yet reported, and the data lines that were not JSON so far."""
        notes, self._notes = self._notes, []
        return notes, self._non_json_now()

    def add_notes(self, notes: list[Note]) -> None:
        """Decisions made outside the rounds (SPEC §11: the request's repairs), reported with
        the first round's."""
        self._notes.extend(notes)

    def stream_error(self, error: ProxyError) -> bytes:
        """SPEC §6, §8: the bytes that end the client's stream with `error`, in its grammar."""
        return self._grammar.stream_error(error, self._forwarded)

    # -- streaming rounds ----------------------------------------------------------------------

    def _stream_events(self, core: RoundStream, out: list[bytes]) -> list[ExchangeEvent]:
        self._take_notes(core.notes)
        broken = core.non_json.broken
        if broken is not None:
            # SPEC §4: what came before the line goes first; the shell ends the stream.
            self._move(_FAILED)
            return [*self._relay(out), UpstreamBroken(error=broken)]
        error = core.error
        if error is not None:
            # What came before the loop goes first; the shell renders the loop itself.
            return [*self._relay(self._grammar.before_loop(out)), self._loop(error)]
        if core.phase is not self._done:
            return self._relay(out)
        followup = core.followup
        data = b"".join(out)
        if data:
            self._forwarded = True
        if followup is None:
            self._move(_ENDED)
            return [Forward(data=data, last=True)]
        events: list[ExchangeEvent] = [data] if data else []
        events.append(self._followup(followup))
        return events

    def _relay(self, out: list[bytes]) -> list[ExchangeEvent]:
        if not out:
            return []
        self._forwarded = True
        return [out[0] if len(out) == 1 else b"".join(out)]

    def _take_notes(self, notes: list[Note]) -> None:
        """A round core's decisions, kept for `report()` (the core's list is emptied)."""
        if notes:
            self._notes.extend(notes)
            notes.clear()

    # -- non-streaming rounds ------------------------------------------------------------------

    def _feed_message(self, data: bytes) -> list[ExchangeEvent]:
        self._check_receiving()
        if self._message is None:
            raise ExchangeClosed("a stream's input after its round ended")
        self._message.body += data
        return []

    def _message_events(self, round_: MessageRound) -> list[ExchangeEvent]:
        raw = bytes(round_.body)
        grammar = self._grammar
        first = self._rounds == 1
        if first and grammar.unread(raw, round_.ids):
            return self._finish(raw)  # nothing to decide and nothing to render: as it came
        try:
            parsed = orjson.loads(raw)
        except orjson.JSONDecodeError:
            parsed = None
        if not isinstance(parsed, dict):
            if first:  # the first answer: relayed as it came
                return self._conclude(grammar.as_it_came(raw))
            self._move(_FAILED)
            error = UpstreamStreamError(
                "the upstream answered the follow-up with a body that is not a JSON object"
            )
            return [UpstreamBroken(error=error)]
        try:
            answer = grammar.answer(parsed, raw, round_.ids, first, self._notes)
        except ReplayLoopDetected as exc:
            return [self._loop(exc)]
        return self._conclude(answer)

    def _conclude(self, answer: MessageAnswer) -> list[ExchangeEvent]:
        if answer.followup is not None:
            return [self._followup(answer.followup)]
        if answer.broken is not None:
            self._move(_FAILED)
            return [UpstreamBroken(error=answer.broken)]
        return self._finish(answer.body)

    def _finish(self, body: bytes) -> list[ExchangeEvent]:
        self._forwarded = True
        self._move(_ENDED)
        return [Forward(data=body, last=True)]

    # -- across rounds -------------------------------------------------------------------------

    def _followup(self, record: FollowupRecord) -> ExchangeEvent:
        """SPEC §5: the follow-up request in the grammar; or the breaker, when one more round
        is one too many."""
        try:
            self._upstream_body, self.facts = self._grammar.followup_request(
                record, self._upstream_body, self.facts, self.guard
            )
        except ReplayLoopDetected as exc:
            return self._loop(exc)
        self._move(_WAITING)
        # jsontext.dumps: a valid history nested past 254 levels must not raise
        return OpenFollowup(body=dumps(self._upstream_body), replays=tuple(record.replays))

    def _loop(self, error: ReplayLoopDetected) -> LoopDetected:
        self._move(_FAILED)
        reached = self._grammar.reached_client(self._forwarded)
        in_stream = self._stream is not None and self._grammar.loop_in_stream
        return LoopDetected(error=error, before_first_byte=not (reached or in_stream))

    def _non_json_now(self) -> int:
        core = self._stream
        return self._non_json_before + (core.non_json.count if core is not None else 0)

    def _check_receiving(self) -> None:
        if self.phase is not _RECEIVING:
            raise ExchangeClosed(f"upstream input while the exchange is {self.phase.name}")

    def _move(self, to: ExchangePhase) -> None:
        # The table read here rather than through `moved`: a call less per transition.
        if to not in TRANSITIONS[self.phase]:
            self.phase = moved(self.phase, to)  # raises ExchangeClosed
        self.phase = to


__all__ = [
    "FollowupRecord",
    "MessageAnswer",
    "MessageRound",
    "RoundExchange",
    "RoundGrammar",
    "RoundStream",
]
