"""What the stream and the whole message both build: Responses items from Chat pieces, the
response object, its status and usage (SPEC §9).

Item ids are minted from the exchange's entropy (`msg_`, `fc_`, `ctc_`, `rs_`); a call's
`call_id` is the Chat call's id as the Chat exchange decided it (SPEC §2: unique, or the
upstream's own where good), so the next request's history maps back without state.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from proxy.bridge.responses_chat.reasoning import seal
from proxy.bridge.responses_chat.tools import ClientTool, ToolTable

Entropy = Callable[[int], bytes]
# SPEC §9: a cut-off answer is `incomplete`, with the reason Responses names.
INCOMPLETE_REASONS = {"length": "max_output_tokens", "content_filter": "content_filter"}
# The request's fields a response object echoes.
ECHOED = (
    "instructions",
    "max_output_tokens",
    "metadata",
    "parallel_tool_calls",
    "reasoning",
    "temperature",
    "text",
    "tool_choice",
    "tools",
    "top_p",
    "user",
)


def mint(entropy: Entropy, prefix: str) -> str:
    return prefix + entropy(12).hex()


@dataclass(slots=True)
class ResponseHead:
    """The response object's identity and what it echoes of the request."""

    id: str
    created_at: object
    model: object
    echoed: dict[str, Any]
    tools: ToolTable

    @classmethod
    def for_request(cls, body: dict[str, Any], tools: ToolTable, entropy: Entropy) -> ResponseHead:
        echoed = {key: body[key] for key in ECHOED if key in body}
        echoed.setdefault("tools", [])
        echoed.setdefault("tool_choice", "auto")
        echoed.setdefault("parallel_tool_calls", True)
        return cls(mint(entropy, "resp_"), None, body.get("model"), echoed, tools)

    def adopt(self, chat: dict[str, Any]) -> None:
        """The upstream's `created` and `model`, from its first chunk or message."""
        if self.created_at is None and isinstance(chat.get("created"), int | float):
            self.created_at = chat["created"]
        if isinstance(chat.get("model"), str) and chat["model"]:
            self.model = chat["model"]

    def response(
        self,
        status: str,
        output: list[dict[str, Any]],
        usage: dict[str, Any] | None = None,
        incomplete: str | None = None,
    ) -> dict[str, Any]:
        response: dict[str, Any] = {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at if self.created_at is not None else 0,
            "status": status,
            "model": self.model,
            "output": output,
            "error": None,
            "incomplete_details": {"reason": incomplete} if incomplete else None,
            "previous_response_id": None,
            "usage": usage,
        }
        response.update(self.echoed)
        return response


def status_of(finish_reason: object) -> tuple[str, str | None]:
    """The response's status and its `incomplete_details.reason` for a Chat finish."""
    reason = INCOMPLETE_REASONS.get(finish_reason) if isinstance(finish_reason, str) else None
    return ("incomplete", reason) if reason else ("completed", None)


def responses_usage(usage: object) -> dict[str, Any] | None:
    """Chat usage in Responses' words (cached and reasoning tokens in their details)."""
    if not isinstance(usage, dict):
        return None
    prompt = _count(usage.get("prompt_tokens"))
    completion = _count(usage.get("completion_tokens"))
    total = usage.get("total_tokens")
    prompt_details = usage.get("prompt_tokens_details")
    completion_details = usage.get("completion_tokens_details")
    cached = prompt_details.get("cached_tokens") if isinstance(prompt_details, dict) else None
    thought = (
        completion_details.get("reasoning_tokens") if isinstance(completion_details, dict) else None
    )
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": _count(cached)},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": _count(thought)},
        "total_tokens": _count(total) if total is not None else prompt + completion,
    }


def _count(value: object) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


# -- items -----------------------------------------------------------------------------------


def message_item(
    item_id: str, status: str, text: str | None, refusal: str | None
) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if text is not None:
        content.append(text_part(text))
    if refusal is not None:
        content.append({"type": "refusal", "refusal": refusal})
    return {
        "id": item_id,
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": content,
    }


def text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def reasoning_item(item_id: str, text: str) -> dict[str, Any]:
    """The upstream's reasoning text, readable (`content`) and sealed for the next request
    (`encrypted_content`: Codex does not send `content` back)."""
    return {
        "id": item_id,
        "type": "reasoning",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": text}],
        "encrypted_content": seal(text),
        "status": "completed",
    }


def call_item(
    item_id: str, call_id: str, tool: ClientTool, arguments: str, status: str
) -> dict[str, Any]:
    """A `function_call`, or for a custom tool a `custom_tool_call` with its input string."""
    item: dict[str, Any]
    if tool.kind == "custom":
        item = {
            "id": item_id,
            "type": "custom_tool_call",
            "call_id": call_id,
            "name": tool.name,
            "input": custom_input(arguments),
            "status": status,
        }
    else:
        item = {
            "id": item_id,
            "type": "function_call",
            "call_id": call_id,
            "name": tool.name,
            "arguments": arguments,
            "status": status,
        }
    if tool.namespace:
        item["namespace"] = tool.namespace
    return item


def custom_input(arguments: str) -> str:
    """A custom tool's input from the function arguments the upstream wrote: `{"input": s}`
    as asked; a model that wrote the raw input (not JSON) is taken at its word."""
    try:
        parsed = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return arguments
    if isinstance(parsed, dict):
        value = parsed.get("input")
        if isinstance(value, str):
            return value
        strings = [v for v in parsed.values() if isinstance(v, str)]
        if len(parsed) == 1 and strings:
            return strings[0]
    return arguments
