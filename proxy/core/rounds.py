"""The vocabulary of an exchange across its rounds (sans-IO, SPEC §2-§5).

An exchange is one client request from its first upstream round to its last
(`proxy.core.exchange.RoundExchange`, the one lifecycle every surface and bridge runs). Its
state is `ExchangePhase`, with every transition in `TRANSITIONS` (`moved` checks one); input
after the end raises `ExchangeClosed`. `RouteRules` is what a route decides about tool calls.
The shell and the CLI import these names without the lifecycle.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, auto

from mypy_extensions import mypyc_attr

from proxy.core.repeat import DEFAULT_EXEMPT


class ExchangePhase(Enum):
    WAITING = auto()  # no upstream response head yet (first round, or a follow-up's)
    RECEIVING = auto()  # feeding a round's body
    ENDED = auto()  # the client's response is complete
    FAILED = auto()  # a loop or a broken upstream ended it

    # Members are singletons: hash them by identity (C) rather than Enum's hash of the name,
    # a Python call for every transition check on every request.
    __hash__ = object.__hash__


TRANSITIONS: dict[ExchangePhase, frozenset[ExchangePhase]] = {
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
    request_repair: bool = True  # SPEC §11: repair what the upstream would refuse
    # SPEC §11 provider families: the route's family (`auto`: the request's model name
    # decides; the shell has already put the upstream host's family here where it names one)
    # and whether tool-call turns carry their reasoning back whatever the family.
    upstream_profile: str = "auto"
    reasoning_passback: bool = False


def moved(phase: ExchangePhase, to: ExchangePhase) -> ExchangePhase:
    """`to`, if the table lets `phase` go there; a shell that calls out of turn is a bug."""
    if to not in TRANSITIONS[phase]:
        raise ExchangeClosed(f"the exchange cannot go from {phase.name} to {to.name}")
    return to
