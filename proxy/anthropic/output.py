"""The client's side of one streamed round: its bytes, its dense block indexes, the notes.

The event dispatch (`stream.py`), the tool_use blocks (`tools.py`) and the scanned text
blocks (`texts.py`) all write here, so that block indexes stay dense from 0 in delivery
order across every kind of block (SPEC §8) and the follow-up's records keep that order.
"""

from __future__ import annotations

from typing import Any

from proxy.anthropic.wire import at_index, encode, encode_raw
from proxy.core.notes import Note


class RoundOutput:
    """What one round sends the client, and what the message it continues has completed."""

    __slots__ = ("_client_open", "_completed", "_next", "notes", "out", "records")

    def __init__(self, next_index: int) -> None:
        self.out: list[bytes] = []
        self.notes: list[Note] = []
        self.records: list[dict[str, Any]] = []  # text and thinking blocks, for a follow-up
        self._next = next_index  # the next client block index
        # The client's block open now (-1: none), and whether the message completed one.
        self._client_open = -1
        self._completed = next_index > 0  # earlier rounds' blocks all closed

    @property
    def next_index(self) -> int:
        return self._next

    def take(self) -> list[bytes]:
        out, self.out = self.out, []
        return out

    def take_index(self) -> int:
        index = self._next
        self._next += 1
        self._client_open = index  # every index taken is a block the client sees start
        return index

    def take_whole_index(self) -> int:
        """The index of a block that arrived whole inside `message_start` (SPEC §8): the
        client's SDK counts it among the message's blocks, and it is already complete."""
        index = self._next
        self._next += 1
        self._completed = True
        return index

    def stop(self, index: int) -> None:
        self._completed = True
        self._client_open = -1
        self.out.append(encode({"type": "content_block_stop", "index": index}))

    def start(self, index: int, block: dict[str, Any]) -> None:
        start = {"type": "content_block_start", "index": index}
        self.out.append(encode({**start, "content_block": block}))

    def delta(self, index: int, delta: dict[str, Any]) -> None:
        self.out.append(encode({"type": "content_block_delta", "index": index, "delta": delta}))

    def reindexed(self, obj: dict[str, Any], raw: bytes, index: int, kind: str) -> None:
        """The event at the client's index: its own bytes when the index is already right."""
        if at_index(obj, index):
            self.out.append(encode_raw(kind, raw))
        else:
            self.out.append(encode({**obj, "index": index}))

    def block_before_error(self) -> bytes:
        """An empty text block when the message has no completed block and none open: Claude
        Code ends the turn on an error event only after a completed block (without one it
        re-sends the request without streaming, SPEC §8)."""
        if self._completed or self._client_open >= 0:
            return b""
        index = self.take_index()
        self.stop(index)
        start = {"type": "content_block_start", "index": index}
        head = encode({**start, "content_block": {"type": "text", "text": ""}})
        return head + b"".join(self.take())
