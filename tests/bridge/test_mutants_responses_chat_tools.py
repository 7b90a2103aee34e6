"""SPEC §9: Responses tools and `tool_choice` as Chat's, every tool kind at once (functions
with and without parameters, unnamed and hosted tools, custom tools with and without a
grammar, namespaces with odd names and contents) and each `tool_choice` form (the mutation
audit found most of these edges unpinned)."""

from __future__ import annotations

from typing import Any, cast

import pytest

from proxy.bridge.responses_chat import responses_to_chat
from proxy.bridge.responses_chat.tools import CUSTOM_PARAMETERS, EMPTY_PARAMETERS
from tests.bridge.responses_chat.wire import SHELL, body

JSON = dict[str, Any]
HOW = (
    "Pass the tool's whole input as the string parameter `input`, exactly as the raw text the "
    "tool expects (not wrapped in any other JSON)."
)


def function(name: str, parameters: JSON, **extra: Any) -> JSON:
    return {"type": "function", "function": {"name": name, **extra, "parameters": parameters}}


def custom(name: str, description: str) -> JSON:
    fields = {"name": name, "description": description, "parameters": CUSTOM_PARAMETERS}
    return {"type": "function", "function": fields}


def test_every_kind_of_tool_maps_or_is_named() -> None:
    grammar = {"type": "grammar", "syntax": "lark", "definition": "start: x"}
    tools: list[Any] = [
        "stray",
        SHELL,
        {"type": "function", "name": "bare"},
        {"type": "function", "name": "odd", "parameters": "x", "strict": "yes"},
        {"type": "function"},
        {"type": "custom", "name": ""},
        {"type": "function", "name": 5},
        {"type": "web_search"},
        {"type": "custom", "name": "patch", "description": "Edit.", "format": grammar},
        {"type": "custom", "name": "raw"},
        {"type": "custom", "name": "g", "format": {"type": "grammar", "definition": "d"}},
        {"type": "custom", "name": "t", "description": "", "format": {"type": "text"}},
        {"type": "namespace", "name": "mcp", "tools": [{"type": "function", "name": "read"}]},
        {"type": "namespace", "name": 5, "tools": [{"type": "function", "name": "loose"}]},
        {"type": "namespace", "name": "empty", "tools": None},
    ]
    chat, dropped = responses_to_chat(body(tools=tools))
    assert chat["tools"] == [
        function(
            "shell", cast(JSON, SHELL["parameters"]), description="Run a command.", strict=False
        ),
        function("bare", EMPTY_PARAMETERS),
        function("odd", EMPTY_PARAMETERS),
        custom("patch", f"Edit.\n\n{HOW}\n\nThe input must follow this lark grammar:\nstart: x"),
        custom("raw", HOW),
        custom("g", f"{HOW}\n\nThe input must follow this grammar grammar:\nd"),
        custom("t", HOW),
        function("mcp__read", EMPTY_PARAMETERS),
        function("loose", EMPTY_PARAMETERS),
    ]
    # Each name once, header-safe as it is (names.py would turn a space into `?`).
    assert dropped == ("unnamed_tool", "web_search")


def tool_choice(choice: object) -> tuple[object, tuple[str, ...]]:
    namespace = {
        "type": "namespace",
        "name": "mcp",
        "tools": [{"type": "function", "name": "read"}],
    }
    chat, dropped = responses_to_chat(body(tools=[SHELL, namespace], tool_choice=choice))
    return chat.get("tool_choice"), dropped


@pytest.mark.parametrize(
    ("choice", "chat", "dropped"),
    [
        ("none", "none", ()),
        ("required", "required", ()),
        (
            {"type": "function", "name": "shell"},
            {"type": "function", "function": {"name": "shell"}},
            (),
        ),
        (
            {"type": "function", "name": "shell", "namespace": 5},
            {"type": "function", "function": {"name": "shell"}},
            (),
        ),
        (
            {"type": "function", "name": "read", "namespace": "mcp"},
            {"type": "function", "function": {"name": "mcp__read"}},
            (),
        ),
        ({"type": "function", "name": "nope"}, None, ("tool_choice",)),
        ({"type": "file_search", "name": "shell"}, None, ("tool_choice:file_search",)),
        ({"type": "allowed_tools", "mode": "required"}, "required", ("tool_choice.allowed_tools",)),
        ({"type": "allowed_tools", "mode": "odd"}, "auto", ("tool_choice.allowed_tools",)),
        ("sometimes", None, ("tool_choice",)),
    ],
)
def test_each_tool_choice_form(choice: object, chat: object, dropped: tuple[str, ...]) -> None:
    assert tool_choice(choice) == (chat, dropped)
