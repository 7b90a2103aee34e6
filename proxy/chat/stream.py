"""Response direction, streaming (SPEC §2, §4, §5): upstream SSE bytes in, client SSE bytes out.

The state machine per response:
- Chunks that cannot need a change (no `tool_calls`, no non-null `finish_reason`) are
  forwarded as the bytes that arrived, without JSON parsing: the hot path.
- Tool-call deltas in any shape are assigned to call slots by `(choice, upstream index)`
  with the fallbacks of SPEC §4, and re-emitted in OpenAI's shape: one header per call
  (id, type, name, arguments so far), then bare argument fragments, dense indexes.
- A call's header waits only until its client id can be decided (a raw id, or complete
  arguments, or its choice's end); a call that may be a replay or an in-response duplicate
  waits for complete arguments. Nothing else is held.
- At a choice's end: empty arguments become "{}", finish_reason is made truthful, and a
  choice whose only calls were replays asks the shell for a follow-up round (SPEC §5).
After an error (breaker trip) the core refuses further input.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum, auto
from typing import Any

import orjson

from proxy.chat.decide import ChoiceIds, ResponseIds, Verdict, truthful_finish_reason
from proxy.chat.guard import Replay
from proxy.chat.notes import DeltaRepaired, IdRewritten, Note
from proxy.chat.sse_scan import (
    CONTENT,
    LIVE_FINISH,
    MARKUP,
    PLAIN,
    TOOL_CALLS,
    USAGE,
    may_hold_content,
    may_hold_markup,
    scan,
)
from proxy.chat.textcalls import RecoveredCall, TextCallScanner
from proxy.errors import ReplayLoopDetected
from proxy.jsontext import dumps
from proxy.sse import DONE_EVENT, SSEDecoder, SSEEvent, encode_comment, encode_event


class StreamPhase(Enum):
    STREAMING = auto()
    FOLLOWUP = auto()  # this round's only calls were replays: swallow the rest of it
    DONE = auto()
    FAILED = auto()


class SlotState(Enum):
    PENDING = auto()  # header not sent yet (id undecided, or held as a possible replay)
    LIVE = auto()  # header sent; fragments are forwarded as they arrive
    DROPPED = auto()  # duplicate or replay: the client never sees it


class CallSlot:
    """One tool call as the upstream streams it."""

    __slots__ = ("_args", "client_index", "complete", "name_", "raw_id", "state")

    def __init__(self) -> None:
        self.raw_id: str | None = None
        self.name_: str | None = None
        self._args: list[str] = []
        self.complete = False
        self.state = SlotState.PENDING
        self.client_index = -1

    @property
    def name(self) -> str:
        return self.name_ or ""

    def arguments_text(self) -> str:
        if len(self._args) > 1:
            self._args = ["".join(self._args)]
        return self._args[0] if self._args else ""

    def add_arguments(self, fragment: str) -> None:
        self._args.append(fragment)
        if not self.complete and fragment.rstrip()[-1:] in ("}", "]"):
            self.complete = is_complete_json(self.arguments_text())


def is_complete_json(text: str) -> bool:
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError:
        return False
    return True


@dataclass(slots=True)
class ChoiceState:
    ids: ChoiceIds
    slots: list[CallSlot] = field(default_factory=list)
    by_index: dict[int, CallSlot] = field(default_factory=dict)
    last: CallSlot | None = None
    finished: bool = False
    scanner: TextCallScanner | None = None  # only when text tool calls are recovered


@dataclass(slots=True)
class Carry:
    """What a follow-up round inherits from the rounds before it (SPEC §5)."""

    response_id: Any = None
    created: Any = None
    model: Any = None
    usage: dict[str, Any] | None = None
    # SPEC §5: until a byte reaches the client a loop can still be a plain HTTP 422, so events
    # that show the user nothing (a first chunk with only `role`) wait here for the next one.
    head_pending: list[bytes] = field(default_factory=list)
    released: bool = False  # some bytes of this response were handed to the shell


@dataclass(frozen=True, slots=True)
class FollowupNeeded:
    content: str
    replays: list[Replay]
    carry: Carry


def _has_live_finish(data: bytes) -> bool:
    """True when some `"finish_reason"` in the raw chunk is not null (no JSON parse)."""
    start = data.find(b'"finish_reason"')
    while start != -1:
        pos = start + 15
        rest = data[pos : pos + 16].lstrip(b" \t\r\n:")
        if not rest.startswith(b"null"):
            return True
        start = data.find(b'"finish_reason"', pos)
    return False


def add_usage(total: dict[str, Any] | None, usage: object) -> dict[str, Any] | None:
    """Sum numeric usage fields (nested details too) over rounds."""
    if not isinstance(usage, dict):
        return total
    if total is None:
        return orjson.loads(dumps(usage))  # type: ignore[no-any-return]
    for key, value in usage.items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            previous = total.get(key)
            total[key] = (previous if isinstance(previous, int | float) else 0) + value
        elif isinstance(value, dict):
            total[key] = add_usage(
                total.get(key) if isinstance(total.get(key), dict) else None, value
            )
    return total


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
        self.phase = StreamPhase.STREAMING
        self._decoder = SSEDecoder()
        self._quiet: list[bytes] = []  # this call's output that shows nothing (see _release)
        self._choices: dict[int, ChoiceState] = {}
        self._continuation = carry is not None
        self._carry = carry or Carry()
        self._envelope: dict[str, Any] | None = None
        self._single = ids.facts.choices == 1
        # Content is only needed if this round may end in a follow-up request.
        self._armed = ids.guard.enabled and self._single and bool(ids.facts.answered)
        self._content: list[bytes | str] = []
        self._saw_raw_choice = False
        self._usage_sent = False
        # SPEC §5: a round may turn out to be replay-only after its usage chunk passed (no
        # finish_reason); while a replay is possible, usage-only chunks wait for the round's end.
        self._held_usage: list[tuple[bytes, Any]] = []
        # Markup is only turned into calls when the request offered tools (issue: text calls).
        self._text_calls = text_tool_calls and bool(ids.facts.offered_tools)

    # -- input -------------------------------------------------------------------------------

    @property
    def nothing_released(self) -> bool:
        """No byte of this response (any round) has been handed out: a trip now is a 422."""
        return not self._carry.released

    def feed(self, data: bytes) -> list[bytes]:
        return self._release(self._feed(data))

    def end(self) -> list[bytes]:
        """The upstream body ended cleanly: complete whatever it left unfinished."""
        return self._release(self._end())

    def _release(self, out: list[bytes]) -> list[bytes]:
        """Until bytes that show something go out, events that show nothing wait (SPEC §5);
        then they leave in front of them."""
        carry = self._carry
        if carry.released or not out:
            return out
        quiet = self._quiet
        start = 0
        while start < len(out) and any(out[start] is q for q in quiet):
            start += 1
        quiet.clear()
        carry.head_pending.extend(out[:start])
        out = out[start:]
        if not out or (self.error is not None and len(out) == 1):
            return out  # nothing to show yet, or only the error: a trip now becomes a 422
        carry.released = True
        out[:0] = carry.head_pending
        carry.head_pending.clear()
        return out

    def _feed(self, data: bytes) -> list[bytes]:
        if self.phase is not StreamPhase.STREAMING:
            if self.phase is not StreamPhase.FOLLOWUP:
                return []
        elif data[-2:] == b"\n\n" and self._decoder.idle:
            if self._envelope is None:
                # The first chunk is always parsed (it names the response); the events after
                # it in the same read may still take the hot path.
                first, sep, rest = data.partition(b"\n\n")
                out = self._handle(self._decoder.feed(first + sep))
                if rest and self._envelope is not None:
                    out += self._feed(rest)  # at most once: the envelope is known now
                elif rest:
                    out += self._handle(self._decoder.feed(rest))
                return out
            unchanged = self._forward_unchanged(data)
            if unchanged is not None:
                return unchanged
        return self._handle(self._decoder.feed(data))

    def _forward_unchanged(self, data: bytes) -> list[bytes] | None:
        """The hot path: a read of whole `data: {...}` events that need no change leaves as
        the bytes that arrived, without building events (None: take the general path).

        Hand-written rather than going through SSEDecoder because this is most of the
        proxy's per-chunk CPU on a stream (bench: core CPU per pass-through chunk). The
        checks of _must_parse are made once over the whole read by `sse_scan.scan` (compiled
        when it could be), so the cost does not grow with a Python loop per event.
        """
        if self._continuation or not self._single:
            return None
        want = USAGE if self._armed else 0
        if self._text_calls:  # a scanner that must see all content gets every content read
            want |= CONTENT if self._holding_text() else MARKUP
        flags = scan(data, want)
        # Not all plain one-line events, a tool call, or a `finish_reason` other than the
        # compact null (`_has_live_finish` also reads spaced forms): the general path decides.
        if flags & (PLAIN | TOOL_CALLS | LIVE_FINISH) != PLAIN:
            return None
        if flags & USAGE:
            return None
        if flags & (MARKUP | CONTENT):
            return None
        if self._armed:
            self._content.extend(block[6:] for block in data[:-2].split(b"\n\n"))
        self._saw_raw_choice = True
        return [data]

    def _end(self) -> list[bytes]:
        if self.phase in (StreamPhase.DONE, StreamPhase.FAILED):
            return []
        out = self._handle(self._decoder.end())
        if self.phase in (StreamPhase.DONE, StreamPhase.FAILED):
            return out
        return out + self._close()

    def _handle(self, events: list[SSEEvent]) -> list[bytes]:
        out: list[bytes] = []
        try:
            for event in events:
                if self.phase is StreamPhase.DONE:
                    break
                self._event(event, out)
        except ReplayLoopDetected as exc:
            self.error = exc
            self.phase = StreamPhase.FAILED
            out.append(exc.sse_bytes())
        return out

    def _event(self, event: SSEEvent, out: list[bytes]) -> None:
        data = event.data
        if data is None:
            if self.phase is StreamPhase.STREAMING:
                out.append(encode_event(None, event.other))  # comments and keep-alives
            return
        if event.is_done:
            out.extend(self._close())
            return
        if self.phase is StreamPhase.FOLLOWUP:
            self._swallow(data)
            return
        if not self._must_parse(data):
            if self._armed:
                self._content.append(data)
            self._saw_raw_choice = True
            out.append(encode_event(data, event.other))
            return
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            # SPEC §4: OpenAI never sends such a line and the openai SDKs raise on it; as a
            # comment, in place, it stays readable in the raw stream.
            self.non_json_events += 1
            self.notes.append(DeltaRepaired(kind="non_json_data"))
            out.append(encode_comment(data, event.other))
            return
        if not isinstance(chunk, dict):
            out.append(encode_event(data, event.other))
            return
        rebuilt = self._chunk(chunk)
        if rebuilt is None:
            encoded = encode_event(data, event.other)
        elif rebuilt is not _DROP and self.phase is StreamPhase.STREAMING:
            # jsontext.dumps: a chunk nested past orjson's 254 levels must not raise here
            encoded = encode_event(dumps(rebuilt), event.other)
        else:
            return
        if self._armed and not chunk.get("choices") and isinstance(chunk.get("usage"), dict):
            self._held_usage.append((encoded, chunk["usage"]))
        else:
            if not self._carry.released and _shows_nothing(chunk):
                self._quiet.append(encoded)  # _release decides whether it must wait
            out.append(encoded)

    def _must_parse(self, data: bytes) -> bool:
        if self._envelope is None or self._continuation or not self._single:
            return True
        if data[:1] != b"{" and data.lstrip()[:1] != b"{":
            return True  # SPEC §4: a data line that is not JSON is counted (not a chunk anyway)
        if self._armed and b'"usage"' in data:
            return True  # may have to be held (SPEC §5)
        if b"tool_calls" in data or (b"finish_reason" in data and _has_live_finish(data)):
            return True
        if not self._text_calls:
            return False
        return may_hold_content(data) if self._holding_text() else may_hold_markup(data)

    def _holding_text(self) -> bool:
        # No content seen yet also counts: the whole message may be one JSON call.
        for state in self._choices.values():
            if state.scanner is None or state.scanner.holding:
                return True
        return not self._choices

    # -- chunks --------------------------------------------------------------------------------

    def _chunk(self, chunk: dict[str, Any]) -> dict[str, Any] | object | None:
        """Returns None to forward the original bytes, _DROP, or the chunk to serialize."""
        changed = False
        if self._envelope is None and chunk.get("id"):
            self._envelope = {
                k: chunk[k] for k in ("id", "object", "created", "model") if k in chunk
            }
            if self._carry.response_id is None:
                self._carry.response_id = chunk.get("id")
                self._carry.created = chunk.get("created")
                self._carry.model = chunk.get("model")
        if self._continuation:
            changed = self._as_continuation(chunk)
        choices = chunk.get("choices")
        if isinstance(choices, list):
            kept = []
            for position, choice in enumerate(choices):
                if not isinstance(choice, dict):
                    kept.append(choice)
                    continue
                result = self._choice(choice, position)
                changed = changed or result != "same"
                if result != "empty":
                    kept.append(choice)
            if len(kept) != len(choices):
                if not kept and not chunk.get("usage"):
                    return _DROP
                chunk["choices"] = kept
        if self.phase is StreamPhase.FOLLOWUP:
            self._carry.usage = add_usage(self._carry.usage, chunk.get("usage"))
            return _DROP
        return chunk if changed else None

    def _as_continuation(self, chunk: dict[str, Any]) -> bool:
        """SPEC §5: a follow-up round reads as the same message as the first round."""
        carry = self._carry
        for key, value in (
            ("id", carry.response_id),
            ("created", carry.created),
            ("model", carry.model),
        ):
            if value is not None and key in chunk:
                chunk[key] = value
        choices = chunk.get("choices")
        # any JSON may arrive here; only a list holds choices (SPEC §6: never fail on input)
        for choice in choices if isinstance(choices, list) else ():
            delta = choice.get("delta") if isinstance(choice, dict) else None
            if isinstance(delta, dict):
                delta.pop("role", None)
        if isinstance(chunk.get("usage"), dict):
            chunk["usage"] = add_usage(carry.usage, chunk["usage"])
            carry.usage = None
            self._usage_sent = True
        return True

    def _state(self, index: int) -> ChoiceState:
        state = self._choices.get(index)
        if state is None:
            state = self._choices[index] = ChoiceState(self.ids.choice(index))
        return state

    def _choice(self, choice: dict[str, Any], position: int) -> str:
        """Rewrite one choice in place: "same", "changed", or "empty" (nothing left to send)."""
        index = choice.get("index")
        state = self._state(index if isinstance(index, int) else position)
        delta = choice.get("delta")
        changed = False
        emitted: list[dict[str, Any]] = []
        if isinstance(delta, dict):
            if self._text_calls and isinstance(delta.get("content"), str) and delta["content"]:
                changed = self._scan_text(state, delta, emitted) or changed
            if self._armed and isinstance(delta.get("content"), str):
                self._content.append(delta["content"])
            if "tool_calls" in delta:
                changed = True
                # extend, not rebind: calls recovered from this delta's text are in `emitted`
                emitted.extend(self._tool_calls(state, delta.pop("tool_calls")))
        reason = choice.get("finish_reason")
        # Some servers send `"finish_reason": ""` on every chunk: that does not end the choice
        # (SPEC §4: the real finish still has to say tool_calls after calls).
        if reason is not None and reason != "" and not state.finished:
            released = self._finish(state, emitted)
            if released:
                if not isinstance(delta, dict):
                    delta = choice["delta"] = {}
                delta["content"] = (delta.get("content") or "") + released
                changed = True
            fixed = self._finish_reason(state, reason)
            if fixed != reason:
                choice["finish_reason"] = fixed
                changed = True
            if self._single and self._wants_followup(state):
                self._start_followup()
        if emitted:
            if not isinstance(delta, dict):
                delta = choice["delta"] = {}
            delta["tool_calls"] = _merge_fragments(emitted)
            # SPEC §4: what the finish released (held headers, "{}" for empty arguments) must
            # reach the client even when the chunk itself needed no other change.
            changed = True
        elif (
            changed
            and isinstance(delta, dict)
            and not delta
            and choice.get("finish_reason") is None
        ) and not choice.get("logprobs"):
            return "empty"
        return "changed" if changed else "same"

    # -- tool calls ----------------------------------------------------------------------------

    def _scan_text(
        self, state: ChoiceState, delta: dict[str, Any], out: list[dict[str, Any]]
    ) -> bool:
        """Content passes through the markup scanner; True when the delta changed."""
        if state.scanner is None:
            state.scanner = TextCallScanner(self.ids.facts.offered_tools)
        original = delta["content"]
        text = self._text_segments(state, state.scanner.feed(original), out)
        if text == original:
            return False
        if text:
            delta["content"] = text
        else:
            del delta["content"]
        return True

    def _text_segments(
        self, state: ChoiceState, segments: list[str | RecoveredCall], out: list[dict[str, Any]]
    ) -> str:
        text: list[str] = []
        for segment in segments:
            if isinstance(segment, str):
                text.append(segment)
                continue
            slot = self._new_slot(state, None)
            slot.raw_id = segment.raw_id
            slot.name_ = segment.name
            slot.add_arguments(segment.arguments)
            slot.complete = True
            self.notes.append(DeltaRepaired(kind="text_tool_call", detail=segment.format))
            self._try_header(state, slot, out, finishing=False)
        return "".join(text)

    def _tool_calls(self, state: ChoiceState, raw: object) -> list[dict[str, Any]]:
        if isinstance(raw, dict):
            raw = [raw]
        if not isinstance(raw, list):
            self.notes.append(DeltaRepaired(kind="malformed_tool_calls"))
            return []
        if not raw:
            self.notes.append(DeltaRepaired(kind="empty_tool_calls"))
            return []
        out: list[dict[str, Any]] = []
        for position, item in enumerate(raw):
            if not isinstance(item, dict):
                self.notes.append(DeltaRepaired(kind="malformed_tool_call"))
                continue
            self._tool_delta(state, item, position, out)
        return out

    def _tool_delta(
        self, state: ChoiceState, item: dict[str, Any], position: int, out: list[dict[str, Any]]
    ) -> None:
        from proxy.chat.ids import normalize_raw_id

        raw_index = item.get("index")
        index = raw_index if type(raw_index) is int else None
        raw_id = normalize_raw_id(item.get("id"))
        fn = item.get("function")
        fn = fn if isinstance(fn, dict) else {}
        name = fn.get("name") if isinstance(fn.get("name"), str) and fn.get("name") else None
        fragment = self._fragment(fn.get("arguments"))
        slot = self._route(state, index, raw_id, name, fragment, position)
        if (
            fragment
            and slot._args
            and fragment.startswith(slot.arguments_text())
            and is_complete_json(fragment)
        ):
            # A final flush of the whole arguments: keep only what it adds (usually nothing).
            fragment = fragment[len(slot.arguments_text()) :]
            self.notes.append(DeltaRepaired(kind="arguments_flush"))
        if raw_id is not None and raw_id != slot.raw_id:
            if slot.raw_id is None and slot.state is SlotState.PENDING:
                slot.raw_id = raw_id
            else:
                self.notes.append(DeltaRepaired(kind="id_changed"))
        elif raw_id is not None and slot.state is not SlotState.PENDING:
            self.notes.append(DeltaRepaired(kind="repeated_fields"))
        if name is not None and slot.name_ is None:
            slot.name_ = name
        if fragment:
            slot.add_arguments(fragment)
            if slot.state is SlotState.LIVE:
                out.append({"index": slot.client_index, "function": {"arguments": fragment}})
        if slot.state is SlotState.PENDING:
            self._try_header(state, slot, out, finishing=False)
        if fragment and slot.complete and slot.raw_id is not None:
            # Later calls of this raw id waited for this one's arguments (SPEC §2.4).
            for other in state.slots:
                if other.state is SlotState.PENDING and other.raw_id == slot.raw_id:
                    self._try_header(state, other, out, finishing=False)

    def _fragment(self, arguments: object) -> str:
        if arguments is None:
            return ""
        if isinstance(arguments, str):
            return arguments
        self.notes.append(DeltaRepaired(kind="object_arguments"))
        return dumps(arguments).decode()

    def _route(
        self,
        state: ChoiceState,
        index: int | None,
        raw_id: str | None,
        name: str | None,
        fragment: str,
        position: int,
    ) -> CallSlot:
        """Which call a delta belongs to (SPEC §4: calls are told apart by choice and index)."""
        if index is None:
            self.notes.append(DeltaRepaired(kind="missing_index"))
            last = state.last
            if name is None and position == 0 and last is not None and not last.complete:
                return last
            return self._new_slot(state, None)
        slot = state.by_index.get(index)
        if slot is None:
            open_slots = [s for s in state.slots if not s.complete]
            if raw_id is None and name is None and len(open_slots) == 1:
                self.notes.append(DeltaRepaired(kind="index_remapped"))
                state.by_index[index] = open_slots[0]
                return open_slots[0]
            return self._new_slot(state, index)
        if (
            slot.complete
            and raw_id is None
            and name is None
            and fragment.strip()  # trailing whitespace after the JSON stays where it was
            and not (fragment.startswith(slot.arguments_text()) and is_complete_json(fragment))
        ):
            # SPEC §4: a complete call is no longer open. A bare fragment (not a final flush)
            # at its index belongs to the one open call: SGLang numbered that index by tool
            # position, and the call order reuses it for a later call.
            open_slots = [s for s in state.slots if not s.complete]
            if len(open_slots) == 1:
                self.notes.append(DeltaRepaired(kind="index_remapped"))
                state.by_index[index] = open_slots[0]
                return open_slots[0]
        if (
            name is not None
            and raw_id is not None
            and slot.raw_id is not None
            and raw_id != slot.raw_id
        ):
            self.notes.append(DeltaRepaired(kind="parallel_calls_one_index"))
            return self._new_slot(state, index)
        if (
            slot.complete
            and name is not None
            and fragment
            and not (fragment.startswith(slot.arguments_text()) and is_complete_json(fragment))
        ):
            self.notes.append(DeltaRepaired(kind="parallel_calls_one_index"))
            return self._new_slot(state, index)
        if name is not None and slot.state is not SlotState.PENDING:
            self.notes.append(DeltaRepaired(kind="repeated_fields"))
        return slot

    def _new_slot(self, state: ChoiceState, index: int | None) -> CallSlot:
        slot = CallSlot()
        state.slots.append(slot)
        state.last = slot
        if index is not None:
            state.by_index[index] = slot
        return slot

    def _try_header(
        self, state: ChoiceState, slot: CallSlot, out: list[dict[str, Any]], *, finishing: bool
    ) -> None:
        if slot.name_ is None:
            if finishing:
                slot.state = SlotState.DROPPED
                self.notes.append(DeltaRepaired(kind="nameless_call_dropped"))
            return
        ready = finishing or slot.complete
        if not ready and (slot.raw_id is None or self.ids.needs_hold(state.ids, slot.raw_id)):
            return
        if not finishing and slot.raw_id is not None and _earlier_open(state, slot):
            # SPEC §2.4: a second call of a raw id is compared with the first once both are
            # complete; parallel calls may interleave, so the first may still be streaming.
            return
        if finishing and not slot.arguments_text().strip():
            slot._args = ["{}"]
            self.notes.append(DeltaRepaired(kind="empty_arguments"))
        decision = self.ids.decide(state.ids, slot.raw_id, slot)
        choice_index = self._index_of(state)
        if decision.verdict is not Verdict.DELIVER:
            slot.state = SlotState.DROPPED
            self.notes.append(decision.dropped(choice_index, slot.name, slot.raw_id))
            return
        slot.state = SlotState.LIVE
        slot.client_index = decision.index
        if decision.reason is not None:
            self.notes.append(
                IdRewritten(
                    choice=choice_index,
                    index=decision.index,
                    name=slot.name,
                    raw_id=slot.raw_id,
                    client_id=decision.client_id,
                    reason=decision.reason,
                )
            )
        out.append(
            {
                "index": decision.index,
                "id": decision.client_id,
                "type": "function",
                "function": {"name": slot.name, "arguments": slot.arguments_text()},
            }
        )

    def _index_of(self, state: ChoiceState) -> int:
        for index, candidate in self._choices.items():
            if candidate is state:
                return index
        return 0

    # -- finishing ----------------------------------------------------------------------------

    def _finish(self, state: ChoiceState, out: list[dict[str, Any]]) -> str:
        """Release what was held and make every delivered call's arguments parseable.

        Appends tool-call deltas to `out`; returns held text the scanner released.
        """
        state.finished = True
        released = ""
        if state.scanner is not None:
            released = self._text_segments(state, state.scanner.end(), out)
        for slot in state.slots:
            if slot.state is SlotState.PENDING:
                self._try_header(state, slot, out, finishing=True)
            elif slot.state is SlotState.LIVE and not slot.arguments_text().strip():
                slot._args = ["{}"]
                self.notes.append(DeltaRepaired(kind="empty_arguments"))
                out.append({"index": slot.client_index, "function": {"arguments": "{}"}})
        return released

    def _finish_reason(self, state: ChoiceState, reason: object) -> object:
        fixed = truthful_finish_reason(bool(state.ids.delivered), reason)
        if fixed != reason:
            self.notes.append(DeltaRepaired(kind="finish_reason", detail=f"{reason} -> {fixed}"))
        return fixed

    def _wants_followup(self, state: ChoiceState) -> bool:
        return self.ids.guard.enabled and bool(state.ids.replays) and not state.ids.delivered

    def _start_followup(self) -> None:
        self.phase = StreamPhase.FOLLOWUP

    def _swallow(self, data: bytes) -> None:
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            return
        if isinstance(chunk, dict):
            self._carry.usage = add_usage(self._carry.usage, chunk.get("usage"))

    def _close(self) -> list[bytes]:
        """End of this round: finish open choices, then `[DONE]` (or hand over to a follow-up)."""
        out: list[bytes] = []
        if self.phase is StreamPhase.STREAMING:
            if not self._choices and self._saw_raw_choice:
                self._state(0)
            for index, state in sorted(self._choices.items()):
                if state.finished:
                    continue
                emitted: list[dict[str, Any]] = []
                released = self._finish(state, emitted)
                reason = self._finish_reason(state, None) or "stop"
                if self._single and self._wants_followup(state):
                    self._start_followup()
                    break
                delta: dict[str, Any] = {"content": released} if released else {}
                if emitted:
                    delta["tool_calls"] = _merge_fragments(emitted)
                out.append(
                    self._synthetic({"index": index, "delta": delta, "finish_reason": reason})
                )
        if self.phase is StreamPhase.FOLLOWUP:
            for _, usage in self._held_usage:
                self._carry.usage = add_usage(self._carry.usage, usage)
            content = "".join(self._collected_content())
            replays = next(iter(self._choices.values())).ids.replays
            self.followup = FollowupNeeded(content, list(replays), self._carry)
            self.phase = StreamPhase.DONE
            return out
        out.extend(encoded for encoded, _ in self._held_usage)
        if self._continuation and self._carry.usage and not self._usage_sent:
            out.append(
                encode_event(dumps({**self._base(), "choices": [], "usage": self._carry.usage}))
            )
        self.phase = StreamPhase.DONE
        out.append(DONE_EVENT)
        return out

    def _base(self) -> dict[str, Any]:
        base = dict(self._envelope or {"object": "chat.completion.chunk"})
        if self._carry.response_id is not None:
            base.update(
                id=self._carry.response_id, created=self._carry.created, model=self._carry.model
            )
        return base

    def _synthetic(self, choice: dict[str, Any]) -> bytes:
        return encode_event(dumps({**self._base(), "choices": [choice]}))

    def _collected_content(self) -> list[str]:
        parts: list[str] = []
        for item in self._content:
            if isinstance(item, str):
                parts.append(item)
                continue
            try:
                chunk = orjson.loads(item)
                content = chunk["choices"][0]["delta"].get("content")
            except (orjson.JSONDecodeError, KeyError, IndexError, TypeError, AttributeError):
                continue
            if isinstance(content, str):
                parts.append(content)
        return parts


_DROP = object()


def _shows_nothing(chunk: dict[str, Any]) -> bool:
    """SPEC §5: a chunk with no content, reasoning, call, finish or usage (a first chunk with
    only `role`, a placeholder with `choices: []`) may wait for the next event."""
    if chunk.get("usage"):
        return False
    choices = chunk.get("choices")
    if choices is None:
        return True
    if not isinstance(choices, list):
        return False
    for choice in choices:
        if not isinstance(choice, dict) or choice.get("finish_reason") or choice.get("logprobs"):
            return False
        delta = choice.get("delta")
        if delta is None:
            continue
        if not isinstance(delta, dict):
            return False
        if any(key != "role" and value not in (None, "") for key, value in delta.items()):
            return False
    return True


def _earlier_open(state: ChoiceState, slot: CallSlot) -> bool:
    """Is a delivered call with this slot's raw id still receiving arguments?"""
    return any(
        other is not slot
        and other.raw_id == slot.raw_id
        and other.state is SlotState.LIVE
        and not other.complete
        for other in state.slots
    )


def _merge_fragments(deltas: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Adjacent fragments of one call in one chunk become one fragment."""
    merged: list[dict[str, Any]] = []
    for delta in deltas:
        previous = merged[-1] if merged else None
        if previous is not None and "id" not in delta and previous["index"] == delta["index"]:
            previous["function"] = {
                **previous["function"],
                "arguments": previous["function"]["arguments"] + delta["function"]["arguments"],
            }
            continue
        merged.append(delta)
    return merged
