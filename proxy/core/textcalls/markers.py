"""The marker stage: text flows out, blocks between a format's markers become calls.

- Text is released as it arrives, except a tail that could still grow into a marker (markers
  may be split anywhere): at most the longest marker's length is held.
- From a marker on, the block is held until it is complete. Its first characters are checked
  against what the formats that marker opens may start with: prose that merely mentions a
  marker is released at once. A complete block becomes calls only if it parses and names only
  offered tools; otherwise its marker goes out as text and its body is scanned again (it may
  hold a real call). Nothing is ever dropped.
- A quiet span (reasoning in the text, formats.QUIET_SPANS) goes out as it arrives; until its
  end marker no block opens, and only a tail that may be the start of that end is looked at
  again with the next piece.

Linear time: every piece of input is looked at a bounded number of times, whatever the split.
No buffer is re-joined or re-searched per piece: a block is kept as a list of pieces (joined
once, when it is complete), the end marker is looked for only in the new piece plus the few
characters before it, a JSON body's end is tracked incrementally (extent.py), and a body that
failed is scanned again at most once (a block that fails inside that second scan, or outgrows
MAX_BLOCK_CHARS, is released whole). `examined` counts the characters looked at, for the tests
that prove this.
"""

from __future__ import annotations

import re

from proxy.core.textcalls.checks import NO, Head
from proxy.core.textcalls.extent import JsonExtent
from proxy.core.textcalls.formats import MARKERS, Marker
from proxy.core.textcalls.model import NotACall, RecoveredCall, Segment, arguments_text

# A block that has not ended after this many characters is not a call worth recovering: it is
# released as text, whole, rather than holding the client's content hostage (and memory).
MAX_BLOCK_CHARS = 256 * 1024

_STARTS = re.compile("|".join(re.escape(s) for s in sorted(MARKERS, key=len, reverse=True)))
_LONGEST = max(len(s) for s in MARKERS)
_START_CHARS = frozenset(s[0] for s in MARKERS)
_PREFIXES = frozenset(s[:n] for s in MARKERS for n in range(1, len(s)))


def may_open(text: str) -> bool:
    """Could a marker start in `text`? Every marker starts with `<` or `[` (the table's tests
    hold every format to that); two `in` tests are far cheaper than the scan of a tail."""
    return "<" in text or "[" in text


class _Block:
    """An open block: its marker, and the body so far."""

    __slots__ = ("extent", "head", "marker", "pieces", "rescan", "size", "skip", "tail", "verdict")

    def __init__(self, marker: Marker, rescan: bool) -> None:
        self.marker = marker
        self.rescan = rescan  # opened while a failed block's body was scanned again
        self.head = Head()  # the body while its check is undecided (then it is all of the body)
        self.verdict: int | None = None  # the check's answer once it is plausible
        self.pieces: list[str] = [marker.start]
        self.size = len(marker.start)  # the head is not counted: it is short
        self.tail = ""  # the end of the body so far if an end marker may have begun in it
        self.extent: JsonExtent | None = None  # end=None: where the JSON value ends
        self.skip = 0  # end=None: body characters before the value's opening bracket

    def text(self) -> str:
        return "".join(self.pieces)


class MarkerScanner:
    __slots__ = ("_block", "_held", "_offered", "_rescanning", "examined", "recovered")

    def __init__(self, offered_tools: frozenset[str]) -> None:
        self._offered = offered_tools
        self._held = ""  # a tail that may still grow into a marker
        self._block: _Block | None = None
        self._rescanning = False
        self.recovered = 0
        self.examined = 0

    @property
    def in_block(self) -> bool:
        """A start marker was seen and its block, one that may hold a call, is not decided
        yet (a quiet span, such as reasoning, holds none)."""
        block = self._block
        return block is not None and not block.marker.quiet

    @property
    def holding(self) -> bool:
        block = self._block
        if block is not None and block.marker.quiet:  # holds nothing back: only its end matters
            return bool(block.tail)
        return bool(self._held) or block is not None

    def feed(self, text: str, out: list[Segment]) -> None:
        pos = 0
        while pos < len(text):
            if self._block is None:
                pos = self._text(text, pos, out)
            else:
                pos = self._in_block(self._block, text, pos, out)

    def end(self, out: list[Segment]) -> None:
        while self._block is not None:
            block = self._block
            if block.marker.quiet:  # all of it went out as it came
                self._block = None
                continue
            if block.verdict is None:  # decided now, on what there is
                self._decide(block, out, final=True)
                continue
            self._block = None
            if block.marker.end is None or block.marker.ends_with_content:
                self._resolve(block, block.text(), out)
            else:
                self._failed(block, block.text(), out)
        if self._held:
            out.append(self._held)
            self._held = ""

    # -- text ------------------------------------------------------------------------------

    def _text(self, text: str, pos: int, out: list[Segment]) -> int:
        """Release text up to a marker (opening its block) or up to a possible marker tail."""
        if self._held:
            resumed = self._resume_held(text, pos, out)
            if resumed is not None:
                return resumed
        found = _STARTS.search(text, pos)
        if found is not None:
            self.examined += found.end() - pos
            out.append(text[pos : found.start()])
            self._open(found.group(), out)
            return found.end()
        self.examined += len(text) - pos
        cut = self._partial_marker(text, pos)
        out.append(text[pos:cut])
        self._held = text[cut:]
        return len(text)

    def _resume_held(self, text: str, pos: int, out: list[Segment]) -> int | None:
        """The held tail with the next characters: a position to go on from, or None to scan
        `text` from `pos` as usual (the tail could not start a marker and was released)."""
        held = self._held
        self._held = ""
        window = held + text[pos : pos + _LONGEST]
        self.examined += len(window)
        found = _STARTS.search(window)
        if found is not None and found.start() < len(held):
            out.append(window[: found.start()])
            self._open(found.group(), out)
            return pos + found.end() - len(held)
        if found is None and len(window) - len(held) == len(text) - pos:
            # All of `text` is in the window and may still be the start of a marker.
            cut = self._partial_marker(window, 0)
            out.append(window[:cut])
            self._held = window[cut:]
            return len(text)
        out.append(held)  # every marker is shorter than the window: none starts in `held`
        return None

    def _partial_marker(self, text: str, pos: int) -> int:
        """Index of the earliest tail of `text` (from `pos`) that could grow into a marker."""
        first = max(pos, len(text) - _LONGEST + 1)
        self.examined += len(text) - first
        for i in range(first, len(text)):
            if text[i] in _START_CHARS and text[i:] in _PREFIXES:
                return i
        return len(text)

    def _open(self, start: str, out: list[Segment]) -> None:
        block = self._block = _Block(MARKERS[start], self._rescanning)
        if block.marker.quiet:
            block.verdict = 0
            block.pieces = []
            out.append(start)

    # -- blocks ----------------------------------------------------------------------------

    def _in_block(self, block: _Block, text: str, pos: int, out: list[Segment]) -> int:
        if block.marker.quiet:
            return self._in_quiet(block, text, pos, out)
        if block.verdict is None:
            return self._check_head(block, text, pos, out)
        stop = self._find_end(block, text, pos)
        piece = text[pos:stop] if pos or stop is not None else text
        block.pieces.append(piece)
        block.size += len(piece)
        if stop is not None:
            self._block = None
            self._resolve(block, block.text(), out)
            return stop
        if block.size > MAX_BLOCK_CHARS:
            self._block = None
            out.append(block.text())
        return len(text)

    def _in_quiet(self, block: _Block, text: str, pos: int, out: list[Segment]) -> int:
        """Text of a quiet span goes out at once; the span ends after its end marker."""
        stop = self._find_end(block, text, pos)
        out.append(text[pos:stop])
        if stop is None:
            return len(text)
        self._block = None
        return stop

    def _check_head(self, block: _Block, text: str, pos: int, out: list[Segment]) -> int:
        """Decide from the body's first characters whether the block can be a call."""
        pos += block.head.take(text, pos)
        self._decide(block, out, final=False)
        return pos

    def _decide(self, block: _Block, out: list[Segment], *, final: bool) -> None:
        verdict, looked_at = block.head.verdict(block.marker.check, final=final)
        self.examined += looked_at
        if verdict is None:
            return
        body, block.head = block.head.text(), Head()
        if verdict == NO:
            self._block = None
            out.append(block.marker.start)
        else:
            block.verdict = verdict
            if block.marker.end is None:
                block.extent = JsonExtent()
                block.skip = verdict - 1  # the check stopped just past the opening bracket
        # As text after the marker, or through the end search as if it arrived just now.
        self.feed(body, out)

    def _find_end(self, block: _Block, text: str, pos: int) -> int | None:
        """Index in `text` just past the block's end, or None while it goes on."""
        end = block.marker.end
        if end is None:
            return self._json_end(block, text, pos)
        if block.tail:  # an end marker that began in the previous piece
            window = block.tail + text[pos : pos + len(end) - 1]
            self.examined += len(window)
            found = window.find(end)
            if found != -1:
                return pos + found + len(end) - len(block.tail)
        found = text.find(end, pos)
        if found != -1:
            self.examined += found + len(end) - pos
            return found + len(end)
        self.examined += len(text) - pos
        recent = text[max(pos, len(text) - len(end) + 1) :]
        if len(recent) < len(end) - 1:
            recent = block.tail + recent
        block.tail = self._partial_end(recent, end)
        return None

    def _partial_end(self, text: str, end: str) -> str:
        """The longest tail of `text` that an end marker may go on from (usually none)."""
        self.examined += len(text)
        for i in range(max(0, len(text) - len(end) + 1), len(text)):
            if text[i] == end[0] and end.startswith(text[i:]):
                return text[i:]
        return ""

    def _json_end(self, block: _Block, text: str, pos: int) -> int | None:
        assert block.extent is not None
        if block.skip:
            skipped = min(block.skip, len(text) - pos)
            block.skip -= skipped
            pos += skipped
            if block.skip:
                return None
        before = block.extent.examined
        stop = block.extent.feed(text, pos)
        self.examined += block.extent.examined - before
        return stop

    # -- complete blocks -------------------------------------------------------------------

    def _resolve(self, block: _Block, whole: str, out: list[Segment]) -> None:
        """A complete block: its calls, or (failing that) its text."""
        marker = block.marker
        self.examined += len(whole)
        body = whole[len(marker.start) :]
        if marker.end is not None and body.endswith(marker.end):
            body = body[: -len(marker.end)]
        calls = self._calls(marker, body)
        if calls is None:
            self._failed(block, whole, out)
            return
        if marker.keeps_start:
            out.append(marker.start)
        out.extend(calls)
        self.recovered += len(calls)

    def _calls(self, marker: Marker, body: str) -> list[RecoveredCall] | None:
        for fmt in marker.formats:
            try:
                parsed = fmt.parse(body)
            except NotACall:
                continue
            if parsed and all(name in self._offered for name, _, _ in parsed):
                return [
                    RecoveredCall(name, arguments_text(args), raw_id, fmt.name)
                    for name, args, raw_id in parsed
                ]
        return None

    def _failed(self, block: _Block, whole: str, out: list[Segment]) -> None:
        """Not a call: the marker is text, and the body is scanned again, once."""
        if block.rescan:
            out.append(whole)
            return
        out.append(block.marker.start)
        outer, self._rescanning = self._rescanning, True
        try:
            self.feed(whole[len(block.marker.start) :], out)
        finally:
            self._rescanning = outer
