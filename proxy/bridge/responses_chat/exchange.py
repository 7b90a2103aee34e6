"""The bridge's exchange: a Responses request served over a Chat Completions upstream
(SPEC §9; the shell's plug, `proxy.core.surface_codec.Exchange`).

The bridge is a pairing (`proxy.bridge.over_chat`): the request is mapped to Chat
(`request.py`) and runs in the core's exchange with Chat's grammar at the upstream's end,
which gives every guarantee of SPEC §2-§5 and §10 (client ids, the route's id dialect
upstream, replay follow-ups in Chat's API, the breaker, text-call recovery, the repeat
guard). `ResponsesEnd` is the client's end: Chat's canonical output turned into Responses
(`stream.py` / `message.py`), and whether the client got anything yet (its own head gate: a
loop found before that is still a plain HTTP error, though Chat's end may have forwarded a
role chunk that became nothing here).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import orjson

from proxy.bridge.over_chat import exchange_over_chat
from proxy.bridge.responses_chat.message import chat_to_response
from proxy.bridge.responses_chat.output import ResponseHead
from proxy.bridge.responses_chat.request import responses_to_chat
from proxy.bridge.responses_chat.stream import ResponsesOverChatStream
from proxy.bridge.responses_chat.tools import map_tools
from proxy.core.errors import ProxyError, ReplayLoopDetected, UpstreamError, error_body
from proxy.core.exchange import MessageAnswer, RoundExchange
from proxy.core.rounds import RouteRules


class ResponsesEnd:
    """The client's end of the bridge (`proxy.bridge.over_chat.ClientEnd`) in Responses'
    grammar: one response for the whole exchange, whatever rounds it takes."""

    def __init__(self, head: ResponseHead, entropy: Callable[[int], bytes]) -> None:
        self._head = head
        self._entropy = entropy
        self._stream: ResponsesOverChatStream | None = None  # one client stream across the rounds

    def open_stream(self) -> None:
        if self._stream is None:
            self._stream = ResponsesOverChatStream(self._head, self._entropy)

    def feed(self, data: bytes) -> bytes:
        return self._stream.feed(data) if self._stream is not None else b""

    def close(self) -> bytes:
        return self._stream.finish() if self._stream is not None else b""

    def message(self, body: bytes) -> MessageAnswer:
        response = chat_to_response(body, self._head, self._entropy)
        if response is None:
            return MessageAnswer(
                broken=UpstreamError(
                    "the upstream answered with a body that is not a chat completion",
                    code="upstream_bad_response",
                )
            )
        return MessageAnswer(body=response)

    def stream_error(self, error: ProxyError) -> bytes:
        """Responses' in-stream failure (`response.failed`), numbered after what the client
        has; the response's head goes first when nothing went out yet."""
        self.open_stream()
        assert self._stream is not None
        return self._stream.fail(error)

    def reached_client(self, chat_forwarded: bool) -> bool:
        return self._stream is not None and self._stream.released

    def loop_error(self, error: ReplayLoopDetected) -> ReplayLoopDetected:
        return error  # Chat's client ids are the Responses call ids


# Named as a class: the exchange's name, as tests and tools know it (a factory now: the
# exchange is the core's one, with this bridge's grammar).
def ResponsesOverChat(
    body: dict[str, Any],
    rules: RouteRules,
    *,
    entropy: Callable[[int], bytes] = os.urandom,
) -> RoundExchange:
    """One Responses request across the rounds of a Chat upstream. Raises
    `ClientRequestError` (400) for a request that needs stored state."""
    chat_body, dropped = responses_to_chat(body, rules.request_repair)
    head = ResponseHead.for_request(body, map_tools(body.get("tools")).table, entropy)
    return exchange_over_chat(chat_body, rules, entropy, ResponsesEnd(head, entropy), dropped)


def new_responses_over_chat(
    body: dict[str, Any], raw: bytes, rules: RouteRules, entropy: Callable[[int], bytes]
) -> RoundExchange:
    """The shell's factory (`proxy.core.surface_codec.ExchangeFactory`). `raw` is the
    client's Responses body: the upstream gets the Chat body built from `body` instead.
    Raises `ClientRequestError` (400) for a request that needs stored state."""
    del raw
    return ResponsesOverChat(body, rules, entropy=entropy)


def upstream_error(status: int, body: bytes) -> bytes:
    """An upstream's non-2xx answer in the OpenAI error shape (SPEC §9), its message kept:
    an OpenAI-shaped body keeps its fields; any other JSON or text becomes the message."""
    try:
        parsed: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        parsed = None
    error = parsed.get("error") if isinstance(parsed, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        shaped = error_body(error["message"], _type(error, status), _code(error))
        shaped["error"]["param"] = error.get("param")
        return orjson.dumps(shaped)
    if isinstance(error, str):
        message = error
    elif isinstance(parsed, dict) and isinstance(parsed.get("message"), str):
        message = parsed["message"]
    else:
        text = body.decode("utf-8", "replace").strip()
        message = text or f"the upstream answered HTTP {status}"
    return orjson.dumps(error_body(message, _type(parsed, status), _code(parsed)))


def _type(error: object, status: int) -> str:
    kind = error.get("type") if isinstance(error, dict) else None
    if isinstance(kind, str) and kind:
        return kind
    return "invalid_request_error" if 400 <= status < 500 else "upstream_error"


def _code(error: object) -> str | None:
    code = error.get("code") if isinstance(error, dict) else None
    return str(code) if isinstance(code, str | int) and not isinstance(code, bool) else None
