"""Blocks that arrive whole inside `message_start` (SPEC §8).

Some translators send a message's blocks in `message_start`'s `content` and then only
`message_stop`. The first round's are kept in place (the SDKs read them as the message's
first blocks); a continuation round's `message_start` is not forwarded (one message), so its
blocks reach the client as block events at the next indexes.
"""

from __future__ import annotations

from typing import Any

from proxy.anthropic.blocks import record_of
from proxy.anthropic.output import RoundOutput
from proxy.anthropic.tools import ToolBlocks


def kept_in_place(blocks: list[Any], tools: ToolBlocks, output: RoundOutput) -> list[Any]:
    """`message_start`'s own blocks, kept in place: tool_use ids decided as any block's
    (SPEC §2), replays and duplicates left out, each block counted in the client's dense
    indexes."""
    kept = []
    for block in blocks:
        if isinstance(block, dict) and block.get("type") == "tool_use":
            block = tools.whole(block)
            if block is None:
                continue
        else:
            output.take_whole_index()
            record = record_of(block) if isinstance(block, dict) else None
            if record is not None:
                output.records.append(record)
        kept.append(block)
    return kept


def as_events(blocks: list[Any], tools: ToolBlocks, output: RoundOutput) -> None:
    """A continuation round's `message_start` blocks, as block events at the next indexes."""
    for block in blocks:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "tool_use":
            tools.close(tools.start(block))
            continue
        index = output.take_index()
        record = record_of(block)
        if record is not None:
            output.records.append(record)
        output.start(index, block)
        output.stop(index)
