"""One client request, from its first upstream round to its last (sans-IO, SPEC §2-§5).

The shell talks to nothing else: it hands the exchange the upstream's body as it arrives
(`feed`, then `end`) and acts on the small events it gets back, in order (`proxy.core.events`;
the protocol every surface's exchange follows is `proxy.surface_codec.Exchange`).
Decisions for logs and metrics are read with `report()`.

The exchange owns what lives across rounds: the translated request, the guard and breaker,
the follow-up requests, and (in its round cores) the carried message identity and usage.
Its state is `ExchangePhase`, with every transition in `_TRANSITIONS`; input after the end
raises `ExchangeClosed`. Randomness comes in through `entropy` only.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum, auto
from typing import Any

import orjson
from mypy_extensions import mypyc_attr

from proxy.chat.followup import build_followup
from proxy.chat.history import HistoryFacts, translate_request
from proxy.chat.message import holds_no_call, merge_continuation, sanitize_completion
from proxy.chat.stream import Carry, StreamPhase, StreamSanitizer, add_usage
from proxy.core.decide import ResponseIds
from proxy.core.events import (
    ExchangeEvent,
    Forward,
    LoopDetected,
    OpenFollowup,
    UpstreamBroken,
)
from proxy.core.guard import GuardState, Replay
from proxy.core.notes import Note, RepeatNoted
from proxy.core.repeat import DEFAULT_EXEMPT
from proxy.errors import ProxyError, ReplayLoopDetected, UpstreamStreamError
from proxy.jsontext import dumps


class ExchangePhase(Enum):
    WAITING = auto()  # no upstream response head yet (first round, or a follow-up's)
    RECEIVING = auto()  # feeding a round's body
    ENDED = auto()  # the client's response is complete
    FAILED = auto()  # a loop or a broken upstream ended it

    # Members are singletons: hash them by identity (C) rather than Enum's hash of the name,
    # a Python call for every transition check on every request.
    __hash__ = object.__hash__


_TRANSITIONS: dict[ExchangePhase, frozenset[ExchangePhase]] = {
    ExchangePhase.WAITING: frozenset({ExchangePhase.RECEIVING}),
    ExchangePhase.RECEIVING: frozenset(
        {ExchangePhase.WAITING, ExchangePhase.ENDED, ExchangePhase.FAILED}
    ),
    ExchangePhase.ENDED: frozenset(),
    ExchangePhase.FAILED: frozenset(),
}


# Read on every streamed read: on Python 3.11 an Enum member read through its class is an
# EnumType.__getattr__ call.
_RECEIVING = ExchangePhase.RECEIVING
_STREAMING = StreamPhase.STREAMING
_STREAM_DONE = StreamPhase.DONE


# mypyc compiles this module; an exception class of a built-in base stays a Python class.
@mypyc_attr(native_class=False)
class ExchangeClosed(RuntimeError):
    """Input after the exchange ended, or before a round began: a bug in the shell."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RouteRules:
    """What a route decides about tool calls (the exchange's part of its settings)."""

    ids: str = "auto"
    dialect: str = "auto"
    replay_guard: bool = True
    max_followups: int = 2
    text_tool_calls: bool = True
    repeat_guard: str = "on"  # SPEC §10: on | note | off
    repeat_exempt: tuple[str, ...] = DEFAULT_EXEMPT


class RoundPhases:
    """What every surface's exchange does the same way across rounds: the phase table's
    checks, ending the client's body, and opening a follow-up round (or tripping)."""

    phase: ExchangePhase
    facts: HistoryFacts
    _upstream_body: dict[str, Any]
    _forwarded: bool
    _notes: list[Note]

    def _begin_exchange(
        self,
        rules: RouteRules,
        facts: HistoryFacts,
        upstream_body: dict[str, Any],
        upstream_request: bytes,
        entropy: Callable[[int], bytes],
    ) -> None:
        """The state every surface's exchange starts with, from its translated request."""
        self.rules = rules
        self.facts = facts
        self.upstream_request = upstream_request
        self.guard = GuardState(
            enabled=rules.replay_guard, max_followups=rules.max_followups, entropy=entropy
        )
        self.phase = ExchangePhase.WAITING
        self._upstream_body = upstream_body
        self._notes = []
        if facts.repeat is not None:  # SPEC §10: the request carries the note
            tools = ", ".join(facts.repeat.names)
            self._notes.append(RepeatNoted(count=facts.repeat.count, tools=tools))
        self._non_json_before = 0  # data lines that were not JSON, in the rounds before this

    def _take_notes(self, notes: list[Note]) -> None:
        """A round core's decisions, kept for `report()` (the core's list is emptied)."""
        if notes:
            self._notes.extend(notes)
            notes.clear()

    def _finish(self, body: bytes) -> list[ExchangeEvent]:
        self._mark_forwarded()
        self._move(ExchangePhase.ENDED)
        return [Forward(data=body, last=True)]

    def _open_followup(
        self,
        build: Callable[[], tuple[dict[str, Any], HistoryFacts]],
        replays: list[Replay],
    ) -> ExchangeEvent:
        """SPEC §5: the follow-up request `build` renders in the surface's grammar; or the
        breaker, when one more round is one too many."""
        try:
            self._upstream_body, self.facts = build()
        except ReplayLoopDetected as exc:
            return self._loop(exc)
        self._move(ExchangePhase.WAITING)
        # jsontext.dumps: a valid history nested past 254 levels must not raise
        return OpenFollowup(body=dumps(self._upstream_body), replays=tuple(replays))

    def _loop(self, error: ReplayLoopDetected) -> LoopDetected:
        self._move(ExchangePhase.FAILED)
        return LoopDetected(error=error, before_first_byte=not self._was_forwarded())

    # Some bytes of the response reached the shell: `_forwarded` here, what a surface keeps
    # elsewhere in its overrides (methods, not a property over the attribute: compiled, the
    # methods above read a declared attribute directly, past a subclass's property).
    def _mark_forwarded(self) -> None:
        self._forwarded = True

    def _was_forwarded(self) -> bool:
        return self._forwarded

    def _check_receiving(self) -> None:
        if self.phase is not ExchangePhase.RECEIVING:
            raise ExchangeClosed(f"upstream input while the exchange is {self.phase.name}")

    def _move(self, to: ExchangePhase) -> None:
        if to not in _TRANSITIONS[self.phase]:
            raise ExchangeClosed(f"the exchange cannot go from {self.phase.name} to {to.name}")
        self.phase = to


class ChatExchange(RoundPhases):
    """A Chat Completions request across its rounds."""

    def __init__(
        self,
        body: dict[str, Any],
        raw: bytes,
        rules: RouteRules,
        *,
        entropy: Callable[[int], bytes] = os.urandom,
    ):
        translated = translate_request(body, rules.dialect, rules.repeat_guard, rules.repeat_exempt)
        self._begin_exchange(
            rules, translated.facts, translated.body, translated.to_bytes(raw), entropy
        )
        self._forwarded = False  # some bytes of the response reached the shell
        # The round being fed: a stream's core, or a whole message's body (never both).
        self._stream_core: StreamSanitizer | None = None
        self._message: MessageRound | None = None
        self._carry: Carry | None = None  # the earlier rounds' message, once there are some
        self._content_before = ""  # non-streaming: the earlier rounds' content

    # -- the shell's calls ---------------------------------------------------------------------

    def begin_round(self, *, stream: bool) -> None:
        """An upstream response head arrived: its body is an event stream or one message."""
        self._move(ExchangePhase.RECEIVING)
        self._non_json_before = self._non_json_now()
        ids = ResponseIds(self.facts, self.rules.ids, self.guard)
        if stream:
            self._stream_core = StreamSanitizer(
                ids, carry=self._carry, text_tool_calls=self.rules.text_tool_calls
            )
            self._message = None
        else:
            self._message = MessageRound(ids)
            self._stream_core = None

    def feed(self, data: bytes) -> list[ExchangeEvent]:
        core = self._stream_core
        if core is None or self.phase is not _RECEIVING:
            return self._feed_message(data)
        out = core.feed(data)
        if core.phase is _STREAMING and not core.notes:
            # The hot path: the round goes on and decided nothing worth a note.
            if out:
                self._forwarded = True
                return [out[0] if len(out) == 1 else b"".join(out)]
            return []
        return self._stream_events(core, out)

    def _feed_message(self, data: bytes) -> list[ExchangeEvent]:
        self._check_receiving()
        if self._message is None:
            raise ExchangeClosed("a stream's input after its round ended")
        self._message.body += data
        return []

    def end(self) -> list[ExchangeEvent]:
        """The round's upstream body ended cleanly."""
        self._check_receiving()
        if self._message is not None:
            return self._message_events(self._message)
        assert self._stream_core is not None  # begin_round set one of the two
        return self._stream_events(self._stream_core, self._stream_core.end())

    def report(self) -> tuple[list[Note], int]:
        """The decisions not yet reported, and the data lines that were not JSON so far."""
        notes, self._notes = self._notes, []
        return notes, self._non_json_now()

    def stream_error(self, error: ProxyError) -> bytes:
        """SPEC §6: a stream that cannot go on ends with an error event (no `[DONE]`); a
        replay loop's in the form its agents treat as final (`ReplayLoopDetected.sse_bytes`)."""
        return error.sse_bytes()

    def _non_json_now(self) -> int:
        core = self._stream_core
        return self._non_json_before + (core.non_json_events if core is not None else 0)

    # -- streaming rounds ----------------------------------------------------------------------

    def _stream_events(self, core: StreamSanitizer, out: list[bytes]) -> list[ExchangeEvent]:
        self._take_notes(core.notes)
        if core.error is not None:
            return self._stream_loop(core, out)
        if core.phase is not _STREAM_DONE:
            if out:
                self._forwarded = True
                return [out[0] if len(out) == 1 else b"".join(out)]
            return []
        followup = core.followup
        events: list[ExchangeEvent] = []
        if out:
            self._forwarded = True
            events.append(Forward(data=b"".join(out), last=followup is None))
        if followup is None:
            self._move(ExchangePhase.ENDED)
            return events
        self._carry = followup.carry
        events.append(self._followup(followup.content, followup.replays))
        return events

    def _stream_loop(self, core: StreamSanitizer, out: list[bytes]) -> list[ExchangeEvent]:
        """The core ended its output with the error event; what came before it goes first."""
        assert core.error is not None
        events: list[ExchangeEvent] = []
        if len(out) > 1:
            self._forwarded = True
            events.append(b"".join(out[:-1]))
        return [*events, self._loop(core.error)]

    # -- non-streaming rounds ------------------------------------------------------------------

    def _message_events(self, round_: MessageRound) -> list[ExchangeEvent]:
        raw = bytes(round_.body)
        if self._carry is None and holds_no_call(raw) and not self._recovers_text(round_):
            # The first round's answer, and nothing in it to decide: it goes out as it came,
            # which is what the full check below ends in for it (parsed or not).
            return self._finish(raw)
        try:
            parsed = orjson.loads(raw)
        except orjson.JSONDecodeError:
            parsed = None
        if not isinstance(parsed, dict):
            if self._carry is None:  # the first answer: relayed as it came
                return self._finish(raw)
            self._move(ExchangePhase.FAILED)
            return [
                UpstreamBroken(
                    error=UpstreamStreamError(
                        "the upstream answered the follow-up with a body that is not a JSON object"
                    )
                )
            ]
        try:
            result = sanitize_completion(
                parsed, round_.ids, text_tool_calls=self.rules.text_tool_calls
            )
        except ReplayLoopDetected as exc:
            return [self._loop(exc)]
        self._notes.extend(result.notes)
        if result.replays:
            carry = self._carry or Carry(
                parsed.get("id"), parsed.get("created"), parsed.get("model")
            )
            carry.usage = add_usage(carry.usage, parsed.get("usage"))
            self._carry = carry
            self._content_before += result.content
            return [self._followup(result.content, result.replays)]
        if self._carry is not None:
            return self._finish(
                dumps(merge_continuation(self._carry, self._content_before, parsed))
            )
        return self._finish(dumps(parsed) if result.changed else raw)

    def _recovers_text(self, round_: MessageRound) -> bool:
        """Could tool-call markup in the content become calls (sanitize_completion's rule)?"""
        return self.rules.text_tool_calls and bool(round_.ids.facts.offered_tools)

    # -- across rounds -------------------------------------------------------------------------

    def _followup(self, content: str, replays: list[Replay]) -> ExchangeEvent:
        """The previous request, this round's message and one synthetic answer per replay."""
        return self._open_followup(
            lambda: build_followup(self._upstream_body, self.facts, self.guard, content, replays),
            replays,
        )


@dataclass(slots=True)
class MessageRound:
    ids: ResponseIds
    # The whole body: a message is read before it is answered.
    body: bytearray = field(default_factory=bytearray)
