"""Argument fragments of a held call, taken from their bytes (SPEC §2.4, §4).

A call whose raw id may repeat an answered call waits, unseen by the client, until its
arguments are complete; until then each of its fragments only grows its arguments, and the
general path parses the chunk, routes the fragment and drops the chunk: about 55K
instructions an event under callgrind (bench.inprocess --stream-toolcall), for nothing the
client sees. Upstreams write every fragment of a call in one shape, only the arguments string
changing:

    {<envelope>,"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":
    {"arguments":"..."}}]},"logprobs":null,"finish_reason":null}]}

A `FragmentLane` is that chunk, drawn from a chunk of the call that the general path just
dropped (its envelope and its choice's keys as they came), serialized with the arguments cut
out: its head and tail. An event that is exactly the head, one JSON string and the tail is
that chunk with that string (the grammar leaves nothing else for it to be), which the general
path would drop after appending the string to the call: the lane does the appending, when
`ChoiceCalls.held_fragment` says the string can neither complete the call nor be a final
flush. Anything else (another shape, another index, a usage key, a string that may complete
the call) takes the general path. The tests hold the lane to the general path's output.
"""

from __future__ import annotations

from typing import Any

import orjson

from proxy.chat.calls import ChoiceCalls

# Stands for the arguments in the drawn chunk; found in its serialization once, exactly.
_MARKER = "arguments cut here"
_MARKER_JSON = orjson.dumps(_MARKER)


class FragmentLane:
    __slots__ = (
        "_choice",
        "_head",
        "_left",
        "_left_data",
        "_left_start",
        "_tail",
        "_template",
        "built",
        "calls",
        "index",
        "taken",
    )

    def __init__(
        self,
        head: bytes,
        tail: bytes,
        calls: ChoiceCalls,
        index: int,
        template: dict[str, Any],
        choice: dict[str, Any],
    ):
        self._head = head
        self._tail = tail
        self.calls = calls
        self.index = index  # the upstream index of the held call's deltas
        self.taken = 0  # fragments taken from their bytes (what the tests look at)
        self.built = 0  # chunks built for the general path instead of parsed (likewise)
        # The drawn chunk (its envelope) and its choice, the shape `left_chunk` builds.
        self._template = template
        self._choice = choice
        # The fragment of the event `take` last left to the general path, and where that
        # event is: `left_chunk` answers for that event only.
        self._left: str | None = None
        self._left_data = b""
        self._left_start = -1

    @classmethod
    def draw(
        cls, chunk: dict[str, Any], choice: dict[str, Any], calls: ChoiceCalls, index: int
    ) -> FragmentLane | None:
        """The lane for fragments at upstream `index` of `calls`, in the shape of `chunk`,
        whose one choice was `choice` (both as the general path left them: only `choices`
        and the choice's delta changed). None when the general path would not drop such a
        chunk: usage (a usage chunk is sent), a finish, logprobs (kept with the choice)."""
        if (
            chunk.get("usage")
            or "delta" not in choice
            or type(choice.get("index")) is not int
            or choice.get("finish_reason") is not None
            or choice.get("logprobs")
        ):
            return None
        # copies in place of comprehensions: the keys keep their order
        shaped = dict(choice)
        shaped["delta"] = {"tool_calls": [{"index": index, "function": {"arguments": _MARKER}}]}
        template = dict(chunk)
        template["choices"] = [shaped]
        try:
            text = orjson.dumps(template)
        except orjson.JSONEncodeError:  # nested past orjson's depth: no lane
            return None
        # split, not find: bytes.find parses its arguments into a tuple (about 1.5K
        # instructions from compiled code); split is one call for both questions
        parts = text.split(_MARKER_JSON)
        if len(parts) != 2:
            return None  # the marker's text occurs elsewhere too: no exact cut
        head, tail = b"data: " + parts[0], parts[1] + b"\n\n"
        return cls(head, tail, calls, index, template, shaped)

    def take(self, data: bytes, start: int, end: int) -> bool:
        """Take the event `data[start:end]` (it ends with its blank line) when it is the
        lane's chunk with a fragment `held_fragment` accepts; False: nothing was done."""
        head = self._head
        tail = self._tail
        cut = start + len(head)
        stop = end - len(tail)
        # Slices compared, not startswith/endswith: from compiled code those are method calls
        # (about 1.1K instructions each under callgrind), a slice and a compare a few hundred.
        if stop < cut or data[start:cut] != head or data[stop:end] != tail:
            return False
        try:
            fragment = orjson.loads(data[cut:stop])
        except orjson.JSONDecodeError:
            return False
        if type(fragment) is not str:
            return False
        if not self.calls.held_fragment(self.index, fragment):
            self._left, self._left_data, self._left_start = fragment, data, start
            return False
        self.taken += 1
        return True

    def left_chunk(self, data: bytes, start: int) -> dict[str, Any] | None:
        """The chunk the event at `start` of `data` parses into, when `take` just left it to
        the general path (its fragment may complete the call): the drawn chunk with that
        fragment, built without parsing. The event is exactly that chunk's serialization,
        so the chunk is what orjson.loads would make of it (about 14K instructions for the
        parse, under 3K for the build). The envelope's values are shared with the drawn
        chunk: the general path replaces a chunk's choices, never changes its envelope's
        values in place. None for any other event."""
        fragment = self._left
        if fragment is None or self._left_data is not data or self._left_start != start:
            return None
        self._left = None
        self._left_data = b""
        choice = dict(self._choice)
        choice["delta"] = {
            "tool_calls": [{"index": self.index, "function": {"arguments": fragment}}]
        }
        chunk = dict(self._template)
        chunk["choices"] = [choice]
        self.built += 1
        return chunk
