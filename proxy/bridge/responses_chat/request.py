"""A Responses request as a Chat Completions request (SPEC §9), field by field.

Every field either maps to its Chat equivalent, is refused (state the proxy does not keep),
or is left out and named in `dropped` (the shell reports it in the response header
`x-toolcall-proxy-dropped-tools` and the route's log line): nothing is lost silently.

- `instructions` -> the first `system` message; `input` -> the history (`history.py`);
- `tools`, `tool_choice` (`tools.py`), `parallel_tool_calls` (with tools only: OpenAI refuses
  it without);
- `max_output_tokens` -> `max_tokens`; `temperature`, `top_p`, `user` as they are;
  `reasoning.effort` -> `reasoning_effort`; `text.format` -> `response_format`;
- `stream` -> `stream` with `stream_options.include_usage` (usage is reported at the end);
- `store: true` is served (nothing is stored either way); `include:
  ["reasoning.encrypted_content"]` is what the bridge always does;
- `previous_response_id`, `conversation`, `item_reference` items and `background: true`
  need stored responses: a 400 that says to send the whole history with `store: false`;
- a call without its output, or an output without its call, is repaired by the Chat
  exchange (SPEC §11: a synthetic output, the output moved up, marked text); with the
  route's `request_repair` off it is a 400 as Responses itself answers it: a Chat upstream
  cannot read such a history (`proxy.bridge.pairing`). A `call_id` that is no string is a
  400 either way.
"""

from __future__ import annotations

from typing import Any

from proxy.bridge.names import safe_names, shown
from proxy.bridge.pairing import UNANSWERED, first_unpaired
from proxy.bridge.responses_chat.history import HistoryBuilder
from proxy.bridge.responses_chat.tools import ToolTable, map_tool_choice, map_tools
from proxy.core.errors import ClientRequestError

STATEFUL_CODE = "unsupported_stateful_request"
# Fields whose meaning needs nothing from the upstream, or that the bridge honours itself.
SERVED = frozenset({"model", "input", "instructions", "tools", "tool_choice", "stream", "store"})
SAME_NAME = ("temperature", "top_p", "user")
HONOURED_INCLUDES = frozenset({"reasoning.encrypted_content"})


def responses_to_chat(
    body: dict[str, Any], repair: bool = False
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The Chat body for a Responses body, and the names of what it left out. With `repair`
    (the route's `request_repair`), a history whose calls and outputs do not pair is left for
    the Chat exchange to repair (SPEC §11) instead of refused."""
    _refuse_stateful(body)
    dropped: list[str] = []
    mapped = map_tools(body.get("tools"))
    dropped += mapped.dropped
    chat: dict[str, Any] = {}
    if "model" in body:
        chat["model"] = body["model"]
    chat["messages"] = _messages(body, mapped.table, dropped, repair)
    if mapped.tools:
        chat["tools"] = mapped.tools
        choice, unsaid = map_tool_choice(body.get("tool_choice"), mapped.table, mapped.names)
        dropped += unsaid
        if choice is not None:
            chat["tool_choice"] = choice
        if isinstance(body.get("parallel_tool_calls"), bool):
            chat["parallel_tool_calls"] = body["parallel_tool_calls"]
    for key in SAME_NAME:
        if body.get(key) is not None:
            chat[key] = body[key]
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = body["max_output_tokens"]
    _reasoning(body.get("reasoning"), chat, dropped)
    _text(body.get("text"), chat, dropped)
    if body.get("stream") is True:
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    dropped += _unmapped(body)
    return chat, safe_names(dropped)


def _refuse_stateful(body: dict[str, Any]) -> None:
    """SPEC §9: a request that leans on stored state is refused, never served without its
    context."""
    stateful = [key for key in ("previous_response_id", "conversation") if body.get(key)]
    if body.get("background") is True:
        stateful.append("background")
    items = body.get("input")
    if isinstance(items, list) and any(
        isinstance(item, dict) and item.get("type") == "item_reference" for item in items
    ):
        stateful.append("item_reference")
    if stateful:
        raise ClientRequestError(
            f"This endpoint keeps no stored responses, so `{stateful[0]}` cannot be served: "
            "send the whole conversation in `input` with `store: false` instead.",
            code=STATEFUL_CODE,
        )


def _messages(
    body: dict[str, Any], table: ToolTable, dropped: list[str], repair: bool
) -> list[Any]:
    builder = HistoryBuilder(table)
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        builder.messages.append({"role": "system", "content": instructions})
    elif isinstance(instructions, list):  # a prompt's items: the conversation's start
        for item in instructions:
            if isinstance(item, dict):
                builder.add(item)
    items = body.get("input")
    if isinstance(items, str):
        builder.add({"type": "message", "role": "user", "content": items})
    elif isinstance(items, list):
        for item in items:
            if isinstance(item, dict):
                builder.add(item)
    elif items is not None:
        raise ClientRequestError(
            "'input' must be a string or a list of items", code="invalid_input"
        )
    messages = builder.finish()
    dropped += builder.dropped
    if not repair:
        _refuse_unpaired(messages)
    return messages


def _refuse_unpaired(messages: list[dict[str, Any]]) -> None:
    """A call without its output, or an output without its call, is what Responses itself
    refuses (in these words), and a Chat upstream cannot read (`proxy.bridge.pairing`)."""
    unpaired = first_unpaired(messages)
    if unpaired is None:
        return
    if unpaired.kind == UNANSWERED:
        message = f"No tool output found for function call {shown(unpaired.call_id)}."
    else:
        message = (
            f"No tool call found for function call output with call_id {shown(unpaired.call_id)}."
        )
    raise ClientRequestError(
        message + " Every call in `input` needs its output right after the call's turn.",
        code="invalid_tool_output",
    )


def _reasoning(reasoning: object, chat: dict[str, Any], dropped: list[str]) -> None:
    if not isinstance(reasoning, dict):
        return
    for key, value in reasoning.items():
        if value is None:
            continue
        if key == "effort":
            chat["reasoning_effort"] = value
        else:  # summaries: the bridge hands out the reasoning text itself, never a summary
            dropped.append(f"reasoning.{key}")


def _text(text: object, chat: dict[str, Any], dropped: list[str]) -> None:
    if not isinstance(text, dict):
        return
    for key, value in text.items():
        if value is None:
            continue
        if key == "format":
            response_format = _response_format(value)
            if response_format is not None:
                chat["response_format"] = response_format
        else:
            dropped.append(f"text.{key}")


def _response_format(fmt: object) -> dict[str, Any] | None:
    """Responses' flat `text.format` as Chat's `response_format` (plain text: none)."""
    if not isinstance(fmt, dict) or fmt.get("type") == "text":
        return None
    if fmt.get("type") != "json_schema":
        return dict(fmt)
    schema = {k: v for k, v in fmt.items() if k != "type"}
    return {"type": "json_schema", "json_schema": schema}


def _unmapped(body: dict[str, Any]) -> list[str]:
    """Every other field the client set: Chat has no word for it here."""
    handled = SERVED | {"parallel_tool_calls", "max_output_tokens", "reasoning", "text"}
    out: list[str] = []
    for key, value in body.items():
        if key in handled or key in SAME_NAME or value is None:
            continue
        if key == "include":
            out += [_include(v) for v in _list(value) if v not in HONOURED_INCLUDES]
        elif key == "background" or (key == "truncation" and value == "disabled"):
            continue  # false / the default: nothing asked for
        elif key == "stream_options":
            continue  # Responses' own stream options (obfuscation): the bridge writes its own
        else:
            out.append(key)
    return out


def _list(value: object) -> list[object]:
    """The values of `include` that can be named (a string each; anything else as one)."""
    values = value if isinstance(value, list) else [value]
    return [v if isinstance(v, str) else None for v in values]


def _include(value: object) -> str:
    return f"include:{value}" if isinstance(value, str) else "include"
