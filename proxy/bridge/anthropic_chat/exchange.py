"""Anthropic Messages served over a Chat Completions upstream (SPEC §9), sans-IO.

The bridge is a pairing (`proxy.bridge.over_chat`): the Anthropic body is mapped to a Chat
body (`request.py`) and runs in the core's exchange with Chat's grammar at the upstream's
end, which gives every guarantee (unique client ids, the route's id dialect upstream, replay
follow-up rounds, the breaker, text-call recovery, the repeat guard); `AnthropicEnd` is the
client's end, which says what Chat's end decided in Anthropic's grammar (`stream.py`,
`message.py`). The shell renders a loop or a failure inside a stream with `stream_error`.
Nothing is kept between requests: ids map by prefix (`ids.py`) and reasoning travels in its
signature.
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
from proxy.bridge.over_chat import exchange_over_chat
from proxy.core.errors import ProxyError, ReplayLoopDetected, UpstreamStreamError
from proxy.core.exchange import MessageAnswer, RoundExchange
from proxy.core.jsontext import dumps
from proxy.core.rounds import RouteRules

MESSAGE_ID_BYTES = 12  # msg_ + 24 hex digits


class AnthropicEnd:
    """The client's end of the bridge (`proxy.bridge.over_chat.ClientEnd`) in Anthropic's
    grammar: one message for the whole response, whatever rounds it takes."""

    def __init__(self, message_id: str, model: str) -> None:
        self._message_id = message_id
        self._model = model
        self._stream: ChatToAnthropicStream | None = None  # one for all rounds, once streaming

    def open_stream(self) -> None:
        if self._stream is None:
            self._stream = ChatToAnthropicStream(self._message_id, self._model)

    def feed(self, data: bytes) -> bytes:
        assert self._stream is not None  # bytes come only from a streamed round
        return self._stream.feed(data)

    def close(self) -> bytes:
        assert self._stream is not None
        return self._stream.close()

    def message(self, body: bytes) -> MessageAnswer:
        try:
            message = chat_to_message(body, self._message_id, self._model)
        except UpstreamStreamError as exc:
            return MessageAnswer(broken=exc)
        return MessageAnswer(body=dumps(message))

    def stream_error(self, error: ProxyError) -> bytes:
        """SPEC §8: Anthropic's in-stream `error` event, continuing the stream's state."""
        self.open_stream()
        assert self._stream is not None
        return self._stream.error(error)

    def reached_client(self, chat_forwarded: bool) -> bool:
        return chat_forwarded

    def loop_error(self, error: ReplayLoopDetected) -> ReplayLoopDetected:
        return _client_words(error)


# Named as a class: the exchange's name, as tests and tools know it (a factory now: the
# exchange is the core's one, with this bridge's grammar).
def AnthropicOverChat(
    body: dict[str, Any],
    rules: RouteRules,
    *,
    entropy: Callable[[int], bytes] = os.urandom,
) -> RoundExchange:
    """One Anthropic Messages request across the rounds of a Chat upstream."""
    chat_body, dropped = messages_to_chat(body, rules.request_repair)
    model = body.get("model")
    end = AnthropicEnd(
        "msg_" + entropy(MESSAGE_ID_BYTES).hex(), model if isinstance(model, str) else ""
    )
    return exchange_over_chat(chat_body, rules, entropy, end, dropped)


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
) -> RoundExchange:
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
