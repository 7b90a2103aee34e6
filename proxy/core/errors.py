"""The proxy's own errors and their OpenAI-shaped bodies (SPEC §6).

Every error says whose fault it is (the client's request, the upstream's behaviour, or a
replay loop the model got into) and carries the HTTP status and OpenAI `type`/`code` it
maps to, so the shell never has to decide that again.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import orjson


class ProxyError(Exception):
    """Base of every error the proxy answers with its own body."""

    status: int = 500
    error_type: str = "proxy_error"
    code: str | None = None

    def __init__(self, message: str, *, code: str | None = None, status: int | None = None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.error_type, self.code)

    def json_bytes(self) -> bytes:
        return orjson.dumps(self.body())

    def sse_bytes(self) -> bytes:
        """The error as the last event of a stream (no `[DONE]` follows it)."""
        return b"data: " + self.json_bytes() + b"\n\n"


class ClientRequestError(ProxyError):
    """The client sent something we cannot forward (nothing goes upstream)."""

    status = 400
    error_type = "invalid_request_error"
    code = "invalid_request"


class RequestTooLarge(ClientRequestError):
    status = 413
    code = "request_too_large"


class HeadersTooLarge(ClientRequestError):
    """Too many or too large request headers (uvicorn with httptools sets no limit itself)."""

    status = 431
    code = "request_headers_too_large"


class AuthenticationError(ProxyError):
    status = 401
    error_type = "authentication_error"
    code = "invalid_proxy_key"


class UpstreamError(ProxyError):
    """The upstream could not be reached, timed out, or broke its stream."""

    status = 502
    error_type = "upstream_error"
    code = "upstream_error"


class UpstreamUnreachable(UpstreamError):
    status = 502
    code = "upstream_unreachable"


class UpstreamTimeout(UpstreamError):
    status = 504
    code = "upstream_timeout"


class UpstreamStreamError(UpstreamError):
    """The upstream's transport broke, stalled or sent unframeable data mid-stream."""

    status = 502
    code = "upstream_stream_error"


class CallBoundExceeded(UpstreamStreamError):
    """SPEC §6: a tool call's arguments, or the calls of one response, went past their bound
    (proxy/core/bounds.py) as they arrived. The stream core stops reading and the client's
    stream ends with `upstream_stream_error`, as for a broken upstream."""


# SPEC §5, §8: what no supported client's retry rule matches in an error's message. pi and
# opencode search the message (opencode also the response body) for `429`, `500`, `502`,
# `503`, `504` (`524`) and for words such as "overloaded", "rate limit", "timeout",
# "terminated", "unavailable"; qwen-code reads `HTTP_STATUS/<3 digits>`; Claude Code looks for
# `"type":"overloaded_error"`; Codex takes a delay from "try again in"; Cline retries on
# "provider returned error" (docs/clients.md has each rule, file and line). A loop message
# names a tool and ids the model chose (`functions.bash:500`, a minted id's hex digits), and a
# retry re-runs the loop's upstream rounds, so the message is written in a *shown form*: every
# run of three or more digits is grouped in pairs from the right with a middle dot
# (`functions.bash:5·00`), and every word of that vocabulary gets a middle dot after its first
# letter (`check_t·imeout`). A control character becomes U+FFFD first: JSON writes it as
# `\u00XX`, digits that the next ones would continue (`\x15` and `00` became `\u001500`). What
# is left holds no three digits in a row and none of the words, in the message and in the body.
SHOWN_SEPARATOR = "\u00b7"
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_DIGIT_RUN = re.compile(r"[0-9]{3,}")
_RETRY_WORDS = re.compile(
    r"overload|rate.?limit|rate increased|too.?many.?requests|unavailable|exhausted|capacity"
    r"|quota|billing|server.?error|internal.?error|network|connection|websocket|other side"
    r"|fetch|upstream.?connect|reset before|socket|ended without|http.?2|http_status"
    r"|event:error|timed? ?out|time.?out|terminated|retry|try.?again|getaddrinfo|enotfound"
    r"|eai_again|econn|etimedout|provider.?returned",
    re.IGNORECASE,
)


def _grouped(match: re.Match[str]) -> str:
    digits = match.group()
    head = len(digits) % 2 or 2
    pairs = [digits[:head]] + [digits[i : i + 2] for i in range(head, len(digits), 2)]
    return SHOWN_SEPARATOR.join(pairs)


def _broken(match: re.Match[str]) -> str:
    word = match.group()
    return word[0] + SHOWN_SEPARATOR + word[1:]


def unretried(message: str) -> str:
    """A loop message in its shown form (see above): the same words, no retry trigger."""
    shown = _RETRY_WORDS.sub(_broken, _CONTROL.sub("\ufffd", message))
    return _DIGIT_RUN.sub(_grouped, shown)


# SPEC §5, §8: the `type` of the error event that ends a Chat Completions stream at a replay
# loop once bytes went out (its code and message stay the loop's). qwen-code continues a stream
# cut by an error event without an HTTP status whenever the response carried a request id, as
# the proxy's always does (it re-sent the looping request three times), but stops at once on
# this type; opencode and pi stop on either (tests/agents/test_chat_loop_error.py measures all
# three). Before the first byte the loop is the HTTP 422 of type `loop_detected`.
LOOP_EVENT_TYPE = "invalid_request_error"


class ReplayLoopDetected(ProxyError):
    """SPEC §5 circuit breaker: the model keeps replaying calls that were answered."""

    status = 422
    error_type = "loop_detected"
    code = "tool_call_replay_loop"

    def sse_bytes(self) -> bytes:
        """The loop as a Chat Completions stream's last event (LOOP_EVENT_TYPE); the other
        surfaces write their own."""
        body = error_body(self.message, LOOP_EVENT_TYPE, self.code)
        return b"data: " + orjson.dumps(body) + b"\n\n"

    def __init__(self, tool_name: str, raw_id: str, reason: str, *, client_id: str | None = None):
        # SPEC §5: name the id the client knows the call by; the raw id is the model's.
        known = f' (id "{client_id}" in the conversation)' if client_id else ""
        super().__init__(
            unretried(
                f'Tool-call replay loop detected: the model replayed tool call "{tool_name}"'
                f'{known} after it was already answered, sending it as "{raw_id}" ({reason}). '
                "The response was stopped so the call is not executed again."
            )
        )
        self.tool_name = tool_name
        self.raw_id = raw_id
        self.client_id = client_id
        self.reason = reason


class RepeatLoopDetected(ReplayLoopDetected):
    """SPEC §10: the model repeated an identical call after the proxy answered it instead of
    running it (the breaker of SPEC §5, for calls under fresh ids)."""

    code = "tool_call_repeat_loop"

    def __init__(self, tool_name: str, count: int, reason: str):
        ProxyError.__init__(
            self,
            unretried(
                f'Tool-call repeat loop detected: the model kept calling "{tool_name}" with the '
                f"same arguments after {count} identical results ({reason}). The response was "
                "stopped so the call is not executed again."
            ),
        )
        self.tool_name = tool_name
        self.raw_id = ""
        self.client_id = None
        self.reason = reason


def error_body(message: str, error_type: str, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": error_type, "code": code, "param": None}}


# How a surface answers an error before the first byte of a response: status and JSON body.
ErrorRenderer = Callable[[ProxyError], tuple[int, bytes]]


def openai_error_response(error: ProxyError) -> tuple[int, bytes]:
    """SPEC §6: the OpenAI error shape (Chat Completions, Responses, every other path)."""
    return error.status, error.json_bytes()
