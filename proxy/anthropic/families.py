"""A provider family's rules in Anthropic Messages' shape (SPEC §11, `proxy.core.families`).

- *Client-only blocks* (`client_only_block`): an Anthropic-compatible upstream that is not
  Anthropic (Moonshot, DeepSeek, GLM, MiniMax, vLLM, Ollama) refuses blocks only Anthropic
  reads, such as the `tool_reference` blocks Claude Code's tool search puts inside a
  `tool_result`; each becomes a `text` block carrying its words.
- *Schemas* (`tool_schema`): each client tool's `input_schema` in the family's JSON Schema
  flavor (`proxy.core.schemas`).

Each message is decided on its own (prefix-stable); nothing is kept between requests.
"""

from __future__ import annotations

from typing import Any

from proxy.core.families import FamilyRules
from proxy.core.request_repair import RequestRepairs, with_tools
from proxy.core.schemas import FLAVORS, flavored

# Blocks only Anthropic reads, inside a tool_result, as the words a text block carries.
_CLIENT_ONLY: dict[str, str] = {"tool_reference": "tool_name"}


def family_messages(messages: list[Any], rules: FamilyRules, repairs: RequestRepairs) -> list[Any]:
    """`messages` with client-only blocks as text; the same list when none is there."""
    if not rules.family.client_blocks:
        return messages
    out: list[Any] | None = None
    for at, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list) or message.get("role") != "user":
            continue
        blocks = _blocks(content, repairs)
        if blocks is not content:
            if out is None:
                out = list(messages)
            out[at] = {**message, "content": blocks}
    return messages if out is None else out


def _blocks(content: list[Any], repairs: RequestRepairs) -> list[Any]:
    out: list[Any] | None = None
    for at, block in enumerate(content):
        if not isinstance(block, dict) or block.get("type") != "tool_result":
            continue
        inner = block.get("content")
        if not isinstance(inner, list):
            continue
        texts = [_as_text(part, repairs) for part in inner]
        if any(new is not old for new, old in zip(texts, inner, strict=True)):
            if out is None:
                out = list(content)
            out[at] = {**block, "content": texts}
    return content if out is None else out


def _as_text(part: Any, repairs: RequestRepairs) -> Any:
    kind = part.get("type") if isinstance(part, dict) else None
    field = _CLIENT_ONLY.get(kind) if isinstance(kind, str) else None
    if field is None:
        return part
    repairs.client_only_block(str(kind))
    words = part.get(field)
    return {"type": "text", "text": f"{kind}: {words if isinstance(words, str) else ''}"}


def family_tools(
    body: dict[str, Any], rules: FamilyRules, repairs: RequestRepairs
) -> dict[str, Any]:
    """`body` with each client tool's `input_schema` in the family's flavor."""
    flavor = rules.family.schema
    if flavor not in FLAVORS:
        return body

    def flavored_tool(tool: dict[str, Any]) -> dict[str, Any] | None:
        client_tool = tool.get("type") in (None, "custom")
        schema = flavored(tool.get("input_schema"), flavor) if client_tool else None
        return None if schema is None else {**tool, "input_schema": schema}

    return with_tools(body, repairs, flavored_tool)


__all__ = ["family_messages", "family_tools"]
