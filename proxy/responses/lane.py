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

from proxy.core.textcalls import TextCallScanner
from proxy.jsontext import dumps
from proxy.responses.carry import ResponseCarry

TEXT_DELTA = "response.output_text.delta"
_HEAD = b"event: response.output_text.delta\ndata: "
_SEQ, _TEXT, _COPY = range(3)
# The values that differ from one delta of a part to the next; every other value is fixed.
_HOLES = {"sequence_number": _SEQ, "delta": _TEXT, "obfuscation": _COPY}
# What a JSON string's text may not hold as it is (a quote ends it, a backslash escapes).
_NOT_PLAIN = re.compile(rb'["\\\x00-\x1f]')
_MAX_DIGITS = 18  # any such integer parses as one (orjson reads past 64 bits as a float)


class TextLane:
    """The text deltas of one content part that the general path would pass unchanged."""

    __slots__ = (
        "_client",
        "_copies",
        "_pieces",
        "_same",
        "_scanner",
        "_seq_at",
        "_text_at",
        "_texts",
    )

    def __init__(
        self,
        upstream: dict[str, Any],
        client: dict[str, Any],
        scanner: TextCallScanner | None,
        texts: tuple[list[str], ...],
    ) -> None:
        kinds = [_HOLES[key] for key in upstream if key in _HOLES]
        self._pieces = _pieces(upstream)
        self._client = _pieces(client)
        self._same = self._client == self._pieces
        self._seq_at = kinds.index(_SEQ)
        self._text_at = kinds.index(_TEXT)
        self._copies = tuple(n for n, kind in enumerate(kinds) if kind == _COPY)
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
        # The carry released the response's head with the event that opened the lane: a
        # delta goes out at once, as the general path's `emit` would send it.
        values = self._values(data)
        if values is None:
            return False
        seq = values[self._seq_at]
        if not seq.isdigit() or len(seq) > _MAX_DIGITS or (seq[0] == 48 and len(seq) > 1):
            return False  # not a JSON integer (48: a leading zero)
        for at in self._copies:
            if _plain(values[at]) is None:
                return False
        text = _plain(values[self._text_at])
        if not text:
            return False  # an empty delta: the scanner's path drops it
        scanner = self._scanner
        if scanner is not None and not scanner.passes(text):
            return False
        for texts in self._texts:
            texts.append(text)
        number = b"%d" % carry.seq
        carry.seq += 1
        if self._same and seq == number:
            out += (_HEAD, data, b"\n\n")
            return True
        values[self._seq_at] = number
        client = self._client
        parts = [_HEAD, client[0]]
        for value, piece in zip(values, client[1:], strict=True):
            parts += (value, piece)
        parts.append(b"\n\n")
        out.append(b"".join(parts))
        return True

    def _values(self, data: bytes) -> list[bytes] | None:
        """The bytes between the pieces, if `data` is the pieces around them."""
        pieces = self._pieces
        if not data.startswith(pieces[0]):
            return None
        values = []
        at = len(pieces[0])
        for piece in pieces[1:]:
            # A string's value ends at its closing quote, an integer's at the `,` or `}`
            # after it: what follows is the next piece, which begins with that byte.
            end = data.find(piece[:1], at)
            if end < 0 or not data.startswith(piece, end):
                return None
            values.append(data[at:end])
            at = end + len(piece)
        return values if at == len(data) else None


def _pieces(event: dict[str, Any]) -> list[bytes]:
    """The event as `dumps` writes it, cut out around its holes' values (a string's quotes
    stay with the pieces)."""
    pieces = []
    written = b"{"
    for n, (key, value) in enumerate(event.items()):
        written += (b"," if n else b"") + dumps(key) + b":"
        kind = _HOLES.get(key)
        if kind is None:
            written += dumps(value)
            continue
        quote = b"" if kind == _SEQ else b'"'
        pieces.append(written + quote)
        written = quote
    pieces.append(written + b"}")
    return pieces


def _plain(value: bytes) -> str | None:
    """A string's bytes as its text, if JSON writes that text as these bytes."""
    if _NOT_PLAIN.search(value) is not None:
        return None
    try:
        return value.decode()
    except UnicodeDecodeError:
        return None
