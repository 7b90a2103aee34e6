"""Request direction (SPEC §3): translate the history's tool-call ids into the upstream dialect.

Rules this module follows:
- Pure: the same history always yields the same upstream request, and appending messages
  never changes how earlier calls were translated (ids depend only on what precedes them),
  so prompt caches stay warm and any replica can serve any turn.
- Repair: a `tool` message pairs with the first still-unanswered call of its id in the nearest
  earlier assistant message that has one; repeated ids get deterministic unique upstream ids.
- Nothing else changes: arguments given as objects become JSON strings, and a history that
  needs no translation is forwarded byte for byte.
It also extracts what the response side needs to know: the turn, the ids the client already
holds, and which upstream ids were answered with which fingerprint (SPEC §5).

This is Chat Completions' walk of its `messages`; the decisions are `ledger.HistoryLedger`'s,
shared with every other API surface.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

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
from proxy.core.repeat import note_text, with_note


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

    # Written out (init=False): mypyc compiles this one; the generated one stays Python.
    def __init__(
        self, body: dict[str, Any], facts: HistoryFacts, changed: bool, calls: list[LedgerCall]
    ) -> None:
        self.body = body
        self.facts = facts
        self.changed = changed
        self.calls = calls

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
) -> TranslatedRequest:
    """Translate `body['messages']` (already checked to be a list) for the upstream; with
    the repeat guard on (SPEC §10), a run of identical rounds notes its last result."""
    ledger = HistoryLedger(resolve_dialect(dialect_setting, body.get("model")))
    messages: list[Any] = body["messages"]
    rewritten = _MessageRewrite(messages)
    last_result = -1
    for pos, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        if role == "assistant":
            _assistant_turn(pos, message, ledger, rewritten)
        elif role == "tool":
            last_result = pos
            target = ledger.result(message.get("tool_call_id"), message.get("content"))
            if target is not None and message.get("tool_call_id") != target.upstream_id:
                rewritten.replace(pos, {**message, "tool_call_id": target.upstream_id})
        elif role == "user":
            ledger.user_input()
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
    changed = rewritten.messages is not messages
    out_body = {**body, "messages": rewritten.messages} if changed else body
    return TranslatedRequest(out_body, facts, changed, ledger.calls)


def _assistant_turn(
    pos: int, message: dict[str, Any], ledger: HistoryLedger, rewritten: _MessageRewrite
) -> None:
    """An assistant message: a model turn, and its calls under their upstream ids."""
    ledger.begin_turn()
    tool_calls = message.get("tool_calls")
    if isinstance(tool_calls, list):
        records = []
        for call in tool_calls:
            client_id, name, arguments = _call_parts(call)
            records.append(ledger.call(client_id, name, arguments))
        rewritten.calls(pos, message, tool_calls, records)


class _MessageRewrite:
    """The upstream's copy of `messages`: the client's list until a message must change."""

    def __init__(self, messages: list[Any]):
        self.original = messages
        self.messages = messages

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
        new_calls = [_upstream_call(call, records[at]) for at, call in enumerate(calls)]
        for at, call in enumerate(calls):
            if new_calls[at] is not call:
                self.replace(pos, {**message, "tool_calls": new_calls})
                return


def _upstream_call(call: Any, record: LedgerCall) -> Any:
    if not isinstance(call, dict):
        return call
    fn = call.get("function")
    needs_string = isinstance(fn, dict) and not isinstance(fn.get("arguments"), str | None)
    if call.get("id") == record.upstream_id and not needs_string:
        return call
    call = {**call, "id": record.upstream_id}
    if needs_string and isinstance(fn, dict):
        call["function"] = {**fn, "arguments": dumps(fn["arguments"]).decode()}
    return call


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
