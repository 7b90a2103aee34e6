"""A request body as the inspector shows it (SPEC §12): its messages' structure, content only
when asked for.

One function per shape of history item, for every surface the proxy repairs: Chat Completions'
`messages` (`tool_calls`, `tool_call_id`), Anthropic Messages' content blocks (`tool_use`,
`tool_result`) and the Responses API's `input` items (`function_call`,
`function_call_output`). A bridge's upstream request is one of these shapes too. What a
summary holds is bounded: each text is cut, and only the newest messages that fit a budget of
bytes are kept (the older ones are counted).
"""

from __future__ import annotations

from typing import Any

import orjson

# A text (message content, arguments, a tool result) shown with content on is cut here.
TEXT_CHARS = 2000
# A name or an id longer than this is cut (a hostile upstream may send any length).
NAME_CHARS = 200
# A body larger than this is not parsed for the inspector: its size is shown instead.
MAX_PARSED_BYTES = 4 * 1024 * 1024
# The newest messages kept of one history at most (the older ones are counted): what an
# exchange changed is in its last turns, and a long agent history costs no more.
MAX_MESSAGES = 64

Part = dict[str, Any]


def short(value: object, limit: int = NAME_CHARS) -> str | None:
    """A name, id or model as text of bounded length (None stays None)."""
    if value is None:
        return None
    text = value if isinstance(value, str) else orjson.dumps(value, default=str).decode()
    return text if len(text) <= limit else text[:limit] + "…"


def _text_part(kind: str, value: object, content: bool) -> Part:
    """A text, as its size (structure) or, with content on, its (cut) text too."""
    text = value if isinstance(value, str) else _flatten(value)
    part: Part = {"kind": kind, "chars": len(text)}
    if content:
        part["text"] = text[:TEXT_CHARS]
        if len(text) > TEXT_CHARS:
            part["cut"] = True
    return part


def _flatten(value: object) -> str:
    """Text blocks joined (a list of `{"type": "text", "text": ...}`), else the JSON of it."""
    if isinstance(value, list):
        texts = [b.get("text") for b in value if isinstance(b, dict)]
        if texts and all(isinstance(t, str) for t in texts):
            return "\n".join(t for t in texts if isinstance(t, str))
    if value is None:
        return ""
    return orjson.dumps(value, default=str).decode()


def _call(name: object, call_id: object, arguments: object, content: bool) -> Part:
    args = arguments if isinstance(arguments, str) else _flatten(arguments)
    part: Part = {
        "kind": "call",
        "name": short(name),
        "id": short(call_id),
        "args_bytes": len(args),
    }
    if content:
        part["args"] = args[:TEXT_CHARS]
    return part


def _result(call_id: object, output: object, content: bool) -> Part:
    part = _text_part("result", output, content)
    part["id"] = short(call_id)
    return part


def _block(block: object, content: bool) -> Part:
    """One content block (Anthropic's, or a Chat Completions content part)."""
    if not isinstance(block, dict):
        return _text_part("text", block, content)
    kind = block.get("type")
    if kind == "tool_use":
        return _call(block.get("name"), block.get("id"), block.get("input"), content)
    if kind == "tool_result":
        return _result(block.get("tool_use_id"), block.get("content"), content)
    if kind in ("text", "input_text", "output_text"):
        return _text_part("text", block.get("text"), content)
    return {"kind": short(kind) or "part"}  # an image, a document, thinking: named only


def _chat_calls(message: dict[str, Any], content: bool) -> list[Part]:
    raw = message.get("tool_calls")
    parts = []
    for call in raw if isinstance(raw, list) else []:
        if isinstance(call, dict):
            fn = call.get("function")
            fn = fn if isinstance(fn, dict) else {}
            parts.append(_call(fn.get("name"), call.get("id"), fn.get("arguments"), content))
    return parts


def _message(message: object, content: bool) -> dict[str, Any]:
    """One history item: its role (or type) and its parts."""
    if not isinstance(message, dict):
        return {"role": "?", "parts": []}
    kind = message.get("type")
    if kind == "function_call":  # Responses
        call = _call(message.get("name"), message.get("call_id"), message.get("arguments"), content)
        return {"role": "function_call", "parts": [call]}
    if kind == "function_call_output":
        return {
            "role": "function_call_output",
            "parts": [_result(message.get("call_id"), message.get("output"), content)],
        }
    parts: list[Part] = []
    body = message.get("content")
    if isinstance(body, list):
        parts += [_block(block, content) for block in body]
    elif body is not None:
        parts.append(_text_part("text", body, content))
    parts += _chat_calls(message, content)
    if "tool_call_id" in message:  # Chat Completions' tool result: its id, then its content
        parts = [{"kind": "result_for", "id": short(message.get("tool_call_id"))}, *parts]
    return {"role": short(message.get("role") or kind) or "?", "parts": parts}


def _history(body: dict[str, Any]) -> list[Any]:
    for key in ("messages", "input"):
        value = body.get(key)
        if isinstance(value, list):
            return value
        if isinstance(value, str):  # Responses' input as one string
            return [{"role": "user", "content": value}]
    return []


def _tool_names(body: dict[str, Any]) -> list[str]:
    """The offered tools' names (Chat's `function.name`, the others' `name`)."""
    raw = body.get("tools")
    names = []
    for tool in raw if isinstance(raw, list) else []:
        if isinstance(tool, dict):
            fn = tool.get("function")
            name = fn.get("name") if isinstance(fn, dict) else tool.get("name")
            if name is not None:
                names.append(short(name) or "")
    return names


def summarize(raw: bytes, content: bool, budget: int) -> dict[str, Any]:
    """The request body `raw` as the inspector shows it, in about `budget` bytes of JSON."""
    if len(raw) > MAX_PARSED_BYTES:
        return {"bytes": len(raw), "too_large": True, "messages": [], "omitted": 0}
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {"bytes": len(raw), "not_json": True, "messages": [], "omitted": 0}
    if not isinstance(body, dict):
        return {"bytes": len(raw), "not_json": True, "messages": [], "omitted": 0}
    history = _history(body)
    kept: list[dict[str, Any]] = []
    spent = 0
    oldest = max(0, len(history) - MAX_MESSAGES)
    for position in range(len(history) - 1, oldest - 1, -1):  # newest first, while they fit
        message = _message(history[position], content)
        message["at"] = position
        size = len(orjson.dumps(message))
        if kept and spent + size > budget:
            break
        if size > budget:  # the newest alone is too large: its parts are counted
            message = {"role": message["role"], "parts": [], "at": position}
            message["parts_omitted"] = len(_message(history[position], False)["parts"])
        kept.append(message)
        spent += size
    kept.reverse()
    summary: dict[str, Any] = {
        "bytes": len(raw),
        "tools": _tool_names(body)[:64],
        "messages": kept,
        "omitted": len(history) - len(kept),
    }
    system = body.get("system") if "system" in body else body.get("instructions")
    if system is not None:
        summary["system"] = _text_part("text", system, content)
    return summary
