"""A Responses round's calls on their way to the client (SPEC §4, §5, §8).

Each `function_call` / `custom_tool_call` item of the round is a `CallItem` (calls.py), held
while its client id cannot be decided, then sent as the canonical events: one
`output_item.added`, argument deltas, one `.done` with the whole text, `output_item.done`.
`RoundCalls` routes the upstream's call events to their call, decides each call's id once it
can (decide.py: a replay is dropped and kept for the follow-up, a duplicate dropped) and
numbers what the client gets. Calls recovered from a message's text come in here too.
The round's calls are bounded (SPEC §6, `proxy.core.bounds`): one past the bound breaks the
round (`CallBoundExceeded`), as one call's arguments past theirs do (calls.py).
"""

from __future__ import annotations

from typing import Any

from proxy.core.bounds import check_calls
from proxy.core.decide import ResponseIds
from proxy.core.notes import DeltaRepaired, Note
from proxy.responses.calls import CallItem
from proxy.responses.carry import ResponseCarry
from proxy.responses.decide import decide_call, may_decide
from proxy.responses.final import Streamed


class RoundCalls:
    """The round's calls, by the upstream's output_index (a recovered call by its message)."""

    def __init__(self, ids: ResponseIds, carry: ResponseCarry, notes: list[Note]) -> None:
        self.ids = ids
        self.carry = carry
        self.notes = notes
        self.calls: dict[object, CallItem] = {}
        self.replayed: list[dict[str, Any]] = []  # the replayed calls' items, in order
        self.started = 0  # calls the round started (one added again at its index counts too)

    def added(self, upstream: object, item: dict[str, Any], out: list[bytes]) -> None:
        """A call's `output_item.added`."""
        call = self.calls[upstream] = CallItem.start(item)
        self._count(call)
        self.advance(call, out)

    def event(self, call: CallItem, kind: str, event: dict[str, Any], out: list[bytes]) -> None:
        """One of the call's own events (its arguments' deltas and `.done`, and the like)."""
        if kind == call.delta_type:
            delta = event.get("delta")
            if isinstance(delta, str):
                self._delta(call, delta)
        elif kind == call.done_type:
            call.add_whole(event.get(call.key))
            call.closed = True
        elif call.delivered:
            self._pass_on(call, event, out)
        elif not call.dropped:
            call.extra.append(event)
        self.advance(call, out)

    def _delta(self, call: CallItem, delta: str) -> None:
        """A fragment of the call's text. After its `.done` the upstream has said the text is
        whole, and its final item says the same: a fragment that would add to it is dropped
        (the client's `.done` and `output_item.done` agree with the upstream's, SPEC §8)."""
        if not call.closed:
            call.add_delta(delta)
        elif delta and delta != call.text:  # an empty one or a flush of the whole adds nothing
            self.notes.append(DeltaRepaired(kind="arguments_after_done"))

    def done(self, call: CallItem, item: object, out: list[bytes]) -> None:
        """The call's `output_item.done`: its whole item, as the upstream last described it."""
        self._count(call)  # the stream core adds a call first seen done
        if isinstance(item, dict):
            call.update_item(item)
            call.add_whole(item.get(call.key))
        call.complete = call.closed = call.item_done = True
        self.advance(call, out)

    def finish(self, out: list[bytes]) -> None:
        """The round ended: every call the upstream left open is completed (SPEC §4)."""
        for call in self.calls.values():
            call.closed = call.item_done = call.complete = True
            self.advance(call, out)

    def recovered(self, upstream: object, calls: list[dict[str, Any]], out: list[bytes]) -> None:
        """Calls recovered from a message's text become call items after that message."""
        for n, item in enumerate(calls):
            key = ("text", upstream, n)
            call = self.calls[key] = CallItem.start(item)
            self._count(call)
            call.closed = call.item_done = call.complete = True
            self.advance(call, out)

    def _count(self, call: CallItem) -> None:
        """SPEC §6: one call more for the round's bound, the first time it is seen."""
        if not call.counted:
            call.counted = True
            self.started += 1
            check_calls(self.started)

    def streamed(self) -> list[Streamed]:
        """The calls the client received in this round, as the upstream named them."""
        return [
            Streamed(
                call.index, key, call.kind, call.item.get("id"), call.raw_id, call.client_final
            )
            for key, call in self.calls.items()
            if call.item_sent
        ]

    def advance(self, call: CallItem, out: list[bytes]) -> None:
        """Decide the call once its id can be decided, then send what the client lacks."""
        if call.dropped:
            return
        if not call.delivered and not self._decide(call, out):
            return
        piece = call.unsent()
        if piece:
            self._emit_for(call, {"type": call.delta_type, "delta": piece}, out)
        for extra in call.extra:
            self._pass_on(call, extra, out)
        call.extra.clear()
        if call.closed and not call.done_sent:
            call.finish_text()
            piece = call.unsent()
            if piece:
                self._emit_for(call, {"type": call.delta_type, "delta": piece}, out)
            self._emit_for(call, {"type": call.done_type, call.key: call.text}, out)
            call.done_sent = True
        if call.item_done and call.done_sent and not call.item_sent:
            final = call.client_item(done=True)
            self.carry.emit(
                {"type": "response.output_item.done", "output_index": call.index, "item": final},
                out,
            )
            call.item_sent = True
            self.carry.items[call.index] = final

    def _pass_on(self, call: CallItem, event: dict[str, Any], out: list[bytes]) -> None:
        """One of the call's other events, as it came but for the client's numbers and, where
        it names one, the client's item id (SPEC §8: no field added)."""
        if "item_id" in event:
            event["item_id"] = call.client_item_id
        event["output_index"] = call.index
        self.carry.emit(event, out)

    def _emit_for(self, call: CallItem, event: dict[str, Any], out: list[bytes]) -> None:
        """A canonical event the proxy builds for the call: it names the call's item."""
        event["item_id"] = call.client_item_id
        self._pass_on(call, event, out)

    def _decide(self, call: CallItem, out: list[bytes]) -> bool:
        """True once the call is delivered (its `output_item.added` sent)."""
        if not may_decide(self.ids, call):
            return False  # held: its id waits for its arguments (SPEC §4)
        if not decide_call(self.ids, self.carry.call_ids, call, self.notes, self.replayed):
            return False
        call.index = self.carry.next_index
        self.carry.next_index += 1
        added = {"type": "response.output_item.added", "output_index": call.index}
        self.carry.emit({**added, "item": call.client_item(done=False)}, out)
        return True
