"""The tool calls of one choice in a stream: deltas to call slots, slots to OpenAI's shape.

Rules (SPEC §4):
- Calls are told apart by `(choice, index)`; the fallbacks for servers that number calls
  otherwise are `CallRouter`'s (routing.py).
- A call is *open* until its arguments form a complete JSON value (`CallSlot`, slot.py).
- Each delivered call gets one header (id, type, name, the arguments so far), then bare
  argument fragments. The header waits only until its client id can be decided (SPEC §2): a
  raw id, or complete arguments, or the choice's end; a possible replay or in-response
  duplicate waits for complete arguments.

The work per delta does not grow with the number of calls (SPEC §6): a call of a raw id that
another call of it, still streaming, keeps from being decided is set aside under that raw id
(`_blocked`) and decided again when that call's arguments complete, instead of every pending
call being looked at after every fragment.
"""

from __future__ import annotations

from typing import Any

from proxy.chat.routing import CallRouter, ToolDelta
from proxy.chat.slot import CLOSING, CallSlot, SlotState
from proxy.core.decide import ChoiceIds, ResponseIds, Verdict
from proxy.core.ids import normalize_raw_id
from proxy.core.jsontext import dumps
from proxy.core.notes import DeltaRepaired, IdRewritten, Note
from proxy.core.textcalls import RecoveredCall

__all__ = ["CallSlot", "ChoiceCalls", "SlotState", "ToolDelta", "merge_fragments"]

# Enum members read through their class cost an EnumType.__getattr__ call each on Python
# 3.11; these are read for every argument fragment.
_PENDING = SlotState.PENDING
_LIVE = SlotState.LIVE
_DROPPED = SlotState.DROPPED
_DELIVER = Verdict.DELIVER


class ChoiceCalls:
    """Routes one choice's tool-call deltas to slots and emits them in OpenAI's shape."""

    __slots__ = (
        "_blocked",
        "_by_index",
        "_notes",
        "_response",
        "_router",
        "_streaming",
        "ids",
        "index",
        "slots",
    )

    def __init__(self, index: int, ids: ChoiceIds, response: ResponseIds, notes: list[Note]):
        self.index = index
        self.ids = ids
        self._response = response
        self._notes = notes
        self._router = CallRouter(notes, response)
        # The router's own list and dict (it adds the calls): read here without a hop.
        self.slots = self._router.slots
        self._by_index = self._router.by_index
        # raw id -> its delivered calls whose arguments were not complete then (the ones
        # still streaming hold back later calls of their raw id, SPEC §2.4)
        self._streaming: dict[str, list[CallSlot]] = {}
        # raw id -> complete calls held back by a call of it still streaming (ordered set)
        self._blocked: dict[str, dict[CallSlot, None]] = {}

    def take(self, raw: object) -> list[dict[str, Any]]:
        """A delta's `tool_calls`: the deltas the client receives for them."""
        if isinstance(raw, dict):
            raw = [raw]
        if not isinstance(raw, list):
            self._note("malformed_tool_calls")
            return []
        if not raw:
            self._note("empty_tool_calls")
            return []
        out: list[dict[str, Any]] = []
        if len(raw) == 1:
            # Most deltas are one bare argument fragment of an open call: routed directly.
            slot = self._fragment_slot(raw[0])
            if slot is not None:
                fragment = raw[0]["function"]["arguments"]
                if fragment and slot.is_flush(fragment):
                    fragment = self._flushed(slot, fragment)
                self._grow(slot, fragment, out)
                return out
        for position, item in enumerate(raw):
            if not isinstance(item, dict):
                self._note("malformed_tool_call")
                continue
            self._take_one(self._read(item, position), out)
        return out

    def held_fragment(self, index: int, fragment: str) -> bool:
        """What `take` does with a bare fragment at `index` when that is a held call's (one
        that waits for complete arguments, SPEC §2.4): appends it, sending nothing, when it
        can neither complete the arguments nor be a final flush of them: it does not end in
        a closing bracket, and a flush would (`flushes_close`). False: nothing was done."""
        slot = self._by_index.get(index)
        if (
            slot is None
            or slot.state is not _PENDING
            or not slot.waits
            or slot.complete
            or not slot.flushes_close
            or not fragment
            or fragment.rstrip()[-1:] in CLOSING
            or slot.exceeds_bound(fragment)  # the general path breaks the round (SPEC §6)
        ):
            return False
        slot.add_open_fragment(fragment)
        return True

    def held_index(self) -> int | None:
        """The upstream index of a call that waits for complete arguments, if any."""
        for index, slot in self._by_index.items():
            if slot.state is _PENDING and slot.waits and not slot.complete:
                return index
        return None

    def recovered(self, call: RecoveredCall, out: list[dict[str, Any]]) -> None:
        """A call recovered from markup in the text: complete from the start."""
        slot = self._router.new_slot(None)
        slot.raw_id = call.raw_id
        slot.name_ = call.name
        slot.add_arguments(call.arguments)
        slot.complete = True
        self._notes.append(DeltaRepaired(kind="text_tool_call", detail=call.format))
        self._try_header(slot, out, finishing=False)

    def finish(self, out: list[dict[str, Any]]) -> None:
        """The choice ends: decide what was held, and make every delivered call's arguments
        parseable ("{}" for none)."""
        for slot in self.slots:
            if slot.state is _PENDING:
                self._try_header(slot, out, finishing=True)
            elif slot.state is _LIVE and not slot.arguments_text().strip():
                slot.set_arguments("{}")
                self._note("empty_arguments")
                out.append({"index": slot.client_index, "function": {"arguments": "{}"}})

    # -- one delta -----------------------------------------------------------------------------

    def _read(self, item: dict[str, Any], position: int) -> ToolDelta:
        raw_index = item.get("index")
        fn = item.get("function")
        fn = fn if isinstance(fn, dict) else {}
        name = fn.get("name")
        arguments = fn.get("arguments")
        return ToolDelta(
            upstream_index=raw_index if type(raw_index) is int else None,
            raw_id=normalize_raw_id(item.get("id")),
            name=name if isinstance(name, str) and name else None,
            fragment=arguments if isinstance(arguments, str) else self._fragment(arguments),
            position=position,
        )

    def _fragment(self, arguments: object) -> str:
        """Arguments that are not a string: null adds nothing, an object is its JSON."""
        if arguments is None:
            return ""
        self._note("object_arguments")
        return dumps(arguments).decode()

    def _fragment_slot(self, item: object) -> CallSlot | None:
        """The open call `item` continues when it is a bare argument fragment (string
        arguments, no id, no name) at an index a call has; else None. `CallRouter.route`
        would pick the same call: its fallbacks are for a missing or free index, an id or a
        name, or a complete call's index reused, and `_read` would read the same fragment."""
        if type(item) is not dict or item.get("id") is not None:
            return None
        fn = item.get("function")
        if type(fn) is not dict or fn.get("name") is not None:
            return None
        index = item.get("index")
        if type(index) is not int or type(fn.get("arguments")) is not str:
            return None
        slot = self._by_index.get(index)
        return slot if slot is not None and not slot.complete else None

    def _take_one(self, delta: ToolDelta, out: list[dict[str, Any]]) -> None:
        slot = self._router.route(delta)
        fragment = delta.fragment
        if fragment and slot.is_flush(fragment):
            fragment = self._flushed(slot, fragment)
        if delta.raw_id is not None or delta.name is not None:
            self._merge_identity(slot, delta)
        self._grow(slot, fragment, out)

    def _flushed(self, slot: CallSlot, fragment: str) -> str:
        """A final flush of the whole arguments: only what it adds (usually nothing)."""
        self._note("arguments_flush")
        return fragment[len(slot.arguments_text()) :]

    def _grow(self, slot: CallSlot, fragment: str, out: list[dict[str, Any]]) -> None:
        """`fragment` (what is left of it after a flush) joins `slot`'s arguments."""
        completes = False
        if fragment:
            completes = not slot.complete
            slot.add_arguments(fragment)
            completes = completes and slot.complete
            if slot.state is _LIVE:
                out.append({"index": slot.client_index, "function": {"arguments": fragment}})
        if slot.state is _PENDING and (slot.complete or not slot.waits):
            self._try_header(slot, out, finishing=False)
        elif completes and slot.state is _LIVE and slot.raw_id is not None:
            # Later calls of this raw id waited for this one's arguments (SPEC §2.4).
            self._release(slot.raw_id, out)

    def _release(self, raw_id: str, out: list[dict[str, Any]]) -> None:
        """A streaming call of `raw_id` completed: the calls it held back are decided again,
        in the order they started (another call of it still streaming holds them again)."""
        blocked = self._blocked.pop(raw_id, None)
        if blocked is None:
            return
        for other in sorted(blocked, key=_started):
            if other.state is _PENDING:
                self._try_header(other, out, finishing=False)

    def _merge_identity(self, slot: CallSlot, delta: ToolDelta) -> None:
        """SPEC §4: the first real id wins; id and name are sent once."""
        raw_id = delta.raw_id
        if raw_id is not None and raw_id != slot.raw_id:
            if slot.raw_id is None and slot.state is _PENDING:
                slot.raw_id = raw_id
            else:
                self._note("id_changed")
        elif raw_id is not None and slot.state is not _PENDING:
            self._note("repeated_fields")
        if delta.name is not None and slot.name_ is None:
            slot.name_ = delta.name

    # -- headers (SPEC §2) -------------------------------------------------------------------

    def _try_header(self, slot: CallSlot, out: list[dict[str, Any]], *, finishing: bool) -> None:
        if slot.name_ is None:
            if finishing:
                slot.state = _DROPPED
                self._note("nameless_call_dropped")
            return
        if not finishing and not self._decidable(slot):
            return
        if finishing and not slot.arguments_text().strip():
            slot.set_arguments("{}")
            self._note("empty_arguments")
        decision = self._response.decide(self.ids, slot.raw_id, slot, slot.value)
        if decision.verdict is not _DELIVER:
            slot.state = _DROPPED
            self._notes.append(decision.dropped(self.index, slot.name, slot.raw_id))
            return
        slot.state = _LIVE
        slot.client_index = decision.index
        if not slot.complete and slot.raw_id is not None:
            self._streaming.setdefault(slot.raw_id, []).append(slot)
        if decision.reason is not None:
            self._notes.append(
                IdRewritten(
                    choice=self.index,
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

    def _decidable(self, slot: CallSlot) -> bool:
        """Before its choice ends, may this call's client id be decided now?"""
        raw_id = slot.raw_id
        if not slot.complete and raw_id is None:
            return False
        if not slot.complete and self._response.needs_hold(self.ids, raw_id, slot.name):
            slot.waits = True
            return False
        # SPEC §2.4: a second call of a raw id is compared with the first once both are
        # complete; parallel calls may interleave, so the first may still be streaming.
        if raw_id is None:
            return True
        streaming = self._streaming.get(raw_id)
        if not streaming:
            return True
        # The complete ones are forgotten as they are met: each is looked at once more.
        streaming[:] = [other for other in streaming if not other.complete]
        if any(other is not slot for other in streaming):
            self._blocked.setdefault(raw_id, {})[slot] = None
            return False
        return True

    def _note(self, kind: str) -> None:
        self._notes.append(DeltaRepaired(kind=kind))


def _started(slot: CallSlot) -> int:
    return slot.order


def merge_fragments(deltas: list[dict[str, Any]]) -> list[dict[str, Any]]:
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
