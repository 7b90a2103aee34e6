"""Responses tools as Chat Completions function tools, and back (SPEC §9).

- `function` tools keep their name, description, parameters and `strict`.
- `custom` (freeform) tools such as Codex's `apply_patch` become a function with one required
  string parameter `input` (a grammar `format` is written into the description); the
  model's call comes back to the client as a `custom_tool_call` carrying that string.
- `namespace` tools (Codex's MCP and multi-agent tools) flatten to `{namespace}__{name}`;
  the call comes back as the nested name with its `namespace` field, which Codex requires
  ("unsupported call" for a flattened name, QUIRKS.md).
- Hosted tools (web search, file search, computer use, image generation, code interpreter,
  remote MCP, `local_shell`, `tool_search`, ...) need the provider to run them or items Chat
  has no word for: they are left out and named.

Which chat name is which client tool is read from the request itself (`ToolTable`), so the
response direction needs no state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

NAMESPACE_SEPARATOR = "__"
CUSTOM_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "input": {"type": "string", "description": "The tool's whole input, as raw text."}
    },
    "required": ["input"],
    "additionalProperties": False,
}
EMPTY_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}


@dataclass(frozen=True, slots=True)
class ClientTool:
    """A tool as the client named it: `kind` is `function` or `custom`."""

    name: str
    kind: str = "function"
    namespace: str | None = None


@dataclass(slots=True)
class ToolTable:
    """Chat function name -> the client's tool (only names that differ or are custom)."""

    by_chat_name: dict[str, ClientTool] = field(default_factory=dict)

    def lookup(self, chat_name: str) -> ClientTool:
        return self.by_chat_name.get(chat_name) or ClientTool(chat_name)

    def chat_name_of(self, name: str, namespace: object) -> str:
        return flat_name(name, namespace if isinstance(namespace, str) else None)


def flat_name(name: str, namespace: str | None) -> str:
    return f"{namespace}{NAMESPACE_SEPARATOR}{name}" if namespace else name


@dataclass(slots=True)
class MappedTools:
    tools: list[dict[str, Any]] = field(default_factory=list)
    table: ToolTable = field(default_factory=ToolTable)
    dropped: list[str] = field(default_factory=list)

    @property
    def names(self) -> frozenset[str]:
        """The Chat function names offered upstream."""
        return frozenset(tool["function"]["name"] for tool in self.tools)


def map_tools(tools: object) -> MappedTools:
    out = MappedTools()
    for tool in tools if isinstance(tools, list) else ():
        if not isinstance(tool, dict):
            continue
        kind = tool.get("type")
        if kind == "namespace":
            namespace = tool.get("name")
            nested = tool.get("tools")
            for inner in nested if isinstance(nested, list) else ():
                if isinstance(inner, dict):
                    _add(out, inner, namespace if isinstance(namespace, str) else None)
        else:
            _add(out, tool, None)
    return out


def _add(out: MappedTools, tool: dict[str, Any], namespace: str | None) -> None:
    kind = tool.get("type")
    name = tool.get("name")
    if kind not in ("function", "custom") or not isinstance(name, str) or not name:
        out.dropped.append(str(kind if kind not in ("function", "custom") else "unnamed_tool"))
        return
    chat_name = flat_name(name, namespace)
    if kind == "custom":
        function = {
            "name": chat_name,
            "description": _custom_description(tool),
            "parameters": CUSTOM_PARAMETERS,
        }
    else:
        function = {"name": chat_name}
        if isinstance(tool.get("description"), str):
            function["description"] = tool["description"]
        parameters = tool.get("parameters")
        function["parameters"] = parameters if isinstance(parameters, dict) else EMPTY_PARAMETERS
        if isinstance(tool.get("strict"), bool):
            function["strict"] = tool["strict"]
    out.tools.append({"type": "function", "function": function})
    if kind == "custom" or namespace:
        out.table.by_chat_name[chat_name] = ClientTool(name, str(kind), namespace)


def _custom_description(tool: dict[str, Any]) -> str:
    """The client's description, and how a freeform input travels as a function argument
    (with the grammar the client gave, which the upstream cannot enforce)."""
    description = tool.get("description")
    parts = [description] if isinstance(description, str) and description else []
    parts.append(
        "Pass the tool's whole input as the string parameter `input`, exactly as the raw "
        "text the tool expects (not wrapped in any other JSON)."
    )
    fmt = tool.get("format")
    if isinstance(fmt, dict) and fmt.get("type") == "grammar":
        syntax = fmt.get("syntax") if isinstance(fmt.get("syntax"), str) else "grammar"
        definition = fmt.get("definition")
        if isinstance(definition, str):
            parts.append(f"The input must follow this {syntax} grammar:\n{definition}")
    return "\n\n".join(parts)


def map_tool_choice(
    choice: object, table: ToolTable, offered: frozenset[str]
) -> tuple[object, list[str]]:
    """Chat's `tool_choice` (None: leave it out) and what could not be said. A named tool
    that the upstream is not offered (a hosted tool left out, or none of the request's) has
    no Chat form: upstreams refuse a `tool_choice` naming a function not in `tools`."""
    if choice is None:
        return None, []
    if choice in ("auto", "none", "required"):
        return choice, []
    if isinstance(choice, dict):
        kind = choice.get("type")
        name = choice.get("name")
        if kind in ("function", "custom") and isinstance(name, str):
            chat_name = table.chat_name_of(name, choice.get("namespace"))
            if chat_name not in offered:
                return None, ["tool_choice"]
            return {"type": "function", "function": {"name": chat_name}}, []
        if kind == "allowed_tools":
            mode = choice.get("mode")
            return (mode if mode in ("auto", "required") else "auto"), ["tool_choice.allowed_tools"]
        return None, [f"tool_choice:{kind}"]
    return None, ["tool_choice"]
