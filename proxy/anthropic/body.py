"""What an Anthropic Messages request must be for the proxy to serve it (SPEC §6 as §8 says).

A body the proxy cannot read is refused before anything goes upstream, with a 400 in
Anthropic's error shape (the codec's `error_response`); everything else about the request is
the upstream's to judge (it answers in its own words, relayed unchanged).
"""

from __future__ import annotations

from typing import Any

import orjson

from proxy.errors import ClientRequestError


def parse_body(raw: bytes) -> dict[str, Any]:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ClientRequestError(
            f"request body is not valid JSON: {exc}", code="invalid_json"
        ) from None
    if not isinstance(body, dict):
        raise ClientRequestError("request body must be a JSON object", code="invalid_body")
    if not isinstance(body.get("messages"), list):
        raise ClientRequestError("messages: must be a list", code="invalid_messages")
    return body
