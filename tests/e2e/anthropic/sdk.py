"""The anthropic Python SDK driving a tool loop, as an agent (Claude Code, a script) does.

Each tool call's execution is recorded, so a test can count real side effects: a replayed
call that reaches the client runs again; one the proxy answered does not.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import anthropic

TOOLS: list[dict[str, Any]] = [
    {
        "name": "Bash",
        "description": "Run a shell command.",
        "input_schema": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
    }
]
MAX_TURNS = 8  # every loop is bounded: a replaying model would otherwise run forever


def client(base_url: str, **options: Any) -> anthropic.Anthropic:
    """An SDK client for a proxy or simulator root (the SDK appends `/v1/messages`)."""
    return anthropic.Anthropic(base_url=base_url, api_key="sk-ant-test", max_retries=0, **options)


@dataclass
class LoopRun:
    final_text: str | None  # None: the loop hit MAX_TURNS
    executed: list[tuple[str, str]] = field(default_factory=list)  # (tool, input) per run
    ids: list[str] = field(default_factory=list)  # every tool_use id the client received
    messages: list[dict[str, Any]] = field(default_factory=list)


def ask(sdk: anthropic.Anthropic, model: str, messages: list[Any], *, stream: bool) -> Any:
    if stream:
        with sdk.messages.stream(
            model=model, max_tokens=512, tools=TOOLS, messages=messages
        ) as events:
            return events.get_final_message()
    return sdk.messages.create(model=model, max_tokens=512, tools=TOOLS, messages=messages)


def tool_loop(sdk: anthropic.Anthropic, model: str, *, stream: bool) -> LoopRun:
    """Ask, run every tool_use, answer with tool_result blocks, until the model stops."""
    run = LoopRun(None)
    run.messages = [{"role": "user", "content": "Run the checks."}]
    for _ in range(MAX_TURNS):
        message = ask(sdk, model, run.messages, stream=stream)
        run.messages.append(
            {"role": "assistant", "content": [b.to_dict() for b in message.content]}
        )
        uses = [b for b in message.content if b.type == "tool_use"]
        if message.stop_reason != "tool_use" or not uses:
            run.final_text = "".join(b.text for b in message.content if b.type == "text")
            return run
        results = []
        for use in uses:
            run.ids.append(use.id)
            run.executed.append((use.name, json.dumps(use.input, sort_keys=True)))
            results.append(
                {"type": "tool_result", "tool_use_id": use.id, "content": f"ran {use.input}"}
            )
        run.messages.append({"role": "user", "content": results})
    return run
