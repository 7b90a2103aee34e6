"""A text lane's deltas read from a read in runs, not one by one (SPEC §8: text passes
unchanged but for its numbers).

A `TextLane` holds one content part's delta as the proxy writes it, with holes where its
text, sequence number and copied values (OpenAI's `obfuscation`) go. Its *template* is that
event with its framing (`event:` line, `data:` line, blank line), cut at the holes into
fixed pieces. A run is the events that follow one another in a read, each of which is the
template with values in its holes; `TextRun.read` finds it without a Python step per event:

- its extent: the read's whole events from there (split at their blank lines) up to the
  first whose head (framing and first fixed piece) is not the template's;
- its values: each event's bytes between its first and last fixed pieces, joined by NULs,
  every fixed piece between two holes replaced by a NUL too (no value may hold one: JSON
  writes no raw control character), then one split;
- the proof: the template's pieces put back around those values give the run's bytes again,
  byte for byte, so each event is the template with those values and nothing else;
- the values' checks, per kind, on all of them joined by NULs (one regular expression each,
  and one UTF-8 decoding: a value between two ASCII bytes that is not UTF-8 fails it): a text
  is a non-empty JSON string body of characters JSON writes as they are or of the short
  escapes `orjson` writes itself (`\\n`, `\\"`, ...), without `<` or `[` when the scanner
  reads it (every markup start begins with one: it then passes any cut of it); a sequence
  number is a JSON integer the parse reads as one; a copied value a plain string.

The events before the first one whose values fail are the run; the general path parses the
rest. Such an event is what the lane's `take` would take one by one, and the general path's
parse and dump would write again as the same bytes but for the client's numbers and pieces:
the run goes out as it came, or rebuilt on the client's template with the client's numbers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import accumulate
from operator import add, itemgetter

import orjson

HEAD = b"event: response.output_text.delta\ndata: "
_NUL = b"\x00"
_BLANK = b"\n\n"
TEXT, SEQ, COPY = range(3)  # the kinds of holes


def _strings(plain: bytes) -> re.Pattern[bytes]:
    """JSON string bodies joined by NULs: `plain` characters (NUL among them) and the short
    escapes orjson writes itself, written so that plain characters are one fast repeat."""
    escape = rb'\\["\\bfnrt]'
    return re.compile(plain + b"*(?:" + escape + plain + b"*)*")


_TEXTS = _strings(rb'[^"\\\x01-\x1f]')
_SCANNED_TEXTS = _strings(rb'[^"\\\x01-\x1f<\[]')  # every markup start begins with one
_COPIES = re.compile(rb'[^"\\\x01-\x1f]*')
# What an ASCII text the run takes without its pattern holds none of (a NUL neither).
_NOT_PLAIN_ASCII = bytes(range(0x20)) + b'"\\'
# Where numbers joined by NULs stop being JSON integers the parse reads as ints (orjson reads
# one past 64 bits as a float): a byte not a digit, a leading zero, a 19th digit, no digit.
_NOT_NUMBER = re.compile(rb"[^0-9\x00]|(?<![^\x00])0[0-9]|[0-9]{19}|(?<![^\x00])(?![^\x00])")
_EVENT_LINE = HEAD[: HEAD.index(b"\n")]
_DATA = HEAD[len(_EVENT_LINE) + 1 :]  # `data: `
_NEXT = _BLANK + _EVENT_LINE + b"\n"  # between two text deltas' data lines


@dataclass(slots=True)
class Run:
    """Events a run took: how many, where they end (from the read's position), their text
    joined, and the client's bytes for them."""

    count: int
    size: int
    text: str
    sent: bytes


class TextRun:
    """The runs of one lane, over its upstream template and the client's."""

    __slots__ = ("_client", "_fast", "_inner", "_kinds", "_same", "_texts", "_upstream")

    def __init__(
        self, upstream: list[bytes], client: list[bytes], kinds: list[int], scanned: bool
    ) -> None:
        """`upstream` and `client`: an event's data cut at its holes (the fixed pieces),
        `kinds`: each hole's kind, `scanned`: the text goes through the markup scanner."""
        self._kinds = kinds
        self._upstream = _template(upstream)
        self._client = _template(client)
        first, last = self._upstream[0], self._upstream[2]
        self._inner = itemgetter(slice(len(first), -len(last) or None))  # a data line's holes
        self._same = client == upstream
        self._texts = _SCANNED_TEXTS if scanned else _TEXTS
        # A text, then a number, and nothing else in the holes: the usual delta.
        self._fast = (
            TextThenNumber(upstream, client, self._same, self._texts, scanned)
            if kinds == [TEXT, SEQ]
            else None
        )

    def read(self, data: bytes, pos: int, seq: int) -> Run | None:
        """The run of events at `pos` (the first numbered `seq` for the client), if any."""
        fast = self._fast
        if fast is not None:
            found = fast.read(data, pos, seq)
            if found is not _UNDECIDED:
                return found if isinstance(found, Run) else None
        end = data.rfind(_BLANK, pos)
        if end < 0:
            return None
        # Each event three lines (`event:`, `data:`, blank) while the run lasts; the last
        # event's blank line is cut off with the read's tail.
        lines = data[pos:end].split(b"\n")
        datas = lines[1 : 3 * _aligned(lines) : 3]
        values = self._values(datas) if datas else None
        if values is None:
            return None
        # The proof: the template around these values is the events' bytes.
        sent = _EVENT_LINE + b"\n" + _interleaved(self._upstream, values) + _BLANK
        if not data.startswith(sent, pos):
            return None
        step = len(self._kinds)
        count = len(datas)
        numbers = _numbers(seq, count)
        good = self._good(values, count, numbers)
        if good == 0:
            return None
        if good < count:
            values = values[: good * step]
            sent = sent[: good * (len(_EVENT_LINE) + 3) + sum(map(len, datas[:good]))]
        body = b"".join(values[self._kinds.index(TEXT) :: step])
        text = body.decode() if body.find(b"\\") < 0 else orjson.loads(b'"' + body + b'"')
        at = self._kinds.index(SEQ)
        if self._same and values[at::step] == numbers[:good]:
            return Run(good, len(sent), text, sent)
        size = len(sent)
        values[at::step] = numbers[:good]
        sent = _EVENT_LINE + b"\n" + _interleaved(self._client, values) + _BLANK
        return Run(good, size, text, sent)

    def _values(self, datas: list[bytes]) -> list[bytes] | None:
        """The holes' values of data lines, in order, if they split as the template's: each
        line's bytes between its first and last fixed pieces, joined by the piece after the
        first hole, every other piece between two holes replaced by that one, then split."""
        between = self._upstream[1]
        body = between[1].join(map(self._inner, datas))
        for piece in between[2:]:
            body = body.replace(piece, between[1])
        values = body.split(between[1])
        return values if len(values) == len(datas) * len(self._kinds) else None

    def _good(self, values: list[bytes], count: int, numbers: list[bytes]) -> int:
        """How many events, from the first, have values the lane would take."""
        good = count
        step = len(self._kinds)
        for at, kind in enumerate(self._kinds):
            of_kind = values[at::step]
            if kind == SEQ:
                if of_kind != numbers:
                    good = min(good, _before_bad_number(of_kind))
            elif kind == TEXT:
                empty = of_kind.index(b"") if b"" in of_kind else count
                good = min(good, empty, _strings_before(of_kind, self._texts))
            else:
                good = min(good, _strings_before(of_kind, _COPIES))
        return good


class _Undecided:
    """The fast reader cannot tell: the general one reads the events."""


_UNDECIDED = _Undecided()
# A run is read from this many bytes at most: CPython's `split` looks for a needle of 6 bytes
# or more in 30,000 bytes or more with a search it prepares anew at every occurrence.
_REGION = 28 * 1024


class TextThenNumber:
    """Runs of deltas whose holes are a text and then a number (no copied value), read
    with one split and no step per event in Python.

    Split at the piece between the two holes, a read from a run's first event gives the
    first event's head and text, then for each event its number, the bound (the last piece,
    the blank line and the next event's head) and the next event's text. Upstreams number
    their events one by one: from the first event's number, each next one is known, so each
    text is where its part's number and bound end. The proof: the template around those
    texts and numbers is the read's bytes, byte for byte (for as many events from the first
    as it is, found by halving); then each event is the template with those values."""

    __slots__ = ("_bound", "_client", "_lead", "_middle", "_plain", "_same", "_tail", "_texts")

    def __init__(
        self,
        upstream: list[bytes],
        client: list[bytes],
        same: bool,
        texts: re.Pattern[bytes],
        scanned: bool,
    ) -> None:
        first, middle, last = upstream
        self._lead = HEAD + first  # an event up to its text
        self._middle = middle  # from its text to its number
        self._tail = last + _BLANK  # from its number to its end
        self._bound = self._tail + self._lead  # from a number to the next event's text
        self._client = [HEAD + client[0], client[1], client[2] + _BLANK]
        self._same = same
        self._texts = texts
        self._plain = _NOT_PLAIN_ASCII + (b"<[" if scanned else b"")

    def read(self, data: bytes, pos: int, seq: int) -> Run | _Undecided | None:
        """The run at `pos` (its first event numbered `seq` for the client); None: none
        begins there; `_UNDECIDED`: the events are not in this reader's shape."""
        lead = self._lead
        end = data.rfind(_BLANK, pos, pos + _REGION)
        if end < 0 or not data.startswith(lead, pos):
            return _UNDECIDED
        parts = data[pos : end + 2].split(self._middle)
        count = len(parts) - 1
        number = parts[1][: parts[1].find(self._tail)] if count else b""
        if not _is_number(number):
            return _UNDECIDED
        numbers = _numbers(int(number), count)
        texts = self._texts_of(parts, numbers)
        count, sent = self._proven(data, pos, texts, numbers)
        if not count:
            return _UNDECIDED
        good = min(count, self._plain_texts(texts[:count]))
        if not good:
            return None
        del texts[good:], numbers[good:]
        body = b"".join(texts)
        text = body.decode() if body.find(b"\\") < 0 else orjson.loads(b'"' + body + b'"')
        size = len(body) + sum(map(len, numbers)) + good * self._fixed()
        if self._same and numbers[0] == b"%d" % seq:  # the proof's bytes are the read's
            return Run(good, size, text, sent if len(sent) == size else sent[:size])
        return Run(good, size, text, _events(self._client, texts, _numbers(seq, good)))

    def _texts_of(self, parts: list[bytes], numbers: list[bytes]) -> list[bytes]:
        """Each event's text, if the parts are as the template says (else some bytes)."""
        texts = [parts[0][len(self._lead) :]]
        after = len(self._bound)
        # The parts after numbers of one length (10 to 99, ...) at once: one slice for all.
        at, end = 1, len(parts) - 1
        while at < end:
            size = len(numbers[at - 1])
            stop = min(end, at + 10**size - int(numbers[at - 1]))
            texts += map(itemgetter(slice(size + after, None)), parts[at:stop])
            at = stop
        return texts

    def _proven(
        self, data: bytes, pos: int, texts: list[bytes], numbers: list[bytes]
    ) -> tuple[int, bytes]:
        """How many events from the first the template around these values is, byte for
        byte (all of them, or as many as halving finds), and their bytes.

        Built once: the first k events' bytes are a prefix of all of them (each event's
        bytes are its own values in the template), so halving compares prefixes of one
        build, where a build per step cost more than the whole read (a run's last read
        ends in other events, and every stream has one)."""
        count = len(texts)
        sent = _events([self._lead, self._middle, self._tail], texts, numbers)
        if data.startswith(sent, pos):
            return count, sent
        fixed = self._fixed()
        # Where each event ends in `sent`, less the fixed pieces of those before it.
        ends = list(accumulate(map(add, map(len, texts), map(len, numbers))))
        whole = memoryview(sent)  # prefixes compared without a copy
        low, high = 0, count  # `low` events are proven, `high` are not
        while high - low > 1:
            middle = (low + high) // 2
            if data.startswith(whole[: middle * fixed + ends[middle - 1]], pos):
                low = middle
            else:
                high = middle
        return low, sent[: low * fixed + ends[low - 1]] if low else b""

    def _plain_texts(self, texts: list[bytes]) -> int:
        """How many texts, from the first, are non-empty string bodies the lane takes: at
        once when all are ASCII without a byte to look at (an escape, a control character,
        a markup start), else by the pattern."""
        good = texts.index(b"") if b"" in texts else len(texts)
        body = b"".join(texts)
        if body.isascii() and len(body.translate(None, self._plain)) == len(body):
            return good
        return min(good, _strings_before(texts, self._texts))

    def _fixed(self) -> int:
        return len(self._lead) + len(self._middle) + len(self._tail)


def _events(pieces: list[bytes], texts: list[bytes], numbers: list[bytes]) -> bytes:
    """Events of these texts and numbers: each the lead, a text, the middle, a number and
    the tail (`pieces`)."""
    lead, middle, tail = pieces
    joined = [middle] * (4 * len(texts))
    joined[0::4] = [lead] * len(texts)
    joined[1::4] = texts
    joined[3::4] = numbers
    joined.append(tail)
    joined[4::4] = [tail + lead] * (len(texts) - 1) + [tail]
    return b"".join(joined)


def _is_number(digits: bytes) -> bool:
    """Is this a JSON integer the parse reads as an int (not past 64 bits)?"""
    return (
        digits.isdigit()
        and len(digits) <= 18
        and digits.isascii()
        and (digits[:1] != b"0" or digits == b"0")
    )


# The client's sequence numbers as written, from 0: most streams number fewer events than
# this, whose numbers are then sliced from here instead of written for every run.
_WRITTEN_NUMBERS = 1 << 16
_written: list[bytes] = []


def _numbers(start: int, count: int) -> list[bytes]:
    """`start`, `start + 1`, ... (`count` of them) as JSON writes them."""
    stop = start + count
    if stop > len(_written) and stop <= _WRITTEN_NUMBERS:
        _written.extend(_decimal(len(_written), max(stop, 2 * len(_written), 1024)))
    if stop <= len(_written):
        return _written[start:stop]
    return _decimal(start, stop)


def _decimal(start: int, stop: int) -> list[bytes]:
    return "\x00".join(map(str, range(start, stop))).encode().split(_NUL)


def _template(pieces: list[bytes]) -> tuple[bytes, list[bytes], bytes]:
    """An event's data line (`data: ` included) as its first fixed piece, the pieces from one
    value to the next (between its holes, and from its last hole over the blank line and the
    next event's `event:` line to that event's first hole), and its last piece."""
    first, last = _DATA + pieces[0], pieces[-1]
    return first, [last + _NEXT + first, *pieces[1:-1]], last


def _aligned(lines: list[bytes]) -> int:
    """How many events, from the first, are a text delta's `event:` line, one more line and
    a blank line (the last one's blank line cut off)."""
    heads, blanks = lines[0::3], lines[2::3]
    count = len(heads)
    if heads.count(_EVENT_LINE) != count:
        count = list(map(_EVENT_LINE.__eq__, heads)).index(False)
    if blanks.count(b"") != len(blanks):
        count = min(count, list(map(b"".__eq__, blanks)).index(False))
    return count


def _interleaved(template: tuple[bytes, list[bytes], bytes], values: list[bytes]) -> bytes:
    """The template's first piece, the values with the pieces between them, its last piece."""
    first, between, last = template
    pieces = between * (len(values) // len(between))
    pieces[0] = first
    joined: list[bytes] = [b""] * (2 * len(values))
    joined[0::2] = pieces
    joined[1::2] = values
    return b"".join(joined) + last


def _strings_before(values: list[bytes], pattern: re.Pattern[bytes]) -> int:
    """How many of `values`, from the first, are string bodies `pattern` takes and UTF-8
    (each between NULs: a value that is not UTF-8 fails the decoding of them all there)."""
    joined, whole = _joined(values)
    found = pattern.match(joined)  # never None: the pattern takes an empty string
    stop = found.end() if found is not None else 0
    good = len(values)
    if stop < len(joined):  # in the value that holds `stop`
        good = joined.count(_NUL, 0, stop)
        joined = joined[:stop]
    try:
        joined.decode()
    except UnicodeDecodeError as exc:
        return min(whole, joined.count(_NUL, 0, exc.start))
    return min(whole, good)


def _before_bad_number(values: list[bytes]) -> int:
    """How many of `values`, from the first, are JSON integers the parse reads as ints."""
    joined, whole = _joined(values)
    found = _NOT_NUMBER.search(joined)
    return min(whole, len(values) if found is None else joined.count(_NUL, 0, found.start()))


def _joined(values: list[bytes]) -> tuple[bytes, int]:
    """The values joined by NULs, and how many from the first hold no NUL of their own (not
    JSON: where one does, the joined values would not say which is which)."""
    joined = _NUL.join(values)
    if joined.count(_NUL) == len(values) - 1:
        return joined, len(values)
    return joined, next(at for at, value in enumerate(values) if _NUL in value)
