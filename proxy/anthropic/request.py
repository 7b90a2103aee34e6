"""Request direction (SPEC §3 as §8 translates it): the ids of an Anthropic history.

Every `tool_use` block of an assistant message is a call; every `tool_result` block of a later
user message is a result. The walk over them (turns, pairing, repair of colliding ids, the
route's dialect, the facts the response side needs) is the shared history walk's; this module
only says where Anthropic keeps the ids and writes the upstream ids back into the blocks.
Everything else keeps its form: `input` stays an object, and a history that needs no
translation is forwarded byte for byte.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.chat.history import HistoryFacts, translate_request
from proxy.jsontext import dumps

# (message position, block position) of a tool_use or tool_result block
Place = tuple[int, int]


@dataclass(slots=True)
class TranslatedMessages:
    body: dict[str, Any]
    facts: HistoryFacts
    changed: bool

    def to_bytes(self, original: bytes) -> bytes:
        # jsontext.dumps: a valid history nested past orjson's 254 levels must not raise
        return dumps(self.body) if self.changed else original


def _blocks(message: object) -> list[Any]:
    content = message.get("content") if isinstance(message, dict) else None
    return content if isinstance(content, list) else []


def _walk(messages: list[Any]) -> tuple[list[dict[str, Any]], list[Place], list[Place]]:
    """The history in the shared walk's terms: an assistant message per Anthropic assistant
    message (its tool_use blocks as calls), a result per tool_result block, in order."""
    walked: list[dict[str, Any]] = []
    calls: list[Place] = []
    results: list[Place] = []
    for m, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        blocks = _blocks(message)
        if role == "assistant":
            tool_calls = []
            for b, block in enumerate(blocks):
                if isinstance(block, dict) and block.get("type") == "tool_use":
                    calls.append((m, b))
                    fn = {"name": block.get("name"), "arguments": block.get("input")}
                    tool_calls.append({"id": block.get("id"), "function": fn})
            walked.append({"role": "assistant", "tool_calls": tool_calls})
            continue
        for b, block in enumerate(blocks):
            if isinstance(block, dict) and block.get("type") == "tool_result":
                results.append((m, b))
                walked.append({"role": "tool", "tool_call_id": block.get("tool_use_id")})
    return walked, calls, results


def _offered(body: dict[str, Any]) -> list[dict[str, Any]]:
    tools = body.get("tools")
    return [
        {"type": "function", "function": {"name": tool["name"]}}
        for tool in (tools if isinstance(tools, list) else [])
        if isinstance(tool, dict) and isinstance(tool.get("name"), str)
    ]


class _Rewriter:
    """Copies only the messages, content lists and blocks that change."""

    def __init__(self, messages: list[Any]):
        self.original = messages
        self.messages = messages
        self.copied: set[int] = set()

    def set(self, place: Place, key: str, value: str) -> None:
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


def translate_messages(body: dict[str, Any], dialect_setting: str) -> TranslatedMessages:
    """Translate `body['messages']` (already checked to be a list) for the upstream."""
    messages: list[Any] = body["messages"]
    walked, calls, results = _walk(messages)
    shared = translate_request(
        {"model": body.get("model"), "messages": walked, "tools": _offered(body)},
        dialect_setting,
    )
    rewriter = _Rewriter(messages)
    for place, translation in zip(calls, shared.translations, strict=True):
        rewriter.set(place, "id", translation.upstream_id)
    answers = [m for m in shared.body["messages"] if m.get("role") == "tool"]
    for place, answer in zip(results, answers, strict=True):
        upstream_id = answer.get("tool_call_id")
        if isinstance(upstream_id, str):
            rewriter.set(place, "tool_use_id", upstream_id)
    changed = rewriter.messages is not messages
    out = {**body, "messages": rewriter.messages} if changed else body
    return TranslatedMessages(out, shared.facts, changed)
