"""Chat Completions' grammar for the one round lifecycle (`proxy.core.exchange`), and its
exchange (sans-IO, SPEC §2-§5).

The shell talks to the exchange only: it hands it the upstream's body as it arrives (`feed`,
then `end`) and acts on the small events it gets back, in order (`proxy.core.events`).
`ChatExchange` is `RoundExchange` with the request translated to the route's dialect and
`ChatGrammar` for what is Chat's own: streamed rounds run `StreamSanitizer`, whole messages
`sanitize_completion`, follow-ups are built by `followup.py`, and what lives across rounds
(the carried message identity and usage, a whole message's earlier content) is here. The
bridges over a Chat upstream (`proxy.bridge`) run this grammar at their upstream's end.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from proxy.chat.continuation import FollowupNeeded
from proxy.chat.followup import build_followup
from proxy.chat.history import translate_request
from proxy.chat.message import holds_no_call, merge_continuation, sanitize_completion
from proxy.chat.stream import Carry, StreamPhase, StreamSanitizer
from proxy.core.decide import ResponseIds
from proxy.core.errors import ProxyError
from proxy.core.exchange import FollowupRecord, MessageAnswer, RoundExchange
from proxy.core.families import request_family
from proxy.core.guard import GuardState
from proxy.core.jsontext import dumps
from proxy.core.ledger import HistoryFacts
from proxy.core.notes import Note
from proxy.core.rounds import RouteRules
from proxy.core.usage import add_usage


class ChatGrammar:
    """Chat Completions at both ends of a round (`proxy.core.exchange.RoundGrammar`)."""

    # Defaults of the class rather than set per request (built for each one).
    mint_prefix = "call_"
    streaming_phase: object = StreamPhase.STREAMING
    done_phase: object = StreamPhase.DONE  # FOLLOWUP still swallows the round's rest
    loop_in_stream = False

    def __init__(self, rules: RouteRules) -> None:
        self._text_tool_calls = rules.text_tool_calls
        self._carry: Carry | None = None  # the earlier rounds' message, once there are some
        self._content_before = ""  # non-streaming: the earlier rounds' content
        self._reasoning_before: dict[str, str] = {}  # ... and their reasoning, by field

    def open_stream(self, ids: ResponseIds) -> StreamSanitizer:
        return StreamSanitizer(ids, carry=self._carry, text_tool_calls=self._text_tool_calls)

    def before_loop(self, out: list[bytes]) -> list[bytes]:
        """The core ended its output with the error event: the shell renders its own."""
        return out[:-1]

    def unread(self, raw: bytes, ids: ResponseIds) -> bool:
        """The first answer with no call in it, and no markup that could become one
        (sanitize_completion's rule): what the full check ends in for it, parsed or not."""
        recovers_text = self._text_tool_calls and bool(ids.facts.offered_tools)
        return holds_no_call(raw) and not recovers_text

    def as_it_came(self, raw: bytes) -> MessageAnswer:
        return MessageAnswer(body=raw)

    def answer(
        self, parsed: dict[str, Any], raw: bytes, ids: ResponseIds, first: bool, notes: list[Note]
    ) -> MessageAnswer:
        result = sanitize_completion(parsed, ids, text_tool_calls=self._text_tool_calls)
        notes.extend(result.notes)
        if result.replays:
            carry = self._carry or Carry(
                parsed.get("id"), parsed.get("created"), parsed.get("model")
            )
            carry.usage = add_usage(carry.usage, parsed.get("usage"))
            self._carry = carry
            self._content_before += result.content
            for key, text in result.reasoning.items():
                self._reasoning_before[key] = self._reasoning_before.get(key, "") + text
            return MessageAnswer(
                followup=FollowupNeeded(result.content, result.replays, carry, result.reasoning)
            )
        if self._carry is not None:
            merged = merge_continuation(
                self._carry, self._content_before, parsed, self._reasoning_before
            )
            return MessageAnswer(body=dumps(merged))
        return MessageAnswer(body=dumps(parsed) if result.changed else raw)

    def followup_request(
        self,
        record: FollowupRecord,
        upstream_body: dict[str, Any],
        facts: HistoryFacts,
        guard: GuardState,
    ) -> tuple[dict[str, Any], HistoryFacts]:
        """The previous request, this round's message and one synthetic answer per replay."""
        assert isinstance(record, FollowupNeeded)
        self._carry = record.carry
        return build_followup(
            upstream_body, facts, guard, record.content, record.replays, record.reasoning
        )

    def stream_error(self, error: ProxyError, forwarded: bool) -> bytes:
        """SPEC §6: a stream that cannot go on ends with an error event (no `[DONE]`); a
        replay loop's in the form its agents treat as final (`ReplayLoopDetected.sse_bytes`)."""
        return error.sse_bytes()

    def reached_client(self, forwarded: bool) -> bool:
        return forwarded


class ChatExchange(RoundExchange):
    """A Chat Completions request across its rounds."""

    def __init__(
        self,
        body: dict[str, Any],
        raw: bytes,
        rules: RouteRules,
        *,
        entropy: Callable[[int], bytes] = os.urandom,
    ):
        translated = translate_request(
            body,
            rules.dialect,
            rules.repeat_guard,
            rules.repeat_exempt,
            rules.request_repair,
            request_family(rules, body),
        )
        super().__init__(
            ChatGrammar(rules),
            rules,
            translated.facts,
            translated.body,
            translated.to_bytes(raw),
            entropy,
        )
        self._notes.extend(translated.repairs)  # SPEC §11: reported with the round's notes


__all__ = ["ChatExchange", "ChatGrammar"]
