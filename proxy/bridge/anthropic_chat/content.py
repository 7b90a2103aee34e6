"""Anthropic content blocks -> Chat Completions messages and content parts (SPEC §9).

One Anthropic message can become several Chat messages: a user turn's `tool_result` blocks
become one `tool` message each, in the order of the calls they answer and before the turn's
other content (Chat wants a call's answers right after the assistant message that made it);
images a tool returned follow in a user message, since few Chat upstreams take images in a
`tool` message.
"""

from __future__ import annotations

from typing import Any

from proxy.bridge.anthropic_chat.dropped import Dropped
from proxy.bridge.anthropic_chat.ids import chat_tool_id
from proxy.bridge.anthropic_chat.reasoning import is_proxy_signature, signed_reasoning
from proxy.core.errors import ClientRequestError
from proxy.core.jsontext import dumps

Part = dict[str, Any]
Message = dict[str, Any]

ERROR_PREFIX = "Error: "  # SPEC §9: an is_error result keeps its text, marked as an error


def blocks_of(content: object, role: str) -> list[dict[str, Any]]:
    """A message's content as blocks: a string is one text block."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list) and all(isinstance(block, dict) for block in content):
        return content
    raise ClientRequestError(f"a {role} message's content must be a string or a list of blocks")


def note_cache_control(block: dict[str, Any], dropped: Dropped) -> None:
    if "cache_control" in block:
        dropped.add("cache_control")


def text_of_blocks(blocks: list[dict[str, Any]], dropped: Dropped, where: str) -> str:
    """The text of text blocks (a system prompt): other blocks are dropped and named."""
    texts: list[str] = []
    for block in blocks:
        note_cache_control(block, dropped)
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        else:
            dropped.add(f"{where}:{block.get('type')}")
    return "\n\n".join(texts)


# -- parts: text, image, document ---------------------------------------------------------------


def image_part(block: dict[str, Any], dropped: Dropped) -> Part | None:
    """base64 -> a data URL, url -> the URL; a Files API reference has no Chat form."""
    source = block.get("source")
    if not isinstance(source, dict):
        dropped.add("image")
        return None
    kind = source.get("type")
    if kind == "base64":
        url = f"data:{source.get('media_type', 'image/png')};base64,{source.get('data', '')}"
    elif kind == "url" and isinstance(source.get("url"), str):
        url = source["url"]
    else:
        dropped.add(f"image:{kind}")
        return None
    return {"type": "image_url", "image_url": {"url": url}}


def document_part(block: dict[str, Any], dropped: Dropped) -> Part | None:
    """Plain text (a `text` source, or a `content` source's text blocks) -> a text part, so
    every upstream reads it; a base64 PDF -> Chat's `file` part: the proxy cannot extract a
    PDF's text, and an upstream without PDF input refuses the request visibly, which beats a
    silent loss. A URL document has no Chat form (the proxy fetches nothing)."""
    source = block.get("source")
    kind = source.get("type") if isinstance(source, dict) else None
    if "citations" in block:
        dropped.add("citations")
    title = block.get("title")
    if kind == "text" and isinstance(source, dict):
        text = str(source.get("data", ""))
    elif kind == "content" and isinstance(source, dict):
        inner = source.get("content")
        text = text_of_blocks(blocks_of(inner, "document"), dropped, "document")
    elif kind == "base64" and isinstance(source, dict):
        media = source.get("media_type", "application/pdf")
        file: dict[str, Any] = {"file_data": f"data:{media};base64,{source.get('data', '')}"}
        file["filename"] = title if isinstance(title, str) and title else "document.pdf"
        return {"type": "file", "file": file}
    else:
        dropped.add(f"document:{kind}")
        return None
    if isinstance(title, str) and title:
        text = f"{title}\n\n{text}"
    return {"type": "text", "text": text}


def user_part(block: dict[str, Any], dropped: Dropped) -> Part | None:
    kind = block.get("type")
    note_cache_control(block, dropped)
    if kind == "text":
        return {"type": "text", "text": str(block.get("text", ""))}
    if kind == "image":
        return image_part(block, dropped)
    if kind == "document":
        return document_part(block, dropped)
    dropped.add(str(kind))  # search_result, container_upload, ...: no Chat form
    return None


def user_message(parts: list[Part]) -> Message:
    """One text part is sent as a plain string, which every Chat upstream takes."""
    if len(parts) == 1 and parts[0]["type"] == "text":
        return {"role": "user", "content": parts[0]["text"]}
    return {"role": "user", "content": parts}


# -- user turns: tool results first -------------------------------------------------------------


def tool_result_messages(
    results: list[dict[str, Any]], call_order: list[str], dropped: Dropped
) -> tuple[list[Message], list[Part]]:
    """One `tool` message per result, in the order of the calls (results the previous
    assistant message did not call keep their own order, after); and the results' images."""
    position = {call_id: i for i, call_id in enumerate(call_order)}
    ordered = sorted(
        enumerate(results),
        key=lambda pair: (position.get(_result_id(pair[1]), len(position)), pair[0]),
    )
    messages: list[Message] = []
    images: list[Part] = []
    for _, result in ordered:
        note_cache_control(result, dropped)
        text, result_images = _tool_result_content(result.get("content"), dropped)
        if result.get("is_error") is True:
            text = ERROR_PREFIX + text
        messages.append({"role": "tool", "tool_call_id": _result_id(result), "content": text})
        images.extend(result_images)
    return messages, images


def _result_id(result: dict[str, Any]) -> str:
    return chat_tool_id(_tool_id(result, "tool_use_id", "tool_result"))


def _tool_id(block: dict[str, Any], key: str, kind: str) -> str:
    """A `tool_use` block's `id` or a `tool_result`'s `tool_use_id`: Anthropic requires a
    string, and a Chat upstream pairs a call with its answer by it."""
    tool_id = block.get(key)
    if not isinstance(tool_id, str) or not tool_id:
        raise ClientRequestError(f"every {kind} block needs an `{key}` string")
    return tool_id


def _tool_result_content(content: object, dropped: Dropped) -> tuple[str, list[Part]]:
    """A tool result's text (its text parts joined) and its images."""
    if content is None:
        return "", []
    texts: list[str] = []
    images: list[Part] = []
    for block in blocks_of(content, "tool_result"):
        part = user_part(block, dropped)
        if part is None:
            continue
        if part["type"] == "text":
            texts.append(part["text"])
        else:
            images.append(part)
    return "\n".join(texts), images


def user_turn(
    blocks: list[dict[str, Any]], call_order: list[str], dropped: Dropped
) -> list[Message]:
    """A user message: its tool results as `tool` messages, then one user message with the
    results' images and the turn's own content, in the order it came."""
    results = [block for block in blocks if block.get("type") == "tool_result"]
    tools, parts = tool_result_messages(results, call_order, dropped)
    for block in blocks:
        if block.get("type") != "tool_result":
            part = user_part(block, dropped)
            if part is not None:
                parts.append(part)
    return [*tools, user_message(parts)] if parts else tools


# -- assistant turns ----------------------------------------------------------------------------


def assistant_turn(blocks: list[dict[str, Any]], dropped: Dropped) -> tuple[Message, list[str]]:
    """An assistant message: text, `tool_use` -> `tool_calls`, the proxy's own thinking ->
    `reasoning_content`. Returns it and its calls' Chat ids (what the next turn answers)."""
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in blocks:
        note_cache_control(block, dropped)
        kind = block.get("type")
        if kind == "text":
            texts.append(str(block.get("text", "")))
        elif kind == "tool_use":
            calls.append(_tool_call(block))
        elif kind == "thinking" and is_proxy_signature(block.get("signature")):
            reasoning.append(_reasoning_text(block))
        elif kind == "thinking":  # a provider's own signature: a Chat upstream cannot read it
            dropped.add("thinking_block")
        else:  # redacted_thinking, server_tool_use, web_search_tool_result, ...
            dropped.add(str(kind))
    message: Message = {"role": "assistant", "content": "".join(texts)}
    if reasoning:
        message["reasoning_content"] = "".join(reasoning)
    if calls:
        message["tool_calls"] = calls
    return message, [call["id"] for call in calls]


def _reasoning_text(block: dict[str, Any]) -> str:
    """The text the proxy signed (what the upstream wrote, whatever the client shows or
    keeps of `thinking`); the block's own text if the signature was damaged."""
    text = signed_reasoning(block.get("signature"))
    return text if text is not None else str(block.get("thinking", ""))


def _tool_call(block: dict[str, Any]) -> dict[str, Any]:
    arguments = block.get("input")
    text = arguments if isinstance(arguments, str) else dumps(arguments or {}).decode()
    return {
        "id": chat_tool_id(_tool_id(block, "id", "tool_use")),
        "type": "function",
        "function": {"name": str(block.get("name", "")), "arguments": text},
    }
