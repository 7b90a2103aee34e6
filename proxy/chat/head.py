"""The response head leaves with the first bytes that show the user something (SPEC §5).

Until a byte of the response reaches the client, a replay loop can still be answered with a
plain HTTP 422, which agents do not retry. So output that shows nothing (a first chunk whose
delta has only `role`, a placeholder with `choices: []`, an empty content delta) waits in the
`Carry` until output that shows something goes out, and leaves in front of it. The wait spans
follow-up rounds. Events the stream forwards unparsed are asked too, while the head waits
(`events_show_nothing`): a fast path may skip the parse, not this rule.
"""

from __future__ import annotations

from typing import Any

import orjson

from proxy.chat.continuation import Carry


class HeadGate:
    __slots__ = ("_carry", "_quiet")

    def __init__(self, carry: Carry):
        self._carry = carry
        self._quiet: list[bytes] = []  # this call's output that shows nothing

    @property
    def released(self) -> bool:
        """Some byte of this response (any round) has been handed out."""
        return self._carry.released

    def quiet(self, encoded: bytes) -> None:
        """`encoded`, about to be output, shows the user nothing: it may wait."""
        self._quiet.append(encoded)

    def shows(self, out: list[bytes]) -> bool:
        """Does some of `out`, this call's output so far, show the user something? Asked
        for each event left unchanged while the head waits: loops, not generators (a
        generator expression costs about 1K instructions to build and finish), and the
        quiet items come first, so the answer is most often the second item's."""
        quiet = self._quiet
        for item in out:
            for waiting in quiet:
                if item is waiting:
                    break
            else:
                return True
        return False

    def release(self, out: list[bytes], failed: bool) -> list[bytes]:
        """What of `out` leaves now; with the first bytes that show something, everything
        that waited leaves in front of them."""
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
        if not out or (failed and len(out) == 1):
            return out  # nothing to show yet, or only the error: a trip now becomes a 422
        carry.released = True
        out[:0] = carry.head_pending
        carry.head_pending.clear()
        return out


def shows_nothing(chunk: dict[str, Any]) -> bool:
    """A chunk with no content, reasoning, call, finish or usage: it may wait."""
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


def events_show_nothing(run: bytes, start: int) -> bool:
    """Do the whole one-line `data: {...}` events of `run[start:]` (each one JSON object, as
    the scan proved) all show nothing? Parsed one by one up to the first that shows something:
    asked only while the head waits, that is most often the first."""
    size = len(run)
    while start < size:
        end = run.find(b"\n\n", start)
        try:
            chunk = orjson.loads(run[start + 6 : end]) if end > start else None
        except orjson.JSONDecodeError:
            return False  # not an event the scan forwards: as any other output, it shows
        if not isinstance(chunk, dict) or not shows_nothing(chunk):
            return False
        start = end + 2
    return True
