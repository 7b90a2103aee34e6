"""What every surface's exchange does the same way across rounds (sans-IO, SPEC §2-§5).

An exchange is one client request from its first upstream round to its last. Its state is
`ExchangePhase`, with every transition in `_TRANSITIONS`; input after the end raises
`ExchangeClosed`. `RouteRules` is what a route decides about tool calls; `RoundPhases` is the
base of each surface's exchange (`ChatExchange`, `AnthropicExchange`, `ResponsesExchange`),
compiled with them (setup.py says why).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum, auto
from typing import Any

from mypy_extensions import mypyc_attr

from proxy.core.decide import ResponseIds
from proxy.core.errors import ReplayLoopDetected
from proxy.core.events import ExchangeEvent, Forward, LoopDetected, OpenFollowup
from proxy.core.guard import GuardState, Replay
from proxy.core.jsontext import dumps
from proxy.core.ledger import HistoryFacts
from proxy.core.notes import Note, RepeatNoted
from proxy.core.repeat import DEFAULT_EXEMPT


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
    dropped: tuple[str, ...]  # always empty: an exchange on the client's own API maps nothing
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
        self.dropped = ()
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


@dataclass(slots=True)
class MessageRound:
    ids: ResponseIds
    # The whole body: a message is read before it is answered.
    body: bytearray = field(default_factory=bytearray)
