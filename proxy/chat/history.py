"""Request direction (SPEC §3): translate the history's tool-call ids into the upstream dialect.

Rules this module follows:
- Pure: the same history always yields the same upstream request, and appending messages
  never changes how earlier calls were translated (ids depend only on what precedes them),
  so prompt caches stay warm and any replica can serve any turn.
- Repair: a `tool` message pairs with the first still-unanswered call of its id in the nearest
  earlier assistant message that has one; repeated ids get deterministic unique upstream ids.
- Nothing else changes: arguments given as objects become JSON strings, and a history that
  needs no translation is forwarded byte for byte.
- What the upstream would refuse is repaired (SPEC §11, `proxy.core.request_repair`, unless
  the route's `request_repair` is off): each call answered by a `tool` message right after
  its assistant message (moved up, or a synthetic one), results with no call to answer as
  marked `user` text, arguments that do not parse as an object, empty tool schemas.
It also extracts what the response side needs to know: the turn, the ids the client already
holds, and which upstream ids were answered with which fingerprint (SPEC §5).

This is Chat Completions' walk of its `messages`; the decisions are `ledger.HistoryLedger`'s,
shared with every other API surface.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from proxy.chat.families import family_messages, family_tools
from proxy.core.families import NO_FAMILY_RULES, FamilyRules
from proxy.core.jsontext import dumps
from proxy.core.ledger import (
    FORM_ISSUED,
    FORM_UPSTREAM,
    Fingerprint,
    HistoryFacts,
    HistoryLedger,
    LedgerCall,
    ReplayMatch,
    resolve_dialect,
)
from proxy.core.notes import Note
from proxy.core.repeat import note_text, with_note
from proxy.core.request_repair import (
    DUPLICATE,
    KEEP,
    MISSING_RESULT,
    OTHER,
    RESULT,
    SYNTHETIC,
    TURN,
    RequestRepairs,
    ResultPairs,
    Step,
    Unit,
    marked_text,
    object_schema,
    parseable_arguments,
    plan_pairing,
    text_with_mark,
    with_tools,
)


# Value objects: read-only by convention and hashed by value (unsafe_hash), not frozen: a
# frozen dataclass's __init__ sets each field through object.__setattr__, about twice the
# cost of building one, and these are built per call, per note or per event.
@dataclass(slots=True, unsafe_hash=True)
class IdTranslation:
    client_id: str | None
    upstream_id: str
    name: str


@dataclass(slots=True, init=False)
class TranslatedRequest:
    body: dict[str, Any]
    facts: HistoryFacts
    changed: bool
    calls: list[LedgerCall]
    repairs: list[Note]  # SPEC §11: what was repaired, one note each (DeltaRepaired)

    # Written out (init=False): mypyc compiles this one; the generated one stays Python.
    def __init__(
        self,
        body: dict[str, Any],
        facts: HistoryFacts,
        changed: bool,
        calls: list[LedgerCall],
        repairs: list[Note] | None = None,
    ) -> None:
        self.body = body
        self.facts = facts
        self.changed = changed
        self.calls = calls
        self.repairs = [] if repairs is None else repairs

    @property
    def translations(self) -> list[IdTranslation]:
        """Each call's client and upstream id (for `sanitize --explain`): built when asked,
        not for every request."""
        return [IdTranslation(c.client_id, c.upstream_id, c.name) for c in self.calls]

    def to_bytes(self, original: bytes) -> bytes:
        # jsontext.dumps: a valid history nested past orjson's 254 levels must not raise
        return dumps(self.body) if self.changed else original


def _offered_tools(body: Mapping[str, Any]) -> frozenset[str]:
    names = set()
    tools = body.get("tools")
    if isinstance(tools, list):
        for tool in tools:
            fn = tool.get("function") if isinstance(tool, dict) else None
            if isinstance(fn, dict) and isinstance(fn.get("name"), str):
                names.add(fn["name"])
    return frozenset(names)


def _call_parts(call: Any) -> tuple[str | None, str, Any]:
    if not isinstance(call, dict):
        return None, "", None
    raw_id = call.get("id")
    client_id = (
        raw_id if isinstance(raw_id, str) else (str(raw_id) if isinstance(raw_id, int) else None)
    )
    fn = call.get("function")
    fn = fn if isinstance(fn, dict) else {}
    name = fn.get("name")
    return client_id, name if isinstance(name, str) else "", fn.get("arguments")


def translate_request(
    body: dict[str, Any],
    dialect_setting: str,
    repeat_guard: str = "off",
    repeat_exempt: tuple[str, ...] = (),
    repair: bool = False,
    family: FamilyRules = NO_FAMILY_RULES,
) -> TranslatedRequest:
    """Translate `body['messages']` (already checked to be a list) for the upstream; with
    the repeat guard on (SPEC §10), a run of identical rounds notes its last result; with
    `repair` (SPEC §11), what the upstream would refuse is repaired, by every upstream's
    rules and by those of the upstream's `family` (`proxy.chat.families`)."""
    ledger = HistoryLedger(resolve_dialect(dialect_setting, body.get("model")))
    messages: list[Any] = body["messages"]
    repairs = RequestRepairs() if repair else None
    rewritten = _MessageRewrite(messages, repairs)
    units, pairs, last_result = _walk(messages, ledger, rewritten)
    n = body.get("n")
    choices = n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 1
    facts = ledger.facts(
        choices=choices,
        offered_tools=_offered_tools(body),
        repeat_guard=repeat_guard,
        repeat_exempt=repeat_exempt,
    )
    if facts.repeat is not None and last_result >= 0:
        rewritten.note(last_result, note_text(facts.repeat))
    out_body = body
    if repairs is not None:
        steps = plan_pairing(units, pairs.answer_of)
        if steps is not None:
            rewritten.messages = _paired(rewritten.messages, steps, ledger.calls, repairs)
        out_body = family_tools(_with_tool_schemas(body, repairs), family, repairs)
        offers_tools = bool(facts.offered_tools)
        rewritten.messages = family_messages(rewritten.messages, family, offers_tools, repairs)
    changed = rewritten.messages is not messages or out_body is not body
    if changed:
        out_body = {**out_body, "messages": rewritten.messages}
    notes = [] if repairs is None else repairs.notes
    return TranslatedRequest(out_body, facts, changed, ledger.calls, notes)


def _walk(
    messages: list[Any], ledger: HistoryLedger, rewritten: _MessageRewrite
) -> tuple[list[Unit], ResultPairs, int]:
    """Tell the ledger the history in order, each call and result under its upstream id:
    the history as pairing units (SPEC §11), which call each result answers, and the last
    `tool` message's place (-1: none)."""
    units: list[Unit] = []
    pairs = ResultPairs()
    last_result = -1
    for pos, message in enumerate(messages):
        if not isinstance(message, dict):
            units.append(Unit(OTHER))
            continue
        role = message.get("role")
        if role == "assistant":
            units.append(_assistant_turn(pos, message, ledger, rewritten))
        elif role == "tool":
            last_result = pos
            target = ledger.result(message.get("tool_call_id"), message.get("content"))
            if target is not None and message.get("tool_call_id") != target.upstream_id:
                rewritten.replace(pos, {**message, "tool_call_id": target.upstream_id})
            ordinal = -1 if target is None else target.ordinal
            units.append(Unit(RESULT, ordinal=ordinal, status=pairs.status(ordinal, pos)))
        else:
            if role == "user":
                ledger.user_input()
            units.append(Unit(OTHER))
    return units, pairs, last_result


def _assistant_turn(
    pos: int, message: dict[str, Any], ledger: HistoryLedger, rewritten: _MessageRewrite
) -> Unit:
    """An assistant message: a model turn, and its calls under their upstream ids."""
    ledger.begin_turn()
    tool_calls = message.get("tool_calls")
    ordinals: list[int] = []
    if isinstance(tool_calls, list):
        records = []
        for call in tool_calls:
            client_id, name, arguments = _call_parts(call)
            record = ledger.call(client_id, name, arguments)
            records.append(record)
            if isinstance(call, dict):  # a call the upstream reads: it needs its answer
                ordinals.append(record.ordinal)
        rewritten.calls(pos, message, tool_calls, records)
    return Unit(TURN, calls=ordinals)


def _paired(
    messages: list[Any], steps: list[Step], calls: list[LedgerCall], repairs: RequestRepairs
) -> list[Any]:
    """SPEC §11: the messages in the order `steps` plan (`proxy.core.request_repair`)."""
    out: list[Any] = []
    for step in steps:
        if step.op == SYNTHETIC:
            call = calls[step.ordinal]
            repairs.missing_result(call.name)
            out.append(
                {"role": "tool", "tool_call_id": call.upstream_id, "content": MISSING_RESULT}
            )
        elif step.op == KEEP:
            if step.moved:
                repairs.result_moved(calls[step.ordinal].name)
            out.append(messages[step.unit])
        else:
            out.append(_marked_result(messages[step.unit], step, calls, repairs))
    return out


def _marked_result(
    message: dict[str, Any], step: Step, calls: list[LedgerCall], repairs: RequestRepairs
) -> Any:
    """A `tool` message that answers no call, or a call already answered, as `user` text."""
    if step.status == DUPLICATE:
        name = calls[step.ordinal].name
        repairs.duplicate_result(name)
    else:
        name = ""
        repairs.orphan_result()
    mark = marked_text(step.status, name)
    content = message.get("content")
    text = text_with_mark(mark, content)
    if text is not None:
        return {"role": "user", "content": text}
    if not isinstance(content, list):
        content = [{"type": "text", "text": dumps(content).decode()}]
    return {"role": "user", "content": [{"type": "text", "text": mark}, *content]}


def _with_tool_schemas(body: dict[str, Any], repairs: RequestRepairs) -> dict[str, Any]:
    """SPEC §11: a function tool without parameters, or with empty ones, gets an empty object
    schema; `body` itself when none needs it."""
    return with_tools(body, repairs, _with_empty_schema, "function")


def _with_empty_schema(tool: dict[str, Any]) -> dict[str, Any] | None:
    fn = tool.get("function")
    if not isinstance(fn, dict):
        return None
    schema = object_schema(fn.get("parameters"))
    return None if schema is None else {**tool, "function": {**fn, "parameters": schema}}


class _MessageRewrite:
    """The upstream's copy of `messages`: the client's list until a message must change."""

    def __init__(self, messages: list[Any], repairs: RequestRepairs | None):
        self.original = messages
        self.messages = messages
        self.repairs = repairs  # SPEC §11: None when the route's request_repair is off

    def replace(self, pos: int, message: dict[str, Any]) -> None:
        if self.messages is self.original:
            self.messages = list(self.original)
        self.messages[pos] = message

    def note(self, pos: int, note: str) -> None:
        """SPEC §10: the repeat guard's note, in the tool message itself (never a message of
        its own: strict providers refuse a user message right after a tool message)."""
        result = self.messages[pos]
        self.replace(pos, {**result, "content": with_note(result.get("content"), note)})

    def calls(
        self, pos: int, message: dict[str, Any], calls: list[Any], records: list[LedgerCall]
    ) -> None:
        """An assistant message's calls under their upstream ids, arguments as strings
        (`records`: one per call, in order). Indexed rather than zipped: zip(strict=True) is
        a call with a keyword from compiled code, about 2.5K instructions each."""
        repairs = self.repairs
        new_calls = [_upstream_call(call, records[at], repairs) for at, call in enumerate(calls)]
        for at, call in enumerate(calls):
            if new_calls[at] is not call:
                self.replace(pos, {**message, "tool_calls": new_calls})
                return


def _upstream_call(call: Any, record: LedgerCall, repairs: RequestRepairs | None) -> Any:
    if not isinstance(call, dict):
        return call
    fn = call.get("function")
    arguments = _sent_arguments(fn, record, repairs)
    if call.get("id") == record.upstream_id and arguments is None:
        return call
    call = {**call, "id": record.upstream_id}
    if arguments is not None and isinstance(fn, dict):
        call["function"] = {**fn, "arguments": arguments}
    return call


def _sent_arguments(fn: Any, record: LedgerCall, repairs: RequestRepairs | None) -> str | None:
    """The arguments string to send instead of the call's own, or None to keep them: objects
    become JSON strings (SPEC §3); with repairs on, what does not parse as a JSON object is
    made to (SPEC §11)."""
    if not isinstance(fn, dict):
        return None
    arguments = fn.get("arguments")
    text = arguments if isinstance(arguments, str | None) else dumps(arguments).decode()
    if repairs is not None:
        fixed = parseable_arguments(text)
        if fixed is not None:
            repairs.history_arguments(record.name)
            return fixed
    return None if text is arguments else text


__all__ = [
    "FORM_ISSUED",
    "FORM_UPSTREAM",
    "Fingerprint",
    "HistoryFacts",
    "IdTranslation",
    "ReplayMatch",
    "TranslatedRequest",
    "resolve_dialect",
    "translate_request",
]
