"""Chat Completions as an API surface: its request body, its exchange, its error shape."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from proxy.chat.exchange import ChatExchange
from proxy.core.body import parse_messages_body
from proxy.core.errors import openai_error_response
from proxy.core.rounds import RouteRules
from proxy.core.surface_codec import SurfaceCodec
from proxy.core.surfaces import CHAT_COMPLETIONS


def new_chat_exchange(
    body: dict[str, Any], raw: bytes, rules: RouteRules, entropy: Callable[[int], bytes]
) -> ChatExchange:
    return ChatExchange(body, raw, rules, entropy=entropy)


CHAT_CODEC = SurfaceCodec(
    surface=CHAT_COMPLETIONS,
    parse_body=parse_messages_body,
    new_exchange=new_chat_exchange,
    error_response=openai_error_response,
)

__all__ = ["CHAT_CODEC"]
