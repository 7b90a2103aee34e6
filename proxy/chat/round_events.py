"""A streamed round's events one at a time (the general path), and the round's phases.

`RoundEvents` is what `StreamSanitizer` (stream.py) hands each event the hot path did not
forward as it arrived: decoded (or read whole as one `data:` line), parsed, its tool-call
deltas routed and re-emitted by `Choices`, its usage held when a follow-up may need it, the
output that shows nothing handed to the `HeadGate` (SPEC §5), and the round closed at
`[DONE]` or the upstream's end. It changes when what is done to a chunk changes; how reads
are walked and which bytes may leave unparsed (the rule) is stream.py's, which the general
path asks through two methods StreamSanitizer overrides: `_unchanged_event` and `_draw_lane`.

Phases and what moves between them (`_TRANSITIONS`, the one place a phase changes):
    STREAMING --replays only--> FOLLOWUP   a choice's only calls were replays: swallow the rest
    STREAMING, FOLLOWUP --round end--> DONE   `[DONE]`, or end() completed the round
    STREAMING --trip--> FAILED             the breaker tripped: the error event was the last
    STREAMING --break--> FAILED            a line that is not JSON inside an open call (`broken`)
Only STREAMING and FOLLOWUP take input. Bytes after `[DONE]` are not part of the stream
(SPEC §4: nothing after it is forwarded) and after a trip the error event was the last: in
DONE and FAILED, feed() and end() return nothing and fed bytes are counted in
`ignored_bytes` (the exchange stops feeding there and raises on input after its end). A step
the table does not list raises StreamStateError.
"""

from __future__ import annotations

from enum import Enum, auto
from typing import Any

import orjson
from mypy_extensions import mypyc_attr

from proxy.chat.choices import Choices
from proxy.chat.continuation import Carry, Continuation, FollowupNeeded, RoundContent
from proxy.chat.head import HeadGate, shows_nothing
from proxy.core.decide import ResponseIds
from proxy.core.errors import CallBoundExceeded, ReplayLoopDetected
from proxy.core.jsontext import dumps
from proxy.core.nonjson import NonJsonRule, read_object
from proxy.core.notes import Note
from proxy.core.sse import DONE_EVENT, SSEEvent, encode_event


class StreamPhase(Enum):
    STREAMING = auto()
    FOLLOWUP = auto()  # this round's only calls were replays: swallow the rest of it
    DONE = auto()  # the round is complete (`followup` says whether another one follows)
    FAILED = auto()  # the breaker tripped (`error`)

    # Members are singletons: hash them by identity (C) rather than Enum's hash of the name,
    # a Python call for every transition.
    __hash__ = object.__hash__


class Step(Enum):
    REPLAYS_ONLY = auto()
    ROUND_END = auto()
    TRIP = auto()
    BREAK = auto()  # SPEC §4: a line that is not JSON while a call is open

    __hash__ = object.__hash__


_TRANSITIONS: dict[tuple[StreamPhase, Step], StreamPhase] = {
    (StreamPhase.STREAMING, Step.REPLAYS_ONLY): StreamPhase.FOLLOWUP,
    (StreamPhase.STREAMING, Step.ROUND_END): StreamPhase.DONE,
    (StreamPhase.FOLLOWUP, Step.ROUND_END): StreamPhase.DONE,
    (StreamPhase.STREAMING, Step.TRIP): StreamPhase.FAILED,
    (StreamPhase.STREAMING, Step.BREAK): StreamPhase.FAILED,
}


class Outcome(Enum):
    """What becomes of a parsed chunk."""

    FORWARD = auto()  # the bytes that arrived
    REWRITTEN = auto()  # the chunk, changed in place, re-serialized
    DROP = auto()  # nothing


# Reading an Enum member through its class costs an EnumType.__getattr__ call on Python 3.11
# (seven times a global's cost): the checks made per read and per event use these names.
_STREAMING = StreamPhase.STREAMING
_FOLLOWUP = StreamPhase.FOLLOWUP
_DONE = StreamPhase.DONE
_FAILED = StreamPhase.FAILED
_REPLAYS_ONLY = Step.REPLAYS_ONLY
_ROUND_END = Step.ROUND_END
_TRIP = Step.TRIP
_BREAK = Step.BREAK
_FORWARD = Outcome.FORWARD
_REWRITTEN = Outcome.REWRITTEN
_DROP = Outcome.DROP


# mypyc compiles this module; an exception class of a built-in base stays a Python class.
@mypyc_attr(native_class=False)
class StreamStateError(RuntimeError):
    """A step the transition table does not list: a bug in the core."""


class RoundEvents:
    """The round's state, its phases, and the general path of its events. Subclassed by
    `StreamSanitizer` (one object: the hot path reads and writes this state per read, where
    a second object would add a hop to each access), which reads the bytes, answers the
    rule for an event (`_unchanged_event`) and draws the fragment lane (`_draw_lane`)."""

    def __init__(self, ids: ResponseIds, carry: Carry | None, text_tool_calls: bool) -> None:
        self.ids = ids
        self.notes: list[Note] = []
        self.followup: FollowupNeeded | None = None
        self.error: ReplayLoopDetected | None = None
        self.non_json = NonJsonRule(self.notes)
        self.parsed_chunks = 0  # chunks the general path parsed (the rest left as they came)
        self.phase = _STREAMING  # changed by _go() only
        self._round = Continuation(carry)
        self._carry = self._round.carry
        self._head = HeadGate(self._carry)
        single = ids.facts.choices == 1
        # The round's content is only needed if it may end in a follow-up request.
        self._armed = ids.guard.enabled and single and bool(ids.facts.answered)
        self._content = RoundContent() if self._armed else None
        # Markup is only turned into calls when the request offered tools (text tool calls).
        self._text_calls = text_tool_calls and bool(ids.facts.offered_tools)
        self._choices = Choices(
            ids, self.notes, text_calls=self._text_calls, content=self._content, followups=single
        )
        # The hot path needs the envelope known (the first chunk is always parsed), a round
        # that is not a continuation (those are rewritten) and one choice.
        self._hot_allowed = carry is None and single
        self._hot = False
        # Output of this round showed the user something: the response's head leaves with it
        # at the end of the read that made it (`HeadGate`), so output the hot path forwards
        # from then on is not asked whether it shows anything (SPEC §5).
        self._shown = False

    @property
    def nothing_released(self) -> bool:
        """No byte of this response (any round) has been handed out: a trip now is a 422."""
        return not self._carry.released

    def _go(self, step: Step) -> None:
        phase = _TRANSITIONS.get((self.phase, step))
        if phase is None:
            raise StreamStateError(f"no {step.name} step from {self.phase.name}")
        self.phase = phase

    def _trip(self, exc: ReplayLoopDetected | CallBoundExceeded, out: list[bytes]) -> None:
        if isinstance(exc, CallBoundExceeded):  # SPEC §6: broken, as by a line inside a call
            self.non_json.broken = exc
            self._go(_BREAK)
            return
        self.error = exc
        self._go(_TRIP)
        out.append(exc.sse_bytes())

    # -- events ----------------------------------------------------------------------------------

    def _plain_event(self, event: bytes, chunk: dict[str, Any] | None = None) -> list[bytes]:
        """One `data: {...}\\n\\n` event, as `_handle` would take it from the decoder (the
        decoder's split and event object: about 23K instructions an event); unchanged, it
        leaves as the bytes that arrived. The rule does not forward it (or is not asked).
        `chunk`: what it parses into, when the lane built that (`FragmentLane.left_chunk`)."""
        out: list[bytes] = []
        try:
            if chunk is None:
                self._parsed_event(event[6:-2], (), out, event)
            else:
                self._parsed_chunk(chunk, b"", (), out, event)
        except (ReplayLoopDetected, CallBoundExceeded) as exc:
            self._trip(exc, out)
        return out

    def _handle(self, events: list[SSEEvent], refused: bytes | None) -> list[bytes]:
        """`refused`: the read these events came from, when the rule refused it whole."""
        out: list[bytes] = []
        try:
            for event in events:
                phase = self.phase
                if phase is _DONE or phase is _FAILED:
                    break
                self._event(event, out, refused)
        except (ReplayLoopDetected, CallBoundExceeded) as exc:
            self._trip(exc, out)
        return out

    def _event(self, event: SSEEvent, out: list[bytes], refused: bytes | None) -> None:
        data = event.data
        if data is None:
            if self.phase is _STREAMING:
                out.append(encode_event(None, event.other))  # comments and keep-alives
        elif event.is_done:
            out.extend(self._close())
        elif self.phase is _FOLLOWUP:
            self._round.swallow(data)
        elif self._unchanged_event(data, refused):
            if self._content is not None:
                self._content.add_event(data)
            self._choices.raw_seen = True
            encoded = encode_event(data, event.other)
            if not self._shown and self._waits(data, out):  # the flag first: a call less
                self._head.quiet(encoded)
            out.append(encoded)
        else:
            self._parsed_event(data, event.other, out)

    def _waits(self, data: bytes, out: list[bytes]) -> bool:
        """SPEC §5: does an event left unchanged (its data, one JSON object: the rule proved
        it) show nothing while the head waits, as the general path would find it? Parsed only
        while nothing of the response, nor of this read's output `out`, shows anything."""
        if self._shown or self._carry.released:
            return False
        if self._head.shows(out) or not shows_nothing(orjson.loads(data)):
            self._shown = True
            return False
        return True

    def _unchanged_event(self, data: bytes, refused: bytes | None) -> bool:
        """May the event whose data is `data` leave unchanged, unparsed (`refused`: the read
        it came from, when the rule refused it whole)? StreamSanitizer's, which asks the
        rule; without a hot path, none may."""
        return False

    def _parsed_event(
        self, data: bytes, other: tuple[bytes, ...], out: list[bytes], framed: bytes | None = None
    ) -> None:
        """`framed`: the event's bytes when they are `encode_event(data, other)` already."""
        chunk = read_object(data)
        if chunk is None:
            self._not_json(data, other, out)
            return
        self._parsed_chunk(chunk, data, other, out, framed)

    def _not_json(self, data: bytes, other: tuple[bytes, ...], out: list[bytes]) -> None:
        """SPEC §4: a data line that is not a JSON object becomes a comment in its place
        (showing nothing, it may wait with the head), or breaks the round inside an open
        call."""
        comment = self.non_json.answer(data, other, self._choices.call_open())
        if comment is None:
            self._go(_BREAK)
            return
        if not self._carry.released:
            self._head.quiet(comment)
        out.append(comment)

    def _parsed_chunk(
        self,
        chunk: dict[str, Any],
        data: bytes,
        other: tuple[bytes, ...],
        out: list[bytes],
        framed: bytes | None,
    ) -> None:
        """The chunk an event's data parsed into; `data` is only read when `framed` is None."""
        choices = chunk.get("choices")  # as it came: _chunk may replace the list
        outcome = self._chunk(chunk)
        if outcome is _DROP:
            if framed is not None and self._hot:
                self._draw_lane(chunk, choices)
            return
        # jsontext.dumps: a chunk nested past orjson's 254 levels must not raise here
        if outcome is _REWRITTEN:
            encoded = encode_event(dumps(chunk), other)
        else:
            encoded = framed if framed is not None else encode_event(data, other)
        if self._armed and not chunk.get("choices") and isinstance(chunk.get("usage"), dict):
            self._round.hold_usage(encoded, chunk["usage"])
            return
        if not self._carry.released and shows_nothing(chunk):
            self._head.quiet(encoded)  # the head gate decides whether it must wait
        out.append(encoded)

    def _draw_lane(self, chunk: dict[str, Any], choices: object) -> None:
        """A chunk of the hot path's events (one `data:` line) was dropped: the fragment lane
        may be drawn from it. StreamSanitizer's, which walks the reads the lane takes from;
        the general path alone draws none."""

    def _chunk(self, chunk: dict[str, Any]) -> Outcome:
        """Rewrites a parsed chunk in place."""
        self.parsed_chunks += 1
        round_ = self._round
        if round_.envelope is None and round_.take_envelope(chunk) and self._hot_allowed:
            self._hot = True
        changed = round_.active and round_.rewrite(chunk)
        send = True
        choices = chunk.get("choices")
        if isinstance(choices, list):
            rewritten, kept = self._choices.rewrite_all(choices)
            changed = changed or rewritten
            if len(kept) != len(choices):
                chunk["choices"] = kept
                send = bool(kept) or bool(chunk.get("usage"))
        if self._choices.replays_only:
            self._go(_REPLAYS_ONLY)
            if send:
                round_.add_usage(chunk.get("usage"))
            return _REWRITTEN if send and _shown_part(chunk) else _DROP
        if not send:
            return _DROP
        return _REWRITTEN if changed else _FORWARD

    def _close(self) -> list[bytes]:
        """End of this round: finish open choices, then `[DONE]` (or hand over to a follow-up)."""
        out: list[bytes] = []
        if self.phase is _STREAMING:
            out = [self._round.synthetic(choice) for choice in self._choices.close()]
            if self._choices.replays_only:
                self._go(_REPLAYS_ONLY)
        if self.phase is _FOLLOWUP:
            content, reasoning = self._content.message() if self._content else ("", {})
            self.followup = self._round.followup(content, self._choices.replays(), reasoning)
            self._go(_ROUND_END)
            return out
        out += self._round.closing_chunks()
        self._go(_ROUND_END)
        out.append(DONE_EVENT)
        return out


def _shown_part(chunk: dict[str, Any]) -> bool:
    """The chunk that made its round replay-only, cut in place to what the client must still
    see (SPEC §5: the follow-up continues the same message, nothing lost): its text (its own,
    and what the text-call scanner held until the finish released it) and whatever else its
    choices show, without their finish and without usage (summed into the carry), which a
    replay-only round does not forward. False: nothing in it shows anything (dropped)."""
    chunk.pop("usage", None)
    choices = chunk.get("choices")
    if not isinstance(choices, list):
        return False
    for choice in choices:
        if isinstance(choice, dict):
            choice["finish_reason"] = None
    return not shows_nothing(chunk)
