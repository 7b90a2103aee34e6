"""One client request, from its first upstream round to its last (sans-IO, SPEC §2-§5).

The shell talks to nothing else: it hands the exchange the upstream's body as it arrives
(`feed`, then `end`) and acts on the small events it gets back, in order (`proxy.core.events`;
the protocol every surface's exchange follows is `proxy.core.surface_codec.Exchange`).
Decisions for logs and metrics are read with `report()`.

The exchange owns what lives across rounds: the translated request, the guard and breaker,
the follow-up requests, and (in its round cores) the carried message identity and usage.
Its state is `ExchangePhase`, with every transition in `_TRANSITIONS`; input after the end
raises `ExchangeClosed`. Randomness comes in through `entropy` only.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import orjson

from proxy.chat.followup import build_followup
from proxy.chat.history import translate_request
from proxy.chat.message import holds_no_call, merge_continuation, sanitize_completion
from proxy.chat.stream import Carry, StreamPhase, StreamSanitizer
from proxy.core.decide import ResponseIds
from proxy.core.errors import ProxyError, ReplayLoopDetected, UpstreamStreamError
from proxy.core.events import (
    ExchangeEvent,
    Forward,
    UpstreamBroken,
)
from proxy.core.guard import Replay
from proxy.core.jsontext import dumps
from proxy.core.notes import Note
from proxy.core.rounds import (
    ExchangeClosed,
    ExchangePhase,
    MessageRound,
    RoundPhases,
    RouteRules,
)
from proxy.core.usage import add_usage

# Read on every streamed read: on Python 3.11 an Enum member read through its class is an
# EnumType.__getattr__ call.
_RECEIVING = ExchangePhase.RECEIVING
_STREAMING = StreamPhase.STREAMING
_STREAM_DONE = StreamPhase.DONE


class ChatExchange(RoundPhases):
    """A Chat Completions request across its rounds."""

    def __init__(
        self,
        body: dict[str, Any],
        raw: bytes,
        rules: RouteRules,
        *,
        entropy: Callable[[int], bytes] = os.urandom,
    ):
        translated = translate_request(body, rules.dialect, rules.repeat_guard, rules.repeat_exempt)
        self._begin_exchange(
            rules, translated.facts, translated.body, translated.to_bytes(raw), entropy
        )
        self._forwarded = False  # some bytes of the response reached the shell
        # The round being fed: a stream's core, or a whole message's body (never both).
        self._stream_core: StreamSanitizer | None = None
        self._message: MessageRound | None = None
        self._carry: Carry | None = None  # the earlier rounds' message, once there are some
        self._content_before = ""  # non-streaming: the earlier rounds' content
        self._reasoning_before: dict[str, str] = {}  # ... and their reasoning, by field

    # -- the shell's calls ---------------------------------------------------------------------

    def begin_round(self, *, stream: bool) -> None:
        """An upstream response head arrived: its body is an event stream or one message."""
        self._move(ExchangePhase.RECEIVING)
        self._non_json_before = self._non_json_now()
        ids = ResponseIds(self.facts, self.rules.ids, self.guard)
        if stream:
            self._stream_core = StreamSanitizer(
                ids, carry=self._carry, text_tool_calls=self.rules.text_tool_calls
            )
            self._message = None
        else:
            self._message = MessageRound(ids)
            self._stream_core = None

    def feed(self, data: bytes) -> list[ExchangeEvent]:
        core = self._stream_core
        if core is None or self.phase is not _RECEIVING:
            return self._feed_message(data)
        out = core.feed(data)
        if core.phase is _STREAMING and not core.notes:
            # The hot path: the round goes on and decided nothing worth a note.
            if out:
                self._forwarded = True
                return [out[0] if len(out) == 1 else b"".join(out)]
            return []
        return self._stream_events(core, out)

    def _feed_message(self, data: bytes) -> list[ExchangeEvent]:
        self._check_receiving()
        if self._message is None:
            raise ExchangeClosed("a stream's input after its round ended")
        self._message.body += data
        return []

    def end(self) -> list[ExchangeEvent]:
        """The round's upstream body ended cleanly."""
        self._check_receiving()
        if self._message is not None:
            return self._message_events(self._message)
        assert self._stream_core is not None  # begin_round set one of the two
        return self._stream_events(self._stream_core, self._stream_core.end())

    def report(self) -> tuple[list[Note], int]:
        """The decisions not yet reported, and the data lines that were not JSON so far."""
        notes, self._notes = self._notes, []
        return notes, self._non_json_now()

    def stream_error(self, error: ProxyError) -> bytes:
        """SPEC §6: a stream that cannot go on ends with an error event (no `[DONE]`); a
        replay loop's in the form its agents treat as final (`ReplayLoopDetected.sse_bytes`)."""
        return error.sse_bytes()

    def _non_json_now(self) -> int:
        core = self._stream_core
        return self._non_json_before + (core.non_json_events if core is not None else 0)

    # -- streaming rounds ----------------------------------------------------------------------

    def _stream_events(self, core: StreamSanitizer, out: list[bytes]) -> list[ExchangeEvent]:
        self._take_notes(core.notes)
        if core.error is not None:
            return self._stream_loop(core, out)
        if core.phase is not _STREAM_DONE:
            if out:
                self._forwarded = True
                return [out[0] if len(out) == 1 else b"".join(out)]
            return []
        followup = core.followup
        events: list[ExchangeEvent] = []
        if out:
            self._forwarded = True
            events.append(Forward(data=b"".join(out), last=followup is None))
        if followup is None:
            self._move(ExchangePhase.ENDED)
            return events
        self._carry = followup.carry
        events.append(self._followup(followup.content, followup.replays, followup.reasoning))
        return events

    def _stream_loop(self, core: StreamSanitizer, out: list[bytes]) -> list[ExchangeEvent]:
        """The core ended its output with the error event; what came before it goes first."""
        assert core.error is not None
        events: list[ExchangeEvent] = []
        if len(out) > 1:
            self._forwarded = True
            events.append(b"".join(out[:-1]))
        return [*events, self._loop(core.error)]

    # -- non-streaming rounds ------------------------------------------------------------------

    def _message_events(self, round_: MessageRound) -> list[ExchangeEvent]:
        raw = bytes(round_.body)
        if self._carry is None and holds_no_call(raw) and not self._recovers_text(round_):
            # The first round's answer, and nothing in it to decide: it goes out as it came,
            # which is what the full check below ends in for it (parsed or not).
            return self._finish(raw)
        try:
            parsed = orjson.loads(raw)
        except orjson.JSONDecodeError:
            parsed = None
        if not isinstance(parsed, dict):
            if self._carry is None:  # the first answer: relayed as it came
                return self._finish(raw)
            self._move(ExchangePhase.FAILED)
            return [
                UpstreamBroken(
                    error=UpstreamStreamError(
                        "the upstream answered the follow-up with a body that is not a JSON object"
                    )
                )
            ]
        try:
            result = sanitize_completion(
                parsed, round_.ids, text_tool_calls=self.rules.text_tool_calls
            )
        except ReplayLoopDetected as exc:
            return [self._loop(exc)]
        self._notes.extend(result.notes)
        if result.replays:
            carry = self._carry or Carry(
                parsed.get("id"), parsed.get("created"), parsed.get("model")
            )
            carry.usage = add_usage(carry.usage, parsed.get("usage"))
            self._carry = carry
            self._content_before += result.content
            for key, text in result.reasoning.items():
                self._reasoning_before[key] = self._reasoning_before.get(key, "") + text
            return [self._followup(result.content, result.replays, result.reasoning)]
        if self._carry is not None:
            return self._finish(
                dumps(
                    merge_continuation(
                        self._carry, self._content_before, parsed, self._reasoning_before
                    )
                )
            )
        return self._finish(dumps(parsed) if result.changed else raw)

    def _recovers_text(self, round_: MessageRound) -> bool:
        """Could tool-call markup in the content become calls (sanitize_completion's rule)?"""
        return self.rules.text_tool_calls and bool(round_.ids.facts.offered_tools)

    # -- across rounds -------------------------------------------------------------------------

    def _followup(
        self, content: str, replays: list[Replay], reasoning: dict[str, str]
    ) -> ExchangeEvent:
        """The previous request, this round's message and one synthetic answer per replay."""
        return self._open_followup(
            lambda: build_followup(
                self._upstream_body, self.facts, self.guard, content, replays, reasoning
            ),
            replays,
        )
