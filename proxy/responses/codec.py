"""OpenAI Responses as an API surface (SPEC §8): its request body, exchange and error shape."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from proxy.core.body import parse_json_object
from proxy.core.errors import ClientRequestError, ProxyError, ReplayLoopDetected
from proxy.core.rounds import RouteRules
from proxy.core.surface_codec import SurfaceCodec
from proxy.core.surfaces import RESPONSES
from proxy.responses.exchange import ResponsesExchange

# SPEC §8: Codex reconnects five times after an HTTP 422 and stops at once on a 400, so the
# breaker answers 400 here (in the OpenAI error shape, type and code as on every surface).
LOOP_STATUS = 400


def parse_responses_body(raw: bytes) -> dict[str, Any]:
    body = parse_json_object(raw)
    items = body.get("input")
    if items is not None and not isinstance(items, str | list):
        raise ClientRequestError(
            "'input' must be a string or a list of items", code="invalid_input"
        )
    return body


def new_responses_exchange(
    body: dict[str, Any], raw: bytes, rules: RouteRules, entropy: Callable[[int], bytes]
) -> ResponsesExchange:
    return ResponsesExchange(body, raw, rules, entropy=entropy)


def responses_error_response(error: ProxyError) -> tuple[int, bytes]:
    if isinstance(error, ReplayLoopDetected):
        return LOOP_STATUS, error.json_bytes()
    return error.status, error.json_bytes()


RESPONSES_CODEC = SurfaceCodec(
    surface=RESPONSES,
    parse_body=parse_responses_body,
    new_exchange=new_responses_exchange,
    error_response=responses_error_response,
)

__all__ = ["RESPONSES_CODEC", "parse_responses_body", "responses_error_response"]
