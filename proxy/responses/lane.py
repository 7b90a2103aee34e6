"""Plain text deltas of one content part, taken from their bytes (SPEC §8: text passes
unchanged but for its numbers).

Nearly all of a long answer is `response.output_text.delta` events of one content part, each
the same JSON object but for its `delta`, its `sequence_number` and (OpenAI) its
`obfuscation`. Once the general path has parsed and written one such event, a `TextLane`
holds that event as the proxy's serializer writes it, cut around those three values (its
*pieces*), both as the upstream's bytes would spell it and as the client got it (another
`output_index` or `item_id` in a follow-up round or after a renamed item). An event whose
bytes are the upstream pieces around a plain text (valid UTF-8 without quotes, backslashes or
control characters: JSON writes it as it is), a JSON integer and plain strings is that object
with those values, so the general path would write the client's pieces around the same
values and the next sequence number, record the same text and feed the same scanner: the
lane does that without parsing (`take`; the tests hold it to the general path).
"""

from __future__ import annotations

import re
from typing import Any

from proxy.core.jsontext import dumps
from proxy.core.textcalls import TextCallScanner
from proxy.responses.carry import ResponseCarry
from proxy.responses.runs import COPY, HEAD, SEQ, TEXT, TextRun

TEXT_DELTA = "response.output_text.delta"
_HEAD = HEAD
_SEQ, _TEXT, _COPY = SEQ, TEXT, COPY
# The values that differ from one delta of a part to the next; every other value is fixed.
_HOLES = {"sequence_number": _SEQ, "delta": _TEXT, "obfuscation": _COPY}
# Each hole's value while the event is written once (`_split`): a string no upstream writes in
# an event (NULs), and the piece `dumps` makes of it between its quotes.
_MARKS = {key: f"\x00{kind}\x00" for key, kind in _HOLES.items()}
_MARKED = {key: dumps(mark)[1:-1] for key, mark in _MARKS.items()}
# What a JSON string's text may not hold as it is (a quote ends it, a backslash escapes).
_NOT_PLAIN = re.compile(rb'["\\\x00-\x1f]')
_MAX_DIGITS = 18  # any such integer parses as one (orjson reads past 64 bits as a float)


class TextLane:
    """The text deltas of one content part that the general path would pass unchanged.

    The event is held as its bytes split on quotes, with the holes' values emptied: a
    string's value is a piece of its own (a plain value holds no quote), the sequence
    number sits in the piece between its key's closing quote and the next key's opening
    one (`:5,`). A delta's bytes split the same way are that event with other values in the
    holes when, holes emptied, the two lists are equal: one comparison for the whole event.
    """

    __slots__ = (
        "_around",
        "_blank",
        "_client",
        "_client_holes",
        "_copies",
        "_count",
        "_holes",
        "_kinds",
        "_run",
        "_same",
        "_scanner",
        "_seq_at",
        "_seq_first",
        "_seq_forms",
        "_text_at",
        "_texts",
        "_whole",
    )

    def __init__(
        self,
        upstream: dict[str, Any],
        client: dict[str, Any],
        scanner: TextCallScanner | None,
        texts: tuple[list[str], ...],
    ) -> None:
        self._blank, holes, seq_tail = _split(upstream)
        self._client, self._client_holes, client_tail = _split(client)
        self._same = self._client == self._blank
        self._count = len(self._blank)
        kinds = [_HOLES[key] for key in upstream if key in _HOLES]
        self._holes = holes
        self._kinds = kinds
        self._run: TextRun | None = None  # built when a run is first asked for
        self._seq_at = holes[kinds.index(_SEQ)]
        self._text_at = holes[kinds.index(_TEXT)]
        self._copies = tuple(at for at, kind in zip(holes, kinds, strict=True) if kind == _COPY)
        # The sequence number's piece as the upstream and the client have it: `:%d` and what
        # follows the number up to the next quote.
        self._seq_forms = (b":%d" + seq_tail.replace(b"%", b"%%"), seq_tail, client_tail)
        # Without other values than the text and the number: the event's bytes before and
        # after its text when it is numbered as the client's next (`%d` where the number is).
        self._seq_first = self._seq_at < self._text_at
        self._around = None if self._copies else self._around_text()
        # The same around a whole event (its `event:` line and blank line too), for a read
        # that is one delta (`take_whole`); the client's bytes are the upstream's.
        self._whole = None
        if self._around is not None and self._same:
            before, after = self._around
            self._whole = (_HEAD + before, after + b"\n\n")
        # The part's scanner (None: text is not scanned) and every list its text goes into.
        self._scanner = scanner
        self._texts = texts

    @staticmethod
    def fits(upstream: dict[str, Any], client: dict[str, Any]) -> bool:
        """Can deltas like this one (as parsed, and as written) be taken from their bytes?"""
        seq, copy = upstream.get("sequence_number"), upstream.get("obfuscation", "")
        return (
            list(upstream) == list(client)
            and type(seq) is int
            and isinstance(upstream.get("delta"), str)
            and isinstance(copy, str)
            and client.get("type") == TEXT_DELTA
        )

    def take(self, data: bytes, carry: ResponseCarry, out: list[bytes]) -> bool:
        """Write the event whose data this is if it is one of this part's plain deltas;
        False (nothing done) when the general path must decide."""
        around = self._around
        if around is not None:
            # The usual delta: the event around its text, numbered as the client's next.
            before, after = around
            if self._seq_first:
                before %= carry.seq
            else:
                after %= carry.seq
            if data.startswith(before) and data.endswith(after):
                text = data[len(before) : len(data) - len(after)]
                return self._send(text, data, self._same, carry, out)
        parts = data.split(b'"')
        if len(parts) != self._count:
            return False
        text_at, seq_at = self._text_at, self._seq_at
        text, seq = parts[text_at], parts[seq_at]
        parts[text_at] = parts[seq_at] = b""
        if self._copies and not _copied(parts, self._copies):
            return False
        if parts != self._blank:
            return False
        number = self._seq_forms[0] % carry.seq
        if seq != number and not self._is_number(seq):
            return False
        return self._send(text, data, self._same and seq == number, carry, out)

    def take_whole(self, data: bytes, carry: ResponseCarry) -> bool:
        """Take the read `data` if it is one whole plain delta of this part numbered as the
        client's next, so that it goes out as it came: a paced model's read, nearly every
        delta of a real stream, for which `take_run`'s steps (the event found in the read,
        its data line cut out, the lane's checks, the pieces joined again) cost about as
        much again as the checks. False: nothing was done."""
        whole = self._whole
        if whole is None:
            return False
        before, after = whole
        if self._seq_first:
            before %= carry.seq
        else:
            after %= carry.seq
        # Bytes that begin and end so around a text with no quote, backslash or control
        # character are one event: the text holds no line break, so no blank line either.
        if not (data.startswith(before) and data.endswith(after)):
            return False
        text = self._plain_text(data[len(before) : len(data) - len(after)])
        if text is None:
            return False
        for texts in self._texts:
            texts.append(text)
        carry.seq += 1
        return True

    def take_run(self, data: bytes, pos: int, carry: ResponseCarry, out: list[bytes]) -> int:
        """Take the event at `pos` in a read (`data`, whose earlier events the reader has had
        in full) as `take` does, then the run of this part's deltas after it (runs.py): where
        the events taken end (`pos`: none was, the general path reads the event there)."""
        end = data.find(b"\n\n", pos)
        if end < 0 or not data.startswith(_HEAD, pos):
            return pos
        line = data[pos + len(_HEAD) : end]
        if line.find(b"\n") >= 0 or line.find(b"\r") >= 0 or not self.take(line, carry, out):
            return pos
        pos = end + 2
        if pos == len(data):
            # The read held this one event (a paced model's read, nearly every delta of a
            # real stream): no run follows, and looking for one cost more than the take.
            return pos
        run = self._run
        if run is None:
            run = self._run = self._text_run()
        found = run.read(data, pos, carry.seq)
        if found is None:
            return pos
        scanner = self._scanner
        if scanner is not None and not scanner.passes(found.text):
            return pos
        for texts in self._texts:
            texts.append(found.text)
        out.append(found.sent)
        carry.seq += found.count
        return pos + found.size

    def _text_run(self) -> TextRun:
        """This lane's event and the client's, cut at their holes, for runs of them."""
        tails = self._seq_forms
        upstream = _cut(self._blank, self._holes, self._kinds, tails[1])
        client = _cut(self._client, self._client_holes, self._kinds, tails[2])
        return TextRun(upstream, client, self._kinds, self._scanner is not None)

    def _send(
        self, raw: bytes, data: bytes, as_came: bool, carry: ResponseCarry, out: list[bytes]
    ) -> bool:
        """The delta of this text (its bytes between the quotes), if the text is plain and
        the scanner passes it whole, as the general path would write it."""
        text = self._plain_text(raw)
        if text is None:
            return False
        for texts in self._texts:
            texts.append(text)
        # The carry released the response's head with the event that opened the lane: a
        # delta goes out at once, as the general path's `emit` would send it.
        if as_came:
            out += (_HEAD, data, b"\n\n")
        else:
            out.append(_HEAD + self._client_bytes(data, carry.seq) + b"\n\n")
        carry.seq += 1
        return True

    def _plain_text(self, raw: bytes) -> str | None:
        """The text of a delta (its bytes between the quotes) if the lane may take it: not
        empty (the scanner's path drops an empty delta), written by JSON as it is, UTF-8, and
        passed whole by the part's scanner (which then has it)."""
        # `proxy.core.jsontext.plain_text`'s check, written out: on the paced hot path its
        # call cost 70K instructions a 200-delta stream (`bench.responses_core --paced`).
        if not raw or _NOT_PLAIN.search(raw) is not None:
            return None
        try:
            text = raw.decode()
        except UnicodeDecodeError:
            return None
        scanner = self._scanner
        if scanner is not None and not scanner.passes(text):
            return None
        return text

    def _around_text(self) -> tuple[bytes, bytes]:
        filled = [part.replace(b"%", b"%%") for part in self._blank]
        filled[self._seq_at] = self._seq_forms[0]
        at = self._text_at
        before = b'"'.join(filled[:at]) + b'"'
        after = b'"' + b'"'.join(filled[at + 1 :])
        return (before, after % ()) if self._seq_first else (before % (), after)

    def _is_number(self, piece: bytes) -> bool:
        """Is the sequence number's piece a JSON integer the parse reads as one?"""
        tail = self._seq_forms[1]
        digits = piece[1 : len(piece) - len(tail)]
        return (
            piece[:1] == b":"
            and piece.endswith(tail)
            and digits.isdigit()
            and len(digits) <= _MAX_DIGITS
            and (digits[:1] != b"0" or digits == b"0")
        )

    def _client_bytes(self, data: bytes, seq: int) -> bytes:
        """The client's event: its own pieces, these values, the client's number."""
        parts = data.split(b'"')
        filled = list(self._client)
        for at, client_at in zip(self._holes, self._client_holes, strict=True):
            filled[client_at] = parts[at]
        client_seq_at = self._client_holes[self._holes.index(self._seq_at)]
        filled[client_seq_at] = b":%d" % seq + self._seq_forms[2]
        return b'"'.join(filled)


def _split(event: dict[str, Any]) -> tuple[list[bytes], list[int], bytes]:
    """The event as `dumps` writes it, split on quotes with its holes' values emptied; where
    each hole's value is (in key order); and what follows the sequence number in its piece.

    Written once with a mark in each hole (a string no event holds: else it is written key
    by key, `_split_by_key`), then each mark's piece found: one `dumps` call, not one per key."""
    keys = [key for key in event if key in _HOLES]
    marked = dict(event)
    for key in keys:
        marked[key] = _MARKS[key]
    parts = dumps(marked).split(b'"')
    found = [parts.index(_MARKED[key]) for key in keys if parts.count(_MARKED[key]) == 1]
    if len(found) != len(keys):
        return _split_by_key(event)  # some value holds a mark: where the hole is is unclear
    holes: list[int] = []
    seq_tail, shift = b"", 0
    for key, at in zip(keys, found, strict=True):
        at -= shift
        if _HOLES[key] == _SEQ:
            # `:`, the mark, then what follows the number: one piece `:` + tail, emptied.
            seq_tail = parts[at + 1]
            parts[at - 1 : at + 2] = [b""]
            holes.append(at - 1)
            shift += 2
        else:  # the piece between its quotes
            parts[at] = b""
            holes.append(at)
    return parts, holes, seq_tail


def _split_by_key(event: dict[str, Any]) -> tuple[list[bytes], list[int], bytes]:
    """`_split`, written key by key with nothing in the holes (for an event whose values
    hold a mark)."""
    written = b"{"
    holes = []
    for n, (key, value) in enumerate(event.items()):
        written += (b"," if n else b"") + dumps(key) + b":"
        kind = _HOLES.get(key)
        if kind is None:
            written += dumps(value)
        elif kind == _SEQ:  # in the piece that begins after its key's closing quote
            holes.append(written.count(b'"'))
        else:  # the piece between its quotes
            holes.append(written.count(b'"') + 1)
            written += b'""'
    parts = (written + b"}").split(b'"')
    seq_tail = b""
    for at in holes:
        if parts[at][:1] == b":":  # the sequence number's piece: `:`, then what follows it
            seq_tail = parts[at][1:]
        parts[at] = b""
    return parts, holes, seq_tail


def _cut(parts: list[bytes], holes: list[int], kinds: list[int], seq_tail: bytes) -> list[bytes]:
    """An event's bytes cut at its holes: the fixed pieces around their values."""
    filled = list(parts)
    for at, kind in zip(holes, kinds, strict=True):
        filled[at] = b":\x00" + seq_tail if kind == _SEQ else b"\x00"
    return b'"'.join(filled).split(b"\x00")


def _copied(parts: list[bytes], copies: tuple[int, ...]) -> bool:
    """Are the copied values plain strings (then emptied, as the lane's own are)?"""
    for at in copies:
        if _plain(parts[at]) is None:
            return False
        parts[at] = b""
    return True


def _plain(value: bytes) -> str | None:
    """A string's bytes as its text, if JSON writes that text as these bytes."""
    if _NOT_PLAIN.search(value) is not None:
        return None
    try:
        return value.decode()
    except UnicodeDecodeError:
        return None
