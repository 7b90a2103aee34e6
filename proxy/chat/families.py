"""A provider family's rules in Chat Completions' shape (SPEC §11, `proxy.core.families`).

The walk of `messages` (`proxy.chat.history`) hands its repaired messages and tools here:
- *Thinking models' reasoning* (`reasoning_passback`): in a request that offers tools, every
  assistant message with tool calls carries `reasoning_content`: the client's own reasoning
  under another name (`reasoning`, the text of `reasoning_details`) where it kept one, else the
  family's fill. A bridge has already put an Anthropic `thinking` block's or a Responses
  `reasoning` item's text there.
- *Roles* (`role`): `developer` becomes `system` where the family has no such role.
- *Content* (`content`): a tool-call turn's empty content as the family takes it (`null` for
  the empty string, or the empty string for `null`); an empty `tool` result as the family's
  non-empty stand-in.
- *Schemas* (`tool_schema`): each function tool's parameters in the family's JSON Schema
  flavor (`proxy.core.schemas`); `strict: true` dropped where strict mode would refuse.

Each message is decided on its own, so appending messages never changes how earlier ones were
sent (prefix-stable), and nothing is kept between requests.
"""

from __future__ import annotations

from typing import Any

from proxy.core.families import EMPTY, NULL, FamilyRules
from proxy.core.request_repair import RequestRepairs, with_tools
from proxy.core.schemas import flavored_declaration


def family_messages(
    messages: list[Any], rules: FamilyRules, offers_tools: bool, repairs: RequestRepairs
) -> list[Any]:
    """`messages` with the family's rules applied; the same list when none applies."""
    family = rules.family
    passback = rules.passback and offers_tools
    if family.developer_role and not passback and not _content_rules(rules):
        return messages
    out: list[Any] | None = None
    for at, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        sent = _message(message, rules, passback, repairs)
        if sent is not message:
            if out is None:
                out = list(messages)
            out[at] = sent
    return messages if out is None else out


def _content_rules(rules: FamilyRules) -> bool:
    family = rules.family
    return family.tool_turn_content != 0 or family.empty_result is not None


def _message(
    message: dict[str, Any], rules: FamilyRules, passback: bool, repairs: RequestRepairs
) -> dict[str, Any]:
    role = message.get("role")
    family = rules.family
    if role == "developer" and not family.developer_role:
        repairs.role("developer")
        return {**message, "role": "system"}
    if role == "tool" and family.empty_result is not None and _empty(message.get("content")):
        repairs.content("tool")
        return {**message, "content": family.empty_result}
    calls = message.get("tool_calls")
    if role != "assistant" or not isinstance(calls, list) or not calls:
        return message
    out = message
    if passback:
        reasoning = _passed_back(message, family.reasoning_fill)
        if reasoning is not None:
            repairs.reasoning_passback(_first_name(calls))
            out = {**out, "reasoning_content": reasoning}
    content = _turn_content(message, family.tool_turn_content)
    if content is not _KEEP:
        repairs.content("assistant")
        out = {**out, "content": content}
    return out


_KEEP = object()


def _turn_content(message: dict[str, Any], rule: int) -> Any:
    """What a tool-call turn's content becomes (`_KEEP`: as it is)."""
    content = message.get("content", _KEEP)
    if rule == NULL and content == "":
        return None
    if rule == EMPTY and "content" in message and content is None:
        return ""
    return _KEEP


def _empty(content: object) -> bool:
    return content is None or content == "" or content == []


def _passed_back(message: dict[str, Any], fill: str) -> str | None:
    """The `reasoning_content` a tool-call turn is sent with, or None to keep its own."""
    own = message.get("reasoning_content")
    if isinstance(own, str) and own:
        return None
    text = _client_reasoning(message)
    if text:
        return text
    if own == "" and not fill:
        return None  # already what the family takes
    return fill


def _client_reasoning(message: dict[str, Any]) -> str:
    """The reasoning a client kept under another name: `reasoning` (OpenRouter, some SDKs)
    or the text of `reasoning_details` entries."""
    reasoning = message.get("reasoning")
    if isinstance(reasoning, str) and reasoning.strip():
        return reasoning
    details = message.get("reasoning_details")
    if not isinstance(details, list):
        return ""
    texts = []
    for detail in details:
        if isinstance(detail, dict):
            text = detail.get("text")
            if not isinstance(text, str):
                text = detail.get("summary")
            if isinstance(text, str):
                texts.append(text)
    return "".join(texts) if any(t.strip() for t in texts) else ""


def _first_name(calls: list[Any]) -> str:
    call = calls[0]
    fn = call.get("function") if isinstance(call, dict) else None
    name = fn.get("name") if isinstance(fn, dict) else None
    return name if isinstance(name, str) else ""


def family_tools(
    body: dict[str, Any], rules: FamilyRules, repairs: RequestRepairs
) -> dict[str, Any]:
    """`body` with each function tool's schema in the family's flavor; `body` itself when
    none changes."""
    flavor = rules.family.schema
    if not flavor:
        return body

    def flavored_tool(tool: dict[str, Any]) -> dict[str, Any] | None:
        fn = tool.get("function")
        if not isinstance(fn, dict):
            return None
        sent = flavored_declaration(fn, flavor)
        return None if sent is fn else {**tool, "function": sent}

    return with_tools(body, repairs, flavored_tool, "function")


__all__ = ["family_messages", "family_tools"]
