"""A whole `chat.completion` as a Responses `response` object (SPEC §9, non-streaming).

The same items the stream builds, in the same order (reasoning, message, calls), the same
status (`incomplete` for a `length` or `content_filter` finish) and usage.
"""

from __future__ import annotations

from typing import Any

import orjson

from proxy.bridge.responses_chat.output import (
    Entropy,
    ResponseHead,
    call_item,
    message_item,
    mint,
    reasoning_item,
    responses_usage,
    status_of,
)
from proxy.core.jsontext import dumps


def chat_to_response(data: bytes, head: ResponseHead, entropy: Entropy) -> bytes | None:
    """The client's body for the Chat exchange's answer; None when it is not a JSON object.
    An OpenAI error body (some servers answer errors with 200) goes out as it is: Responses
    clients read the same shape."""
    try:
        parsed = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(parsed, dict):
        return None
    if "error" in parsed and "choices" not in parsed:
        return data
    head.adopt(parsed)
    choice = _first_choice(parsed.get("choices"))
    message = choice.get("message")
    message = message if isinstance(message, dict) else {}
    status, reason = status_of(choice.get("finish_reason"))
    output = _items(message, head, entropy, status)
    return dumps(head.response(status, output, responses_usage(parsed.get("usage")), reason))


def _first_choice(choices: object) -> dict[str, Any]:
    for choice in choices if isinstance(choices, list) else ():
        if isinstance(choice, dict) and choice.get("index", 0) == 0:
            return choice
    return {}


def _items(
    message: dict[str, Any], head: ResponseHead, entropy: Entropy, status: str
) -> list[dict[str, Any]]:
    output: list[dict[str, Any]] = []
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if isinstance(reasoning, str) and reasoning:
        output.append(reasoning_item(mint(entropy, "rs_"), reasoning))
    text = message.get("content")
    text = text if isinstance(text, str) and text else None
    refusal = message.get("refusal")
    refusal = refusal if isinstance(refusal, str) and refusal else None
    if text is not None or refusal is not None:
        output.append(message_item(mint(entropy, "msg_"), status, text, refusal))
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else ():
        item = _call(call, head, entropy)
        if item is not None:
            output.append(item)
    return output


def _call(call: object, head: ResponseHead, entropy: Entropy) -> dict[str, Any] | None:
    if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
        return None
    function = call["function"]
    tool = head.tools.lookup(str(function.get("name") or ""))
    arguments = function.get("arguments")
    if not isinstance(arguments, str):
        arguments = dumps(arguments if arguments is not None else {}).decode()
    item_id = mint(entropy, "ctc_" if tool.kind == "custom" else "fc_")
    return call_item(item_id, str(call.get("id") or ""), tool, arguments, "completed")
