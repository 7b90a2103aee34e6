"""Upstream errors in Anthropic's shape, and the token count the proxy answers itself
(SPEC §9)."""

from __future__ import annotations

from typing import Any

import orjson

from proxy.core.jsontext import dumps

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def anthropic_error_type(status: int) -> str:
    if status in _ERROR_TYPES:
        return _ERROR_TYPES[status]
    if status >= 500:
        return "api_error"
    return "invalid_request_error"  # another 4xx: the request's fault, as Anthropic says


# A body that is no JSON (an HTML error page from a gateway) is quoted up to this length.
MAX_TEXT = 2000


def upstream_message(status: int, body: bytes) -> str:
    """The upstream's own words: OpenAI's `{"error": {"message"}}` (or a bare string error),
    vLLM's `{"message"}`, FastAPI's `{"detail"}`; else the body's text; else the status."""
    try:
        parsed: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        parsed = None
    if isinstance(parsed, dict):
        error = parsed.get("error")
        candidates = [
            error.get("message") if isinstance(error, dict) else error,
            parsed.get("message"),
            parsed.get("detail"),
        ]
        for candidate in candidates:
            if isinstance(candidate, str) and candidate:
                return candidate
            if candidate is not None and not isinstance(candidate, str):
                return dumps(candidate).decode()  # e.g. FastAPI's list of details
    text = body.decode("utf-8", "replace").strip()[:MAX_TEXT]
    return text or f"the upstream answered HTTP {status}"


def upstream_error(status: int, body: bytes) -> bytes:
    """An upstream's non-2xx answer as Anthropic's error body; the status stays the
    upstream's (the shell sends it)."""
    error = {"type": anthropic_error_type(status), "message": upstream_message(status, body)}
    return orjson.dumps({"type": "error", "error": error})


# A rough rule of thumb for today's tokenizers on English text and JSON: about four bytes a
# token. The count is only an estimate (the shell says so in `x-toolcall-proxy-estimate: 1`):
# a Chat upstream has no count endpoint, and Claude Code only needs a number of the right
# size to decide when to compact.
BYTES_PER_TOKEN = 4


def count_tokens_estimate(body: dict[str, Any]) -> dict[str, int]:
    """`{"input_tokens": N}` for a count_tokens request: the bytes of the JSON of its system
    prompt, messages and tools, divided by BYTES_PER_TOKEN (at least 1)."""
    counted = {key: body.get(key) for key in ("system", "messages", "tools") if key in body}
    size = len(dumps(counted))
    return {"input_tokens": max(1, size // BYTES_PER_TOKEN)}
