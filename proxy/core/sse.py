"""Sans-IO server-sent-events framing: upstream bytes in, events out, and events back to bytes.

Rules (SPEC §4, "framing"): lines end in `\\n`, `\\r\\n` or `\\r`; an event ends at a blank
line; `data:` may or may not be followed by a space; reads may split anything anywhere,
including a CRLF pair or a UTF-8 character (we only ever split on ASCII bytes, so characters
survive). Comments and `event:`/`id:`/`retry:` lines are kept so they can be forwarded.

No JSON is parsed here: the chat core decides which events need looking into.
"""

from __future__ import annotations

from dataclasses import dataclass

# One SSE event is one JSON chunk; the largest legitimate ones carry a whole tool call's
# arguments or a long content flush. 64 MiB is far above that and still bounds the memory a
# broken upstream (no blank line ever) can make us hold.
MAX_EVENT_BYTES = 64 * 1024 * 1024


class SSEFramingError(Exception):
    """The upstream sent an event larger than MAX_EVENT_BYTES."""


# Value objects: read-only by convention and hashed by value (unsafe_hash), not frozen: a
# frozen dataclass's __init__ sets each field through object.__setattr__, about twice the
# cost of building one, and these are built per call, per note or per event.
@dataclass(slots=True, unsafe_hash=True)
class SSEEvent:
    """One event: its data (data lines joined by `\\n`, or None) and its other raw lines."""

    data: bytes | None
    other: tuple[bytes, ...] = ()

    @property
    def is_done(self) -> bool:
        return self.data is not None and self.data.strip() == b"[DONE]"


class SSEDecoder:
    """Feed it bytes as they arrive; it returns the events completed so far."""

    __slots__ = ("_buffer", "_data", "_other", "_pending_cr", "_size")

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._data: list[bytes] = []
        self._other: list[bytes] = []
        self._pending_cr = False
        self._size = 0

    @property
    def idle(self) -> bool:
        """Nothing is buffered: the next read starts on an event boundary."""
        return not (self._buffer or self._data or self._other or self._pending_cr)

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        if not chunk:
            return []
        if self._pending_cr and chunk[:1] == b"\n":
            # The `\r` that ended the previous read and this `\n` are one CRLF line end.
            chunk = chunk[1:]
        self._pending_cr = chunk[-1:] == b"\r"
        if chunk.find(b"\r") >= 0:  # find(): `bytes in bytes` formats a TypeError first
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        buffer = self._buffer
        buffer += chunk
        if chunk.find(b"\n") < 0:
            self._check_size()
            return []
        lines = buffer.split(b"\n")
        # The last piece has no line end yet: keep it for the next read.
        self._buffer = bytearray(lines.pop())
        events: list[SSEEvent] = []
        for line in lines:
            self._take_line(bytes(line), events)
        self._check_size()
        return events

    def end(self) -> list[SSEEvent]:
        """The body ended: a last event without its blank line still counts."""
        events: list[SSEEvent] = []
        if self._buffer:
            self._take_line(bytes(self._buffer), events)
            self._buffer = bytearray()
        self._dispatch(events)
        return events

    def _take_line(self, line: bytes, events: list[SSEEvent]) -> None:
        if not line:
            self._dispatch(events)
            return
        if line[:5] == b"data:":
            value = line[5:]
            self._data.append(value[1:] if value[:1] == b" " else value)
        else:
            self._other.append(line)
        self._size += len(line)

    def _dispatch(self, events: list[SSEEvent]) -> None:
        if self._data:
            data = self._data[0] if len(self._data) == 1 else b"\n".join(self._data)
            events.append(SSEEvent(data, tuple(self._other)))
        elif self._other:
            events.append(SSEEvent(None, tuple(self._other)))
        self._data = []
        self._other = []
        self._size = 0

    def _check_size(self) -> None:
        if self._size + len(self._buffer) > MAX_EVENT_BYTES:
            raise SSEFramingError(f"an upstream event exceeded {MAX_EVENT_BYTES} bytes")


def encode_event(data: bytes | None, other: tuple[bytes, ...] = ()) -> bytes:
    """Serialize an event in OpenAI's framing: `data: ...` lines and a blank line."""
    parts = [line + b"\n" for line in other]
    if data is not None:
        if data.find(b"\n") >= 0:
            parts.extend(b"data: " + line + b"\n" for line in data.split(b"\n"))
        else:
            parts.append(b"data: " + data + b"\n")
    parts.append(b"\n")
    return b"".join(parts)


def encode_comment(data: bytes, other: tuple[bytes, ...] = ()) -> bytes:
    """An event's data lines as SSE comments (`: ` + each line), its other lines kept but
    its `event:` line, which becomes a comment too: a client's SSE reader dispatches an event
    that has a name and no data (the openai SDKs then fail to parse its empty data). Valid
    UTF-8 whatever the upstream sent (`utf8_safe`)."""
    parts = [(b": " + line if line.startswith(b"event:") else line) + b"\n" for line in other]
    parts.extend(b": " + line + b"\n" for line in data.split(b"\n"))
    parts.append(b"\n")
    return utf8_safe(b"".join(parts))


def utf8_safe(data: bytes) -> bytes:
    """`data` with any invalid UTF-8 replaced (U+FFFD), the rest as it was. A body cut inside a
    character leaves half of one in what the proxy passes on as a comment; the openai and
    anthropic SDKs decode every line of a stream as strict UTF-8 and raise on such a line."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("utf-8", "replace").encode("utf-8")
    return data


DONE_EVENT = b"data: [DONE]\n\n"
