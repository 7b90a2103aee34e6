"""Chat Completions as an API surface: its request body, its exchange, its error shape."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from proxy.chat.exchange import ChatExchange, RouteRules
from proxy.errors import ClientRequestError, openai_error_response
from proxy.surface_codec import SurfaceCodec
from proxy.surfaces import CHAT_COMPLETIONS


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


def parse_chat_body(raw: bytes) -> dict[str, Any]:
    body = parse_json_object(raw)
    if not isinstance(body.get("messages"), list):
        raise ClientRequestError("'messages' must be a list", code="invalid_messages")
    return body


def new_chat_exchange(
    body: dict[str, Any], raw: bytes, rules: RouteRules, entropy: Callable[[int], bytes]
) -> ChatExchange:
    return ChatExchange(body, raw, rules, entropy=entropy)


CHAT_CODEC = SurfaceCodec(
    surface=CHAT_COMPLETIONS,
    parse_body=parse_chat_body,
    new_exchange=new_chat_exchange,
    error_response=openai_error_response,
)

__all__ = ["CHAT_CODEC", "parse_chat_body", "parse_json_object"]
