"""OpenAI Responses' grammar for the one round lifecycle (`proxy.core.exchange`), and its
exchange (sans-IO, SPEC §8).

The same contract with the shell as Chat Completions' exchange: `begin_round`, `feed`, `end`
hand back events (`bytes`, `Forward`, `OpenFollowup`, `LoopDetected`, `UpstreamBroken`),
`report` the decisions, and `stream_error` the bytes that end a stream in this grammar
(`response.failed` with the next sequence number). Everything that lives across rounds (the
numbering, the delivered items, usage, the response id, the client ids given out) is in the
`ResponseCarry`, which also knows whether any byte reached the client (its head gate);
randomness comes in through `entropy` only.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from proxy.core.decide import ResponseIds
from proxy.core.errors import ProxyError, ReplayLoopDetected
from proxy.core.exchange import FollowupRecord, MessageAnswer, RoundExchange
from proxy.core.families import request_family
from proxy.core.guard import GuardState
from proxy.core.jsontext import dumps
from proxy.core.ledger import HistoryFacts
from proxy.core.notes import Note
from proxy.core.rounds import RouteRules
from proxy.responses.body import sanitize_output
from proxy.responses.carry import IDENTITY_KEYS, ResponseCarry
from proxy.responses.followup import build_followup
from proxy.responses.ids import CallIds
from proxy.responses.request import translate_request
from proxy.responses.stream import ResponsesStream, RoundFollowup, StreamPhase

LOOP_FAILURE_CODE = "invalid_prompt"  # SPEC §8: the code Codex treats as final


def loop_message(error: ReplayLoopDetected) -> str:
    return f"{error.message} ({error.code})"


class ResponsesGrammar:
    """OpenAI Responses at both ends of a round (`proxy.core.exchange.RoundGrammar`)."""

    def __init__(self, rules: RouteRules, carry: ResponseCarry) -> None:
        self.mint_prefix = "call_"
        self.streaming_phase: object = StreamPhase.STREAMING
        self.done_phase: object = StreamPhase.DONE  # FAILED comes with the core's error
        self.loop_in_stream = False
        self.carry = carry
        self._text_tool_calls = rules.text_tool_calls

    def open_stream(self, ids: ResponseIds) -> ResponsesStream:
        return ResponsesStream(ids, self.carry, text_tool_calls=self._text_tool_calls)

    def before_loop(self, out: list[bytes]) -> list[bytes]:
        return out

    def unread(self, raw: bytes, ids: ResponseIds) -> bool:
        return False

    def as_it_came(self, raw: bytes) -> MessageAnswer:
        return MessageAnswer(body=raw)

    def answer(
        self, parsed: dict[str, Any], raw: bytes, ids: ResponseIds, first: bool, notes: list[Note]
    ) -> MessageAnswer:
        carry = self.carry
        carry.rounds += 1
        result = sanitize_output(parsed, ids, carry, notes, text_tool_calls=self._text_tool_calls)
        if first:
            carry.envelope = {k: parsed[k] for k in IDENTITY_KEYS if k in parsed}
        carry.add_usage(parsed.get("usage"))
        for item in result.output:
            carry.items[carry.next_index] = item
            carry.next_index += 1
        if result.replays:
            return MessageAnswer(
                followup=RoundFollowup(result.replays, result.replayed_items, result.round_items)
            )
        if first and not result.changed:
            return MessageAnswer(body=raw)
        merged = carry.response(parsed, str(parsed.get("status") or "completed"))
        merged["output"] = carry.output()
        if carry.usage is not None:
            merged["usage"] = carry.usage
        return MessageAnswer(body=dumps(merged))

    def followup_request(
        self,
        record: FollowupRecord,
        upstream_body: dict[str, Any],
        facts: HistoryFacts,
        guard: GuardState,
    ) -> tuple[dict[str, Any], HistoryFacts]:
        assert isinstance(record, RoundFollowup)
        return build_followup(
            upstream_body,
            facts,
            guard,
            record.round_items,
            record.replays,
            record.replayed_items,
        )

    def stream_error(self, error: ProxyError, forwarded: bool) -> bytes:
        """`response.failed`, numbered after what the client has, with the error: a loop's code
        is `invalid_prompt` (Codex stops at once; it reconnects after codes it does not know)."""
        carry = self.carry
        response = carry.response(None, "failed")
        response["output"] = carry.output()
        if isinstance(error, ReplayLoopDetected):
            response["error"] = {"code": LOOP_FAILURE_CODE, "message": loop_message(error)}
        else:
            response["error"] = {"code": error.code or "server_error", "message": error.message}
        out: list[bytes] = []
        carry.emit({"type": "response.failed", "response": response}, out)
        carry.release(out)
        return b"".join(out)

    def reached_client(self, forwarded: bool) -> bool:
        """The carry's head gate knows: events that show nothing wait there (SPEC §5)."""
        return self.carry.released


class ResponsesExchange(RoundExchange):
    """A Responses request across its rounds."""

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
        grammar = ResponsesGrammar(
            rules, ResponseCarry(CallIds(entropy, translated.facts.client_ids))
        )
        super().__init__(
            grammar,
            rules,
            translated.facts,
            translated.body,
            translated.to_bytes(raw),
            entropy,
        )
        self.translations = translated.translations  # for `sanitize --explain`
        self._notes.extend(translated.repairs)  # SPEC §11: reported with the round's notes
        self._carry = grammar.carry

    @property
    def nothing_released(self) -> bool:
        return not self._carry.released


__all__ = ["LOOP_FAILURE_CODE", "ResponsesExchange", "ResponsesGrammar", "loop_message"]
