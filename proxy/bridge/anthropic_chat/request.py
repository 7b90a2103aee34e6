"""Request direction: an Anthropic Messages body -> a Chat Completions body (SPEC §9).

Field by field, and nothing left out silently: whatever has no Chat form is named in the
`dropped` tuple (the shell puts it in its log line and `x-toolcall-proxy-dropped-tools`).
- `system` -> a leading `system` message; `role: "system"` messages inside `messages`
  (Claude Code sends them) stay where they are.
- content blocks -> messages and parts (`content.py`); ids `toolu_X` -> `call_X` (`ids.py`),
  which the Chat exchange then translates into the route's dialect (SPEC §3).
- tools -> function tools; Anthropic's server tools (web search, bash, text editor, ...)
  are run by Anthropic, not by a Chat upstream: left out and named by their type.
- `tool_choice`, `disable_parallel_tool_use`, `max_tokens`, `temperature`, `top_p`,
  `stop_sequences`, `metadata.user_id`, `stream` (+ `stream_options.include_usage`, so usage
  can be reported) map; `top_k`, `thinking`, `cache_control`, beta fields do not.
- a `tool_use` without its `tool_result` in the next message, or a result without its call,
  is repaired by the Chat exchange (SPEC §11: a synthetic result, the result moved up, marked
  text); with the route's `request_repair` off it is a 400 as Anthropic itself answers it: a
  Chat upstream cannot read such a history (`proxy.bridge.pairing`). An id that is no string
  is a 400 either way.
"""

from __future__ import annotations

from typing import Any

from proxy.bridge.anthropic_chat.content import (
    Message,
    assistant_turn,
    blocks_of,
    text_of_blocks,
    user_turn,
)
from proxy.bridge.anthropic_chat.dropped import Dropped
from proxy.bridge.anthropic_chat.ids import client_tool_id
from proxy.bridge.names import safe_names, shown
from proxy.bridge.pairing import UNANSWERED, first_unpaired
from proxy.core.errors import ClientRequestError

# Top-level fields copied under the same name.
_SAME = ("max_tokens", "temperature", "top_p")
# Top-level fields handled below; every other one is dropped and named.
_MAPPED = frozenset(
    {"model", "messages", "system", "tools", "tool_choice", "stop_sequences", "metadata", "stream"}
)
# A custom tool's fields with a Chat form; others (cache_control, defer_loading, strict,
# input_examples, eager_input_streaming, allowed_callers...) are dropped and named.
_TOOL_FIELDS = frozenset({"type", "name", "description", "input_schema"})


def messages_to_chat(
    body: dict[str, Any], repair: bool = False
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The Chat body for this Anthropic body, and what it leaves out. With `repair` (the
    route's `request_repair`), a history whose calls and results do not pair is left for the
    Chat exchange to repair (SPEC §11) instead of refused."""
    dropped = Dropped()
    chat: dict[str, Any] = {"model": body.get("model")}
    chat["messages"] = _system(body.get("system"), dropped) + _messages(body, dropped)
    if not repair:
        _refuse_unpaired(chat["messages"])
    _tools(body, chat, dropped)
    for key in _SAME:
        if body.get(key) is not None:
            chat[key] = body[key]
    _sampling(body, chat, dropped)
    if body.get("stream") is True:
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    for key in body:
        if key not in _MAPPED and key not in _SAME:
            dropped.add(key)  # top_k, thinking, context_management, output_config, ...
    return chat, safe_names(dropped.names())


def _system(system: object, dropped: Dropped) -> list[Message]:
    if system is None or system == "" or system == []:
        return []
    text = text_of_blocks(blocks_of(system, "system"), dropped, "system")
    return [{"role": "system", "content": text}]


def _messages(body: dict[str, Any], dropped: Dropped) -> list[Message]:
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise ClientRequestError("`messages` must be a list")
    out: list[Message] = []
    call_order: list[str] = []  # the Chat ids of the last assistant message's calls
    for message in messages:
        if not isinstance(message, dict):
            raise ClientRequestError("every message must be an object")
        role = message.get("role")
        if role not in ("user", "assistant", "system"):
            raise ClientRequestError(f"unknown message role {shown(role)}")
        blocks = blocks_of(message.get("content"), str(role))
        if role == "user":
            out.extend(user_turn(blocks, call_order, dropped))
        elif role == "assistant":
            assistant, call_order = assistant_turn(blocks, dropped)
            out.append(assistant)
        else:  # a system message: kept in place, never hoisted (its position means something)
            out.append({"role": "system", "content": text_of_blocks(blocks, dropped, "system")})
    return out


def _refuse_unpaired(messages: list[Message]) -> None:
    """What Anthropic itself refuses (in its words), and a Chat upstream cannot read: a
    `tool_use` without its `tool_result` in the next message, or a result without its call
    (`proxy.bridge.pairing`)."""
    unpaired = first_unpaired(messages)
    if unpaired is None:
        return
    tool_id = shown(client_tool_id(unpaired.call_id))
    if unpaired.kind == UNANSWERED:
        message = (
            f"`tool_use` ids were found without `tool_result` blocks immediately after: "
            f"{tool_id}. Each `tool_use` block must have a corresponding `tool_result` block "
            "in the next message."
        )
    else:
        message = (
            f"unexpected `tool_use_id` found in `tool_result` blocks: {tool_id}. Each "
            "`tool_result` block must have a corresponding `tool_use` block in the previous "
            "message."
        )
    raise ClientRequestError(message)


def _tools(body: dict[str, Any], chat: dict[str, Any], dropped: Dropped) -> None:
    tools = body.get("tools")
    functions: list[dict[str, Any]] = []
    for tool in tools if isinstance(tools, list) else []:
        function = _function_tool(tool, dropped)
        if function is not None:
            functions.append(function)
    if functions:
        chat["tools"] = functions
    choice = body.get("tool_choice")
    if choice is None:
        return
    if not functions or not isinstance(choice, dict):
        dropped.add("tool_choice")  # nothing it could apply to
        return
    mapped = _tool_choice(choice, {f["function"]["name"] for f in functions})
    if mapped is None:
        dropped.add("tool_choice")
    else:
        chat["tool_choice"] = mapped
    if choice.get("disable_parallel_tool_use") is True and mapped != "none":
        chat["parallel_tool_calls"] = False


def _function_tool(tool: object, dropped: Dropped) -> dict[str, Any] | None:
    if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
        raise ClientRequestError("every tool must be an object with a name")
    kind = tool.get("type")
    if kind not in (None, "custom"):
        dropped.add(str(kind))  # a server tool (web_search_20250305, bash_20250124, ...)
        return None
    for key in tool:
        if key not in _TOOL_FIELDS:
            dropped.add(key)
    function: dict[str, Any] = {"name": tool["name"]}
    if isinstance(tool.get("description"), str):
        function["description"] = tool["description"]
    schema = tool.get("input_schema")
    function["parameters"] = schema if isinstance(schema, dict) else {"type": "object"}
    return {"type": "function", "function": function}


def _tool_choice(choice: dict[str, Any], names: set[str]) -> str | dict[str, Any] | None:
    """auto -> auto, any -> required, tool -> that function, none -> none; None: no Chat
    form (a tool that is not offered upstream, e.g. a dropped server tool)."""
    kind = choice.get("type")
    if kind in ("auto", "none"):
        return str(kind)
    if kind == "any":
        return "required"
    if kind == "tool" and choice.get("name") in names:
        return {"type": "function", "function": {"name": choice["name"]}}
    return None


def _sampling(body: dict[str, Any], chat: dict[str, Any], dropped: Dropped) -> None:
    """Stop sequences and the end user's id."""
    stops = body.get("stop_sequences")
    if isinstance(stops, list) and stops:
        chat["stop"] = stops
    metadata = body.get("metadata")
    if isinstance(metadata, dict):
        for key, value in metadata.items():
            if key == "user_id" and isinstance(value, str) and value:
                chat["user"] = value
            elif key != "user_id":
                dropped.add(f"metadata.{key}")
