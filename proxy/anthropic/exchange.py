"""Anthropic Messages' grammar for the one round lifecycle (`proxy.core.exchange`), and its
exchange (sans-IO, SPEC §8).

The shell drives it exactly as it drives Chat Completions' exchange (`begin_round`, `feed`,
`end`, `report`, and the events they return); what differs is the grammar: requests are
translated by `request.py`, streamed rounds run `stream.AnthropicStream`, whole messages
`message.sanitize_message`, and follow-ups are built by `followup.py`. A replay loop in a
stream always ends it with an in-stream `error` event (`stream_error`): Claude Code re-sends a
request answered with an HTTP 4xx, but ends the turn on an error event (SPEC §8).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from proxy.anthropic.ending import output_tokens
from proxy.anthropic.followup import build_followup
from proxy.anthropic.message import merge_continuation, sanitize_message
from proxy.anthropic.request import translate_messages
from proxy.anthropic.stream import AnthropicStream, MessageCarry, RoundFollowup, StreamPhase
from proxy.anthropic.wire import encode, error_event
from proxy.core.decide import ResponseIds
from proxy.core.errors import ProxyError, ReplayLoopDetected
from proxy.core.exchange import FollowupRecord, MessageAnswer, RoundExchange
from proxy.core.families import request_family
from proxy.core.guard import GuardState
from proxy.core.jsontext import dumps
from proxy.core.ledger import HistoryFacts
from proxy.core.notes import Note
from proxy.core.rounds import RouteRules

MINT_PREFIX = "toolu_"  # SPEC §8: minted client ids are toolu_{turn}_{idx}_{hex8}


class AnthropicGrammar:
    """Anthropic Messages at both ends of a round (`proxy.core.exchange.RoundGrammar`)."""

    def __init__(self, rules: RouteRules, model: object) -> None:
        self.mint_prefix = MINT_PREFIX
        self.streaming_phase: object = StreamPhase.STREAMING
        self.done_phase: object = StreamPhase.DONE
        # SPEC §8: a stream's loop is always an in-stream event, never a 422 before it.
        self.loop_in_stream = True
        self._text_tool_calls = rules.text_tool_calls
        self._model = model if isinstance(model, str) else ""
        self._carry: MessageCarry | None = None
        self._first_body: dict[str, Any] | None = None  # non-streaming: the first round's
        self._core: AnthropicStream | None = None  # the streamed round being fed
        self._error_started = False  # stream_error sent a message_start

    def open_stream(self, ids: ResponseIds) -> AnthropicStream:
        self._core = AnthropicStream(ids, carry=self._carry, text_tool_calls=self._text_tool_calls)
        return self._core

    def before_loop(self, out: list[bytes]) -> list[bytes]:
        return out

    def unread(self, raw: bytes, ids: ResponseIds) -> bool:
        return False

    def as_it_came(self, raw: bytes) -> MessageAnswer:
        return MessageAnswer(body=raw)

    def answer(
        self, parsed: dict[str, Any], raw: bytes, ids: ResponseIds, first: bool, notes: list[Note]
    ) -> MessageAnswer:
        result = sanitize_message(parsed, ids, text_tool_calls=self._text_tool_calls)
        notes.extend(result.notes)
        if result.replays:
            carry = self._carry or MessageCarry()
            carry.output_tokens += output_tokens(parsed.get("usage"))
            carry.records.extend(result.blocks)
            self._carry = carry
            self._first_body = self._first_body or parsed
            return MessageAnswer(followup=RoundFollowup(result.replays, result.blocks, carry))
        if self._carry is not None and self._first_body is not None:
            return MessageAnswer(
                body=merge_continuation(self._carry, self._first_body, result.body)
            )
        return MessageAnswer(body=dumps(result.body) if result.changed else raw)

    def followup_request(
        self,
        record: FollowupRecord,
        upstream_body: dict[str, Any],
        facts: HistoryFacts,
        guard: GuardState,
    ) -> tuple[dict[str, Any], HistoryFacts]:
        assert isinstance(record, RoundFollowup)
        self._carry = record.carry
        return build_followup(upstream_body, facts, guard, record.blocks, record.replays)

    def stream_error(self, error: ProxyError, forwarded: bool) -> bytes:
        """The bytes that end the client's stream with this error: Anthropic's `error` event,
        after a `message_start` if none went out yet (SDKs read the error inside a message),
        and, for a replay loop, after a completed content block (an empty text block if the
        message has none): Claude Code ends the turn on such an event, and re-sends the
        request without streaming after an error with no completed block before it."""
        # The first round's first event is its message_start: any byte forwarded began one.
        started = forwarded or self._error_started
        head = b"" if started else encode(_placeholder_start(self._model))
        self._error_started = True
        core = self._core
        if isinstance(error, ReplayLoopDetected) and core is not None:
            head += core.block_before_error()  # so Claude Code takes the loop as final
        return head + error_event(error)

    def reached_client(self, forwarded: bool) -> bool:
        return forwarded


class AnthropicExchange(RoundExchange):
    """An Anthropic Messages request across its rounds."""

    def __init__(
        self,
        body: dict[str, Any],
        raw: bytes,
        rules: RouteRules,
        entropy: Callable[[int], bytes] = os.urandom,
    ):
        translated = translate_messages(
            body,
            rules.dialect,
            rules.repeat_guard,
            rules.repeat_exempt,
            rules.request_repair,
            request_family(rules, body),
        )
        super().__init__(
            AnthropicGrammar(rules, translated.body.get("model")),
            rules,
            translated.facts,
            translated.body,
            translated.to_bytes(raw),
            entropy,
        )
        self.history_calls = translated.calls
        self._notes.extend(translated.repairs)  # SPEC §11: reported with the round's notes


def _placeholder_start(model: str) -> dict[str, Any]:
    """A message_start for a stream that fails before the upstream sent its own."""
    message: dict[str, Any] = {
        "id": "msg_toolcall_proxy_error",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 0, "output_tokens": 0},
    }
    return {"type": "message_start", "message": message}


__all__ = ["MINT_PREFIX", "AnthropicExchange", "AnthropicGrammar"]
