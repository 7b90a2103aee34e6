"""Client-id decisions for one upstream response (SPEC §2), shared by streams and messages.

For each call, once its id may be decided, `decide()` says whether it reaches the client and
under which id:
1. a replay of an answered call (SPEC §5, checked first) is withheld;
2. a second call with the same raw id and fingerprint in one choice is dropped;
3. otherwise the call is delivered: its raw id is kept when the route's policy allows and it
   collides with nothing, else a turn-scoped `call_{turn}_{idx}_{hex8}` is minted (four
   random hex digits per choice, then four of the raw id's digest).
`idx` is the call's position among the calls the client receives in its choice.

The work stays linear in the number of calls: a call is compared with the earlier calls of
its raw id through a set of their fingerprints, each taken once (when a later call of that
raw id is first compared with it: by then its arguments are complete, SPEC §2.4). Every call
a stream starts is counted (`count_call`) against the response's bound (SPEC §6).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum, auto
from typing import Protocol

from proxy.core.bounds import check_calls
from proxy.core.guard import GuardState, Replay
from proxy.core.ids import (
    REASON_COLLISION,
    REASON_DUPLICATE,
    REASON_POLICY,
    canonical_arguments,
    mint_client_id,
    rejection_reason,
)
from proxy.core.ledger import HistoryFacts
from proxy.core.notes import CallDropped

# The `reason` of a call the repeat guard answers (SPEC §10), beside SPEC §5's two forms.
FORM_REPEAT = "repeat"


class CallLike(Protocol):
    """A call as the decider sees it: its name and, once complete, its arguments."""

    @property
    def name(self) -> str: ...

    def arguments_text(self) -> str: ...


# What `decide` is passed when the caller has not parsed the call's arguments.
UNPARSED: object = object()


class Verdict(Enum):
    DELIVER = auto()
    DUPLICATE = auto()
    REPLAY = auto()


# Enum members read through their class cost an EnumType.__getattr__ call each on Python 3.11;
# a verdict is made for every call.
_DELIVER = Verdict.DELIVER
_DUPLICATE = Verdict.DUPLICATE
_REPLAY = Verdict.REPLAY


# Value objects: read-only by convention and hashed by value (unsafe_hash), not frozen: a
# frozen dataclass's __init__ sets each field through object.__setattr__, about twice the
# cost of building one, and these are built per call, per note or per event.
@dataclass(slots=True, unsafe_hash=True, init=False)
class Decision:
    verdict: Verdict
    client_id: str
    index: int
    # Why the client id differs from the raw id (None: kept verbatim); for a replay, which
    # form of its raw id matched (SPEC §5).
    reason: str | None

    # Written out (init=False), the defaults here only: mypyc compiles this one; the
    # one dataclasses generates would stay Python.
    def __init__(
        self, verdict: Verdict, client_id: str = "", index: int = -1, reason: str | None = None
    ) -> None:
        self.verdict = verdict
        self.client_id = client_id
        self.index = index
        self.reason = reason

    def dropped(self, choice: int, name: str, raw_id: str | None) -> CallDropped:
        """The note for a call this decision withholds (a replay or a duplicate)."""
        if self.verdict is _REPLAY and self.reason == FORM_REPEAT:
            return CallDropped(choice=choice, name=name, raw_id=raw_id, reason="repeat")
        if self.verdict is _REPLAY:
            return CallDropped(
                choice=choice, name=name, raw_id=raw_id, reason="replay", matched=self.reason or ""
            )
        return CallDropped(choice=choice, name=name, raw_id=raw_id, reason="duplicate_in_response")


@dataclass(slots=True, init=False)
class ChoiceIds:
    """Per choice: the random half of its minted ids' suffix and what it delivered."""

    hex4: str  # drawn when the choice's first id is minted (most responses mint none)
    delivered: int
    # raw id -> the calls delivered under it; their arguments are read when a later call
    # with the same raw id is complete (they may still be streaming when delivered)
    raw_calls: dict[str, list[CallLike]]
    replays: list[Replay]
    # raw id -> the fingerprints of its first calls in raw_calls, and how many those are
    raw_keys: dict[str, tuple[set[tuple[str, str]], int]]

    # Written out (init=False), the defaults here only: mypyc compiles this one; the
    # one dataclasses generates would stay Python.
    def __init__(
        self,
        hex4: str = "",
        delivered: int = 0,
        raw_calls: dict[str, list[CallLike]] | None = None,
        replays: list[Replay] | None = None,
    ) -> None:
        self.hex4 = hex4
        self.delivered = delivered
        self.raw_calls = {} if raw_calls is None else raw_calls
        self.replays = [] if replays is None else replays
        self.raw_keys = {}

    def earlier_call(self, raw_id: str, key: tuple[str, str]) -> bool:
        """SPEC §2.4: was a call of this raw id and fingerprint delivered before? The
        fingerprints of calls not yet compared are taken now, once each."""
        calls = self.raw_calls.get(raw_id)
        if not calls:
            return False
        keys, taken = self.raw_keys.get(raw_id) or (set(), 0)
        for earlier in calls[taken:]:
            keys.add((earlier.name, canonical_arguments(earlier.arguments_text())))
        self.raw_keys[raw_id] = (keys, len(calls))
        return key in keys


# finish_reasons that mean "the model stopped" after it delivered calls; "" is what some
# servers send for "not finished", treated like null.
_STOPPED = ("stop", "tool_calls", "function_call", "eos", None, "")


def truthful_finish_reason(delivered: bool, reason: object) -> object:
    """SPEC §4: `tool_calls` in a choice that delivered calls, `stop` in one that claims
    `tool_calls` but delivered none; anything else (`length`, `content_filter`) is kept."""
    if delivered and reason in _STOPPED:
        return "tool_calls"
    if not delivered and reason == "tool_calls":
        return "stop"
    return reason


class ResponseIds:
    """Decides client ids for every call of one upstream response."""

    def __init__(
        self,
        facts: HistoryFacts,
        policy: str,
        guard: GuardState,
        hex_source: Callable[[], str] | None = None,
        mint_prefix: str = "call_",
    ):
        self.facts = facts
        self.mint_prefix = mint_prefix  # SPEC §8: `toolu_` on Anthropic Messages
        self.policy = policy
        self.guard = guard
        # The random half of minted ids: from the guard's injected entropy unless a test
        # fixes it.
        self._hex_source = hex_source or (lambda: guard.entropy(2).hex())
        self._choices: dict[int, ChoiceIds] = {}
        self._response_ids: set[str] = set()  # client ids given out in this response
        self._replays_seen: set[str] = set()
        self.calls_started = 0  # the calls a stream started (SPEC §6's bound)

    def count_call(self) -> None:
        """A stream started one more call: past the bound on calls per response, the round
        breaks (`CallBoundExceeded`, SPEC §6)."""
        self.calls_started += 1
        check_calls(self.calls_started)

    def choice(self, index: int) -> ChoiceIds:
        ids = self._choices.get(index)
        if ids is None:
            ids = self._choices[index] = ChoiceIds()
        return ids

    def needs_hold(self, ids: ChoiceIds, raw_id: str | None, name: str = "") -> bool:
        """SPEC §4: only a possible replay or in-response duplicate waits for its arguments,
        and (SPEC §10) a call to a tool of a repeat run that the route blocks."""
        if self.facts.repeat_block and self._may_repeat(name):
            return True
        if raw_id is None:
            return False
        return raw_id in ids.raw_calls or (self.guard.enabled and self.facts.may_be_replay(raw_id))

    def _may_repeat(self, name: str) -> bool:
        run = self.facts.repeat
        return run is not None and name in run.names

    def decide(
        self, ids: ChoiceIds, raw_id: str | None, call: CallLike, parsed: object = UNPARSED
    ) -> Decision:
        """Decide one call. When needs_hold() said so, its arguments must be complete.
        `parsed`: the value its arguments text holds, when the caller has parsed it."""
        if self.facts.repeat_block and self._may_repeat(call.name):
            repeat = self._repeat(ids, raw_id, call, parsed)
            if repeat is not None:
                return repeat
        if raw_id is not None and self.needs_hold(ids, raw_id):
            arguments = call.arguments_text()
            key = (call.name, canonical_arguments(arguments if parsed is UNPARSED else parsed))
            match = self.facts.replay_of(raw_id, key) if self.guard.enabled else None
            if match is not None:
                replay = Replay(raw_id, call.name, arguments, match.client_id, match.form)
                ids.replays.append(replay)
                self.guard.note_replay(replay, key, self._replays_seen)
                return Decision(_REPLAY, reason=match.form)
            if ids.earlier_call(raw_id, key):
                return Decision(_DUPLICATE, reason=REASON_DUPLICATE)
        index = ids.delivered
        ids.delivered += 1
        if raw_id is not None:
            ids.raw_calls.setdefault(raw_id, []).append(call)
        client_id, reason = self._client_id(ids, raw_id, index)
        self._response_ids.add(client_id)
        return Decision(_DELIVER, client_id, index, reason)

    def _repeat(
        self, ids: ChoiceIds, raw_id: str | None, call: CallLike, parsed: object
    ) -> Decision | None:
        """SPEC §10: the next identical call after a run the route blocks is answered by the
        proxy (a follow-up round, as for a replay); None when it is not one."""
        run = self.facts.repeat
        arguments = call.arguments_text()
        key = (call.name, canonical_arguments(arguments if parsed is UNPARSED else parsed))
        if run is None or key not in run.calls:
            return None
        repeat = Replay(raw_id or "", call.name, arguments, None, FORM_REPEAT, run.count)
        ids.replays.append(repeat)
        self.guard.note_replay(repeat, key, self._replays_seen)
        return Decision(_REPLAY, reason=FORM_REPEAT)

    def _client_id(self, ids: ChoiceIds, raw_id: str | None, index: int) -> tuple[str, str | None]:
        policy = self.policy
        if raw_id is not None and policy != "always":
            # SPEC §5: a raw id equal to an answered call's upstream id, with other arguments,
            # is a fresh call and gets a fresh client id (in the alnum9 dialect, or after a
            # follow-up, that upstream id is one the client has never seen).
            colliding = (
                raw_id in self.facts.client_ids
                or raw_id in self._response_ids
                or raw_id in self.facts.answered
            )
            if policy == "off":
                return raw_id, None
            if policy == "collisions" and not colliding:
                return raw_id, None
            reason = rejection_reason(raw_id) if policy == "auto" else None
            if reason is None and not colliding:
                return raw_id, None
            minted = mint_client_id(
                self.facts.turn, index, self._hex4(ids), raw_id, self.mint_prefix
            )
            return minted, reason or REASON_COLLISION
        reason = rejection_reason(raw_id) if raw_id is None else REASON_POLICY
        minted = mint_client_id(self.facts.turn, index, self._hex4(ids), raw_id, self.mint_prefix)
        return minted, reason

    def _hex4(self, ids: ChoiceIds) -> str:
        """The choice's random half, drawn once: a system call's worth of entropy per choice
        that mints, none for the many responses that keep every id or carry no call."""
        if not ids.hex4:
            ids.hex4 = self._hex_source()
        return ids.hex4
