"""Responses content parts as Chat Completions content (SPEC §9).

Text parts join into a plain string where a message holds nothing else (every Chat server
takes a string; not all take part lists, least of all for `system`); images become
`image_url` parts (a URL or a base64 data URL); files with inline data become `file` parts.
What Chat has no part for (a file or image known only by an id on the provider's storage, a
file by URL, audio) is left out and named.
"""

from __future__ import annotations

from typing import Any

from proxy.core.jsontext import dumps

TEXT_JOIN = "\n\n"


def chat_content(content: object, dropped: list[str]) -> str | list[dict[str, Any]]:
    """A message item's `content` (a string or parts) as Chat content."""
    if isinstance(content, str):
        return content
    parts: list[dict[str, Any]] = []
    for part in content if isinstance(content, list) else ():
        mapped = _part(part, dropped) if isinstance(part, dict) else None
        if mapped is not None:
            parts.append(mapped)
    if all(part["type"] == "text" for part in parts):
        return TEXT_JOIN.join(part["text"] for part in parts)
    return parts


def _part(part: dict[str, Any], dropped: list[str]) -> dict[str, Any] | None:
    kind = part.get("type")
    if kind in ("input_text", "output_text", "text", "refusal"):
        text = part.get("refusal") if kind == "refusal" else part.get("text")
        return {"type": "text", "text": text if isinstance(text, str) else ""}
    if kind == "input_image":
        return _image(part, dropped)
    if kind == "input_file":
        return _file(part, dropped)
    dropped.append(str(kind))
    return None


def _image(part: dict[str, Any], dropped: list[str]) -> dict[str, Any] | None:
    url = part.get("image_url")
    if not isinstance(url, str) or not url:
        dropped.append("input_image.file_id")
        return None
    image: dict[str, Any] = {"url": url}
    if isinstance(part.get("detail"), str):
        image["detail"] = part["detail"]
    return {"type": "image_url", "image_url": image}


def _file(part: dict[str, Any], dropped: list[str]) -> dict[str, Any] | None:
    data = part.get("file_data")
    if not isinstance(data, str) or not data:
        dropped.append("input_file.file_url" if part.get("file_url") else "input_file.file_id")
        return None
    file: dict[str, Any] = {"file_data": data}
    if isinstance(part.get("filename"), str):
        file["filename"] = part["filename"]
    return {"type": "file", "file": file}


def text_of(content: object) -> str:
    """The text of an assistant message item (its parts concatenated, as they were one
    message), refusals included."""
    if isinstance(content, str):
        return content
    texts: list[str] = []
    for part in content if isinstance(content, list) else ():
        if isinstance(part, dict):
            value = part.get("refusal") if part.get("type") == "refusal" else part.get("text")
            if isinstance(value, str):
                texts.append(value)
    return "".join(texts)


def tool_output(output: object, dropped: list[str]) -> tuple[str, list[dict[str, Any]]]:
    """A call output's text for the `tool` message, and its images (a Chat `tool` message
    carries text only: they follow in a user message)."""
    if isinstance(output, str):
        return output, []
    if not isinstance(output, list):
        return "" if output is None else dumps(output).decode(), []
    texts: list[str] = []
    media: list[dict[str, Any]] = []
    for part in output:
        mapped = _part(part, dropped) if isinstance(part, dict) else None
        if mapped is None:
            continue
        if mapped["type"] == "text":
            texts.append(mapped["text"])
        else:
            media.append(mapped)
    return TEXT_JOIN.join(texts), media
