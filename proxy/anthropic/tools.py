"""The tool_use blocks of one streamed round, made canonical (SPEC §8, ids per SPEC §2).

Each delivered block reaches the client as one `content_block_start` with `input: {}`,
`input_json_delta` fragments that concatenate to the whole input, and one
`content_block_stop`. An input sent whole in `content_block_start` becomes one delta, and
deltas that repeat it are dropped; a block without input gets `{}`. A block that may be a
replay or an in-response duplicate is held until its input is complete, then decided.
A block's input and the round's blocks are bounded (SPEC §6, `proxy.core.bounds`): past a
bound the round breaks (`CallBoundExceeded`).
"""

from __future__ import annotations

from typing import Any

from proxy.anthropic.blocks import ToolBlock
from proxy.anthropic.output import RoundOutput
from proxy.core.bounds import check_arguments
from proxy.core.decide import ResponseIds, Verdict
from proxy.core.ids import canonical_arguments, normalize_raw_id
from proxy.core.notes import DeltaRepaired
from proxy.core.textcalls import RecoveredCall


class ToolBlocks:
    """Starts, input deltas, closes and the client-id decisions of tool_use blocks."""

    __slots__ = ("_choice", "_ids", "_output")

    def __init__(self, ids: ResponseIds, output: RoundOutput) -> None:
        self._ids = ids
        self._choice = ids.choice(0)  # Anthropic messages have one choice
        self._output = output

    def start(self, block: dict[str, Any]) -> ToolBlock:
        raw_id = normalize_raw_id(block.get("id"))
        tool = self._counted(ToolBlock.from_start(block, raw_id))
        if tool.whole is not None:
            note = DeltaRepaired(kind="whole_input", detail="moved into a delta")
            self._output.notes.append(note)
        if self._ids.needs_hold(self._choice, raw_id, tool.name):
            tool.held = True
        else:
            self._deliver(tool)
        return tool

    def whole(self, block: dict[str, Any]) -> dict[str, Any] | None:
        """A tool_use block that arrived whole inside `message_start`: decided at once (its
        input is complete) and kept in place with its client id, or None when it is a
        replay or a duplicate the client must not see."""
        tool = self._counted(ToolBlock.from_start(block, normalize_raw_id(block.get("id"))))
        decision = self._ids.decide(self._choice, tool.raw_id, tool)
        tool.decision = decision
        if decision.verdict is not Verdict.DELIVER:
            self._output.notes.append(decision.dropped(0, tool.name, tool.raw_id))
            return None
        self._output.take_whole_index()
        if (note := tool.rewritten(decision)) is not None:
            self._output.notes.append(note)
        return {**block, "id": decision.client_id}

    def delta(self, tool: ToolBlock, obj: dict[str, Any], raw: bytes) -> None:
        delta = obj.get("delta")
        if not isinstance(delta, dict) or delta.get("type") != "input_json_delta":
            if tool.index >= 0:  # another kind of delta: passed on in the block's place
                self._output.reindexed(obj, raw, tool.index, "content_block_delta")
            return
        part = delta.get("partial_json")
        if not isinstance(part, str):
            return  # null or missing adds nothing
        tool.received += len(part)
        check_arguments(tool.received)
        if tool.whole is not None:
            tool.repeats.append(part)
            return
        tool.parts.append(part)
        if tool.index >= 0 and not tool.held and part:
            tool.sent_input = True
            self._input(tool.index, part)

    def close(self, tool: ToolBlock) -> None:
        notes = self._output.notes
        if tool.repeats:
            same = canonical_arguments("".join(tool.repeats)) == canonical_arguments(tool.whole)
            kind = "repeated_input" if same else "conflicting_input"
            notes.append(DeltaRepaired(kind=kind, detail="the whole input was sent once"))
        if tool.held:
            tool.held = False
            self._deliver(tool)
        if tool.index < 0:
            return  # a replay or a duplicate: the client never sees it
        if not tool.sent_input:
            self._input(tool.index, "{}")
            notes.append(DeltaRepaired(kind="empty_input", detail="{}"))
        self._output.stop(tool.index)

    def recovered(self, call: RecoveredCall) -> None:
        """A call found in the text: a tool_use block of its own, decided whole."""
        self._output.notes.append(DeltaRepaired(kind="text_tool_call", detail=call.format))
        tool = ToolBlock(normalize_raw_id(call.raw_id), call.name, whole=call.arguments)
        self._deliver(self._counted(tool))
        self.close(tool)

    def _counted(self, tool: ToolBlock) -> ToolBlock:
        """SPEC §6: one block more for the round's bound, its whole input within its own."""
        self._ids.count_call()
        if tool.whole is not None:
            check_arguments(len(tool.whole))
        return tool

    def _deliver(self, tool: ToolBlock) -> None:
        """Decide the call's client id (SPEC §2) and send its start with what input it has."""
        output = self._output
        decision = self._ids.decide(self._choice, tool.raw_id, tool)
        tool.decision = decision
        if decision.verdict is not Verdict.DELIVER:
            output.notes.append(decision.dropped(0, tool.name, tool.raw_id))
            return
        tool.index = output.take_index()
        if (note := tool.rewritten(decision)) is not None:
            output.notes.append(note)
        output.start(tool.index, tool.start_block(decision.client_id))
        text = tool.whole if tool.whole is not None else "".join(tool.parts)
        if text:
            tool.sent_input = True
            self._input(tool.index, text)

    def _input(self, index: int, part: str) -> None:
        self._output.delta(index, {"type": "input_json_delta", "partial_json": part})
