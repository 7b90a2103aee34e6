"""Every tool call answered, and every answer to a call (SPEC §9).

A Chat upstream reads a history whose assistant message with `tool_calls` is followed by one
`tool` message per call, and only those (OpenAI and DeepSeek refuse anything else; vLLM
takes it and confuses the model). The client APIs ask the same of their own histories
(Responses: a `function_call_output` for each `function_call`; Anthropic: the `tool_result`
blocks in the message right after the `tool_use` blocks), and refuse a history that breaks
it. So a bridge checks the Chat history it built and refuses, in the client's words, what
the client's own API would refuse, instead of sending the upstream a history it cannot read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

UNANSWERED = "unanswered"  # a call with no `tool` message right after its assistant message
UNEXPECTED = "unexpected"  # a `tool` message that answers no call of the message before it


@dataclass(frozen=True, slots=True)
class Unpaired:
    kind: str  # UNANSWERED or UNEXPECTED
    call_id: str  # the Chat id (the bridge names it in the client's form)


def first_unpaired(messages: Sequence[dict[str, Any]]) -> Unpaired | None:
    """The first call or answer that breaks the pairing, or None when there is none."""
    awaiting: list[str] = []  # the last assistant message's calls not answered yet
    for message in messages:
        role = message.get("role")
        if role == "tool":
            call_id = str(message.get("tool_call_id"))
            if call_id not in awaiting:
                return Unpaired(UNEXPECTED, call_id)
            awaiting.remove(call_id)  # one answer per call, also where an id repeats
            continue
        if awaiting:
            return Unpaired(UNANSWERED, awaiting[0])
        if role == "assistant":
            calls = message.get("tool_calls")
            awaiting = [str(call.get("id")) for call in calls or ()]
    return Unpaired(UNANSWERED, awaiting[0]) if awaiting else None
