"""Request direction (SPEC §3 as §8 translates it): the ids of an Anthropic history.

Every `tool_use` block of an assistant message is a call; every `tool_result` block of a later
user message is a result. The decisions (turns, pairing, repair of colliding ids, the route's
dialect, the facts the response side needs) are the shared `HistoryLedger`'s; this module only
says where Anthropic keeps the ids and writes the upstream ids back into the blocks.
Everything else keeps its form: `input` stays an object, and a history that needs no
translation is forwarded byte for byte.

What Anthropic (and servers that follow its rules) would refuse is repaired (SPEC §11, the
rules in `proxy.core.request_repair`, unless the route's `request_repair` is off): every
`tool_use` answered at the start of the next user message (a result moved up from further
down, or a synthetic `is_error` one, in a user message created where there is none), a
result with no call, or a second one, as a marked `text` block where it stood, `tool_result`
blocks before any other block of their message, an `input` that is no object, empty schemas.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from proxy.anthropic.families import family_messages, family_tools
from proxy.core.families import NO_FAMILY_RULES, FamilyRules
from proxy.core.jsontext import dumps
from proxy.core.ledger import HistoryFacts, HistoryLedger, LedgerCall, resolve_dialect
from proxy.core.notes import Note
from proxy.core.repeat import note_text, with_note
from proxy.core.request_repair import (
    DUPLICATE,
    FIRST,
    MISSING_RESULT,
    RequestRepairs,
    ResultPairs,
    marked_text,
    object_schema,
    parseable_arguments,
    text_with_mark,
    with_tools,
)

# (message position, block position) of a tool_use or tool_result block
Place = tuple[int, int]


@dataclass(slots=True)
class TranslatedMessages:
    body: dict[str, Any]
    facts: HistoryFacts
    changed: bool
    calls: list[LedgerCall]  # every tool_use of the history, for `sanitize --explain`
    repairs: list[Note] = field(default_factory=list)  # SPEC §11: one note per repair

    def to_bytes(self, original: bytes) -> bytes:
        # jsontext.dumps: a valid history nested past orjson's 254 levels must not raise
        return dumps(self.body) if self.changed else original


def _blocks(message: object) -> list[Any]:
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, list) else []


def _client_id(value: object) -> str | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value if isinstance(value, str) else None


def offered_tools(body: dict[str, Any]) -> frozenset[str]:
    tools = body.get("tools")
    return frozenset(
        tool["name"]
        for tool in (tools if isinstance(tools, list) else [])
        if isinstance(tool, dict) and isinstance(tool.get("name"), str)
    )


class _Rewriter:
    """Copies only the messages, content lists and blocks that change."""

    def __init__(self, messages: list[Any]):
        self.original = messages
        self.messages = messages
        self.copied: set[int] = set()

    def set(self, place: Place, key: str, value: Any) -> None:
        m, b = place
        block = self.messages[m]["content"][b]
        if block.get(key) == value:
            return
        if self.messages is self.original:
            self.messages = list(self.original)
        if m not in self.copied:
            self.copied.add(m)
            message = self.messages[m]
            self.messages[m] = {**message, "content": list(message["content"])}
        self.messages[m]["content"][b] = {**block, key: value}


class _Walk:
    """What the walk learns for SPEC §11: each turn's calls, each result's fate."""

    def __init__(self, ledger: HistoryLedger, out: _Rewriter, repairs: RequestRepairs | None):
        self.ledger = ledger
        self.out = out
        self.repairs = repairs
        self.pairs = ResultPairs()
        self.places: list[Place] = []  # the place of each pairs.answer_of value (by index)
        self.turns: dict[int, list[int]] = {}  # assistant message -> its calls' ordinals
        self.results: dict[Place, tuple[int, int]] = {}  # a result's (status, call ordinal)
        self.unordered = False  # a user message with a block before a tool_result

    def needs_pairing(self) -> bool:
        """Is anything out of place (SPEC §11)? Most histories: no, and nothing is rebuilt."""
        if self.unordered or any(status != FIRST for status, _ in self.results.values()):
            return True
        answer_of = self.pairs.answer_of
        for m, ordinals in self.turns.items():
            for ordinal in ordinals:
                where = answer_of.get(ordinal)
                if where is None or self.places[where][0] != m + 1:
                    return True
        return False

    def call(self, place: Place, block: dict[str, Any]) -> None:
        name = block.get("name")
        name = name if isinstance(name, str) else ""
        record = self.ledger.call(_client_id(block.get("id")), name, block.get("input"))
        self.out.set(place, "id", record.upstream_id)
        self.turns.setdefault(place[0], []).append(record.ordinal)
        if self.repairs is not None and not isinstance(block.get("input"), dict):
            self.repairs.history_arguments(name)
            self.out.set(place, "input", _object_input(block.get("input")))

    def result(self, place: Place, block: dict[str, Any]) -> None:
        result = (block.get("content"), block.get("is_error") is True)
        answered = self.ledger.result(block.get("tool_use_id"), result)
        if answered is not None:
            self.out.set(place, "tool_use_id", answered.upstream_id)
        ordinal = -1 if answered is None else answered.ordinal
        status = self.pairs.status(ordinal, len(self.places))
        if status == FIRST:
            self.places.append(place)
        self.results[place] = (status, ordinal)


def _object_input(value: object) -> dict[str, Any]:
    """SPEC §11: a tool_use `input` that is no object, as the object the upstream can read."""
    text = value if isinstance(value, str) else None
    fixed = parseable_arguments(text)
    loaded = orjson.loads(fixed if fixed is not None else text or "{}")
    return loaded if isinstance(loaded, dict) else {}


def _walk_message(m: int, message: object, walk: _Walk) -> Place | None:
    """One message's blocks: an assistant's tool_use blocks are calls of a new turn, any
    other message's tool_result blocks are results (the last one's place is returned). A
    user message without results is user input (SPEC §10): agents attach reminders to the
    message that carries a round's results, while a person's words come in their own."""
    if not isinstance(message, dict):
        return None
    role = message.get("role")
    assistant = role == "assistant"
    if assistant:
        walk.ledger.begin_turn()
    last: Place | None = None
    other_first = False
    for b, block in enumerate(_blocks(message)):
        kind = block.get("type") if isinstance(block, dict) else None
        if assistant and kind == "tool_use":
            walk.call((m, b), block)
        elif not assistant and kind == "tool_result":
            last = (m, b)
            walk.result(last, block)
            walk.unordered = walk.unordered or other_first
        else:
            other_first = True
    if role == "user" and last is None:
        walk.ledger.user_input()
    return last


def translate_messages(
    body: dict[str, Any],
    dialect_setting: str,
    repeat_guard: str = "off",
    repeat_exempt: tuple[str, ...] = (),
    repair: bool = False,
    family: FamilyRules = NO_FAMILY_RULES,
) -> TranslatedMessages:
    """Translate `body['messages']` (already checked to be a list) for the upstream; with
    the repeat guard on (SPEC §10), a run of identical rounds notes its last result; with
    `repair` (SPEC §11), what the upstream would refuse is repaired, by every upstream's
    rules and by those of the upstream's `family` (`proxy.anthropic.families`)."""
    messages: list[Any] = body["messages"]
    ledger = HistoryLedger(resolve_dialect(dialect_setting, body.get("model")))
    rewriter = _Rewriter(messages)
    repairs = RequestRepairs() if repair else None
    walk = _Walk(ledger, rewriter, repairs)
    last: Place | None = None
    for m, message in enumerate(messages):
        last = _walk_message(m, message, walk) or last
    facts = ledger.facts(
        choices=1,
        offered_tools=offered_tools(body),
        repeat_guard=repeat_guard,
        repeat_exempt=repeat_exempt,
    )
    if facts.repeat is not None and last is not None:
        # SPEC §10: the note goes in the last tool_result, never in a message of its own.
        m, b = last
        content = rewriter.messages[m]["content"][b].get("content")
        rewriter.set(last, "content", with_note(content, note_text(facts.repeat)))
    out_messages = rewriter.messages
    out = body
    if repairs is not None:
        if walk.needs_pairing():
            out_messages = _Pairing(walk, repairs).messages(out_messages)
        out = family_tools(_with_tool_schemas(body, repairs), family, repairs)
        out_messages = family_messages(out_messages, family, repairs)
    if out_messages is not messages or out is not body:
        out = {**out, "messages": out_messages}
    notes = [] if repairs is None else repairs.notes
    return TranslatedMessages(out, facts, out is not body, ledger.calls, notes)


class _Pairing:
    """SPEC §11 in Anthropic's shape: the messages rebuilt so that each assistant message's
    tool_use blocks are answered by the first blocks of the next (user) message."""

    def __init__(self, walk: _Walk, repairs: RequestRepairs):
        self.walk = walk
        self.repairs = repairs
        self.calls = walk.ledger.calls
        self.placed: set[Place] = set()  # results written at the start of a turn's answer

    def messages(self, messages: list[Any]) -> list[Any]:
        out: list[Any] = []
        owed: list[Any] | None = None  # the results the last assistant message is owed
        for m, message in enumerate(messages):
            role = message.get("role") if isinstance(message, dict) else None
            if role == "user":
                self._user(out, owed, message, self._rest(m, message, owed is not None))
                owed = None
                continue
            if owed is not None:
                out.append({"role": "user", "content": owed})  # created where there is none
            out.append(message)
            owed = None
            if role == "assistant" and m in self.walk.turns:
                owed = self._answers(messages, m)
        if owed is not None:
            out.append({"role": "user", "content": owed})
        return out

    @staticmethod
    def _user(out: list[Any], owed: list[Any] | None, message: Any, rest: list[Any] | None) -> None:
        """A user message: the results it is owed first, then the rest of its blocks; as it
        came when nothing changes, left out when every block moved up."""
        if owed is None:
            if rest is None:
                out.append(message)
            elif rest:
                out.append({**message, "content": rest})
            return
        if rest is None:
            content = message.get("content")
            rest = content if isinstance(content, list) else []
            if isinstance(content, str) and content:
                rest = [{"type": "text", "text": content}]
        out.append({**message, "content": [*owed, *rest]})

    def _answers(self, messages: list[Any], m: int) -> list[Any]:
        """The tool_result blocks that answer the assistant message at `m`: those of the next
        message in their order, then, in the order of the calls, each found further down
        (moved) or a synthetic one."""
        ordinals = self.walk.turns[m]
        answer_of = self.walk.pairs.answer_of
        places = self.walk.places
        blocks: list[Any] = []
        mine = set(ordinals)
        for b, block in enumerate(_blocks(messages[m + 1]) if m + 1 < len(messages) else []):
            status, ordinal = self.walk.results.get((m + 1, b), (-1, -1))
            if status == FIRST and ordinal in mine and messages[m + 1].get("role") == "user":
                blocks.append(block)
                self.placed.add((m + 1, b))
        for ordinal in ordinals:
            where = answer_of.get(ordinal)
            if where is not None and places[where] in self.placed:
                continue
            call = self.calls[ordinal]
            if where is None:
                self.repairs.missing_result(call.name)
                blocks.append(_synthetic(call))
                continue
            self.repairs.result_moved(call.name)
            pm, pb = places[where]
            blocks.append(messages[pm]["content"][pb])
            self.placed.add(places[where])
        return blocks

    def _rest(self, m: int, message: dict[str, Any], answering: bool) -> list[Any] | None:
        """A user message's blocks other than the results written before them: other blocks
        in their order, a result that answers no call (or an answered one) as marked text;
        None when they are its content as it came. `answering`: it follows a turn, whose
        results now come first (`result_order` where a block stood before one of them)."""
        content = message.get("content")
        if not isinstance(content, list):
            return None
        rest: list[Any] = []
        changed = False
        seen_other = False
        for b, block in enumerate(content):
            fate = self.walk.results.get((m, b))
            if (m, b) in self.placed:
                changed = True
                if seen_other and answering:
                    self.repairs.result_order()
                    seen_other = False  # once per message
            elif fate is None:
                seen_other = True
                rest.append(block)
            elif fate[0] != FIRST:
                changed = True
                rest.extend(self._marked(block, fate))
            else:
                rest.append(block)
        return rest if changed else None

    def _marked(self, block: dict[str, Any], fate: tuple[int, int]) -> list[Any]:
        status, ordinal = fate
        if status == DUPLICATE:
            name = self.calls[ordinal].name
            self.repairs.duplicate_result(name)
        else:
            name = ""
            self.repairs.orphan_result()
        mark = marked_text(status, name)
        content = block.get("content")
        text = text_with_mark(mark, content)
        if text is not None:
            return [{"type": "text", "text": text}]
        parts = (
            content
            if isinstance(content, list)
            else [{"type": "text", "text": dumps(content).decode()}]
        )
        return [{"type": "text", "text": mark}, *parts]


def _synthetic(call: LedgerCall) -> dict[str, Any]:
    return {
        "type": "tool_result",
        "tool_use_id": call.upstream_id,
        "content": MISSING_RESULT,
        "is_error": True,
    }


def _with_tool_schemas(body: dict[str, Any], repairs: RequestRepairs) -> dict[str, Any]:
    """SPEC §11: a client tool without `input_schema`, or with an empty one, gets an empty
    object schema (server tools, which have a `type` of their own, have none); `body`
    itself when none needs it."""
    return with_tools(body, repairs, _with_empty_schema)


def _with_empty_schema(tool: dict[str, Any]) -> dict[str, Any] | None:
    client_tool = tool.get("type") in (None, "custom")
    schema = object_schema(tool.get("input_schema")) if client_tool else None
    return None if schema is None else {**tool, "input_schema": schema}
