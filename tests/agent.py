"""A minimal agent loop on the official openai SDK, as users write it.

It executes every tool call the model asks for (recording it), answers with a tool message
keyed by the call's id, and stops when the model answers without tool calls or after
`max_steps`. It trusts the ids it receives, like real agents do: that is what the proxy is for.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import openai

TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "run_shell_command",
            "description": "Run a shell command",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string"}},
                "required": ["command"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    },
]


@dataclass
class AgentRun:
    executed: list[tuple[str, str, str]] = field(default_factory=list)  # (id, name, arguments)
    steps: int = 0
    final_text: str | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ids(self) -> list[str]:
        return [call_id for call_id, _, _ in self.executed]

    @property
    def calls(self) -> list[tuple[str, str]]:
        return [(name, args) for _, name, args in self.executed]


def _assistant_message(message: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"role": "assistant", "content": message.content or ""}
    if message.tool_calls:
        entry["tool_calls"] = [
            {
                "id": tc.id,
                "type": "function",
                "function": {"name": tc.function.name, "arguments": tc.function.arguments},
            }
            for tc in message.tool_calls
        ]
    return entry


def run_agent(
    client: openai.OpenAI, model: str, *, stream: bool, max_steps: int = 8, helper: bool = False
) -> AgentRun:
    """Run the loop; `helper` uses the SDK's `.stream()` helper instead of raw chunks."""
    run = AgentRun(messages=[{"role": "user", "content": "Run the build steps."}])
    for _ in range(max_steps):
        run.steps += 1
        if not stream:
            completion = client.chat.completions.create(
                model=model,
                messages=run.messages,  # type: ignore[arg-type]
                tools=TOOLS,
            )
            message = completion.choices[0].message
        elif helper:
            with client.chat.completions.stream(
                model=model,
                messages=run.messages,  # type: ignore[arg-type]
                tools=TOOLS,
            ) as events:
                message = events.get_final_completion().choices[0].message
        else:
            message = _accumulate(
                client.chat.completions.create(
                    model=model, messages=run.messages, tools=TOOLS, stream=True
                )
            )  # type: ignore[arg-type]
        run.messages.append(_assistant_message(message))
        if not message.tool_calls:
            run.final_text = message.content
            return run
        for tc in message.tool_calls:
            run.executed.append((tc.id, tc.function.name, tc.function.arguments))
            run.messages.append(
                {
                    "role": "tool",
                    "tool_call_id": tc.id,
                    "content": f"executed {tc.function.name} {tc.function.arguments}",
                }
            )
    return run


@dataclass
class _Call:
    id: str
    function: Any


@dataclass
class _Fn:
    name: str
    arguments: str


@dataclass
class _Message:
    content: str | None
    tool_calls: list[_Call] | None


def concatenate_stream(chunks: Iterable[Any]) -> tuple[str, list[dict[str, str]]]:
    """Reassemble a stream the way most hand-written clients do: keyed by `index`,
    concatenating every string field they receive (so repeated ids or names would show).
    Returns the content and the calls in index order, each {"id", "name", "arguments"}."""
    content: list[str] = []
    calls: dict[int, dict[str, str]] = {}
    for chunk in chunks:
        for choice in chunk.choices:
            delta = choice.delta
            content.append(delta.content or "")
            for tc in delta.tool_calls or []:
                slot = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                slot["id"] += tc.id or ""
                if tc.function is not None:
                    slot["name"] += tc.function.name or ""
                    slot["arguments"] += tc.function.arguments or ""
    return "".join(content), [call for _, call in sorted(calls.items())]


def _accumulate(chunks: Any) -> _Message:
    content, calls = concatenate_stream(chunks)
    tool_calls = [_Call(c["id"], _Fn(c["name"], c["arguments"])) for c in calls]
    return _Message(content or None, tool_calls or None)
