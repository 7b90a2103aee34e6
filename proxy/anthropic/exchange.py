"""One Anthropic Messages request, from its first upstream round to its last (sans-IO, §8).

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

import orjson

from proxy.anthropic.ending import output_tokens
from proxy.anthropic.followup import build_followup
from proxy.anthropic.message import merge_continuation, sanitize_message
from proxy.anthropic.request import translate_messages
from proxy.anthropic.stream import AnthropicStream, MessageCarry, StreamPhase
from proxy.anthropic.wire import encode, error_event
from proxy.core.decide import ResponseIds
from proxy.core.errors import ProxyError, ReplayLoopDetected, UpstreamStreamError
from proxy.core.events import ExchangeEvent, Forward, LoopDetected, UpstreamBroken
from proxy.core.guard import Replay
from proxy.core.jsontext import dumps
from proxy.core.notes import Note
from proxy.core.rounds import ExchangeClosed, ExchangePhase, MessageRound, RoundPhases, RouteRules

MINT_PREFIX = "toolu_"  # SPEC §8: minted client ids are toolu_{turn}_{idx}_{hex8}


class AnthropicExchange(RoundPhases):
    """An Anthropic Messages request across its rounds."""

    def __init__(
        self,
        body: dict[str, Any],
        raw: bytes,
        rules: RouteRules,
        entropy: Callable[[int], bytes] = os.urandom,
    ):
        translated = translate_messages(
            body, rules.dialect, rules.repeat_guard, rules.repeat_exempt
        )
        self._begin_exchange(
            rules, translated.facts, translated.body, translated.to_bytes(raw), entropy
        )
        self.history_calls = translated.calls
        self._forwarded = False
        self._stream_core: AnthropicStream | None = None
        self._message: MessageRound | None = None
        self._carry: MessageCarry | None = None
        self._first_body: dict[str, Any] | None = None  # non-streaming: the first round's
        self._started = False  # a message_start reached the client

    # -- the shell's calls ---------------------------------------------------------------------

    def begin_round(self, *, stream: bool) -> None:
        self._move(ExchangePhase.RECEIVING)
        self._non_json_before = self._non_json_now()
        ids = ResponseIds(self.facts, self.rules.ids, self.guard, mint_prefix=MINT_PREFIX)
        if stream:
            self._stream_core = AnthropicStream(
                ids, carry=self._carry, text_tool_calls=self.rules.text_tool_calls
            )
            self._message = None
        else:
            self._message = MessageRound(ids)
            self._stream_core = None

    def feed(self, data: bytes) -> list[ExchangeEvent]:
        self._check_receiving()
        core = self._stream_core
        if core is None:
            if self._message is None:
                raise ExchangeClosed("input after the round ended")
            self._message.body += data
            return []
        return self._stream_events(core, core.feed(data))

    def end(self) -> list[ExchangeEvent]:
        self._check_receiving()
        if self._message is not None:
            return self._message_events(self._message)
        assert self._stream_core is not None
        return self._stream_events(self._stream_core, self._stream_core.end())

    def report(self) -> tuple[list[Note], int]:
        notes, self._notes = self._notes, []
        return notes, self._non_json_now()

    def stream_error(self, error: ProxyError) -> bytes:
        """The bytes that end the client's stream with this error: Anthropic's `error` event,
        after a `message_start` if none went out yet (SDKs read the error inside a message),
        and, for a replay loop, after a completed content block (an empty text block if the
        message has none): Claude Code ends the turn on such an event, and re-sends the
        request without streaming after an error with no completed block before it."""
        head = b"" if self._started else encode(_placeholder_start(self._upstream_body))
        self._started = True
        core = self._stream_core
        if isinstance(error, ReplayLoopDetected) and core is not None:
            head += core.block_before_error()  # so Claude Code takes the loop as final
        return head + error_event(error)

    def _non_json_now(self) -> int:
        core = self._stream_core
        return self._non_json_before + (core.non_json_events if core is not None else 0)

    # -- streaming rounds ----------------------------------------------------------------------

    def _stream_events(self, core: AnthropicStream, out: list[bytes]) -> list[ExchangeEvent]:
        self._take_notes(core.notes)
        events: list[ExchangeEvent] = []
        if out:
            self._forwarded = True
            self._started = True  # the first round's first event is its message_start
        data = b"".join(out)
        if core.error is not None:
            return [*([data] if data else []), self._loop(core.error)]
        if core.phase is not StreamPhase.DONE:
            return [data] if data else []
        followup = core.followup
        if followup is None:
            self._move(ExchangePhase.ENDED)
            return [Forward(data=data, last=True)]
        if data:
            events.append(data)
        self._carry = followup.carry
        events.append(self._followup(followup.blocks, followup.replays))
        return events

    # -- non-streaming rounds ------------------------------------------------------------------

    def _message_events(self, round_: MessageRound) -> list[ExchangeEvent]:
        raw = bytes(round_.body)
        try:
            parsed = orjson.loads(raw)
        except orjson.JSONDecodeError:
            parsed = None
        if not isinstance(parsed, dict):
            if self._carry is None:  # the first answer: relayed as it came
                return self._finish(raw)
            self._move(ExchangePhase.FAILED)
            error = UpstreamStreamError(
                "the upstream answered the follow-up with a body that is not a JSON object"
            )
            return [UpstreamBroken(error=error)]
        try:
            result = sanitize_message(
                parsed, round_.ids, text_tool_calls=self.rules.text_tool_calls
            )
        except ReplayLoopDetected as exc:
            return [self._loop(exc)]
        self._notes.extend(result.notes)
        if result.replays:
            return [self._message_followup(parsed, result.blocks, result.replays)]
        if self._carry is not None and self._first_body is not None:
            return self._finish(merge_continuation(self._carry, self._first_body, result.body))
        return self._finish(dumps(result.body) if result.changed else raw)

    def _message_followup(
        self, parsed: dict[str, Any], blocks: list[dict[str, Any]], replays: list[Replay]
    ) -> ExchangeEvent:
        carry = self._carry or MessageCarry()
        carry.output_tokens += output_tokens(parsed.get("usage"))
        carry.records.extend(blocks)
        self._carry = carry
        self._first_body = self._first_body or parsed
        return self._followup(blocks, replays)

    # -- across rounds -------------------------------------------------------------------------

    def _followup(self, blocks: list[dict[str, Any]], replays: list[Replay]) -> ExchangeEvent:
        return self._open_followup(
            lambda: build_followup(self._upstream_body, self.facts, self.guard, blocks, replays),
            replays,
        )

    def _loop(self, error: ReplayLoopDetected) -> LoopDetected:
        self._move(ExchangePhase.FAILED)
        # A stream's loop is always an in-stream event (SPEC §8), never a 422 before it.
        streaming = self._stream_core is not None
        return LoopDetected(error=error, before_first_byte=not (self._forwarded or streaming))


def _placeholder_start(body: dict[str, Any]) -> dict[str, Any]:
    """A message_start for a stream that fails before the upstream sent its own."""
    model = body.get("model")
    message: dict[str, Any] = {
        "id": "msg_toolcall_proxy_error",
        "type": "message",
        "role": "assistant",
        "model": model if isinstance(model, str) else "",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 0, "output_tokens": 0},
    }
    return {"type": "message_start", "message": message}
