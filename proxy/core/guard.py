"""Replay guard (SPEC §5): what counts as a replay, when the breaker trips, follow-up requests.

A *replay* is a call whose fingerprint equals that of an answered call in the history and whose
raw id is either that call's upstream id as sent in this request, or the id the upstream first
issued for it (the kept client id, or one whose digest a minted client id carries: counters
that restart every response bring the replay back as `functions.bash:0`, not the `:3` the
history said; HistoryFacts.replay_of decides). Only replays are answered
by the proxy; a reused id with new arguments is a fresh call, and the same arguments under a
new id are a legitimate re-run.

State here lives for one client request (across its follow-up rounds) and no longer.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from proxy.core.errors import RepeatLoopDetected, ReplayLoopDetected
from proxy.core.ids import fingerprint, kimi_id, mint_client_id
from proxy.core.ledger import FORM_UPSTREAM, Fingerprint, HistoryFacts
from proxy.core.repeat import REPEAT_ANSWER

REPLAY_MESSAGE = (
    'Duplicate tool call id "{raw_id}" was already handled: this call to "{name}" with the same '
    "arguments was answered earlier in the conversation and was not executed again. Use the "
    "earlier result. If you intended a new invocation, issue the call again with a fresh "
    "tool-call id or different arguments."
)


# Value objects: read-only by convention and hashed by value (unsafe_hash), not frozen: a
# frozen dataclass's __init__ sets each field through object.__setattr__, about twice the
# cost of building one, and these are built per call, per note or per event.
@dataclass(slots=True, unsafe_hash=True)
class Replay:
    raw_id: str
    name: str
    arguments: str
    # The id the client knows the replayed call by (None: the history gave it none), and which
    # of SPEC §5's two forms of the raw id matched: what is known about it, not what it is.
    client_id: str | None = field(default=None, compare=False)
    form: str = field(default=FORM_UPSTREAM, compare=False)
    # SPEC §10: not a replay but the next of a run of this many identical rounds (0: a replay)
    repeat: int = field(default=0, compare=False)


@dataclass(slots=True, init=False)
class GuardState:
    """The breaker's memory for one client request."""

    enabled: bool
    max_followups: int
    # Where the random parts of minted ids come from: the only source of randomness in the
    # core, handed in by the shell (the exchange's `entropy`); tests pass a fixed one.
    entropy: Callable[[int], bytes] = field(repr=False)
    followups_done: int
    # The answered calls (by fingerprint) the proxy answered synthetically: a later replay of
    # one of them is a loop whichever id it comes back under (its raw id, the fresh upstream id
    # of the follow-up's copy, another restarted-counter id). The raw id alone says nothing:
    # under restarted counters every response's first call has the same one.
    synthetic_calls: set[Fingerprint]
    first_replay: Replay | None

    # Written out (init=False), the defaults here only: mypyc compiles this one; the
    # one dataclasses generates would stay Python.
    def __init__(
        self,
        enabled: bool = True,
        max_followups: int = 2,
        entropy: Callable[[int], bytes] = os.urandom,
        followups_done: int = 0,
        synthetic_calls: set[Fingerprint] | None = None,
        first_replay: Replay | None = None,
    ) -> None:
        self.enabled = enabled
        self.max_followups = max_followups
        self.entropy = entropy
        self.followups_done = followups_done
        self.synthetic_calls = set() if synthetic_calls is None else synthetic_calls
        self.first_replay = first_replay

    def note_replay(self, replay: Replay, key: Fingerprint, seen_in_response: set[str]) -> None:
        """Record a replay, raising ReplayLoopDetected when it is one too many (SPEC §5)."""
        if self.first_replay is None:
            self.first_replay = replay
        if key in self.synthetic_calls:
            what = "call" if replay.repeat else "replay"
            self.trip(f"the proxy already answered this {what} once")
        if replay.raw_id in seen_in_response:
            self.trip("the same replay appeared twice in one response")
        seen_in_response.add(replay.raw_id)

    def check_followup_allowed(self) -> None:
        if self.followups_done >= self.max_followups:
            self.trip(f"more than {self.max_followups} follow-up rounds")

    def trip(self, reason: str) -> None:
        first = self.first_replay
        if first is None:
            raise ReplayLoopDetected("?", "?", reason)
        if first.repeat:
            raise RepeatLoopDetected(first.name, first.repeat, reason)
        raise ReplayLoopDetected(first.name, first.raw_id, reason, client_id=first.client_id)


_ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def _fresh_upstream_id(
    facts: HistoryFacts, replay: Replay, position: int, used: set[str], guard: GuardState
) -> str:
    """A new id in the route's dialect: strict upstreams reject an id repeated in one request."""
    if facts.dialect == "kimi":
        return kimi_id(replay.name, facts.tool_call_count + position)
    while True:
        if facts.dialect == "alnum9":
            # 9 of 62 symbols from 9 random bytes: the modulo bias is irrelevant for an id
            candidate = "".join(_ALNUM[b % 62] for b in guard.entropy(9))
        else:
            hex4 = guard.entropy(2).hex()
            candidate = mint_client_id(facts.turn, position, hex4, replay.raw_id)
        if candidate not in used and candidate not in facts.answered:
            return candidate


@dataclass(frozen=True, slots=True)
class SyntheticAnswer:
    """One replay, answered by the proxy in the follow-up request (SPEC §5)."""

    replay: Replay
    upstream_id: str  # a fresh id in the route's dialect: the call's and its answer's
    text: str  # the answer the model reads


def plan_followup(
    facts: HistoryFacts, guard: GuardState, replays: list[Replay]
) -> tuple[list[SyntheticAnswer], HistoryFacts]:
    """What every surface's follow-up adds, before its own grammar: one answer per replay
    under a fresh upstream id, and the facts that describe the longer history. Raises
    ReplayLoopDetected when one more round is one too many."""
    guard.check_followup_allowed()
    guard.followups_done += 1
    used: set[str] = set()
    answers = []
    answered = dict(facts.answered)
    answered_client_ids = dict(facts.answered_client_ids)
    for position, replay in enumerate(replays):
        fresh = _fresh_upstream_id(facts, replay, position, used, guard)
        used.add(fresh)
        key = fingerprint(replay.name, replay.arguments)
        guard.synthetic_calls.add(key)
        answered[fresh] = key
        if replay.client_id is not None:
            answered_client_ids[fresh] = replay.client_id
        if replay.repeat:
            text = REPEAT_ANSWER.format(name=replay.name, count=replay.repeat)
        else:
            text = REPLAY_MESSAGE.format(raw_id=replay.raw_id, name=replay.name)
        answers.append(SyntheticAnswer(replay, fresh, text))
    new_facts = replace(
        facts,
        answered=answered,
        answered_client_ids=answered_client_ids,
        tool_call_count=facts.tool_call_count + len(replays),
    )
    return answers, new_facts
