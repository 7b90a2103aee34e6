"""Where a JSON value ends, found one piece at a time with each character looked at once.

Formats without an end marker (Llama's `<|python_tag|>{...}`, Mistral's `[TOOL_CALLS][...]`,
a whole message that is one JSON call) end where their JSON value ends. Parsing the text so
far on every piece would cost the square of the value's length; this tracker keeps only the
nesting depth and whether it is inside a string, and jumps between the characters that can
change either (a compiled regex skips the rest in C). It does not validate: the value is
parsed once, when it is complete.

With `python=True` it tracks Python's call syntax (`[f(a='x')]`: strings in single quotes
too) for the pythonic call lists; a triple-quoted string is tracked as three strings, which
agrees with Python except where a lone quote of the same kind sits inside it (then the end
is found wrong, and the text is not read as a call: never a call that was not written).
"""

from __future__ import annotations

import re

_OUTSIDE = re.compile(r'[\[\]{}"]')  # what changes depth or enters a string
_INSIDE = re.compile(r'["\\]')  # what ends a string or escapes the next character
_PY_OUTSIDE = re.compile(r"[\[\]{}\"']")
_PY_INSIDE_SINGLE = re.compile(r"['\\]")


class JsonExtent:
    __slots__ = ("_depth", "_escaped", "_in_string", "_outside", "_quote", "examined")

    def __init__(self, python: bool = False) -> None:
        self._depth = 0
        self._in_string = False
        self._outside = _PY_OUTSIDE if python else _OUTSIDE
        self._quote = '"'  # the quote the open string ends with
        self._escaped = False  # the previous piece ended with a backslash inside a string
        self.examined = 0  # characters looked at, for the linear-time tests

    def feed(self, text: str, pos: int = 0) -> int | None:
        """Index in `text` just past the value's end, or None while it is still open.

        The first character fed must be the value's opening `{` or `[`.
        """
        end = self._end(text, pos)
        self.examined += (len(text) if end is None else end) - pos
        return end

    def _end(self, text: str, pos: int) -> int | None:
        while pos < len(text):
            if self._escaped:
                self._escaped = False
                pos += 1
                continue
            found = self._pattern().search(text, pos)
            if found is None:
                return None
            pos = found.end()
            char = found.group()
            if char == "\\":
                self._escaped = True
            elif char == '"' or char == "'":
                self._in_string = not self._in_string
                self._quote = char
            elif char in "[{":
                self._depth += 1
            else:
                self._depth -= 1
                if self._depth <= 0:
                    return pos
        return None

    def _pattern(self) -> re.Pattern[str]:
        if not self._in_string:
            return self._outside
        return _PY_INSIDE_SINGLE if self._quote == "'" else _INSIDE
