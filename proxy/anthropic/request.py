"""Request direction (SPEC §3 as §8 translates it): the ids of an Anthropic history.

Every `tool_use` block of an assistant message is a call; every `tool_result` block of a later
user message is a result. The decisions (turns, pairing, repair of colliding ids, the route's
dialect, the facts the response side needs) are the shared `HistoryLedger`'s; this module only
says where Anthropic keeps the ids and writes the upstream ids back into the blocks.
Everything else keeps its form: `input` stays an object, and a history that needs no
translation is forwarded byte for byte.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.core.jsontext import dumps
from proxy.core.ledger import HistoryFacts, HistoryLedger, LedgerCall, resolve_dialect
from proxy.core.repeat import note_text, with_note

# (message position, block position) of a tool_use or tool_result block
Place = tuple[int, int]


@dataclass(slots=True)
class TranslatedMessages:
    body: dict[str, Any]
    facts: HistoryFacts
    changed: bool
    calls: list[LedgerCall]  # every tool_use of the history, for `sanitize --explain`

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


def _walk_message(m: int, message: object, ledger: HistoryLedger, out: _Rewriter) -> Place | None:
    """One message's blocks: an assistant's tool_use blocks are calls of a new turn, any
    other message's tool_result blocks are results (the last one's place is returned). A
    user message without results is user input (SPEC §10): agents attach reminders to the
    message that carries a round's results, while a person's words come in their own."""
    if not isinstance(message, dict):
        return None
    role = message.get("role")
    assistant = role == "assistant"
    if assistant:
        ledger.begin_turn()
    last: Place | None = None
    for b, block in enumerate(_blocks(message)):
        kind = block.get("type") if isinstance(block, dict) else None
        if assistant and kind == "tool_use":
            name = block.get("name")
            record = ledger.call(
                _client_id(block.get("id")),
                name if isinstance(name, str) else "",
                block.get("input"),
            )
            out.set((m, b), "id", record.upstream_id)
        elif not assistant and kind == "tool_result":
            last = (m, b)
            result = (block.get("content"), block.get("is_error") is True)
            answered = ledger.result(block.get("tool_use_id"), result)
            if answered is not None:
                out.set((m, b), "tool_use_id", answered.upstream_id)
    if role == "user" and last is None:
        ledger.user_input()
    return last


def translate_messages(
    body: dict[str, Any],
    dialect_setting: str,
    repeat_guard: str = "off",
    repeat_exempt: tuple[str, ...] = (),
) -> TranslatedMessages:
    """Translate `body['messages']` (already checked to be a list) for the upstream; with
    the repeat guard on (SPEC §10), a run of identical rounds notes its last result."""
    messages: list[Any] = body["messages"]
    ledger = HistoryLedger(resolve_dialect(dialect_setting, body.get("model")))
    rewriter = _Rewriter(messages)
    last: Place | None = None
    for m, message in enumerate(messages):
        last = _walk_message(m, message, ledger, rewriter) or last
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
    changed = rewriter.messages is not messages
    out = {**body, "messages": rewriter.messages} if changed else body
    return TranslatedMessages(out, facts, changed, ledger.calls)
