"""One choice of a streamed response: its tool calls, its text-call scanner, what it holds.

Rules (SPEC §4):
- A choice's tool-call deltas go to its `ChoiceCalls`, made at its first call (most choices
  have none).
- With text tool calls on, its content passes through a `TextCallScanner` first, made at
  its first content; the calls it recovers join the native ones.
- Its `finish_reason` is made truthful: `tool_calls` when calls were delivered.

When a choice finishes, and what its chunk then says, is `Choices`' (choices.py).
"""

from __future__ import annotations

from typing import Any

from proxy.chat.calls import ChoiceCalls
from proxy.core.decide import ChoiceIds, ResponseIds, truthful_finish_reason
from proxy.core.notes import DeltaRepaired, Note
from proxy.core.textcalls import RecoveredCall, TextCallScanner


class ChoiceState:
    __slots__ = ("_notes", "_response", "calls", "finished", "ids", "index", "scanner")

    def __init__(self, index: int, response: ResponseIds, notes: list[Note]) -> None:
        self.index = index
        self.ids: ChoiceIds = response.choice(index)
        self._response = response
        self._notes = notes
        self.calls: ChoiceCalls | None = None  # from the choice's first tool call
        self.finished = False
        self.scanner: TextCallScanner | None = None  # only when text tool calls are recovered

    def holds_text(self) -> bool:
        """Must its scanner see all content? No scanner yet counts too: the whole message
        may be one JSON call."""
        return self.scanner is None or self.scanner.holding

    def call_open(self) -> bool:
        """A call whose arguments are not complete yet, or text its scanner holds as a
        possible call (SPEC §4: a fragment lost now would change what the call does)."""
        calls = self.calls
        if calls is not None:
            for slot in calls.slots:
                if not slot.complete:
                    return True
        scanner = self.scanner
        return scanner is not None and scanner.in_call

    def made_calls(self) -> ChoiceCalls:
        """Its calls, made now if this is its first."""
        if self.calls is None:
            self.calls = ChoiceCalls(self.index, self.ids, self._response, self._notes)
        return self.calls

    def held_call(self) -> tuple[ChoiceCalls, int] | None:
        """A call that waits for complete arguments: the choice's calls and its upstream
        index."""
        calls = self.calls
        held = calls.held_index() if calls is not None else None
        return None if calls is None or held is None else (calls, held)

    def takes_plain_start(self, text: str) -> bool:
        """`text`, the choice's first content, passed on whole by a new scanner
        (TextCallScanner.takes_plain_start), which it keeps then; False: nothing was done."""
        scanner = TextCallScanner(self._response.facts.offered_tools)
        if not scanner.takes_plain_start(text):
            return False
        self.scanner = scanner
        return True

    def scan_text(self, delta: dict[str, Any], out: list[dict[str, Any]]) -> bool:
        """The delta's content passes through the markup scanner; recovered calls' deltas are
        appended to `out`. True when the delta changed."""
        if self.scanner is None:
            self.scanner = TextCallScanner(self._response.facts.offered_tools)
        original = delta["content"]
        text = self._text_segments(self.scanner.feed(original), out)
        if text == original:
            return False
        if text:
            delta["content"] = text
        else:
            del delta["content"]
        return True

    def release_text(self, out: list[dict[str, Any]]) -> str:
        """The stream or the choice ended: what its scanner held, as text and (appended to
        `out`) recovered calls' deltas."""
        scanner = self.scanner
        return "" if scanner is None else self._text_segments(scanner.end(), out)

    def truthful_reason(self, reason: object) -> object:
        """`reason` as the client must see it; a change is noted."""
        fixed = truthful_finish_reason(bool(self.ids.delivered), reason)
        if fixed != reason:
            self._notes.append(DeltaRepaired(kind="finish_reason", detail=f"{reason} -> {fixed}"))
        return fixed

    def _text_segments(self, segments: list[str | RecoveredCall], out: list[dict[str, Any]]) -> str:
        text: list[str] = []
        for segment in segments:
            if isinstance(segment, str):
                text.append(segment)
            else:
                self.made_calls().recovered(segment, out)
        return "".join(text)
