"""A request body as every surface reads it first: one JSON object, or the 400 that says why
not (SPEC §6)."""

from __future__ import annotations

from typing import Any

import orjson

from proxy.core.errors import ClientRequestError


def parse_json_object(raw: bytes) -> dict[str, Any]:
    """The request body as a JSON object, or the 400 that says why not (every surface)."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ClientRequestError(
            f"request body is not valid JSON: {exc}", code="invalid_json"
        ) from None
    if not isinstance(body, dict):
        raise ClientRequestError("request body must be a JSON object", code="invalid_body")
    return body


def parse_messages_body(raw: bytes) -> dict[str, Any]:
    """A body with a `messages` list: Chat Completions' and Anthropic Messages' rule."""
    body = parse_json_object(raw)
    if not isinstance(body.get("messages"), list):
        raise ClientRequestError("'messages' must be a list", code="invalid_messages")
    return body
