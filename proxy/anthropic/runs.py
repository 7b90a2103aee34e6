"""Runs of plain text deltas read from their bytes, as one match, without parsing them.

A text block the scanner reads (SPEC §8) is streamed as many events of one shape:
`event: content_block_delta` and `{"type":"content_block_delta","index":N,"delta":{"type":
"text_delta","text":"..."}}`. When its client block is open at index N, such an event whose
text the scanner passes whole goes to the client as it came (`TextBlocks.as_came` and
`delta`). `TextRun` proves a whole run of them at once: one regular expression over the
read, written as that exact JSON, so an event matches only if it is that object with those
keys and a JSON string for a text. What the text may hold is narrower than JSON's string:
- no `<` or `[`: every markup start begins with one (`textcalls.markers.may_open`), so the
  scanner passes such text whatever it is cut into, and it can be asked about the run at once;
- escapes of two characters only (`\\n`, `\\"`, ...): none stands for `<` or `[`, and a run of
  them decodes as the concatenation of its texts (`\\u` escapes, which could, are left out);
- no control characters (JSON allows none), and no text that begins with a UTF-8
  continuation byte: with the whole run's text valid UTF-8, every event's text then is.
Anything else (another index, other keys, an event without its `event:` line, CRs) ends the
run, and the events from there on are parsed.
"""

from __future__ import annotations

import re
from functools import lru_cache
from itertools import repeat
from operator import itemgetter

import orjson

EVENT_HEAD = b"event: content_block_delta\ndata: "
LANE_HEAD = b'{"type":"content_block_delta","index":%d,"delta":{"type":"text_delta","text":"'
_INDEX_HEAD = b'{"type":"content_block_delta","index":%d,'
_END = b'"}}\n\n'
# A byte of a text that stands for itself, and one that may begin an event's text.
_PLAIN = rb'[^"\\\x00-\x1f<\[]'
_FIRST = rb'[^"\\\x00-\x1f<\[\x80-\xbf]'
_ESCAPE = rb'\\["\\/bfnrt]'
_TEXT = b"(?:" + _FIRST + b"|" + _ESCAPE + b")" + _PLAIN + b"*+(?:" + _ESCAPE + _PLAIN + b"*+)*+"
_TEXT_ONLY = re.compile(_TEXT)
# Texts joined by a newline, which no text may hold: all of them plain, in one match.
_TEXTS = re.compile(_TEXT + b"(?:\n" + _TEXT + b")*+")
# What an ASCII text without escapes may not hold (a quote, a backslash, controls, `<`, `[`).
_NOT_PLAIN = bytes(range(0x20)) + b'"\\<['
_FIRST_REGION = 512  # bytes of a read split at first
# Where a text delta event may be, when no lane is open (see `first_text_end`).
_TEXT_DELTA = b'"delta":{"type":"text_delta","text":"'


class TextRun:
    """The run of a lane's plain text deltas at the start of a read, at one client index.

    Found without a pass over every byte in Python or in a regular expression: a region of
    the read is split where events end (`"}}` and the blank line: no text holds a raw
    newline, so that ends nothing else); the pieces must each be the lane's whole event head
    and one text (shown at once by rebuilding them from their texts and comparing), and the
    texts plain (shown for ASCII text without escapes by deleting the bytes a plain text may
    not hold, else by a regular expression over the texts alone). The region doubles while
    every event in it is plain, so a run that ends early costs what that run costs.
    """

    __slots__ = ("_head", "_next", "_text_of")

    def __init__(self, index: int) -> None:
        head = EVENT_HEAD + LANE_HEAD % index
        self._head = head
        self._text_of = itemgetter(slice(len(head), None))  # an event's text, from its piece
        # Where a run may begin after an event: a delta at this index. Shorter than the head:
        # CPython searches a needle of 100 bytes or more with a two-way search it prepares
        # at every call.
        self._next = b"\n\n" + (EVENT_HEAD + _INDEX_HEAD % index)

    def match(self, data: bytes, start: int) -> tuple[int, str] | None:
        """Where the run that begins at `start` in `data` ends, and its events' text joined;
        None if no run begins there."""
        if not data.startswith(self._head, start):
            return None
        # The first event alone first: a run that ends at once costs no region's split.
        first = data.find(_END, start)
        if first < 0 or _TEXT_ONLY.fullmatch(data, start + len(self._head), first) is None:
            return None
        texts: list[bytes] = []
        at, size = start, _FIRST_REGION
        while at + size < len(data):
            pieces = data[at : at + size].split(_END)
            pieces.pop()  # after the region's last event end: part of an event, or nothing
            plain = self._plain(pieces)
            texts += plain
            if len(plain) < len(pieces):
                return _decoded(texts, len(self._head), start)  # the run ended
            at += len(pieces) * len(_END) + sum(map(len, pieces))
            size *= 2
        pieces = data[at:].split(_END)  # the rest of the read: its last piece is no event
        pieces.pop()
        texts += self._plain(pieces)
        return _decoded(texts, len(self._head), start)

    def _plain(self, pieces: list[bytes]) -> list[bytes]:
        """The texts of the events (pieces before an end) that begin the run."""
        head = self._head
        texts = list(map(self._text_of, pieces))
        if b"".join(pieces) != head + head.join(texts):  # not each piece a head and a text
            heads = list(map(bytes.startswith, pieces, repeat(head, len(pieces))))
            if False in heads:
                del texts[heads.index(False) :]
        body = b"".join(texts)
        if (
            body.isascii()
            and b"" not in texts
            and len(body.translate(None, _NOT_PLAIN)) == len(body)
        ):
            return texts
        if texts and _TEXTS.fullmatch(b"\n".join(texts)) is not None:
            return texts
        good = list(map(_TEXT_ONLY.fullmatch, texts))
        return texts[: good.index(None)] if None in good else texts

    def next_start(self, data: bytes, at: int, skip: int) -> int:
        """Where the `skip`-th next event from `at` on that may begin a run begins (after the
        blank line before it), or the end of `data`."""
        for _ in range(skip):
            found = data.find(self._next, at)
            if found < 0:
                return len(data)
            at = found + 2
        return at


def first_text_end(data: bytes, at: int) -> int:
    """Where the first event from `at` on that looks like a text delta ends in `data` (its
    blank line included), or the end of `data`: after it a lane may be open."""
    found = data.find(_TEXT_DELTA, at)
    end = data.find(b"\n\n", found) if found >= 0 else -1
    return end + 2 if end >= 0 else len(data)


def _decoded(texts: list[bytes], head: int, start: int) -> tuple[int, str] | None:
    """The end of the run of these texts' events from `start` (each `head` bytes, its text
    and the end) and their text decoded; only the events before the first text that is not
    UTF-8 (none: None)."""
    if not texts:
        return None
    body = b"".join(texts)
    try:
        text = body.decode() if body.find(b"\\") < 0 else orjson.loads(b'"' + body + b'"')
    except ValueError:  # not UTF-8 (orjson's error is a ValueError too)
        valid = _utf8_count(texts)
        if valid == len(texts):
            return None  # not for want of UTF-8: the events are parsed instead
        return _decoded(texts[:valid], head, start) if valid else None
    return start + len(body) + len(texts) * (head + len(_END)), text


def _utf8_count(texts: list[bytes]) -> int:
    """How many texts come before the first that is not UTF-8 (rare: a loop is fine)."""
    for count, text in enumerate(texts):
        try:
            text.decode()
        except UnicodeDecodeError:
            return count
    return len(texts)


@lru_cache(maxsize=64)
def run_at(index: int) -> TextRun:
    """The run at a client index (one compiled expression per index, shared by streams)."""
    return TextRun(index)
