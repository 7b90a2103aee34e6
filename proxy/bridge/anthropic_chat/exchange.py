"""Anthropic Messages served over a Chat Completions upstream (SPEC §9), sans-IO.

The bridge wraps the Chat exchange, which gives every guarantee (unique client ids, the
route's id dialect upstream, replay follow-up rounds, the breaker, text-call recovery, the
repeat guard): the Anthropic body is mapped to a Chat body (`request.py`), the Chat
exchange runs on it, and what it forwards is transcoded into Anthropic's grammar
(`stream.py`, `message.py`). Follow-up requests, loops and broken upstreams pass through:
the shell renders a loop or a failure inside a stream with `stream_error`. Nothing is kept
between requests: ids map by prefix (`ids.py`) and reasoning travels in its signature.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from proxy.bridge.anthropic_chat.errors import count_tokens_estimate, upstream_error
from proxy.bridge.anthropic_chat.ids import client_tool_id
from proxy.bridge.anthropic_chat.message import chat_to_message
from proxy.bridge.anthropic_chat.request import messages_to_chat
from proxy.bridge.anthropic_chat.stream import ChatToAnthropicStream
from proxy.chat.exchange import ChatExchange
from proxy.core.errors import ProxyError, ReplayLoopDetected, UpstreamStreamError
from proxy.core.events import ExchangeEvent, Forward, LoopDetected, UpstreamBroken
from proxy.core.jsontext import dumps
from proxy.core.ledger import HistoryFacts
from proxy.core.notes import Note
from proxy.core.rounds import RouteRules

MESSAGE_ID_BYTES = 12  # msg_ + 24 hex digits


class AnthropicOverChat:
    """One Anthropic Messages request across the Chat exchange's rounds."""

    def __init__(
        self,
        body: dict[str, Any],
        rules: RouteRules,
        *,
        entropy: Callable[[int], bytes] = os.urandom,
    ) -> None:
        chat_body, self.dropped = messages_to_chat(body)
        # The mapped body is serialized here: the Chat exchange forwards these bytes as they
        # are when its history needs no id translation.
        self._inner = ChatExchange(chat_body, dumps(chat_body), rules, entropy=entropy)
        self.upstream_request: bytes = self._inner.upstream_request
        self.facts: HistoryFacts = self._inner.facts  # the inner exchange's, kept in step
        model = body.get("model")
        self._model = model if isinstance(model, str) else ""
        self._message_id = "msg_" + entropy(MESSAGE_ID_BYTES).hex()
        self._stream: ChatToAnthropicStream | None = None  # one for all rounds, once streaming
        self._streaming = False  # the round being fed is a stream

    # -- the shell's calls ---------------------------------------------------------------------

    def begin_round(self, *, stream: bool) -> None:
        self._inner.begin_round(stream=stream)
        self._streaming = stream
        if stream and self._stream is None:
            self._stream = ChatToAnthropicStream(self._message_id, self._model)

    def feed(self, data: bytes) -> list[ExchangeEvent]:
        return self._events(self._inner.feed(data))

    def end(self) -> list[ExchangeEvent]:
        return self._events(self._inner.end())

    def report(self) -> tuple[list[Note], int]:
        return self._inner.report()

    def stream_error(self, error: ProxyError) -> bytes:
        """SPEC §8: Anthropic's in-stream `error` event, continuing the stream's state."""
        if self._stream is None:
            self._stream = ChatToAnthropicStream(self._message_id, self._model)
        return self._stream.error(error)

    # -- the Chat exchange's events in Anthropic's words -----------------------------------------

    def _events(self, events: list[ExchangeEvent]) -> list[ExchangeEvent]:
        self.facts = self._inner.facts  # a follow-up round replaces them
        out: list[ExchangeEvent] = []
        for event in events:
            if isinstance(event, bytes):
                data = self._transcode(event)
                if data:
                    out.append(data)
            elif isinstance(event, Forward):
                out.append(self._forward(event))
            elif isinstance(event, LoopDetected):
                out.append(
                    LoopDetected(
                        error=_client_words(event.error), before_first_byte=event.before_first_byte
                    )
                )
            else:  # OpenFollowup, UpstreamBroken: the shell's, as they are
                out.append(event)
        return out

    def _transcode(self, data: bytes) -> bytes:
        assert self._stream is not None  # bytes come only from a streamed round
        return self._stream.feed(data)

    def _forward(self, event: Forward) -> ExchangeEvent:
        stream = self._stream
        if self._streaming and stream is not None:
            data = stream.feed(event.data)
            return Forward(data=data + stream.close() if event.last else data, last=event.last)
        try:
            message = chat_to_message(event.data, self._message_id, self._model)
        except UpstreamStreamError as exc:
            return UpstreamBroken(error=exc)
        return Forward(data=dumps(message), last=event.last)


def _client_words(error: ReplayLoopDetected) -> ReplayLoopDetected:
    """SPEC §5: the loop's message names the call by the id the client knows it under, which
    is the Anthropic form of the Chat exchange's (`call_X` -> `toolu_X`)."""
    if type(error) is not ReplayLoopDetected or error.client_id is None:
        return error  # the repeat guard's names no id
    client_id = client_tool_id(error.client_id)
    if client_id == error.client_id:
        return error
    return ReplayLoopDetected(error.tool_name, error.raw_id, error.reason, client_id=client_id)


def new_anthropic_over_chat(
    body: dict[str, Any], raw: bytes, rules: RouteRules, entropy: Callable[[int], bytes]
) -> AnthropicOverChat:
    """The shell's factory (`ExchangeFactory`): `raw` is the client's Anthropic body, which
    never goes upstream as it is (the Chat body is built from `body`)."""
    del raw
    return AnthropicOverChat(body, rules, entropy=entropy)


__all__ = [
    "AnthropicOverChat",
    "count_tokens_estimate",
    "new_anthropic_over_chat",
    "upstream_error",
]
