"""The choices of one streamed response: each choice's rewrite, its finish, its leaked calls.

Rules (SPEC §4, §5):
- A choice's tool-call deltas go to its `ChoiceCalls`; with text tool calls on, its content
  passes through a `TextCallScanner` first, and recovered calls join the native ones (each
  choice's own: `ChoiceState`, choice_state.py).
- A choice finishes at its first real `finish_reason` (`""` is what some servers send for
  "not finished"), or at the stream's end: what was held is released, and `finish_reason` is
  made truthful.
- With one choice, a choice that finishes with replays as its only calls asks for a
  follow-up round (`replays_only`); the stream's phases act on it.
"""

from __future__ import annotations

from enum import Enum, auto
from typing import Any

from proxy.chat.calls import ChoiceCalls, merge_fragments
from proxy.chat.choice_state import ChoiceState
from proxy.chat.continuation import RoundContent
from proxy.core.decide import ResponseIds
from proxy.core.guard import Replay
from proxy.core.notes import Note


class ChoiceChange(Enum):
    SAME = auto()  # nothing to change: the choice goes out as it arrived
    CHANGED = auto()  # rewritten in place
    EMPTY = auto()  # nothing left to send: the choice leaves its chunk


# Enum members read through their class cost an EnumType.__getattr__ call each on Python 3.11;
# these are read for every parsed chunk.
_SAME = ChoiceChange.SAME
_CHANGED = ChoiceChange.CHANGED
_EMPTY = ChoiceChange.EMPTY


class Choices:
    __slots__ = (
        "_content",
        "_followups",
        "_ids",
        "_notes",
        "_states",
        "_text_calls",
        "holding_text",
        "raw_seen",
        "replays_only",
    )

    def __init__(
        self,
        ids: ResponseIds,
        notes: list[Note],
        *,
        text_calls: bool,
        content: RoundContent | None,
        followups: bool,
    ):
        self._ids = ids
        self._notes = notes
        self._text_calls = text_calls
        self._content = content  # collects the round's text when it may need a follow-up
        self._followups = followups
        self._states: dict[int, ChoiceState] = {}
        self.raw_seen = False  # a chunk with a choice was forwarded without being parsed
        self.replays_only = False  # a choice finished whose only calls were replays
        # Must some choice's text-call scanner see all content? No content seen yet counts
        # too: the whole message may be one JSON call. Kept current by _held_text() where a
        # scanner or a choice changes: the stream reads it for every event it is asked about.
        self.holding_text = True

    def _held_text(self) -> bool:
        for state in self._states.values():
            if state.holds_text():
                return True
        return not self._states

    def replays(self) -> list[Replay]:
        """The replays of the first choice (the only one, when a follow-up is asked for)."""
        return list(next(iter(self._states.values())).ids.replays)

    def rewrite_all(self, choices: list[Any]) -> tuple[bool, list[Any]]:
        """Rewrites a chunk's choices in place: (whether any changed, the choices to keep)."""
        if len(choices) == 1 and type(choices[0]) is dict:  # nearly every chunk: no lists built
            result = self._rewrite(choices[0], 0)
            return result is not _SAME, [] if result is _EMPTY else choices
        changed = False
        dropped = False
        kept = []
        for position, choice in enumerate(choices):
            if not isinstance(choice, dict):
                kept.append(choice)
                continue
            result = self._rewrite(choice, position)
            changed = changed or result is not _SAME
            if result is _EMPTY:
                dropped = True
                continue
            if dropped and not isinstance(choice.get("index"), int):
                # Placed by its position (SPEC §4), which the choice dropped before it would
                # change: the client must still be told whose choice this is.
                choice["index"] = position
                changed = True
            kept.append(choice)
        return changed, kept

    def takes_plain_start(self, text: str) -> bool:
        """`text`, the first content of the only choice (index 0), read from the bytes of an
        event the stream forwards as they came: taken when its scanner, new, passes it on
        whole at once (TextCallScanner.takes_plain_start), as `ChoiceState.scan_text` would
        have fed it. False: nothing was done (the event takes the general path)."""
        state = self._states.get(0)
        if (
            not self._text_calls
            or state is None
            or len(self._states) != 1
            or state.scanner is not None
            or state.finished
            or not state.takes_plain_start(text)
        ):
            return False
        self.holding_text = self._held_text()
        return True

    def call_open(self) -> bool:
        """Is a tool call open in a choice that has not finished (SPEC §4): its arguments
        not yet complete, or leaked markup its text-call scanner holds?"""
        return any(not state.finished and state.call_open() for state in self._states.values())

    def held_call(self, index: object) -> tuple[ChoiceCalls, int] | None:
        """A call of the choice at `index` that waits for complete arguments: its choice's
        calls and its upstream index."""
        state = self._states.get(index) if type(index) is int else None
        return state.held_call() if state is not None else None

    def close(self) -> list[dict[str, Any]]:
        """The stream ended: finish every open choice; the finishing choices to send."""
        if not self._states and self.raw_seen:
            self._state(0)
        out: list[dict[str, Any]] = []
        for index, state in sorted(self._states.items()):
            if state.finished:
                continue
            emitted: list[dict[str, Any]] = []
            released = self._finish(state, emitted)
            delta: dict[str, Any] = {"content": released} if released else {}
            if self._asks_followup(state):
                # SPEC §5: the round's finish is not forwarded, but the text its scanner held
                # until now is: the follow-up continues the message after it.
                self.replays_only = True
                if released:
                    out.append({"index": index, "delta": delta, "finish_reason": None})
                break
            reason = state.truthful_reason(None) or "stop"
            if emitted:
                delta["tool_calls"] = merge_fragments(emitted)
            out.append({"index": index, "delta": delta, "finish_reason": reason})
        return out

    # -- one choice ------------------------------------------------------------------------------

    def _state(self, index: int) -> ChoiceState:
        state = self._states.get(index)
        if state is None:
            state = self._states[index] = ChoiceState(index, self._ids, self._notes)
            self.holding_text = True  # its scanner has seen nothing yet
        return state

    def _rewrite(self, choice: dict[str, Any], position: int) -> ChoiceChange:
        index = choice.get("index")
        state = self._state(index if isinstance(index, int) else position)
        delta = choice.get("delta")
        emitted: list[dict[str, Any]] = []
        changed = isinstance(delta, dict) and self._rewrite_delta(state, delta, emitted)
        reason = choice.get("finish_reason")
        # Some servers send `"finish_reason": ""` on every chunk: that does not end the choice
        # (SPEC §4: the real finish still has to say tool_calls after calls).
        if reason is not None and reason != "" and not state.finished:
            changed = self._finish_choice(state, choice, reason, emitted) or changed
        if emitted:
            # SPEC §4: what the finish released (held headers, "{}" for empty arguments) must
            # reach the client even when the chunk itself needed no other change.
            _delta_of(choice)["tool_calls"] = merge_fragments(emitted)
            if not isinstance(index, int):
                # Placed by its position: the client must be told whose calls these are.
                choice["index"] = state.index
            return _CHANGED
        if not changed:
            return _SAME
        delta = choice.get("delta")
        if (
            isinstance(delta, dict)
            and not delta
            and choice.get("finish_reason") is None
            and not choice.get("logprobs")
        ):
            return _EMPTY
        return _CHANGED

    def _rewrite_delta(
        self, state: ChoiceState, delta: dict[str, Any], emitted: list[dict[str, Any]]
    ) -> bool:
        changed = False
        if self._text_calls and isinstance(delta.get("content"), str) and delta["content"]:
            changed = state.scan_text(delta, emitted)
            self.holding_text = self._held_text()
        if self._content is not None:  # what a follow-up request repeats (SPEC §5)
            self._content.add_delta(delta)
        if "tool_calls" in delta:
            changed = True
            # extend, not rebind: calls recovered from this delta's text are in `emitted`
            calls = state.calls or state.made_calls()
            emitted.extend(calls.take(delta.pop("tool_calls")))
        return changed

    def _finish_choice(
        self,
        state: ChoiceState,
        choice: dict[str, Any],
        reason: object,
        emitted: list[dict[str, Any]],
    ) -> bool:
        changed = False
        released = self._finish(state, emitted)
        if released:
            delta = _delta_of(choice)
            delta["content"] = (delta.get("content") or "") + released
            changed = True
        fixed = state.truthful_reason(reason)
        if fixed != reason:
            choice["finish_reason"] = fixed
            changed = True
        if self._asks_followup(state):
            self.replays_only = True
        return changed

    def _finish(self, state: ChoiceState, out: list[dict[str, Any]]) -> str:
        """Release what was held; appends tool-call deltas to `out`, returns released text."""
        state.finished = True
        released = ""
        if state.scanner is not None:
            released = state.release_text(out)
            self.holding_text = self._held_text()
            if released and self._content is not None:
                # What a follow-up request repeats (SPEC §5): the delta this text joins, if
                # any, was added before the finish released it.
                self._content.add_delta({"content": released})
        if state.calls is not None:
            state.calls.finish(out)
        return released

    def _asks_followup(self, state: ChoiceState) -> bool:
        ids = state.ids
        return (
            self._followups and self._ids.guard.enabled and bool(ids.replays) and not ids.delivered
        )


def _delta_of(choice: dict[str, Any]) -> dict[str, Any]:
    delta = choice.get("delta")
    if not isinstance(delta, dict):
        delta = choice["delta"] = {}
    return delta
