"""Requests the upstream accepts (SPEC §11): the rules every surface's history walk shares.

A provider refuses a history whose calls are not each answered right after their turn (the
user pressed Esc mid-tool, a result's call was compacted away), whose arguments do not parse
(cut short in an earlier turn), or whose tool has no schema. Since a history only grows, every
later request of the session would fail the same way. Each surface's walk (`proxy.chat.history`,
`proxy.anthropic.request`, `proxy.responses.request`) tells this module what its history holds
and writes the answer in its own shape; the decisions are made here, once:

- *Pairing* (`plan_pairing`): every call of a turn is answered right after the turn, before any
  other message. The results already there keep their order; a call answered further down has
  its result moved up (`result_moved`), the messages between keeping their order after it; a
  call with no result gets a synthetic one (`missing_result`, `MISSING_RESULT`). A result whose
  call is not in the history (`orphan_result`) or that answers a call already answered
  (`duplicate_result`) becomes text where it stood (after the results of its turn), marked.
  Which call a result answers is the ledger's decision (`proxy.core.ledger`), so ids and
  pairing never disagree; the ledger reads the client's history, so a synthetic result is
  never an answered call for the replay guard (SPEC §5) or the repeat guard (SPEC §10).
- *Arguments* (`parseable_arguments`): arguments that are not a JSON object are sent as the
  object they began, closed after its last complete member, else `{}` (`history_arguments`).
- *Schemas* (`object_schema`): a tool with no parameters, or an empty schema, gets
  `{"type": "object", "properties": {}}` (`tool_schema`).

Everything is a pure function of the request: the same history gives the same bytes, and
appending to it never changes how earlier messages were repaired (a late result for a call that
had none takes its synthetic result's place: the one exception).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from proxy.core.notes import DeltaRepaired, Note

# The text of a synthetic result: the call is in the history, its result is not.
MISSING_RESULT = "No result was recorded for this tool call: it may not have run."
# The mark on a result turned into text.
ORPHAN_MARK = "[The result of a tool call that is not in this conversation]"
DUPLICATE_MARK = "[Another result for the {name} call already answered above]"

# What a unit of a flat history is (Chat messages, Responses items).
TURN = 0  # a model turn: its calls must be answered right after it
RESULT = 1  # a call's result
OTHER = 2  # anything else (user, system, developer input)

# What happens to a result.
FIRST = 0  # the answer of its call
DUPLICATE = 1  # a call already answered: kept as text
ORPHAN = 2  # no call in the history: kept as text

# The steps of a flat plan.
KEEP = 0  # the unit, as it is (a result there is its call's answer)
SYNTHETIC = 1  # a synthetic result for the call (`ordinal`)
MARK = 2  # the result unit as marked text (`status` says which mark)


@dataclass(slots=True)
class Unit:
    """One message or item of a flat history, as the pairing sees it."""

    kind: int
    calls: list[int] = field(default_factory=list)  # a turn's calls (ledger ordinals)
    ordinal: int = -1  # a result: the call it answers (-1: none)
    status: int = ORPHAN  # a result: FIRST, DUPLICATE or ORPHAN


@dataclass(slots=True)
class Step:
    op: int  # KEEP, SYNTHETIC or MARK
    unit: int = -1  # KEEP and MARK: the unit's position
    ordinal: int = -1  # the call answered (SYNTHETIC, a moved KEEP), a duplicate's (MARK)
    moved: bool = False  # KEEP: a result moved up to follow its turn
    status: int = FIRST  # MARK: DUPLICATE or ORPHAN


class RequestRepairs:
    """The repairs of one request, as notes (SPEC §11: counted, logged, explained)."""

    def __init__(self) -> None:
        self.notes: list[Note] = []

    def missing_result(self, name: str) -> None:
        self._add("missing_result", name)

    def result_moved(self, name: str) -> None:
        self._add("result_moved", name)

    def orphan_result(self) -> None:
        self._add("orphan_result", "")

    def duplicate_result(self, name: str) -> None:
        self._add("duplicate_result", name)

    def result_order(self) -> None:
        self._add("result_order", "")

    def history_arguments(self, name: str) -> None:
        self._add("history_arguments", name)

    def tool_schema(self, name: str) -> None:
        self._add("tool_schema", name)

    # Provider families (SPEC §11, `proxy.core.families`).

    def reasoning_passback(self, name: str) -> None:
        self._add("reasoning_passback", name)

    def role(self, role: str) -> None:
        self._add("role", role)

    def content(self, role: str) -> None:
        self._add("content", role)

    def client_only_block(self, kind: str) -> None:
        self._add("client_only_block", kind)

    def kinds(self) -> list[str]:
        return [note.kind for note in self.notes if isinstance(note, DeltaRepaired)]

    def _add(self, kind: str, detail: str) -> None:
        self.notes.append(DeltaRepaired(kind=kind, detail=detail))


class ResultPairs:
    """Which call each result answers, told in history order: the first result of a call is
    its answer, a later one a duplicate, one the ledger pairs with no call an orphan."""

    def __init__(self) -> None:
        self.answer_of: dict[int, int] = {}  # call ordinal -> the unit (or place) answering it

    def status(self, ordinal: int, where: int) -> int:
        if ordinal < 0:
            return ORPHAN
        if ordinal in self.answer_of:
            return DUPLICATE
        self.answer_of[ordinal] = where
        return FIRST


def plan_pairing(units: Sequence[Unit], answer_of: dict[int, int]) -> list[Step] | None:
    """The flat history in the order the upstream accepts, or None when it already is."""
    steps: list[Step] = []
    placed: set[int] = set()  # result units already written (right after their turn)
    changed = False
    for at, unit in enumerate(units):
        if unit.kind == RESULT:
            if at in placed:
                continue
            changed = True  # not its call's answer: written as marked text, where it stood
            steps.append(Step(MARK, unit=at, ordinal=unit.ordinal, status=unit.status))
            continue
        steps.append(Step(KEEP, unit=at))
        if unit.kind == TURN and unit.calls:
            changed = _answer_turn(units, at, answer_of, steps, placed) or changed
    return steps if changed else None


def _answer_turn(
    units: Sequence[Unit], at: int, answer_of: dict[int, int], steps: list[Step], placed: set[int]
) -> bool:
    """The results of the turn at `at`, right after it: those already there in their order,
    then, in the order of its calls, each one found further down, or a synthetic one. Whether
    anything differs from the history as it was."""
    calls = set(unit_calls := units[at].calls)
    changed = False
    after = at + 1
    while after < len(units) and units[after].kind == RESULT:
        result = units[after]
        if result.status == FIRST and result.ordinal in calls:
            steps.append(Step(KEEP, unit=after))
            placed.add(after)
        else:
            changed = True  # another turn's, an orphan or a duplicate: it moves or is marked
        after += 1
    for ordinal in unit_calls:
        where = answer_of.get(ordinal)
        if where is not None and where in placed:
            continue
        changed = True
        if where is None:
            steps.append(Step(SYNTHETIC, ordinal=ordinal))
        else:
            steps.append(Step(KEEP, unit=where, ordinal=ordinal, moved=True))
            placed.add(where)
    return changed


def marked_text(status: int, name: str) -> str:
    """The mark a result turned into text starts with."""
    if status == DUPLICATE:
        return DUPLICATE_MARK.format(name=name or "tool")
    return ORPHAN_MARK


def text_with_mark(mark: str, content: Any) -> str | None:
    """A result's content as one text after its mark, or None when it is a list of parts
    (the surface then puts the mark in a text part of its own shape before them)."""
    if content is None or content == "":
        return mark
    if isinstance(content, str):
        return f"{mark}\n{content}"
    return None


# -- arguments ---------------------------------------------------------------------------------


def parseable_arguments(arguments: object) -> str | None:
    """SPEC §11: the arguments to send for a call of the history whose arguments are not a
    JSON object (a string that does not parse as one, or no string at all), or None when they
    are fine. A cut object is closed after its last complete member (a member cut short is
    left out: it was never written whole); text after a complete object (a repeated final
    flush, SPEC §4) is left out; anything else becomes `{}`."""
    if not isinstance(arguments, str):
        return "{}"
    if len(arguments) <= _CACHE_CHARS:
        if _is_object_text(arguments):  # a history's calls come back in every request
            return None
    elif _parses_as_object(arguments):
        return None
    closed = close_cut_object(arguments)
    return closed if closed is not None else "{}"


_CACHE_CHARS = 2048


@functools.lru_cache(maxsize=1024)
def _is_object_text(text: str) -> bool:
    return _parses_as_object(text)


def _parses_as_object(text: str) -> bool:
    try:
        return isinstance(orjson.loads(text), dict)
    except orjson.JSONDecodeError:
        return False


def close_cut_object(text: str) -> str | None:
    """The object `text` begins, closed after its last complete member (or, when it is
    complete and more follows, without what follows); None when `text` begins no object or
    what it begins cannot be closed into one. Linear in the text."""
    start = len(text) - len(text.lstrip(" \t\n\r"))
    if not text.startswith("{", start):
        return None
    scan = _CutScan(text, start)
    candidate = scan.run()
    return candidate if _parses_as_object(candidate) else None


_OBJECT_KEY = 0  # in an object: a key (or the end) comes next
_OBJECT_COLON = 1
_OBJECT_VALUE = 2
_AFTER_VALUE = 3  # a comma or the end comes next
_ARRAY_VALUE = 4  # in an array: a value (or the end) comes next


class _CutScan:
    """One pass over a JSON text that may be cut: where it could last be closed, and how."""

    def __init__(self, text: str, start: int) -> None:
        self.text = text
        self.start = start
        self.stack: list[str] = []  # the open brackets
        self.expect: list[int] = []  # per open bracket: what comes next in it
        self.safe = start  # the text up to here, closed with `}`, is a valid object

    def run(self) -> str:
        text = self.text
        pos = self.start
        end = len(text)
        while pos < end:
            char = text[pos]
            if char == '"':
                close = _string_end(text, pos + 1)
                if close < 0:
                    break  # cut inside a string
                pos = close + 1
                self._string_done(pos)
                continue
            if char in "{[":
                self._open(char, pos + 1)
            elif char in "}]":
                if not self._close(pos + 1):
                    break
                if not self.stack:
                    return text[self.start : pos + 1]  # a complete object; what follows goes
            elif char == ":":
                self._expect_value()
            elif char == ",":
                self._comma()
            elif char not in " \t\n\r":
                pos = self._scalar(pos)
                continue
            pos += 1
        return text[self.start : self.safe] + "}"

    def _mark_safe(self, pos: int) -> None:
        """Only in the object itself: a member is kept whole or not at all."""
        if len(self.stack) == 1:
            self.safe = pos

    def _open(self, bracket: str, pos: int) -> None:
        self.stack.append(bracket)
        self.expect.append(_OBJECT_KEY if bracket == "{" else _ARRAY_VALUE)
        self._mark_safe(pos)

    def _close(self, pos: int) -> bool:
        if not self.stack:
            return False
        self.stack.pop()
        self.expect.pop()
        self._value_done(pos)
        return True

    def _string_done(self, pos: int) -> None:
        if self.expect and self.expect[-1] == _OBJECT_KEY:
            self.expect[-1] = _OBJECT_COLON
        else:
            self._value_done(pos)

    def _value_done(self, pos: int) -> None:
        if self.expect:
            self.expect[-1] = _AFTER_VALUE
            self._mark_safe(pos)

    def _expect_value(self) -> None:
        if self.expect:
            self.expect[-1] = _OBJECT_VALUE

    def _comma(self) -> None:
        if self.expect:
            self.expect[-1] = _OBJECT_KEY if self.stack[-1] == "{" else _ARRAY_VALUE

    def _scalar(self, pos: int) -> int:
        """A number or literal: complete only where a delimiter follows it (a cut number
        may have gone on)."""
        end = pos
        text = self.text
        while end < len(text) and text[end] not in ' \t\n\r,]}:"{[':
            end += 1
        if end < len(text):
            self._value_done(end)
        return end


def _string_end(text: str, pos: int) -> int:
    """Where the string that starts before `pos` ends (its closing quote), or -1."""
    while True:
        quote = text.find('"', pos)
        if quote < 0:
            return -1
        slashes = 0
        back = quote - 1
        while back >= pos and text[back] == "\\":
            slashes += 1
            back -= 1
        if slashes % 2 == 0:
            return quote
        pos = quote + 1


# -- schemas -----------------------------------------------------------------------------------


def object_schema(schema: object) -> dict[str, Any] | None:
    """SPEC §11: the schema to send for a tool's parameters when it has none (absent or null)
    or an empty one (`{}`), or None when it is to be sent as it is."""
    if schema is None or schema == {}:
        return {"type": "object", "properties": {}}
    return None


def with_tools(
    body: dict[str, Any],
    repairs: RequestRepairs,
    replace: Callable[[dict[str, Any]], dict[str, Any] | None],
    named_in: str | None = None,
) -> dict[str, Any]:
    """`body` with each tool declaration that `replace` gives another for replaced, each
    noted as a `tool_schema` repair under the tool's name (read from its `named_in` object,
    Chat's `function`, or from the tool itself); `body` itself, not a copy, when none
    changes, so a request that needs nothing still goes byte for byte."""
    tools = body.get("tools")
    if not isinstance(tools, list):
        return body
    new_tools: list[Any] | None = None
    for at, tool in enumerate(tools):
        sent = replace(tool) if isinstance(tool, dict) else None
        if sent is None:
            continue
        repairs.tool_schema(str((tool[named_in] if named_in else tool).get("name")))
        if new_tools is None:
            new_tools = list(tools)
        new_tools[at] = sent
    return body if new_tools is None else {**body, "tools": new_tools}


__all__ = [
    "DUPLICATE",
    "FIRST",
    "KEEP",
    "MARK",
    "MISSING_RESULT",
    "ORPHAN",
    "OTHER",
    "RESULT",
    "SYNTHETIC",
    "TURN",
    "RequestRepairs",
    "ResultPairs",
    "Step",
    "Unit",
    "close_cut_object",
    "marked_text",
    "object_schema",
    "parseable_arguments",
    "plan_pairing",
    "text_with_mark",
    "with_tools",
]
