"""Anthropic content blocks built from a Chat stream's deltas, in Anthropic's grammar.

Anthropic sends one block at a time (`content_block_start`, deltas, `content_block_stop`)
with dense indexes; a Chat stream can interleave what becomes blocks (reasoning, then text,
then calls whose argument fragments may keep coming after a later call's header). So blocks
wait in a queue, in the order they began: the first one is *live* (started, its deltas go out
as they arrive) and the ones behind it keep their deltas until it stops. A text or thinking
block stops once a later block began; a tool_use block once a later block began and its
arguments form a complete JSON value (a call's fragments can still come until then). At the
end of the message every block left is sent whole, in order.
"""

from __future__ import annotations

from typing import Any

from proxy.anthropic.wire import encode
from proxy.bridge.anthropic_chat.reasoning import sign_reasoning
from proxy.core.jsoncomplete import is_complete_json

TEXT = "text"
THINKING = "thinking"
TOOL = "tool_use"

_DELTA = {TEXT: ("text_delta", "text"), THINKING: ("thinking_delta", "thinking")}


class Block:
    __slots__ = ("content", "followed", "index", "kind", "name", "pending", "tool_id")

    def __init__(self, kind: str, tool_id: str = "", name: str = "") -> None:
        self.kind = kind
        self.tool_id = tool_id
        self.name = name
        self.index = -1  # its client index, once started
        self.pending: list[str] = []  # fragments not sent yet
        self.content: list[str] = []  # every fragment (a thinking block's signature; inputs)
        self.followed = False  # a later block began

    def can_stop(self) -> bool:
        if not self.followed:
            return False
        return self.kind != TOOL or is_complete_json("".join(self.content))

    def start_event(self) -> dict[str, Any]:
        block: dict[str, Any]
        if self.kind == TOOL:
            block = {"type": "tool_use", "id": self.tool_id, "name": self.name, "input": {}}
        elif self.kind == THINKING:
            block = {"type": "thinking", "thinking": "", "signature": ""}
        else:
            block = {"type": "text", "text": ""}
        return {"type": "content_block_start", "index": self.index, "content_block": block}

    def delta_event(self, fragment: str) -> dict[str, Any]:
        if self.kind == TOOL:
            delta = {"type": "input_json_delta", "partial_json": fragment}
        else:
            name, key = _DELTA[self.kind]
            delta = {"type": name, key: fragment}
        return {"type": "content_block_delta", "index": self.index, "delta": delta}


class BlockQueue:
    """The blocks of one message, across the rounds of its exchange."""

    def __init__(self) -> None:
        self.queue: list[Block] = []  # not stopped yet; queue[0] is live once started
        self.next_index = 0
        self.completed = 0  # blocks stopped so far
        self.tools_delivered = False
        self.out: list[bytes] = []

    def take(self) -> bytes:
        out, self.out = self.out, []
        return b"".join(out)

    # -- input ------------------------------------------------------------------------------------

    def append_text(self, kind: str, fragment: str) -> None:
        """Text or reasoning: continues the last block if it is of this kind, else begins one."""
        if not fragment:
            return
        tail = self.queue[-1] if self.queue else None
        if tail is None or tail.kind != kind:
            tail = self.begin(Block(kind))
        self.add_fragment(tail, fragment)

    def begin(self, block: Block) -> Block:
        if self.queue:
            self.queue[-1].followed = True
        self.queue.append(block)
        self.pump()
        return block

    def add_fragment(self, block: Block, fragment: str) -> None:
        if not fragment:
            return
        block.content.append(fragment)
        if block.index >= 0:
            self.out.append(encode(block.delta_event(fragment)))
        else:
            block.pending.append(fragment)
        self.pump()

    def is_open(self, block: Block) -> bool:
        """Can the block still take fragments (it has not stopped)?"""
        return any(queued is block for queued in self.queue)

    # -- output -----------------------------------------------------------------------------------

    def pump(self) -> None:
        """Start the live block; stop it and go on while it can stop."""
        while self.queue:
            head = self.queue[0]
            if head.index < 0:
                self._start(head)
            if not head.can_stop():
                return
            self._stop(self.queue.pop(0))

    def finish(self) -> None:
        """The message ends: every block left goes out, in order."""
        while self.queue:
            head = self.queue.pop(0)
            if head.index < 0:
                self._start(head)
            self._stop(head)

    def close_live(self) -> None:
        """A stream that ends with an error: the live block is stopped (SDKs and Claude Code
        read a completed block), the ones behind it, which the client never saw, are not."""
        if self.queue and self.queue[0].index >= 0:
            self._stop(self.queue[0])
        self.queue.clear()

    def empty_text_block(self) -> None:
        block = Block(TEXT)
        self._start(block)
        self._stop(block)

    def _start(self, block: Block) -> None:
        block.index = self.next_index
        self.next_index += 1
        if block.kind == TOOL:
            self.tools_delivered = True
        self.out.append(encode(block.start_event()))
        if block.pending:
            self.out.append(encode(block.delta_event("".join(block.pending))))
            block.pending.clear()

    def _stop(self, block: Block) -> None:
        if block.kind == THINKING:
            signature = sign_reasoning("".join(block.content))
            delta = {"type": "signature_delta", "signature": signature}
            self.out.append(
                encode({"type": "content_block_delta", "index": block.index, "delta": delta})
            )
        self.out.append(encode({"type": "content_block_stop", "index": block.index}))
        self.completed += 1
