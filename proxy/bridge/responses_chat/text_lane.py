"""Chat content deltas turned into `response.output_text.delta` events from their bytes
(SPEC §9: the bridge's stream, without a parse per delta).

Nearly all of a long answer is Chat chunks that differ only in their `content`. Once the
general path (stream.py) has read one such chunk and written exactly one text delta for it,
a `ChatTextLane` holds both as bytes cut around their text: the Chat event's `data:` line
before and after its content string, and the client's event before its `delta` string,
between it and the sequence number, and after that. A later Chat event whose bytes are the
same around a plain text (valid UTF-8 without quotes, backslashes or control characters, so
JSON writes it as it is and the object's shape cannot differ) is the same chunk with another
text: the general path would parse it, find the same message part open, append the text and
write the same event with that text and the next number. The lane does that from the bytes.
"""

from __future__ import annotations

import re
from typing import Any

from proxy.core.jsontext import dumps
from proxy.responses.carry import encode

TEXT_DELTA = "response.output_text.delta"
_DATA = b"data: "
# Marks written once in the client's template where the text and the number go: strings no
# event of the bridge holds (its ids are minted from hex, its text is the hole itself).
_TEXT_MARK = "\ue000"
_SEQ_MARK = "\ue001"
# What a JSON string's text may not hold as it is (a quote ends it, a backslash escapes).
_NOT_PLAIN = re.compile(rb'["\\\x00-\x1f]')


class ChatTextLane:
    """The content deltas like one the general path wrote as one text delta event."""

    __slots__ = ("_after", "_before", "_client", "_part")

    def __init__(
        self, chat: tuple[bytes, bytes], client: tuple[bytes, bytes, bytes], part: list[str]
    ) -> None:
        self._before, self._after = chat  # the Chat event's line around its content's text
        self._client = client  # the client's event: before its text, to its number, after
        self._part = part  # the message part's [kind, text so far], which the text joins

    @classmethod
    def of(
        cls, data: bytes, text: str, event: dict[str, Any], part: list[str]
    ) -> ChatTextLane | None:
        """The lane of the Chat event's data `data`, whose content `text` the general path
        wrote as `event` (numbered, not yet sent) and appended to `part`; None when the
        bytes do not say where the text is."""
        raw = dumps(text)  # `"text"` as it would be written, if the upstream wrote it so
        needle = b'"content":' + raw
        at = data.find(needle)
        if at < 0 or data.find(needle, at + 1) >= 0 or b"\n" in data:
            return None
        start = at + len(needle) - len(raw) + 1  # just inside the string's opening quote
        chat = (_DATA + data[:start], data[start + len(raw) - 2 :])
        client = _client_template(event)
        if client is None or _plain(raw[1:-1]) != text:
            return None
        lane = cls(chat, client, part)
        if lane._written(raw[1:-1], event["sequence_number"]) != encode(event):
            return None  # the template does not give the general path's bytes
        return lane

    def take(self, line: bytes, seq: int) -> bytes | None:
        """The client's event for the Chat event `line` (its one `data:` line, without the
        blank line), numbered `seq`, if it is this lane's chunk with a plain text; its text
        is then the part's. None: the general path decides (nothing was done)."""
        before, after = self._before, self._after
        if not (line.startswith(before) and line.endswith(after)):
            return None
        raw = line[len(before) : len(line) - len(after)]
        text = _plain(raw)
        if text is None:
            return None
        self._part[1] += text
        return self._written(raw, seq)

    def _written(self, raw: bytes, seq: int) -> bytes:
        before, middle, after = self._client
        return before + raw + middle + b"%d" % seq + after


def _client_template(event: dict[str, Any]) -> tuple[bytes, bytes, bytes] | None:
    """The client's event cut at its text and its number, if each mark lands once."""
    written = encode({**event, "delta": _TEXT_MARK, "sequence_number": _SEQ_MARK})
    pieces = written.split(_TEXT_MARK.encode())
    if len(pieces) != 2:
        return None
    rest = pieces[1].split(dumps(_SEQ_MARK))
    if len(rest) != 2:
        return None
    return pieces[0], rest[0], rest[1]


def _plain(raw: bytes) -> str | None:
    """The text of a JSON string's bytes if JSON writes that text as these bytes (not
    empty: an empty content makes no event)."""
    if not raw or _NOT_PLAIN.search(raw) is not None:
        return None
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return None
