"""The end of a streamed message as the client gets it: one `message_delta`, then
`message_stop` (SPEC §8).

The upstream's `message_delta` is held to the round's end: its `stop_reason` is made truthful
and its output usage summed over the rounds. A message that arrived whole in `message_start`
keeps that event's stop signal and usage, never null.
"""

from __future__ import annotations

from typing import Any

from proxy.anthropic.wire import encode
from proxy.core.notes import DeltaRepaired

_DELTA_KEYS = frozenset({"type", "delta", "usage"})

# finish reasons that mean "the model stopped" after delivering tool_use blocks
_STOPPED = ("end_turn", None, "")

MESSAGE_STOP = b'event: message_stop\ndata: {"type":"message_stop"}\n\n'


def truthful_stop_reason(delivered: bool, reason: object) -> object:
    """SPEC §8: `tool_use` after delivered tool_use blocks, `end_turn` when it claimed
    tool_use and delivered none; `max_tokens`, `pause_turn` and the rest are kept."""
    if delivered and reason in _STOPPED:
        return "tool_use"
    if not delivered and reason == "tool_use":
        return "end_turn"
    return reason


def output_tokens(usage: object) -> int:
    value = usage.get("output_tokens") if isinstance(usage, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


class MessageEnd:
    """What the round's `message_start` and `message_delta` said about the message's end."""

    __slots__ = ("_delta", "_extra", "_start_usage", "_usage")

    def __init__(self) -> None:
        self._delta: dict[str, Any] = {}  # the message_delta's delta, held to the end
        self._extra: dict[str, Any] = {}  # its other keys, kept
        self._usage: dict[str, Any] | None = None  # the message_delta's
        self._start_usage: dict[str, Any] | None = None  # message_start's, until one comes

    def started(self, message: dict[str, Any]) -> None:
        """`message_start`'s message: a stop signal it carries is kept (SPEC §8), and its
        usage counts until a `message_delta` brings one."""
        for key in ("stop_reason", "stop_sequence"):
            if message.get(key) is not None:
                self._delta[key] = message[key]
        usage = message.get("usage")
        self._start_usage = usage if isinstance(usage, dict) else None

    def delta(self, obj: dict[str, Any]) -> None:
        """A `message_delta` event: held, its keys merged into what came before."""
        delta = obj.get("delta")
        if isinstance(delta, dict):
            self._delta.update(delta)
        usage = obj.get("usage")
        if isinstance(usage, dict):
            self._usage = usage
        self._extra.update((k, v) for k, v in obj.items() if k not in _DELTA_KEYS)

    def output_tokens(self) -> int:
        """This round's output tokens, as the upstream last counted them."""
        return output_tokens(self._usage if self._usage is not None else self._start_usage)

    def events(self, delivered: bool, tokens: int) -> tuple[bytes, DeltaRepaired | None]:
        """The client's `message_delta` and `message_stop`, with `tokens` as its output
        usage, and the note for a stop reason made truthful."""
        reason = self._delta.get("stop_reason")
        fixed = truthful_stop_reason(delivered, reason)
        note = None
        if fixed != reason and (reason is not None or delivered):
            note = DeltaRepaired(kind="stop_reason", detail=f"{reason} -> {fixed}")
        delta = {"stop_sequence": None, **self._delta, "stop_reason": fixed}
        usage = {**(self._usage or {}), "output_tokens": tokens}
        event = {"type": "message_delta", **self._extra, "delta": delta, "usage": usage}
        return encode(event) + MESSAGE_STOP, note
