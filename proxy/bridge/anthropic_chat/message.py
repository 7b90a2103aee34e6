"""Response direction, whole messages: the Chat exchange's chat.completion -> an Anthropic
`message` (SPEC §9), with the same mapping as a stream: reasoning -> a signed `thinking`
block, content (and refusal) -> a `text` block, tool calls -> `tool_use` blocks (ids
`call_X` -> `toolu_X`), `finish_reason` -> `stop_reason`, usage -> Anthropic usage."""

from __future__ import annotations

from typing import Any

import orjson

from proxy.bridge.anthropic_chat.ids import client_tool_id
from proxy.bridge.anthropic_chat.mapping import anthropic_usage, stop_reason
from proxy.bridge.anthropic_chat.reasoning import sign_reasoning
from proxy.core.errors import UpstreamStreamError


def chat_to_message(completion: bytes, message_id: str, model: str) -> dict[str, Any]:
    """The Anthropic message for a chat.completion body; raises UpstreamStreamError for a body
    that is none (not JSON, no choices, or an error object in a 2xx answer)."""
    try:
        parsed = orjson.loads(completion)
    except orjson.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict):
        raise UpstreamStreamError("the upstream answered with a body that is not a JSON object")
    choices = parsed.get("choices")
    first = choices[0] if isinstance(choices, list) and choices else None
    message = first.get("message") if isinstance(first, dict) else None
    if not isinstance(first, dict) or not isinstance(message, dict):
        error = parsed.get("error")
        detail = error.get("message") if isinstance(error, dict) else None
        raise UpstreamStreamError(str(detail or "the upstream answered without a message"))
    content = _content(message)
    tools = any(block["type"] == "tool_use" for block in content)
    upstream_model = parsed.get("model")
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": upstream_model if isinstance(upstream_model, str) and upstream_model else model,
        "content": content,
        "stop_reason": stop_reason(first.get("finish_reason"), tools),
        "stop_sequence": None,
        "usage": anthropic_usage(parsed.get("usage")),
    }


def _content(message: dict[str, Any]) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    reasoning = message.get("reasoning_content")
    if not isinstance(reasoning, str):
        reasoning = message.get("reasoning")
    if isinstance(reasoning, str) and reasoning:
        signature = sign_reasoning(reasoning)
        blocks.append({"type": "thinking", "thinking": reasoning, "signature": signature})
    text = "".join(
        value for key in ("content", "refusal") if isinstance(value := message.get(key), str)
    )
    if text:
        blocks.append({"type": "text", "text": text})
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else []:
        if isinstance(call, dict):
            blocks.append(_tool_use(call))
    return blocks


def _tool_use(call: dict[str, Any]) -> dict[str, Any]:
    function = call.get("function")
    function = function if isinstance(function, dict) else {}
    arguments = function.get("arguments")
    try:
        parsed = orjson.loads(arguments) if isinstance(arguments, str) and arguments else arguments
    except orjson.JSONDecodeError:
        parsed = {}  # Anthropic's input is an object; arguments that are none cannot be one
    return {
        "type": "tool_use",
        "id": client_tool_id(str(call.get("id", ""))),
        "name": str(function.get("name", "")),
        "input": parsed if isinstance(parsed, dict) else {},
    }
