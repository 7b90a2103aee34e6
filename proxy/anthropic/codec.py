"""Anthropic Messages as an API surface: its body check, its exchange and its error shape.

- Errors before the first byte have Anthropic's shape (`{"type": "error", "error": {...}}`).
- A replay loop on a stream is always an in-stream `error` event: Claude Code re-sends a
  request answered with an HTTP 4xx, but ends the turn on an error event (SPEC §8).
- A route's upstream key goes in `x-api-key`, as Anthropic endpoints expect it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from proxy.anthropic.exchange import AnthropicExchange
from proxy.anthropic.wire import error_response
from proxy.core.body import parse_messages_body
from proxy.core.rounds import RouteRules
from proxy.core.surface_codec import SurfaceCodec
from proxy.core.surfaces import ANTHROPIC_MESSAGES


def new_anthropic_exchange(
    body: dict[str, Any], raw: bytes, rules: RouteRules, entropy: Callable[[int], bytes]
) -> AnthropicExchange:
    return AnthropicExchange(body, raw, rules, entropy)


ANTHROPIC_CODEC = SurfaceCodec(
    surface=ANTHROPIC_MESSAGES,
    parse_body=parse_messages_body,  # the same rule: a JSON object with a `messages` list
    new_exchange=new_anthropic_exchange,
    error_response=error_response,
    loop_in_stream=True,
    credential_header=b"x-api-key",
    credential_prefix=b"",
)

__all__ = ["ANTHROPIC_CODEC", "new_anthropic_exchange"]
