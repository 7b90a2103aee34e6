"""The bridge's exchange: a Responses request served by the Chat Completions exchange
(SPEC §9; the shell's plug, `proxy.core.surface_codec.Exchange`).

The request is mapped to Chat (`request.py`) and handed to a `ChatExchange`, which gives
every guarantee of SPEC §2-§5 and §10 (client ids, the route's id dialect upstream, replay
follow-ups in Chat's API, the breaker, text-call recovery, the repeat guard). Its events come
back here: bytes and `Forward`s are turned into Responses (`stream.py` / `message.py`),
follow-ups pass as they are (they are Chat requests for the upstream), and a loop found
before the client got anything is still a plain HTTP error (our own head gate decides that:
the Chat exchange may have forwarded a role chunk that became nothing here).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import orjson

from proxy.bridge.responses_chat.message import chat_to_response
from proxy.bridge.responses_chat.output import ResponseHead
from proxy.bridge.responses_chat.request import responses_to_chat
from proxy.bridge.responses_chat.stream import ResponsesStream
from proxy.bridge.responses_chat.tools import map_tools
from proxy.chat.exchange import ChatExchange
from proxy.core.errors import ProxyError, UpstreamError, error_body
from proxy.core.events import ExchangeEvent, Forward, LoopDetected, UpstreamBroken
from proxy.core.jsontext import dumps
from proxy.core.ledger import HistoryFacts
from proxy.core.notes import Note
from proxy.core.rounds import RouteRules


class ResponsesOverChat:
    """One Responses request across the Chat exchange's rounds."""

    upstream_request: bytes
    facts: HistoryFacts
    dropped: tuple[str, ...]

    def __init__(
        self,
        body: dict[str, Any],
        rules: RouteRules,
        *,
        entropy: Callable[[int], bytes] = os.urandom,
    ) -> None:
        chat_body, self.dropped = responses_to_chat(body)
        # The Chat body's own bytes: the exchange forwards them as they are when its
        # translation changes nothing.
        self._chat = ChatExchange(chat_body, dumps(chat_body), rules, entropy=entropy)
        self.upstream_request = self._chat.upstream_request
        self.facts = self._chat.facts
        self._entropy = entropy
        self._head = ResponseHead.for_request(body, map_tools(body.get("tools")).table, entropy)
        self._stream: ResponsesStream | None = None

    # -- the shell's calls ---------------------------------------------------------------------

    def begin_round(self, *, stream: bool) -> None:
        self._chat.begin_round(stream=stream)
        if stream and self._stream is None:  # one client stream across the rounds
            self._stream = ResponsesStream(self._head, self._entropy)

    def feed(self, data: bytes) -> list[ExchangeEvent]:
        return self._client_events(self._chat.feed(data))

    def end(self) -> list[ExchangeEvent]:
        return self._client_events(self._chat.end())

    def report(self) -> tuple[list[Note], int]:
        return self._chat.report()

    def stream_error(self, error: ProxyError) -> bytes:
        """Responses' in-stream failure (`response.failed`), numbered after what the client
        has; the response's head goes first when nothing went out yet."""
        if self._stream is None:
            self._stream = ResponsesStream(self._head, self._entropy)
        return self._stream.fail(error)

    @property
    def nothing_released(self) -> bool:
        return self._stream is None or not self._stream.released

    # -- the Chat exchange's events in Responses' words ----------------------------------------

    def _client_events(self, events: list[ExchangeEvent]) -> list[ExchangeEvent]:
        out: list[ExchangeEvent] = []
        for event in events:
            if isinstance(event, bytes):
                data = self._stream.feed(event) if self._stream is not None else b""
                if data:
                    out.append(data)
            elif isinstance(event, Forward):
                out.append(self._forward(event))
            elif isinstance(event, LoopDetected):
                out.append(LoopDetected(error=event.error, before_first_byte=self.nothing_released))
            else:  # OpenFollowup (a Chat request for the upstream) and UpstreamBroken
                out.append(event)
        return out

    def _forward(self, event: Forward) -> ExchangeEvent:
        stream = self._stream
        if stream is not None:
            data = stream.feed(event.data)
            return Forward(data=data + stream.finish() if event.last else data, last=event.last)
        body = chat_to_response(event.data, self._head, self._entropy)
        if body is None:
            return UpstreamBroken(
                error=UpstreamError(
                    "the upstream answered with a body that is not a chat completion",
                    code="upstream_bad_response",
                )
            )
        return Forward(data=body, last=event.last)


def new_responses_over_chat(
    body: dict[str, Any], raw: bytes, rules: RouteRules, entropy: Callable[[int], bytes]
) -> ResponsesOverChat:
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
