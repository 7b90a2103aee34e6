"""Which call of one choice a tool-call delta belongs to (SPEC §4).

Calls are told apart by `(choice, index)`; the fallbacks for servers that number calls
otherwise are one small method each: a missing index, an index no call has, several calls at
one index, a complete call's index reused. They change as servers are met that number calls
in new ways, apart from what a call's deltas do once routed (`ChoiceCalls`, calls.py).
Each call started counts towards the response's bound (SPEC §6, `ResponseIds.count_call`).
"""

from __future__ import annotations

from typing import NamedTuple

from proxy.chat.slot import CallSlot, SlotState
from proxy.core.decide import ResponseIds
from proxy.core.notes import DeltaRepaired, Note

# Enum members read through their class cost an EnumType.__getattr__ call each on Python 3.11.
_PENDING = SlotState.PENDING


class ToolDelta(NamedTuple):
    """One element of `delta.tool_calls`, read leniently (a tuple: one is built per delta)."""

    upstream_index: int | None
    raw_id: str | None
    name: str | None
    fragment: str
    position: int  # within its delta's `tool_calls`


class CallRouter:
    """A choice's calls in the order they started (`slots`) and by upstream index
    (`by_index`): ChoiceCalls reads the same list and dict, which only the router adds to."""

    __slots__ = ("_last", "_notes", "_open", "_response", "by_index", "slots")

    def __init__(self, notes: list[Note], response: ResponseIds) -> None:
        self._notes = notes
        self._response = response
        self.slots: list[CallSlot] = []
        self.by_index: dict[int, CallSlot] = {}
        self._last: CallSlot | None = None
        # The calls not yet seen complete, in order (an ordered set: `_only_open` drops the
        # complete ones it meets, so each call is looked at there once after it completes).
        self._open: dict[CallSlot, None] = {}

    def route(self, delta: ToolDelta) -> CallSlot:
        index = delta.upstream_index
        if index is None:
            return self._without_index(delta)
        slot = self.by_index.get(index)
        if slot is None:
            return self._at_free_index(delta, index)
        return self._at_taken_index(delta, index, slot)

    def new_slot(self, index: int | None) -> CallSlot:
        self._response.count_call()
        slot = CallSlot(len(self.slots))
        self.slots.append(slot)
        self._open[slot] = None
        self._last = slot
        if index is not None:
            self.by_index[index] = slot
        return slot

    def _without_index(self, delta: ToolDelta) -> CallSlot:
        """A nameless delta (the first of its `tool_calls`) continues the open call; a named
        one, or a later one in the same delta, starts a call."""
        self._note("missing_index")
        last = self._last
        if delta.name is None and delta.position == 0 and last is not None and not last.complete:
            return last
        return self.new_slot(None)

    def _at_free_index(self, delta: ToolDelta, index: int) -> CallSlot:
        """A bare delta at an index no call has continues the one open call: SGLang numbers a
        call's first delta by its tool's position in the request's `tools`."""
        if delta.raw_id is None and delta.name is None:
            only = self._only_open()
            if only is not None:
                return self._remap(index, only)
        return self.new_slot(index)

    def _at_taken_index(self, delta: ToolDelta, index: int, slot: CallSlot) -> CallSlot:
        if slot.complete and delta.raw_id is None and delta.name is None:
            # A complete call is no longer open: a bare fragment (not a final flush; trailing
            # whitespace after the JSON stays where it was) belongs to the one open call, since
            # SGLang numbered that index by tool position and a later call reuses it.
            only = self._only_open()
            if only is not None and delta.fragment.strip() and not slot.is_flush(delta.fragment):
                return self._remap(index, only)
        if delta.name is not None and self._starts_parallel_call(delta, slot):
            # Servers that put every parallel call at index 0.
            self._note("parallel_calls_one_index")
            return self.new_slot(index)
        if delta.name is not None and slot.state is not _PENDING:
            self._note("repeated_fields")
        return slot

    @staticmethod
    def _starts_parallel_call(delta: ToolDelta, slot: CallSlot) -> bool:
        """A delta with a name starts another call when it brings a new id, or arguments
        after the call at this index is complete (and not a final flush)."""
        if delta.raw_id is not None and slot.raw_id is not None and delta.raw_id != slot.raw_id:
            return True
        return slot.complete and bool(delta.fragment) and not slot.is_flush(delta.fragment)

    def _only_open(self) -> CallSlot | None:
        """The one call not complete yet, if exactly one is: at most two open calls are
        looked at, and each complete one once (then forgotten), whatever the number of
        calls (a walk over all of them per delta was quadratic in the calls)."""
        found: CallSlot | None = None
        complete: list[CallSlot] = []
        two = False
        for slot in self._open:
            if slot.complete:
                complete.append(slot)
            elif found is None:
                found = slot
            else:
                two = True
                break
        for slot in complete:
            del self._open[slot]
        return None if two else found

    def _remap(self, index: int, slot: CallSlot) -> CallSlot:
        self._note("index_remapped")
        self.by_index[index] = slot
        return slot

    def _note(self, kind: str) -> None:
        self._notes.append(DeltaRepaired(kind=kind))
