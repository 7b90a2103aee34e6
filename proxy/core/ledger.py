"""The history walk every API surface shares (SPEC §3, §5), and what it learns.

A surface's request translation walks its own history shape (Chat Completions `messages`,
Anthropic content blocks, Responses `input` items) and tells a `HistoryLedger`, in order, where
model turns begin, which calls they made and which calls got results. The ledger decides what
no grammar changes: the upstream id of every call in the route's dialect (deterministic, so
appending to a history never changes earlier ids and any replica can serve any turn), which
call a result answers (the first still-unanswered call of its id in the nearest earlier turn
that has one), and the `HistoryFacts` the response side needs (the turn, the ids the client
holds, and every answered call by both forms of SPEC §5).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from proxy.core.ids import (
    alnum9_id,
    derived_unique_id,
    fingerprint,
    kimi_id,
    minted_digest,
    raw_id_digest,
)
from proxy.core.repeat import (
    NOTE_AT,
    UNANSWERED,
    RepeatRun,
    blocks,
    guarded_run,
    repeat_run,
)

Fingerprint = tuple[str, str]

# SPEC §5: which of the two ids a replay came back under.
FORM_UPSTREAM = "upstream id"  # the id this request sent upstream for the answered call
FORM_ISSUED = "issued id"  # the id the upstream first issued (kept, or a minted id's digest)
FORM_RESTARTED = "restarted id"  # a renumbering client's call, by its place in its turn

# A Kimi-style counter id, `functions.<name>:<n>` or `<name>:<n>`: what a counter that restarts
# every response issues (n: the call's place among the response's calls), and what a client
# that renumbers its history writes (Copilot CLI on a Kimi model: n counted over the
# conversation). The proxy never hands such an id to a client (SPEC §2: never native), so a
# client id of this shape in a history was written by the client itself.
_COUNTER_ID = re.compile(r"(?:functions\.)?([^\s:]+):([0-9]{1,4})")


def counter_id(raw_id: str) -> tuple[str, int] | None:
    """(name, n) of a Kimi-style counter id; None for any other id."""
    match = _COUNTER_ID.fullmatch(raw_id) if ":" in raw_id else None
    return (match.group(1), int(match.group(2))) if match else None


# Value objects: read-only by convention and hashed by value (unsafe_hash), not frozen: a
# frozen dataclass's __init__ sets each field through object.__setattr__, about twice the
# cost of building one, and these are built per call, per note or per event.
@dataclass(slots=True, unsafe_hash=True)
class ReplayMatch:
    """The answered call a replay repeats: how it was recognized and the id the client knows."""

    form: str
    client_id: str | None


@dataclass(slots=True, init=False)
class HistoryFacts:
    """What the response side must know about the request (no client data beyond ids).

    Read-only by convention (every reader treats it so; a follow-up gets a new one from
    `dataclasses.replace`): not frozen, since a frozen dataclass's __init__ sets each field
    through object.__setattr__, 12K of the 20K instructions building one cost per request."""

    turn: int
    client_ids: frozenset[str]
    # upstream id -> fingerprint of the first answered call sent under that id
    answered: Mapping[str, Fingerprint]
    tool_call_count: int
    dialect: str
    choices: int
    offered_tools: frozenset[str]
    # upstream id of an answered call -> the client id the history holds for it
    answered_client_ids: Mapping[str, str]
    # SPEC §5's second form, for answered calls: a client id that is not minted (kept as the
    # upstream issued it) -> {fingerprint: client id}; a minted one's raw-id digest -> same.
    issued_ids: Mapping[str, Mapping[Fingerprint, str]]
    issued_digests: Mapping[str, Mapping[Fingerprint, str]]
    # The second form where the client renumbered its ids (a client id of `counter_id`'s shape
    # naming the call's own tool): the id the upstream first issued is unknown, but a counter
    # that restarts every response issued it as the call's place among its turn's calls.
    # That place -> {fingerprint: client id} (docs/contract.md §5).
    restarted: Mapping[int, Mapping[Fingerprint, str]]
    # SPEC §10: the run of identical rounds at the history's end that the route acts on
    # (None: shorter than a note's, exempt, or the guard off), and whether a further
    # identical call is answered by the proxy instead of forwarded.
    repeat: RepeatRun | None
    repeat_block: bool

    # Written out (init=False), the defaults here only: mypyc compiles this one; the
    # one dataclasses generates would stay Python.
    def __init__(
        self,
        turn: int = 1,
        client_ids: frozenset[str] = frozenset(),
        answered: Mapping[str, Fingerprint] | None = None,
        tool_call_count: int = 0,
        dialect: str = "passthrough",
        choices: int = 1,
        offered_tools: frozenset[str] = frozenset(),
        answered_client_ids: Mapping[str, str] | None = None,
        issued_ids: Mapping[str, Mapping[Fingerprint, str]] | None = None,
        issued_digests: Mapping[str, Mapping[Fingerprint, str]] | None = None,
        restarted: Mapping[int, Mapping[Fingerprint, str]] | None = None,
        repeat: RepeatRun | None = None,
        repeat_block: bool = False,
    ) -> None:
        self.turn = turn
        self.client_ids = client_ids
        self.answered = {} if answered is None else answered
        self.tool_call_count = tool_call_count
        self.dialect = dialect
        self.choices = choices
        self.offered_tools = offered_tools
        self.answered_client_ids = {} if answered_client_ids is None else answered_client_ids
        self.issued_ids = {} if issued_ids is None else issued_ids
        self.issued_digests = {} if issued_digests is None else issued_digests
        self.restarted = {} if restarted is None else restarted
        self.repeat = repeat
        self.repeat_block = repeat_block

    def may_be_replay(self, raw_id: str) -> bool:
        """Could a call under this raw id repeat an answered call (its arguments will tell)?"""
        return (
            raw_id in self.answered
            or raw_id in self.issued_ids
            or (bool(self.issued_digests) and raw_id_digest(raw_id) in self.issued_digests)
            or (bool(self.restarted) and self._restarted(raw_id) is not None)
        )

    def _restarted(self, raw_id: str) -> tuple[str, Mapping[Fingerprint, str]] | None:
        """The tool a counter id names and the renumbered answered calls at its place."""
        counter = counter_id(raw_id)
        if counter is None or counter[1] not in self.restarted:
            return None
        return counter[0], self.restarted[counter[1]]

    def replay_of(self, raw_id: str, key: Fingerprint) -> ReplayMatch | None:
        """SPEC §5: the answered call this one replays, by either form of its raw id."""
        if self.answered.get(raw_id) == key:
            return ReplayMatch(FORM_UPSTREAM, self.answered_client_ids.get(raw_id))
        for issued in (
            self.issued_ids.get(raw_id),
            self.issued_digests.get(raw_id_digest(raw_id)) if self.issued_digests else None,
        ):
            if issued is not None and key in issued:
                return ReplayMatch(FORM_ISSUED, issued[key])
        if self.restarted:
            found = self._restarted(raw_id)
            if found is not None and found[0] == key[0] and key in found[1]:
                return ReplayMatch(FORM_RESTARTED, found[1][key])
        return None


def resolve_dialect(setting: str, model: object) -> str:
    if setting != "auto":
        return setting
    name = model.lower() if isinstance(model, str) else ""
    return "kimi" if ("kimi" in name or "moonshot" in name) else "passthrough"


class _UpstreamIds:
    """Mints upstream ids for the calls of one history, in order, in one dialect."""

    def __init__(self, dialect: str):
        self.dialect = dialect
        self.used: set[str] = set()
        self.seen_client: set[str] = set()

    def mint(self, client_id: str | None, name: str, ordinal: int) -> str:
        if self.dialect == "kimi":
            upstream = kimi_id(name, ordinal)
        elif self.dialect == "alnum9":
            base = client_id if client_id is not None else f"\x00{ordinal}"
            salt = 0 if client_id not in self.seen_client else ordinal + 1
            upstream = alnum9_id(base, salt)
            while upstream in self.used:
                salt += 1_000_003
                upstream = alnum9_id(base, salt)
        else:
            if client_id is not None and client_id not in self.seen_client:
                upstream = client_id
            else:
                salt = 0
                upstream = derived_unique_id(client_id or "", ordinal)
                while upstream in self.used:
                    salt += 1
                    upstream = derived_unique_id(client_id or "", ordinal, salt)
        if client_id is not None:
            self.seen_client.add(client_id)
        self.used.add(upstream)
        return upstream


@dataclass(slots=True, init=False)
class LedgerCall:
    """One call of the history: the id the client holds, and the id the upstream gets."""

    turn: int  # 1-based: the model turn (assistant message, run of model items) that made it
    client_id: str | None
    upstream_id: str
    name: str
    arguments: Any  # a JSON string, or an object (Anthropic `input`)
    answered: bool
    result: Any  # its result's content once told (SPEC §10 compares them), else UNANSWERED
    ordinal: int  # 0-based: its place among the history's calls (SPEC §11 pairs by it)
    place: int  # 0-based: its place among its turn's calls (a restarted counter's number)

    # Written out (init=False), the defaults here only: mypyc compiles this one; the
    # one dataclasses generates would stay Python.
    def __init__(
        self,
        turn: int,
        client_id: str | None,
        upstream_id: str,
        name: str,
        arguments: Any,
        answered: bool = False,
        ordinal: int = -1,
        place: int = -1,
    ) -> None:
        self.turn = turn
        self.client_id = client_id
        self.upstream_id = upstream_id
        self.name = name
        self.arguments = arguments
        self.answered = answered
        self.result = UNANSWERED
        self.ordinal = ordinal
        self.place = place


class HistoryLedger:
    """One history's calls and results, told in order by a surface's walk: the history the
    client sent. A result the proxy adds (SPEC §11's synthetic "no result was recorded") is
    never told, so its call is no answered call for SPEC §5 or §10."""

    def __init__(self, dialect: str):
        self.dialect = dialect
        self.calls: list[LedgerCall] = []
        self.turns = 0
        self._minter = _UpstreamIds(dialect)
        self._by_turn: list[list[LedgerCall]] = []  # index: turn - 1
        self._turns_before_input = 0  # model turns before the latest user input (SPEC §10)

    def begin_turn(self) -> None:
        """A model turn begins (an assistant message; a run of model-made items)."""
        self.turns += 1
        self._by_turn.append([])

    def call(self, client_id: str | None, name: str, arguments: Any) -> LedgerCall:
        """A call of the current turn (a history that starts with one opens a turn)."""
        if not self._by_turn:
            self.begin_turn()
        ordinal = len(self.calls)
        upstream_id = self._minter.mint(client_id, name, ordinal)
        place = len(self._by_turn[-1])
        record = LedgerCall(
            self.turns, client_id, upstream_id, name, arguments, ordinal=ordinal, place=place
        )
        self.calls.append(record)
        self._by_turn[-1].append(record)
        return record

    def user_input(self) -> None:
        """The user spoke (a user message with more than tool results): a repeat run ends."""
        self._turns_before_input = self.turns

    def result(self, tool_call_id: object, content: Any = UNANSWERED) -> LedgerCall | None:
        """The call a result answers: the first unanswered call of its id in the nearest
        earlier turn that has one; when every call of that id is answered (a second answer),
        the latest such call. None when no call has that id. `content`: the result's, for
        the repeat guard (a surface that does not tell it gets no repeat run)."""
        record = self._answered_call(tool_call_id)
        if record is not None and content is not UNANSWERED:
            record.result = content
        return record

    def _answered_call(self, tool_call_id: object) -> LedgerCall | None:
        if isinstance(tool_call_id, int) and not isinstance(tool_call_id, bool):
            tool_call_id = str(tool_call_id)
        if not isinstance(tool_call_id, str):
            return None
        fallback: LedgerCall | None = None
        for turn in reversed(self._by_turn):
            for record in turn:
                if record.client_id == tool_call_id:
                    if not record.answered:
                        record.answered = True
                        return record
                    fallback = fallback or record
        return fallback

    def repeat_run(self) -> RepeatRun | None:
        """SPEC §10: the run of identical rounds since the latest user input, if a note's."""
        if self.turns - self._turns_before_input < NOTE_AT:
            return None  # most histories: too few turns since the user spoke
        return repeat_run(self._by_turn[self._turns_before_input :])

    @staticmethod
    def _renumbered(
        record: LedgerCall, key: Fingerprint, restarted: dict[int, dict[Fingerprint, str]]
    ) -> None:
        """A call whose client id the client wrote in the Kimi form (its own tool's name), as a
        restarted counter issued it: its place among its turn's calls (docs/contract.md §5)."""
        counter = counter_id(record.client_id or "")
        if counter is None or counter[0] != record.name:
            return
        restarted.setdefault(record.place, {}).setdefault(key, record.client_id or "")

    def facts(
        self,
        *,
        choices: int = 1,
        offered_tools: frozenset[str] = frozenset(),
        repeat_guard: str = "off",
        repeat_exempt: tuple[str, ...] = (),
    ) -> HistoryFacts:
        if not self.calls:  # most requests that are not an agent's: only the turn to count
            return HistoryFacts(
                turn=1 + self.turns,
                dialect=self.dialect,
                choices=choices,
                offered_tools=offered_tools,
            )
        run = None
        if repeat_guard != "off":
            run = guarded_run(self.repeat_run(), repeat_guard, repeat_exempt)
        answered: dict[str, Fingerprint] = {}
        answered_client_ids: dict[str, str] = {}
        issued_ids: dict[str, dict[Fingerprint, str]] = {}
        issued_digests: dict[str, dict[Fingerprint, str]] = {}
        restarted: dict[int, dict[Fingerprint, str]] = {}
        for record in self.calls:
            if not record.answered:
                continue
            key = fingerprint(record.name, record.arguments)
            if record.upstream_id not in answered:
                answered[record.upstream_id] = key
                if record.client_id is not None:
                    answered_client_ids[record.upstream_id] = record.client_id
            if record.client_id is not None:
                digest = minted_digest(record.client_id)
                issued = issued_ids if digest is None else issued_digests
                issued.setdefault(digest or record.client_id, {}).setdefault(key, record.client_id)
                if ":" in record.client_id:
                    self._renumbered(record, key, restarted)
        return HistoryFacts(
            turn=1 + self.turns,
            client_ids=frozenset(c.client_id for c in self.calls if c.client_id is not None),
            answered=answered,
            tool_call_count=len(self.calls),
            dialect=self.dialect,
            choices=choices,
            offered_tools=offered_tools,
            answered_client_ids=answered_client_ids,
            issued_ids=issued_ids,
            issued_digests=issued_digests,
            restarted=restarted,
            repeat=run,
            repeat_block=blocks(run, repeat_guard),
        )


__all__ = [
    "FORM_ISSUED",
    "FORM_RESTARTED",
    "FORM_UPSTREAM",
    "Fingerprint",
    "HistoryFacts",
    "HistoryLedger",
    "LedgerCall",
    "ReplayMatch",
    "counter_id",
    "resolve_dialect",
]
