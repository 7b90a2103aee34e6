"""One Responses request, from its first upstream round to its last (sans-IO, SPEC §8).

The same contract with the shell as Chat Completions' exchange: `begin_round`, `feed`, `end`
hand back events (`bytes`, `Forward`, `OpenFollowup`, `LoopDetected`, `UpstreamBroken`),
`report` the decisions, and `stream_error` the bytes that end a stream in this grammar
(`response.failed` with the next sequence number). Everything that lives across rounds (the
numbering, the delivered items, usage, the response id, the client ids given out) is in the
`ResponseCarry`; randomness comes in through `entropy` only.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import orjson

from proxy.core.decide import ResponseIds
from proxy.core.errors import ProxyError, ReplayLoopDetected, UpstreamStreamError
from proxy.core.events import (
    ExchangeEvent,
    Forward,
    UpstreamBroken,
)
from proxy.core.jsontext import dumps
from proxy.core.notes import Note
from proxy.core.rounds import ExchangePhase, RoundPhases, RouteRules
from proxy.responses.body import sanitize_output
from proxy.responses.carry import IDENTITY_KEYS, ResponseCarry
from proxy.responses.followup import build_followup
from proxy.responses.ids import CallIds
from proxy.responses.request import translate_request
from proxy.responses.stream import ResponsesStream, RoundFollowup, StreamPhase

LOOP_FAILURE_CODE = "invalid_prompt"  # SPEC §8: the code Codex treats as final


def loop_message(error: ReplayLoopDetected) -> str:
    return f"{error.message} ({error.code})"


class ResponsesExchange(RoundPhases):
    """A Responses request across its rounds."""

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
        self.translations = translated.translations  # for `sanitize --explain`
        self._carry = ResponseCarry(CallIds(entropy, self.facts.client_ids))
        self._stream: ResponsesStream | None = None
        self._message: bytearray | None = None
        self._ids: ResponseIds | None = None

    # -- the shell's calls ---------------------------------------------------------------------

    def begin_round(self, *, stream: bool) -> None:
        self._move(ExchangePhase.RECEIVING)
        self._non_json_before = self._non_json_now()
        self._ids = ResponseIds(self.facts, self.rules.ids, self.guard)
        if stream:
            self._stream = ResponsesStream(
                self._ids, self._carry, text_tool_calls=self.rules.text_tool_calls
            )
            self._message = None
        else:
            self._message = bytearray()
            self._stream = None

    def feed(self, data: bytes) -> list[ExchangeEvent]:
        self._check_receiving()
        if self._stream is not None:
            return self._stream_events(self._stream, self._stream.feed(data))
        assert self._message is not None
        self._message += data
        return []

    def end(self) -> list[ExchangeEvent]:
        self._check_receiving()
        if self._stream is not None:
            return self._stream_events(self._stream, self._stream.end())
        assert self._message is not None
        return self._message_events(bytes(self._message))

    def report(self) -> tuple[list[Note], int]:
        notes, self._notes = self._notes, []
        return notes, self._non_json_now()

    def stream_error(self, error: ProxyError) -> bytes:
        """`response.failed`, numbered after what the client has, with the error: a loop's code
        is `invalid_prompt` (Codex stops at once; it reconnects after codes it does not know)."""
        carry = self._carry
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

    @property
    def nothing_released(self) -> bool:
        return not self._carry.released

    def _non_json_now(self) -> int:
        core = self._stream
        return self._non_json_before + (core.non_json_events if core is not None else 0)

    # -- streaming rounds ----------------------------------------------------------------------

    def _stream_events(self, core: ResponsesStream, out: list[bytes]) -> list[ExchangeEvent]:
        self._take_notes(core.notes)
        events: list[ExchangeEvent] = []
        if core.error is not None:
            if out:
                events.append(b"".join(out))
            return [*events, self._loop(core.error)]
        if core.phase is StreamPhase.STREAMING:
            return [b"".join(out)] if out else []
        followup = core.followup
        if followup is None:
            self._move(ExchangePhase.ENDED)
            return [Forward(data=b"".join(out), last=True)]
        if out:
            events.append(b"".join(out))
        events.append(self._followup(followup))
        return events

    # -- non-streaming rounds ------------------------------------------------------------------

    def _message_events(self, raw: bytes) -> list[ExchangeEvent]:
        try:
            parsed = orjson.loads(raw)
        except orjson.JSONDecodeError:
            parsed = None
        first = self._carry.rounds == 0
        self._carry.rounds += 1
        if not isinstance(parsed, dict):
            if first:  # the first answer: relayed as it came
                return self._finish(raw)
            self._move(ExchangePhase.FAILED)
            error = UpstreamStreamError(
                "the upstream answered the follow-up with a body that is not a JSON object"
            )
            return [UpstreamBroken(error=error)]
        assert self._ids is not None
        try:
            result = sanitize_output(
                parsed,
                self._ids,
                self._carry,
                self._notes,
                text_tool_calls=self.rules.text_tool_calls,
            )
        except ReplayLoopDetected as exc:
            return [self._loop(exc)]
        carry = self._carry
        if first:
            carry.envelope = {k: parsed[k] for k in IDENTITY_KEYS if k in parsed}
        carry.add_usage(parsed.get("usage"))
        for item in result.output:
            carry.items[carry.next_index] = item
            carry.next_index += 1
        if result.replays:
            followup = RoundFollowup(result.replays, result.replayed_items, result.round_items)
            return [self._followup(followup)]
        if first and not result.changed:
            return self._finish(raw)
        merged = carry.response(parsed, str(parsed.get("status") or "completed"))
        merged["output"] = carry.output()
        if carry.usage is not None:
            merged["usage"] = carry.usage
        return self._finish(dumps(merged))

    # -- across rounds (the rest is RoundPhases') ------------------------------------------------

    def _was_forwarded(self) -> bool:
        """Some bytes of the response reached the shell (the carry's head gate knows)."""
        return self._carry.released

    def _mark_forwarded(self) -> None:
        self._carry.released = True

    def _followup(self, followup: RoundFollowup) -> ExchangeEvent:
        return self._open_followup(
            lambda: build_followup(
                self._upstream_body,
                self.facts,
                self.guard,
                followup.round_items,
                followup.replays,
                followup.replayed_items,
            ),
            followup.replays,
        )
