"""A bridge over a Chat Completions upstream: two codecs meeting at the core (SPEC §9).

The exchange is the core's one (`proxy.core.exchange.RoundExchange`); its grammar here is a
pairing. The upstream's end is Chat's own grammar (`proxy.chat.exchange.ChatGrammar`), which
gives every guarantee of SPEC §2-§5 and §10 (client ids, the route's id dialect upstream,
replay follow-ups in Chat's API, the breaker, text-call recovery, the repeat guard); the
client's end is a `ClientEnd`, which says in the client's grammar what Chat's end decided: a
stream's events as they come (`TranscodedRound`), a whole message, an in-stream error, and a
loop's error in the client's words. Follow-up requests are Chat requests for the upstream.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from proxy.chat.exchange import ChatGrammar
from proxy.chat.history import translate_request
from proxy.chat.stream import StreamPhase, StreamSanitizer
from proxy.core.decide import ResponseIds
from proxy.core.errors import ProxyError, ReplayLoopDetected
from proxy.core.exchange import FollowupRecord, MessageAnswer, RoundExchange
from proxy.core.families import request_family
from proxy.core.guard import GuardState
from proxy.core.jsontext import dumps
from proxy.core.ledger import HistoryFacts
from proxy.core.notes import Note
from proxy.core.rounds import RouteRules

_CHAT_DONE = StreamPhase.DONE


class ClientEnd(Protocol):
    """A bridge's client side: Chat's canonical output in the client's grammar."""

    def open_stream(self) -> None:
        """A streamed round begins (the client's stream is one across the rounds)."""

    def feed(self, data: bytes) -> bytes:
        """Chat events of a streamed round, in the client's grammar."""

    def close(self) -> bytes:
        """The end of the client's stream, once the last round is done."""

    def message(self, body: bytes) -> MessageAnswer:
        """A whole Chat completion as the client's body, or `broken` if it is none."""

    def stream_error(self, error: ProxyError) -> bytes:
        """The client's in-stream error, continuing the stream's state."""

    def reached_client(self, chat_forwarded: bool) -> bool:
        """Has any byte reached the client (`chat_forwarded`: Chat's end forwarded some)?"""

    def loop_error(self, error: ReplayLoopDetected) -> ReplayLoopDetected:
        """The loop's error as the client knows its calls (SPEC §5)."""


class ChatBridge:
    """A bridge's grammar (`proxy.core.exchange.RoundGrammar`): Chat's at the upstream's end,
    the client's `ClientEnd` at the other."""

    def __init__(self, rules: RouteRules, client: ClientEnd) -> None:
        self._chat = ChatGrammar(rules)
        self._client = client
        self.mint_prefix = self._chat.mint_prefix
        self.streaming_phase = self._chat.streaming_phase
        self.done_phase = self._chat.done_phase
        self.loop_in_stream = False  # the client surface's own codec says (SPEC §8)
        self.chat_forwarded = False  # Chat's end handed some bytes on (`TranscodedRound`)

    def open_stream(self, ids: ResponseIds) -> TranscodedRound:
        self._client.open_stream()
        return TranscodedRound(self._chat.open_stream(ids), self._client, self)

    def before_loop(self, out: list[bytes]) -> list[bytes]:
        return out  # `TranscodedRound` left Chat's error event out

    def unread(self, raw: bytes, ids: ResponseIds) -> bool:
        # The client's end renders every answer: Chat's shortcut ends in the same body
        # parsed (`answer` then keeps it as it came), so it is not taken here.
        return False

    def as_it_came(self, raw: bytes) -> MessageAnswer:
        return self._client.message(raw)

    def answer(
        self, parsed: dict[str, Any], raw: bytes, ids: ResponseIds, first: bool, notes: list[Note]
    ) -> MessageAnswer:
        try:
            answer = self._chat.answer(parsed, raw, ids, first, notes)
        except ReplayLoopDetected as exc:
            raise self._client.loop_error(exc) from None
        if answer.followup is not None:
            return answer
        return self._client.message(answer.body)

    def followup_request(
        self,
        record: FollowupRecord,
        upstream_body: dict[str, Any],
        facts: HistoryFacts,
        guard: GuardState,
    ) -> tuple[dict[str, Any], HistoryFacts]:
        try:
            return self._chat.followup_request(record, upstream_body, facts, guard)
        except ReplayLoopDetected as exc:
            raise self._client.loop_error(exc) from None

    def stream_error(self, error: ProxyError, forwarded: bool) -> bytes:
        return self._client.stream_error(error)

    def reached_client(self, forwarded: bool) -> bool:
        return self._client.reached_client(self.chat_forwarded)


class TranscodedRound:
    """A streamed round's Chat core, its output in the client's grammar (a `RoundStream`).
    Its phase, follow-up and counts are the Chat core's, copied after each read; its notes
    are the Chat core's list itself (the exchange takes them and empties it)."""

    def __init__(self, chat: StreamSanitizer, client: ClientEnd, bridge: ChatBridge) -> None:
        self._chat = chat
        self._client = client
        self._bridge = bridge
        self.notes: list[Note] = chat.notes
        self.phase: object = chat.phase
        self.error: ReplayLoopDetected | None = None
        self.followup: FollowupRecord | None = None
        self.non_json = chat.non_json  # the Chat core's own: its count and whether it broke

    def feed(self, data: bytes) -> list[bytes]:
        return self._client_bytes(self._chat.feed(data))

    def end(self) -> list[bytes]:
        return self._client_bytes(self._chat.end())

    def _client_bytes(self, out: list[bytes]) -> list[bytes]:
        chat = self._chat
        self.phase = chat.phase
        self.followup = chat.followup
        if chat.error is not None:
            # Chat's core ends with its error event: the client's comes from stream_error.
            out = out[:-1]
            self.error = self._client.loop_error(chat.error)
        data = b""
        if out:
            self._bridge.chat_forwarded = True
            data = self._client.feed(out[0] if len(out) == 1 else b"".join(out))
        if self.phase is _CHAT_DONE and self.followup is None:
            data += self._client.close()
        return [data] if data else []


def exchange_over_chat(
    chat_body: dict[str, Any],
    rules: RouteRules,
    entropy: Callable[[int], bytes],
    client: ClientEnd,
    dropped: tuple[str, ...],
) -> RoundExchange:
    """The exchange of a client request mapped to `chat_body`; `dropped` is what the mapping
    left out. The Chat body's own bytes go upstream when its translation changes nothing."""
    translated = translate_request(
        chat_body,
        rules.dialect,
        rules.repeat_guard,
        rules.repeat_exempt,
        rules.request_repair,
        request_family(rules, chat_body),
    )
    exchange = RoundExchange(
        ChatBridge(rules, client),
        rules,
        translated.facts,
        translated.body,
        translated.to_bytes(dumps(chat_body)),
        entropy,
        dropped,
    )
    exchange.add_notes(translated.repairs)  # SPEC §11: reported with the round's notes
    return exchange


__all__ = ["ChatBridge", "ClientEnd", "TranscodedRound", "exchange_over_chat"]
