"""Chat content deltas written as the client's text delta events from their bytes (SPEC §9:
a bridge's stream, without a parse per delta).

Nearly all of a long answer is Chat chunks that differ only in their `content`. Once a
bridge's general path has read one such chunk and written exactly one text delta event for
it, a `ChatTextLane` holds both as bytes cut around their text: the Chat event's `data:` line
before and after its content string, and the client's event before its text, and after it
(with, on Responses, the sequence number between two more pieces). A later Chat event whose
bytes are the same around a plain text (valid UTF-8 without quotes, backslashes or control
characters, so JSON writes it as it is and the object's shape cannot differ) is the same
chunk with another text: the general path would parse it, find the same block or part open,
keep the text and write the same event with that text (and the next number). The lane does
that from the bytes. The bridge checks that the general path wrote just that event and
resets the lane whenever its general path reads an event.
"""

from __future__ import annotations

from collections.abc import Callable

from proxy.core.jsontext import dumps, plain_text

_DATA = b"data: "
# Marks written once in the client's event where its text and number go: strings no event of
# a bridge holds but as the hole itself (its ids are minted from hex).
TEXT_MARK = "\ue000"
SEQ_MARK = "\ue001"


class ChatTextLane:
    """The content deltas like one the general path wrote as one text delta event."""

    __slots__ = ("_after", "_before", "_client", "_keep")

    def __init__(
        self, chat: tuple[bytes, bytes], client: list[bytes], keep: Callable[[str], None]
    ) -> None:
        self._before, self._after = chat  # the Chat event's line around its content's text
        self._client = client  # the client's event cut at its text (and its number)
        self._keep = keep  # what the general path does with the text besides writing it

    @classmethod
    def of(
        cls,
        data: bytes,
        text: str,
        written: tuple[bytes, bytes, int],
        keep: Callable[[str], None],
    ) -> ChatTextLane | None:
        """The lane of the Chat event's data `data`, whose content `text` the general path
        wrote as `written`: its bytes, the same event written with `TEXT_MARK` (and
        `SEQ_MARK`) in its holes, and its number (any, where it has none); None when the
        bytes do not say where the text is."""
        sent, marked, number = written
        raw = dumps(text)  # `"text"` as it would be written, if the upstream wrote it so
        needle = b'"content":' + raw
        at = data.find(needle)
        if at < 0 or data.find(needle, at + 1) >= 0 or b"\n" in data:
            return None
        client = _cut(marked)
        if client is None or plain_text(raw[1:-1]) != text:
            return None
        start = at + len(needle) - len(raw) + 1  # just inside the string's opening quote
        chat = (_DATA + data[:start], data[start + len(raw) - 2 :])
        lane = cls(chat, client, keep)
        if lane._written(raw[1:-1], number) != sent:
            return None  # the pieces do not give the general path's bytes
        return lane

    def take(self, line: bytes, number: int = 0) -> bytes | None:
        """The client's event for the Chat event `line` (its one `data:` line, without the
        blank line), numbered `number` where the event has a number, if it is this lane's
        chunk with a plain text, which it then keeps. None: the general path decides
        (nothing was done)."""
        before, after = self._before, self._after
        if not (line.startswith(before) and line.endswith(after)):
            return None
        raw = line[len(before) : len(line) - len(after)]
        text = plain_text(raw)
        if text is None:
            return None
        self._keep(text)
        return self._written(raw, number)

    def _written(self, raw: bytes, number: int) -> bytes:
        client = self._client
        if len(client) == 2:
            return client[0] + raw + client[1]
        return client[0] + raw + client[1] + b"%d" % number + client[2]


def _cut(marked: bytes) -> list[bytes] | None:
    """The client's event cut at its text (and its number), if each mark lands once."""
    pieces = marked.split(TEXT_MARK.encode())
    if len(pieces) != 2:
        return None
    number = dumps(SEQ_MARK)
    if marked.count(number) == 0:
        return pieces
    rest = pieces[1].split(number)
    return [pieces[0], *rest] if len(rest) == 2 else None
