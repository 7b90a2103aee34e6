"""The form without a marker: the whole message is one JSON call, or an array of them.

`{"name": "get_weather", "arguments": {...}}` (or `"parameters"`) as the entire content is how
Hermes-2-Pro on Workers AI, Kimi K2 with some providers and Llama 3.x's JSON tool format
answer when the server does not parse it. Only the entire content (trimmed) can be decided
to be a call, so:

- content whose first character that is not whitespace is anything but `{` or `[` is passed
  on at once (this stage costs nothing else on ordinary text);
- content that opens like a call object (`{"name"`, `{"arguments"`, ... or `[{` and such a
  key, checked on its first characters) is held while it can still be one: until its JSON
  value ends and something other than whitespace follows (released), or the content ends
  (decided), or it passes MAX_BLOCK_CHARS (released). JSON content that does not start with
  a call key (`{"answer": 42}`) is released at its first key.

The price is latency for content that is a JSON object starting with one of those keys and
is not a call: it reaches the client when it ends rather than as it streams.
"""

from __future__ import annotations

import re

from proxy.core.textcalls.checks import NO, Head, either, literal, then
from proxy.core.textcalls.extent import JsonExtent
from proxy.core.textcalls.markers import MAX_BLOCK_CHARS
from proxy.core.textcalls.model import (
    CALL_KEYS,
    NotACall,
    RecoveredCall,
    arguments_text,
    json_calls,
)

FORMAT = "json"

_KEY = literal(*(f'"{key}"' for key in sorted(CALL_KEYS)))
_CHECK = either(then(literal("{"), _KEY), then(literal("["), literal("{"), _KEY))
_NON_SPACE = re.compile(r"\S")

_WAITING, _INSIDE, _AFTER, _OFF = range(4)  # only whitespace so far / in the value / after it


class WholeMessage:
    __slots__ = (
        "_extent",
        "_head",
        "_offered",
        "_pieces",
        "_plausible",
        "_size",
        "_state",
        "examined",
        "recovered",
    )

    def __init__(self, offered_tools: frozenset[str]) -> None:
        self._offered = offered_tools
        self._state = _WAITING
        self._pieces: list[str] = []
        self._size = 0
        self._head = Head()
        self._plausible = False
        self._extent = JsonExtent()
        self.examined = 0
        self.recovered = 0

    @property
    def holding(self) -> bool:
        return self._state != _OFF

    @property
    def in_value(self) -> bool:
        """The content so far opened a JSON value that may be the whole message's call."""
        return self._state == _INSIDE or self._state == _AFTER

    def feed(self, text: str) -> str | None:
        """The text to pass on (all of it held so far), or None while it is held."""
        if self._state == _OFF:
            return text
        self._pieces.append(text)
        self._size += len(text)
        if self._size > MAX_BLOCK_CHARS:
            return self._release()
        pos = 0
        if self._state == _WAITING:
            first = self._next_non_space(text, 0)
            if first is None:
                return None
            if text[first] not in "{[":
                return self._release()
            self._state, pos = _INSIDE, first
        if self._state == _INSIDE:
            if not self._check(text, pos):
                return self._release()
            before = self._extent.examined
            stop = self._extent.feed(text, pos)
            self.examined += self._extent.examined - before
            if stop is None:
                return None
            self._state, pos = _AFTER, stop
        if self._next_non_space(text, pos) is not None:
            return self._release()
        return None

    def passes_at_once(self, text: str) -> bool:
        """Take `text` as the first content when `feed` would pass it on at once: nothing
        seen yet, and its first character is neither whitespace nor an opening bracket (the
        whole message cannot be one JSON call). True: the stage is where `feed(text)` would
        leave it, without keeping the text (TextCallScanner.takes_plain_start); False:
        nothing was done."""
        if (
            self._state != _WAITING
            or self._pieces
            or not text
            or text[0] in "{["
            or text[0].isspace()  # what _NON_SPACE (`\S`) calls whitespace
        ):
            return False
        self.examined += 1  # the one character feed would look at
        self._state = _OFF
        return True

    def end(self) -> list[RecoveredCall] | str:
        """The calls the whole content was, or the text to pass on."""
        if self._state == _AFTER:
            calls = self._calls("".join(self._pieces))
            if calls is not None:
                self.recovered = len(calls)
                self._state = _OFF
                self._pieces = []
                return calls
        return self._release() if self._state != _OFF else ""

    def _next_non_space(self, text: str, pos: int) -> int | None:
        found = _NON_SPACE.search(text, pos)
        self.examined += (found.end() if found else len(text)) - pos
        return found.start() if found else None

    def _check(self, text: str, pos: int) -> bool:
        """Can the value still be a call object? Decided on its first characters."""
        if self._plausible:
            return True
        self._head.take(text, pos)
        verdict, looked_at = self._head.verdict(_CHECK)
        self.examined += looked_at
        if verdict is None:
            return True
        self._head = Head()
        self._plausible = verdict != NO
        return self._plausible

    def _calls(self, content: str) -> list[RecoveredCall] | None:
        self.examined += len(content)
        try:
            parsed = json_calls(content.strip())
        except NotACall:
            return None
        if not all(name in self._offered for name, _, _ in parsed):
            return None
        return [RecoveredCall(name, arguments_text(args), None, FORMAT) for name, args, _ in parsed]

    def _release(self) -> str:
        text = "".join(self._pieces)
        self._pieces = []
        self._state = _OFF
        return text
