"""Response direction, streaming (SPEC §2, §4, §5): upstream SSE bytes in, client SSE bytes out.

`StreamSanitizer` reads the round's bytes; the work is done by its parts:
- the hot path here: events that cannot need a change (by the one rule, `ForwardRule`)
  leave as the bytes that arrived, without JSON parsing; a read the rule refuses is walked
  event by event, where three fast paths come before the general path (`_refused_read`);
- `round_events`: the general path (an event decoded, parsed, rewritten) and the round's
  phases (`StreamPhase`), the state it shares with the hot path, which subclasses it;
- `choices` / `calls`: tool-call deltas assigned to call slots by `(choice, index)` with the
  fallbacks of SPEC §4, re-emitted in OpenAI's shape, headers held only as long as the client
  id cannot be decided, `finish_reason` made truthful, text tool calls recovered;
- `continuation`: a follow-up round read as the same message, usage summed, the `Carry`
  handed to the next round;
- `head`: output that shows nothing waits for the first output that does (SPEC §5);
- `lane`: a held call's argument fragments taken from their bytes.
"""

from __future__ import annotations

from typing import Any, Final

from proxy.chat.calls import CallSlot
from proxy.chat.choices import Choices
from proxy.chat.continuation import Carry, FollowupNeeded
from proxy.chat.head import events_show_nothing
from proxy.chat.lane import FragmentLane
from proxy.chat.round_events import RoundEvents, StreamPhase, StreamStateError
from proxy.chat.sse_scan import CONTENT, MARKUP, PLAIN, USAGE, event_at, run_end, scan
from proxy.core.decide import ResponseIds
from proxy.core.errors import CallBoundExceeded, ReplayLoopDetected
from proxy.core.framing import whole_events
from proxy.core.jsoncomplete import is_complete_json
from proxy.core.sse import DONE_EVENT, SSEDecoder, SSEEvent

__all__ = [
    "CallSlot",
    "Carry",
    "FollowupNeeded",
    "StreamPhase",
    "StreamSanitizer",
    "StreamStateError",
    "is_complete_json",
]

# Reading an Enum member through its class costs an EnumType.__getattr__ call on Python 3.11
# (seven times a global's cost): the checks made per read use these names.
_STREAMING = StreamPhase.STREAMING
_FOLLOWUP = StreamPhase.FOLLOWUP

# The fragment lane (lane.py) on or off: tests turn it off to hold it to the general path. A
# module attribute, since this module is compiled (setup.py): its methods call each other
# directly, so a test that replaced one would not be seen, where this is read at each use.
FRAGMENT_LANE = True

# The first content taken from its bytes (`ForwardRule.plain_start`) on or off, like
# FRAGMENT_LANE: tests turn it off to hold it to the general path. Here too, the rule's
# `scan` and `run_end` are looked up in this module's names, where tests replace them.
PLAIN_START = True
# The one shape whose first content `plain_start` reads from the bytes: OpenAI's, one choice
# at index 0 whose delta opens with its content (the byte before `"choices"` is checked too).
_PLAIN_START_HEAD = b'"choices":[{"index":0,"delta":{"content":"'

# `data: [DONE]` read whole in a refused read: the event the decoder would have made of it.
_DONE_READ = SSEEvent(b"[DONE]")
_DONE_SIZE: Final = len(DONE_EVENT)


class ForwardRule:
    """The one forward-unchanged rule, for the round as it is now: what `sse_scan` must look
    for in its events besides tool calls and finishes. It changes when what may leave
    unparsed changes, apart from how reads are walked (StreamSanitizer)."""

    __slots__ = ("_choices", "_want", "text_calls")

    def __init__(self, choices: Choices, *, usage_held: bool, text_calls: bool) -> None:
        self._choices = choices
        # Usage may have to be held (SPEC §5); with text tool calls, markup or content
        # (`want_now`).
        self._want = USAGE if usage_held else 0
        self.text_calls = text_calls  # markup is turned into calls (the request offered tools)

    def want_now(self) -> int:
        """The scan's `want` now: with text tool calls, content while a choice's scanner
        must see all of it (`Choices.holding_text`), else markup that may start a call."""
        want = self._want
        if self.text_calls:
            want |= CONTENT if self._choices.holding_text else MARKUP
        return want

    def forwards(self, framed: bytes) -> bool:
        """The rule, for a whole read or one event framed as `data: ...\\n\\n`: whole one-line
        JSON events with no tool call, no finish, no usage that may have to wait, and with
        text tool calls no markup that may start a call, or no content at all while a scanner
        must see all of it (`sse_scan`)."""
        return scan(framed, self.want_now()) == PLAIN

    def plain_start(self, data: bytes, pos: int, end: int) -> int:
        """The one-line event `data[pos:end]`, refused while a scanner must see all content
        (CONTENT: the round's first content may open a whole-message JSON call), when it is
        the only choice's first content and that content plainly opens no call: it is then
        taken from its bytes (`Choices.takes_plain_start`) and the rule, no longer asking
        for content, is asked again. Returns where the run it forwards from `pos` ends now;
        `pos`: not taken, nothing was done. On a stream with tools offered, this spares the
        general path (parse, route, scan, about 30K instructions) for the first content.

        Taken only in OpenAI's shape with JSON text that holds no escape (a backslash, or
        any byte of a marker): then the bytes between the quotes are the text."""
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
        want = self._want | MARKUP  # what want_now() is once the text is taken
        run = run_end(data, pos, want)
        if run == pos or not self._choices.takes_plain_start(text):
            return pos
        return run


class StreamSanitizer(RoundEvents):
    """Sans-IO: `feed(bytes) -> list[bytes]`, `end() -> list[bytes]`; decisions in `notes`."""

    def __init__(
        self, ids: ResponseIds, *, carry: Carry | None = None, text_tool_calls: bool = False
    ):
        super().__init__(ids, carry, text_tool_calls)
        self.ignored_bytes = 0  # fed after the stream ended (see round_events' docstring)
        self._decoder = SSEDecoder()
        self._lane: FragmentLane | None = None  # a held call's fragments, from their bytes
        self._rule = ForwardRule(self._choices, usage_held=self._armed, text_calls=self._text_calls)

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
            except (ReplayLoopDetected, CallBoundExceeded) as exc:  # a looping replay, a bound
                self._trip(exc, out)
        return self._head.release(out, self.error is not None)

    # -- reads ---------------------------------------------------------------------------------

    def _read(self, data: bytes) -> list[bytes]:
        if self.phase is _STREAMING and data[-2:] == b"\n\n" and self._decoder.idle:
            return self._whole_events(data)
        if self.phase is not _STREAMING or data.find(b"\r") >= 0:
            return self._handle(self._decoder.feed(data), None)
        return self._split_read(data)

    def _split_read(self, data: bytes) -> list[bytes]:
        """A read cut inside an event (a fast upstream's burst): the decoder finishes the
        event it holds, the whole events after it take the hot path as a read of their own,
        the cut tail goes to the decoder (a blank line always ends an event; no CR here)."""
        start, end = whole_events(data, self._decoder.idle)
        if start < 0:  # still inside the held event
            return self._handle(self._decoder.feed(data), None)
        out = self._handle(self._decoder.feed(data[:start]), None) if start else []
        if end > start and self.phase is _STREAMING and self._decoder.idle:
            out += self._whole_events(data[start:end])
            start = end
        if start < len(data):
            out += self._handle(self._decoder.feed(data[start:]), None)
        return out

    def _whole_events(self, data: bytes) -> list[bytes]:
        """A read of whole events (it ends with a blank line, the decoder holds nothing)."""
        if self._hot:
            # The forward-unchanged rule (`ForwardRule`), asked where the run it forwards ends:
            # a read it forwards whole leaves as it arrived, no events built (the hot path); a
            # refused read is not walked again for where that run ends.
            run = run_end(data, 0, self._rule.want_now())
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
        """A read the rule refused, walked event by event. Three fast paths come first (each
        method says when it applies): `_done_whole` (`data: [DONE]`), `_lane_takes` (a held
        call's argument fragment), `_forwardable_run` (a run of events the rule forwards,
        leaving as it arrived: the first content of a round, or a tool call after content,
        refuses a read whose other events pass). Any other event takes the general path
        (one `data: {...}` line parsed as it stands, anything else through the decoder), and
        the rule is asked again after it.

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
            if self._done_whole(data, pos, end, one_line, out) or self._lane_takes(data, pos, end):
                pos = end  # taken (the lane drops it, as the general path would): not intact
                intact = False
                run = -1
                continue
            cut = self._forwardable_run(data, pos, end, run, one_line)
            run = -1  # it was the answer for the read's first position only
            if cut > pos:
                if cut == size and intact:
                    return self._forward_run(data, pos, out)
                out += self._forward_run(data[pos:cut], 0, out)
                pos = cut
                continue
            # The general path.
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

    # -- a refused read's fast paths -----------------------------------------------------------

    def _done_whole(
        self, data: bytes, pos: int, end: int, one_line: bool, out: list[bytes]
    ) -> bool:
        """Fast path: the event `data[pos:end]` is exactly `data: [DONE]\\n\\n` (so not a
        `data: {...}` line): handled as the decoder's event for it, added to `out`, without
        the decoder's split. False: it is not, nothing was done."""
        if one_line or end - pos != _DONE_SIZE or data[pos:end] != DONE_EVENT:
            return False
        out += self._handle([_DONE_READ], None)
        return True

    def _lane_takes(self, data: bytes, pos: int, end: int) -> bool:
        """Fast path: a lane is drawn (a held call waits for complete arguments, `_draw_lane`)
        and it takes the event `data[pos:end]`, one of that call's fragments that can neither
        complete its arguments nor be a final flush of them (`lane.py`). False: not taken."""
        lane = self._lane
        return lane is not None and lane.take(data, pos, end)

    def _forwardable_run(self, data: bytes, pos: int, end: int, known: int, one_line: bool) -> int:
        """Fast path: where the run of events from `pos` that the rule forwards ends (`pos`:
        none, the event takes the general path); `end`: the end of the event at `pos`;
        `known`: that answer when the caller has it (-1: not known). A read that is one event
        (a paced upstream's) was just refused whole: it is not asked again.

        A one-line event the rule refuses while text calls are recovered and a scanner must
        see all content may be the only choice's first content, read from its bytes
        (`ForwardRule.plain_start`, while PLAIN_START)."""
        if known >= 0:
            cut = known
        elif not pos and end == len(data):
            cut = pos
        else:
            cut = run_end(data, pos, self._rule.want_now())
        if (
            cut == pos
            and one_line
            and PLAIN_START
            and self._rule.text_calls
            and self._choices.holding_text
        ):
            return self._rule.plain_start(data, pos, end)
        return cut

    # -- the general path's entries, and what it asks of the hot path ---------------------------

    def _one_line_event(self, data: bytes, pos: int, event: bytes) -> list[bytes]:
        """The one-line event `event` at `pos` of `data`, refused by the rule, on the general
        path; parsed, or built by the lane when it left the event to the general path."""
        lane = self._lane
        return self._plain_event(event, lane.left_chunk(data, pos) if lane is not None else None)

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

    def _unchanged_event(self, data: bytes, refused: bytes | None) -> bool:
        """The one rule for an event on the general path: its data framed as a read of its
        own. Not asked twice: an event that is the whole read just refused stays refused."""
        if not self._hot:
            return False
        framed = b"data: " + data + b"\n\n"
        return framed != refused and self._rule.forwards(framed)

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
