"""A provider family's rules in OpenAI Responses' shape (SPEC §11, `proxy.core.families`).

An upstream other than OpenAI that serves Responses (DeepSeek, vLLM, Ollama...) refuses the
`developer` role: such `input` messages go as `system` (`role`). Function tools' `parameters`
are sent in the family's JSON Schema flavor, and OpenAI's `strict: true` is dropped where
strict mode would refuse the schema (`tool_schema`, `proxy.core.schemas`). Each item is decided
on its own (prefix-stable).
"""

from __future__ import annotations

from typing import Any

from proxy.core.families import FamilyRules
from proxy.core.request_repair import RequestRepairs, with_tools
from proxy.core.schemas import flavored_declaration


def family_items(items: list[Any], rules: FamilyRules, repairs: RequestRepairs) -> list[Any]:
    """`input` with `developer` messages as `system` where the family has no such role."""
    if rules.family.developer_role:
        return items
    out: list[Any] | None = None
    for at, item in enumerate(items):
        if not isinstance(item, dict) or item.get("role") != "developer":
            continue
        if item.get("type", "message") != "message":
            continue
        repairs.role("developer")
        if out is None:
            out = list(items)
        out[at] = {**item, "role": "system"}
    return items if out is None else out


def family_tools(
    body: dict[str, Any], rules: FamilyRules, repairs: RequestRepairs
) -> dict[str, Any]:
    """`body` with each function tool's `parameters` in the family's flavor."""
    flavor = rules.family.schema
    if not flavor:
        return body

    def flavored_tool(tool: dict[str, Any]) -> dict[str, Any] | None:
        if tool.get("type") != "function":
            return None
        sent = flavored_declaration(tool, flavor)
        return None if sent is tool else sent

    return with_tools(body, repairs, flavored_tool)


__all__ = ["family_items", "family_tools"]
