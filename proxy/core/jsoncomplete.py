"""Do a call's arguments, growing fragment by fragment, form a complete JSON value yet? (SPEC §4)

A call is open until its arguments form a complete JSON value, so the question is asked after
every fragment, and fragments can be a byte each. Parsing all the arguments again each time is
quadratic (100 KB of arguments took 135 ms); `JsonCompleteness` is fed each character once and
keeps only what the answer needs: the bracket depth, whether it is inside a string, whether the
last character was an escaping backslash. When the depth returns to 0 with only whitespace
after it, the value's text is validated once, with orjson.

Complete means what the stream has always meant by it: the arguments are one JSON object or
array that parses, with JSON whitespace around it. A top-level scalar never becomes complete
before its choice finishes: the end of a number cannot be seen (`1` may go on as `10`), and
arguments are an object in every API this proxy serves.
"""

from __future__ import annotations

import re
from enum import Enum, auto

import orjson

_NOT_SPACE = re.compile(r"[^ \t\n\r]")  # JSON's whitespace is these four only
_SPACE = " \t\n\r"
_STRUCTURE = re.compile(r'["\[\]{}]')  # outside strings only brackets and string starts do
_STRUCTURAL = '"[]{}'
# Outside strings, arguments hold a few characters between structural ones (`": "`, `", "`):
# that many are looked at one by one before a regex search takes over. Under callgrind a
# search and its match cost about 700 instructions from compiled code, a character looked at
# a few dozen; a long run of numbers still costs what the search costs.
_NEAR = 16


def _next_structural(text: str, pos: int, end: int) -> int:
    """Where the next string start or bracket is from `pos` (outside strings), or -1."""
    near = min(end, pos + _NEAR)
    while pos < near:
        if text[pos] in _STRUCTURAL:
            return pos
        pos += 1
    if pos == end:
        return -1
    match = _STRUCTURE.search(text, pos)
    return -1 if match is None else match.start()


def _next_non_space(text: str, pos: int, end: int) -> int:
    """Where the next character other than JSON whitespace is from `pos`, or -1."""
    near = min(end, pos + _NEAR)
    while pos < near:
        if text[pos] not in _SPACE:
            return pos
        pos += 1
    if pos == end:
        return -1
    match = _NOT_SPACE.search(text, pos)
    return -1 if match is None else match.start()


def is_complete_json(text: str) -> bool:
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError:
        return False
    return True


class Progress(Enum):
    BEFORE = auto()  # only whitespace so far
    INSIDE = auto()  # within the top-level object or array
    CLOSED = auto()  # its closing bracket came, then only whitespace: complete if it parses
    NEVER = auto()  # nothing appended can make the text one complete object or array


# Reading an Enum member through its class costs an EnumType.__getattr__ call on Python 3.11:
# the states are read for every argument fragment that closes a bracket.
_BEFORE = Progress.BEFORE
_INSIDE = Progress.INSIDE
_CLOSED = Progress.CLOSED
_NEVER = Progress.NEVER


class JsonCompleteness:
    """Fed the text in pieces, each character once; `state` says how far it has got."""

    __slots__ = ("_depth", "_escape", "_in_string", "examined", "state")

    def __init__(self) -> None:
        self.state = _BEFORE
        self._depth = 0
        self._in_string = False
        self._escape = False  # the previous piece ended in a backslash inside a string
        self.examined = 0  # characters fed: linear in the text (tests check it)

    def feed(self, text: str) -> Progress:
        state = self.state
        if state is _NEVER or not text:
            return state
        self.examined += len(text)
        end = len(text)
        if state is _CLOSED:
            if _next_non_space(text, 0, end) >= 0:
                self.state = _NEVER
            return self.state
        start = 0
        if state is _BEFORE:
            first = _next_non_space(text, 0, end)
            if first < 0:
                return state
            if text[first] not in "{[":
                self.state = _NEVER
                return self.state
            self.state = _INSIDE
            self._depth = 1
            start = first + 1
        self._walk(text, start)
        return self.state

    def give_up(self) -> None:
        """The closed value did not parse: no continuation can make it complete."""
        self.state = _NEVER

    def _walk(self, text: str, pos: int) -> None:
        if self._escape:
            self._escape = False
            pos += 1
        end = len(text)
        # Inside a string, its end and escapes are found with str.find, not a regex search and
        # a match object per hit. The quote's place is kept until the walk passes it, so a run
        # of escapes does not look for it again each time (that would be quadratic).
        quote = -2  # not looked for yet; -1: none in the rest of the text
        while pos < end:
            if self._in_string:
                if quote != -1 and quote < pos:
                    quote = text.find('"', pos)
                slash = text.find("\\", pos, end if quote < 0 else quote)
                if slash >= 0:  # an escape before the string's end: skip what it escapes
                    pos = slash + 1
                    if pos == end:
                        self._escape = True  # the escaped character starts the next piece
                    else:
                        pos += 1
                    continue
                if quote < 0:
                    return
                pos = quote + 1
                self._in_string = False
                continue
            at = _next_structural(text, pos, end)
            if at < 0:
                return
            pos = at + 1
            char = text[at]
            if char == '"':
                self._in_string = True
            elif char in "{[":
                self._depth += 1
            else:
                self._depth -= 1
                if self._depth == 0:
                    # Anything but whitespace after the top-level value rules it out for good.
                    trailing = _next_non_space(text, pos, end) >= 0
                    self.state = _NEVER if trailing else _CLOSED
                    return
