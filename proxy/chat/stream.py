"""Response direction, streaming (SPEC §2, §4, §5): upstream SSE bytes in, client SSE bytes out.

`StreamSanitizer` is the per-round state machine; the work is done by its parts:
- the hot path here: events that cannot need a change (by the one rule of `sse_scan.scan`)
  leave as the bytes that arrived, without JSON parsing;
- `choices` / `calls`: tool-call deltas assigned to call slots by `(choice, index)` with the
  fallbacks of SPEC §4, re-emitted in OpenAI's shape, headers held only as long as the client
  id cannot be decided, `finish_reason` made truthful, text tool calls recovered;
- `continuation`: a follow-up round read as the same message, usage summed, the `Carry`
  handed to the next round;
- `head`: output that shows nothing waits for the first output that does (SPEC §5).

Phases and what moves between them (`_TRANSITIONS`, the one place a phase changes):
    STREAMING --replays only--> FOLLOWUP   a choice's only calls were replays: swallow the rest
    STREAMING, FOLLOWUP --round end--> DONE   `[DONE]`, or end() completed the round
    STREAMING --trip--> FAILED             the breaker tripped: the error event was the last
Only STREAMING and FOLLOWUP take input. Bytes after `[DONE]` are not part of the stream
(SPEC §4: nothing after it is forwarded) and after a trip the error event was the last: in
DONE and FAILED, feed() and end() return nothing and fed bytes are counted in
`ignored_bytes` (the exchange stops feeding there and raises on input after its end). A step
the table does not list raises StreamStateError.
"""

from __future__ import annotations

from enum import Enum, auto
from typing import Any, Final

import orjson
from mypy_extensions import mypyc_attr

from proxy.chat.calls import CallSlot
from proxy.chat.choices import Choices
from proxy.chat.continuation import Carry, Continuation, FollowupNeeded, RoundContent
from proxy.chat.head import HeadGate, events_show_nothing, shows_nothing
from proxy.chat.lane import FragmentLane
from proxy.chat.sse_scan import CONTENT, MARKUP, PLAIN, USAGE, event_at, run_end, scan
from proxy.core.decide import ResponseIds
from proxy.core.errors import ReplayLoopDetected
from proxy.core.jsoncomplete import is_complete_json
from proxy.core.jsontext import dumps
from proxy.core.notes import DeltaRepaired, Note
from proxy.core.sse import DONE_EVENT, SSEDecoder, SSEEvent, encode_comment, encode_event

__all__ = [
    "CallSlot",
    "Carry",
    "FollowupNeeded",
    "StreamPhase",
    "StreamSanitizer",
    "StreamStateError",
    "is_complete_json",
]


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

    __hash__ = object.__hash__


_TRANSITIONS: dict[tuple[StreamPhase, Step], StreamPhase] = {
    (StreamPhase.STREAMING, Step.REPLAYS_ONLY): StreamPhase.FOLLOWUP,
    (StreamPhase.STREAMING, Step.ROUND_END): StreamPhase.DONE,
    (StreamPhase.FOLLOWUP, Step.ROUND_END): StreamPhase.DONE,
    (StreamPhase.STREAMING, Step.TRIP): StreamPhase.FAILED,
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
_FORWARD = Outcome.FORWARD
_REWRITTEN = Outcome.REWRITTEN
_DROP = Outcome.DROP


# The fragment lane (lane.py) on or off: tests turn it off to hold it to the general path. A
# module attribute, since this module is compiled (setup.py): its methods call each other
# directly, so a test that replaced one would not be seen, where this is read at each use.
FRAGMENT_LANE = True

# The first content taken from its bytes (`_plain_start`) on or off, like FRAGMENT_LANE: tests
# turn it off to hold it to the general path.
PLAIN_START = True
# The one shape whose first content `_plain_start` reads from the bytes: OpenAI's, one choice
# at index 0 whose delta opens with its content (the byte before `"choices"` is checked too).
_PLAIN_START_HEAD = b'"choices":[{"index":0,"delta":{"content":"'

# `data: [DONE]` read whole in a refused read: the event the decoder would have made of it.
_DONE_READ = SSEEvent(b"[DONE]")
_DONE_SIZE: Final = len(DONE_EVENT)


# mypyc compiles this module; an exception class of a built-in base stays a Python class.
@mypyc_attr(native_class=False)
class StreamStateError(RuntimeError):
    """A step the transition table does not list: a bug in the core."""


class StreamSanitizer:
    """Sans-IO: `feed(bytes) -> list[bytes]`, `end() -> list[bytes]`; decisions in `notes`."""

    def __init__(
        self, ids: ResponseIds, *, carry: Carry | None = None, text_tool_calls: bool = False
    ):
        self.ids = ids
        self.notes: list[Note] = []
        self.followup: FollowupNeeded | None = None
        self.error: ReplayLoopDetected | None = None
        self.non_json_events = 0
        self.parsed_chunks = 0  # chunks the general path parsed (the rest left as they came)
        self.ignored_bytes = 0  # fed after the stream ended (see the module's docstring)
        self.phase = _STREAMING  # changed by _go() only
        self._decoder = SSEDecoder()
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
        # What the hot path's scan must look for besides tool calls and finishes: usage may
        # have to be held (SPEC §5); with text tool calls, markup or content (_forwardable).
        self._want = USAGE if self._armed else 0
        # The hot path needs the envelope known (the first chunk is always parsed), a round
        # that is not a continuation (those are rewritten) and one choice.
        self._hot_allowed = carry is None and single
        self._hot = False
        self._lane: FragmentLane | None = None  # a held call's fragments, from their bytes
        # Output of this round showed the user something: the response's head leaves with it
        # at the end of the read that made it (`HeadGate`), so output the hot path forwards
        # from then on is not asked whether it shows anything (SPEC §5).
        self._shown = False

    @property
    def nothing_released(self) -> bool:
        """No byte of this response (any round) has been handed out: a trip now is a 422."""
        return not self._carry.released

    def feed(self, data: bytes) -> list[bytes]:
        phase = self.phase
        if phase is _STREAMING or phase is _FOLLOWUP:
            return self._head.release(self._read(data), self.error is not None)
        self.ignored_bytes += len(data)
        return []

    def end(self) -> list[bytes]:
        """The upstream body ended cleanly: complete whatever it left unfinished."""
        phase = self.phase
        if phase is not _STREAMING and phase is not _FOLLOWUP:
            return []
        out = self._handle(self._decoder.end(), None)
        if self.phase is _STREAMING or self.phase is _FOLLOWUP:
            try:
                out += self._close()
            except ReplayLoopDetected as exc:  # a call held to the end was a looping replay
                self._trip(exc, out)
        return self._head.release(out, self.error is not None)

    def _go(self, step: Step) -> None:
        phase = _TRANSITIONS.get((self.phase, step))
        if phase is None:
            raise StreamStateError(f"no {step.name} step from {self.phase.name}")
        self.phase = phase

    def _trip(self, exc: ReplayLoopDetected, out: list[bytes]) -> None:
        self.error = exc
        self._go(_TRIP)
        out.append(exc.sse_bytes())

    # -- reads ---------------------------------------------------------------------------------

    def _read(self, data: bytes) -> list[bytes]:
        if self.phase is _STREAMING and data[-2:] == b"\n\n" and self._decoder.idle:
            if self._hot:
                # The one forward-unchanged rule (`_forwardable`), asked as where the run of
                # events it forwards ends: a read it forwards whole is the hot path, leaving
                # as it arrived with no events built (bench.core: this is most of the proxy's
                # per-chunk CPU on a stream); a read it refuses is not walked a second time
                # for where that run ends.
                run = run_end(data, 0, self._want_now())
                if run == len(data):
                    return self._forward_run(data)
                return self._refused_read(data, run=run)
            if self._round.envelope is None:
                return self._first_read(data)
        return self._handle(self._decoder.feed(data), None)

    def _forward_run(
        self, run: bytes, start: int = 0, before: list[bytes] | None = None
    ) -> list[bytes]:
        """Whole events the rule forwards unchanged, as they arrived: `run[start:]`, returned
        as `run` (the caller only passes a `start` when all of `run` leaves as it arrived;
        `before`: then the output `run[:start]` made)."""
        if self._content is not None:
            self._content.add_read(run, start)
        self._choices.raw_seen = True
        if not self._shown and not self._carry.released:
            # SPEC §5: output that shows nothing waits, parsed or not (`HeadGate`).
            if (before is not None and self._head.shows(before)) or not events_show_nothing(
                run, start
            ):
                self._shown = True
            else:
                self._head.quiet(run)
        return [run]

    def _refused_read(
        self,
        data: bytes,
        pos: int = 0,
        out: list[bytes] | None = None,
        intact: bool = True,
        run: int = -1,
    ) -> list[bytes]:
        """A read the rule refused: runs of events it forwards still leave as they arrived,
        each other event takes the general path, and the rule is asked again after it (the
        first content of a round, or a tool call after content, refuses a read whose other
        events pass: those are then not decoded and encoded one by one).

        `out`: the output for `data[:pos]`; `intact`: it is those bytes as they arrived (each
        event handled so far left unchanged). When a run the rule forwards then ends the
        read, the whole read leaves as it arrived, without copying its pieces out of it and
        joining them again (under callgrind a 16 KiB copy is about 16K instructions).
        `run`: where the run of events the rule forwards from `pos` ends, when the caller
        has asked (-1: not asked); it holds for `pos` only, and is dropped once `pos` moves."""
        out = [] if out is None else out
        size = len(data)
        idle = True  # _read saw the decoder idle: only its feeds below change that
        while pos < size:
            if self.phase is not _STREAMING or not idle:
                out += self._handle(self._decoder.feed(data[pos:]), None)
                break
            # Where the event ends, and whether it is one `data: {...}` line (negative: not).
            end = event_at(data, pos)
            one_line = end > 0
            if not one_line:
                end = -end
                if end - pos == _DONE_SIZE and data[pos:end] == DONE_EVENT:
                    out += self._handle([_DONE_READ], None)  # without the decoder's split
                    pos = end
                    intact = False
                    run = -1
                    continue
            if self._lane_takes(data, pos, end):
                pos = end  # dropped, as the general path would: the read is not intact
                intact = False
                run = -1
                continue
            cut = self._forwardable_run(data, pos, end, run, one_line)
            run = -1  # it was the answer for the read's first position only
            if cut == size and intact:
                return self._forward_run(data, pos, out)
            if cut > pos:
                out += self._forward_run(data[pos:cut], 0, out)
                pos = cut
                continue
            event = data[pos:end]
            if one_line:
                handled = self._one_line_event(data, pos, event)
                intact = intact and len(handled) == 1 and handled[0] is event
                out += handled
            else:
                # `event` as refused: the rule just said so, it is not asked again.
                out += self._handle(self._decoder.feed(event), event)
                idle = self._decoder.idle
                intact = False
            pos = end
        return out

    def _lane_takes(self, data: bytes, pos: int, end: int) -> bool:
        """Did the fragment lane take the event `data[pos:end]` (`lane.py`)?"""
        lane = self._lane
        return lane is not None and lane.take(data, pos, end)

    def _one_line_event(self, data: bytes, pos: int, event: bytes) -> list[bytes]:
        """The one-line event `event` at `pos` of `data`, refused by the rule, on the general
        path; parsed, or built by the lane when it left the event to the general path."""
        lane = self._lane
        return self._plain_event(event, lane.left_chunk(data, pos) if lane is not None else None)

    def _forwardable_run(self, data: bytes, pos: int, end: int, known: int, one_line: bool) -> int:
        """Where the run of events from `pos` that the rule forwards ends (`pos`: none);
        `end`: the end of the event at `pos`; `known`: that answer when the caller has it
        (-1: not known). A read that is one event (a paced upstream's) was just refused
        whole: it is not asked again. `one_line`: the event at `pos` is one `data: {...}`
        line, whose first content may be taken from its bytes (`_plain_start`) when the
        rule refuses it and text calls are recovered."""
        if known >= 0:
            cut = known
        elif not pos and end == len(data):
            cut = pos
        else:
            cut = run_end(data, pos, self._want_now())
        if cut == pos and one_line and self._text_calls and self._choices.holding_text:
            return self._plain_start(data, pos, end)
        return cut

    def _plain_start(self, data: bytes, pos: int, end: int) -> int:
        """The one-line event `data[pos:end]`, refused while a scanner must see all content
        (CONTENT: the round's first content may open a whole-message JSON call), when it is
        the only choice's first content and that content plainly opens no call: it is then
        taken from its bytes (`Choices.takes_plain_start`) and the rule, no longer asking
        for content, is asked again. Returns where the run it forwards from `pos` ends now;
        `pos`: not taken, nothing was done. On a stream with tools offered, this spares the
        general path (parse, route, scan, about 30K instructions) for the first content.

        Taken only in OpenAI's shape with JSON text that holds no escape (a backslash, or
        any byte of a marker): then the bytes between the quotes are the text."""
        if not PLAIN_START:
            return pos
        before, head, rest = data[pos:end].partition(_PLAIN_START_HEAD)
        if not head or before[-1:] not in (b"{", b","):
            return pos
        raw, quote, _ = rest.partition(b'"')
        try:
            text = raw.decode()
        except UnicodeDecodeError:
            return pos
        if not quote or "\\" in text:
            return pos
        want = self._want | MARKUP  # what _want_now() is once the text is taken
        run = run_end(data, pos, want)
        if run == pos or not self._choices.takes_plain_start(text):
            return pos
        return run

    def _first_read(self, data: bytes) -> list[bytes]:
        """The first chunk is always parsed (it names the response); the events after it in
        the same read may still take the hot path."""
        end = event_at(data, 0)  # negative: not one `data: {...}` line
        cut = abs(end)
        first = data[:cut]
        one_line = end > 0
        out = (
            self._plain_event(first) if one_line else self._handle(self._decoder.feed(first), None)
        )
        if cut == len(data):
            return out
        if self._hot and self.phase is _STREAMING and self._decoder.idle:
            # The rest as _read would take it, without copying it out of the read.
            intact = len(out) == 1 and out[0] is first
            return self._refused_read(data, cut, out, intact)
        # Off the hot path (a nameless first chunk, a continuation, n > 1, a trip), _read
        # would hand the rest to the decoder too.
        return out + self._handle(self._decoder.feed(data[cut:]), None)

    def _forwardable(self, framed: bytes) -> bool:
        """The one forward-unchanged rule, for a whole read or one event framed as
        `data: ...\\n\\n`: whole one-line JSON events with no tool call, no finish, no usage
        that may have to wait, and with text tool calls no markup that may start a call, or
        no content at all while a scanner must see all of it (`sse_scan`). Only asked once
        `_hot` holds."""
        return scan(framed, self._want_now()) == PLAIN

    def _want_now(self) -> int:
        want = self._want
        if self._text_calls:
            want |= CONTENT if self._choices.holding_text else MARKUP
        return want

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
        except ReplayLoopDetected as exc:
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
        except ReplayLoopDetected as exc:
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
        """The one rule for an event on the general path: its data framed as a read of its
        own. Not asked twice: an event that is the whole read just refused stays refused."""
        if not self._hot:
            return False
        framed = b"data: " + data + b"\n\n"
        return framed != refused and self._forwardable(framed)

    def _parsed_event(
        self, data: bytes, other: tuple[bytes, ...], out: list[bytes], framed: bytes | None = None
    ) -> None:
        """`framed`: the event's bytes when they are `encode_event(data, other)` already."""
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            # SPEC §4: OpenAI never sends such a line and the openai SDKs raise on it; as a
            # comment, in place, it stays readable in the raw stream.
            self.non_json_events += 1
            self.notes.append(DeltaRepaired(kind="non_json_data"))
            out.append(encode_comment(data, other))
            return
        if not isinstance(chunk, dict):
            out.append(encode_event(data, other))
            return
        self._parsed_chunk(chunk, data, other, out, framed)

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
        """A chunk of one choice was dropped while a call of that choice waits for complete
        arguments (its header, or one of its fragments): its later fragments may take the
        lane (`lane.py`). Asked on the hot path's events only (`framed`: their bytes are
        one `data:` line), where the lane is looked for."""
        if type(choices) is not list or len(choices) != 1 or type(choices[0]) is not dict:
            return
        held = self._choices.held_call(choices[0].get("index"))
        lane = self._lane
        if (
            not FRAGMENT_LANE
            or held is None
            or (lane is not None and (lane.calls, lane.index) == held)
        ):
            return
        calls, index = held  # spelled out: a starred call goes through a generic call
        self._lane = FragmentLane.draw(chunk, choices[0], calls, index)

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
            return _DROP
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
