"""What a block's first characters may be: checks that tell a call from prose early.

A marker that prose merely mentions ("use the <tool_call> tag") must be released as text at
once instead of holding the rest of the message back until its end. Each format says what
its body may start with as a check over the body's first characters (the head): it answers
the index just past what it matched (the call is plausible), MORE (the head is too short to
tell), or NO. Checks compose: `then(a, b)` runs `b` where `a` stopped, `either(a, b)` takes
whichever matches.
"""

from __future__ import annotations

import re
from collections.abc import Callable

NO = -1
MORE = None

# The first characters of a block's body tell whether it can be one of its formats (a name,
# a tag, a bracket); a body that has not shown that by this length is prose.
MAX_HEAD_CHARS = 256
# While the head is longer than this, it is checked again only once it has grown by a quarter:
# checking on every piece would cost the square of the head's length when it arrives a
# character at a time; this way a head costs a few times its length, and a verdict comes at
# most a quarter of the head late.
_CHECK_EVERY_PIECE = 16

# head, position -> index past the match, MORE, or NO
Check = Callable[[str, int], int | None]

_SPACE = re.compile(r"\s*")
_NAME = re.compile(r"[\w.\-]+")
_CALL_ID = re.compile(r"[\w.:\-]+")
IDENTIFIER = re.compile(r"[A-Za-z_]\w*")


def _skip_space(head: str, pos: int) -> int:
    match = _SPACE.match(head, pos)
    return match.end() if match else pos


def literal(*options: str) -> Check:
    """After optional whitespace, one of `options`."""

    def check(head: str, pos: int) -> int | None:
        at = _skip_space(head, pos)
        if at == len(head):
            return MORE
        for option in options:
            if head.startswith(option, at):
                return at + len(option)
        if any(option.startswith(head[at:]) for option in options):
            return MORE
        return NO

    return check


def glued(*options: str) -> Check:
    """One of `options`, right at the position (no whitespace before it)."""

    def check(head: str, pos: int) -> int | None:
        if pos == len(head):
            return MORE
        for option in options:
            if head.startswith(option, pos):
                return pos + len(option)
        if any(option.startswith(head[pos:]) for option in options):
            return MORE
        return NO

    return check


def named(
    *follow: str,
    name: re.Pattern[str] = _NAME,
    space_before: bool = True,
    space_after: bool = True,
) -> Check:
    """A name (after optional whitespace if `space_before`), optional whitespace (if
    `space_after`), then one of `follow`."""
    after = literal(*follow) if space_after else glued(*follow)

    def check(head: str, pos: int) -> int | None:
        at = _skip_space(head, pos) if space_before else pos
        match = name.match(head, at)
        if match is None:
            return MORE if at == len(head) else NO
        if match.end() == len(head):
            return MORE
        return after(head, match.end())

    return check


def call_id(*follow: str) -> Check:
    """A name that may carry Kimi's `functions.` prefix and `:n` counter."""
    return named(*follow, name=_CALL_ID)


def then(*checks: Check) -> Check:
    def check(head: str, pos: int) -> int | None:
        at = pos
        for step in checks:
            found = step(head, at)
            if found is None or found == NO:
                return found
            at = found
        return at

    return check


def either(*checks: Check) -> Check:
    def check(head: str, pos: int) -> int | None:
        undecided = False
        for step in checks:
            at = step(head, pos)
            if at is None:
                undecided = True
            elif at != NO:
                return at
        return MORE if undecided else NO

    return check


class Head:
    """A body's first characters, kept until the check decides on them."""

    __slots__ = ("_checked", "_parts", "length")

    def __init__(self) -> None:
        self._parts: list[str] = []
        self.length = 0
        self._checked = 0

    def take(self, text: str, pos: int) -> int:
        """Keep what fits of `text[pos:]`; returns how many characters that was."""
        piece = text[pos : pos + MAX_HEAD_CHARS - self.length]
        if piece:
            self._parts.append(piece)
            self.length += len(piece)
        return len(piece)

    def text(self) -> str:
        joined = "".join(self._parts)
        self._parts = [joined] if joined else []
        return joined

    def verdict(self, check: Check, *, final: bool = False) -> tuple[int | None, int]:
        """The check's answer (NO for a full or `final` head it cannot place, MORE while it
        is not due again) and how many characters it looked at."""
        full = final or self.length >= MAX_HEAD_CHARS
        grown = self.length - self._checked
        if not full and self.length > _CHECK_EVERY_PIECE and grown * 4 < self._checked:
            return MORE, 0
        head = self.text()
        self._checked = len(head)
        found = check(head, 0)
        return (NO if found is None and full else found), len(head)
