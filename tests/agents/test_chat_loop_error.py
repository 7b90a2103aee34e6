"""A replay loop after the model wrote text, on Chat Completions: the error event that ends the
stream must be one that qwen-code, opencode and pi each show as an error and do not retry
(SPEC §5, §8), since each retry re-runs the loop's upstream rounds.

Through the proxy, a Kimi-like upstream that writes "Let me run that." before each call replays
the shell command forever (the simulator's `replay-loop-chatty`): the text goes out, so the
breaker can only end the stream with an error event. Each agent must run the command once, end
with the loop's error and exit status 1, and cost the upstream exactly the two rounds of the
request that replays (the replay answered, then its copy trips the breaker), with no retry.

The control pins why the event's `type` is `invalid_request_error`: against a scripted upstream
that answers with text and then the error event, qwen-code 0.24.4 continues a stream cut by a
`loop_detected` error (an error without an HTTP status, from a response that carried a request
id) three times, each a request of its own.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.agents.agents import AGENTS, JSON, Scratch, Step, installed
from tests.agents.runs import LOOP_ERROR, Cell, Run, RunKey, _execute, _runs
from tests.servers import serving

Runs = dict[RunKey, Run]
F = TypeVar("F", bound=Callable[..., Any])

CHAT_AGENTS = ("qwen-code", "opencode", "pi")
# The shell command is round 2 of the scripted task; the replays re-emit it, text first.
CHATTY = Cell("replay-forever", "history", "kimi-k2/replay-loop-chatty+replay_after=2")
# What each agent shows its user (its output without colours), and its exit status.
SHOWN = {
    "qwen-code": re.compile(r"^\[API Error: Tool-call replay loop detected: .*\]$", re.M),
    "opencode": re.compile(
        r'^Error: \{"message":"Tool-call replay loop detected: .*",'
        r'"type":"invalid_request_error","param":null,"code":"tool_call_replay_loop"\}$',
        re.M,
    ),
    "pi": re.compile(r"^Tool-call replay loop detected: .*\.$", re.M),
}
_COLOURS = re.compile(r"\x1b\[[0-9;]*m")
QWEN_RETRY = "Retrying provider attempt"  # what qwen-code prints before each retry


def routes(*names: str) -> Callable[[F], F]:
    """The runs a test reads (tests/agents/conftest.py starts them all up front)."""

    def mark(fn: F) -> F:
        fn.routes = names  # type: ignore[attr-defined]
        return fn

    return mark


def _shown(output: str) -> str:
    return _COLOURS.sub("", output)


def _with_the_command(run: Run) -> int:
    """Upstream requests whose history holds the shell command's call: the request that
    replays it and the proxy's follow-ups, and any retry of them."""
    return sum(
        any(
            isinstance(message, dict)
            and message.get("role") == "assistant"
            and "log.txt" in json.dumps(message.get("tool_calls"))
            for message in body.get("messages") or []
        )
        for body in run.requests
    )


@pytest.mark.parametrize("agent", CHAT_AGENTS)
@pytest.mark.parametrize("cell", [CHATTY], ids=["replay-forever-after-text"])
@routes("proxy")
def test_a_loop_after_text_ends_the_turn_once(agent_runs: Runs, agent: str, cell: Cell) -> None:
    run = agent_runs[(agent, cell, "proxy")]
    shown = _shown(run.output)
    context = f"{run.ended}\n{shown[-3000:]}"
    assert run.returncode == 1, f"did not end with an error: {context}"
    assert run.runs == 1, f"the shell command ran {run.runs} times: {context}"
    assert not run.wrote, context  # it stopped at the loop
    assert _with_the_command(run) == 2, f"retried: {_with_the_command(run)} rounds: {context}"
    assert run.breaker_trips == 1, context
    assert SHOWN[agent].search(shown), f"not the loop error it shows: {context}"
    assert QWEN_RETRY not in shown, context


# --- the control: qwen-code and a `loop_detected` error event after text -------------------


def _sse(payload: JSON) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def _chunk(delta: JSON, finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return _sse({"id": "c1", "object": "chat.completion.chunk", "model": "m", "choices": [choice]})


@dataclass
class ScriptedChat:
    """Round 1: text and the shell command's call; every later round: text, then the proxy's
    error event with `error_type`. Each response carries a request id, as the proxy's do."""

    step: Step
    error_type: str
    bodies: list[JSON] = field(default_factory=list)

    async def completions(self, request: Request) -> Response:
        body = await request.json()
        self.bodies.append(body)
        data = _chunk({"role": "assistant", "content": ""}) + _chunk({"content": "Let me run."})
        name, args = self.step
        if len(self.bodies) == 1:
            call = {"name": name, "arguments": json.dumps(args)}
            tool_call = {"index": 0, "id": "call_1", "type": "function", "function": call}
            data += _chunk({"tool_calls": [tool_call]}) + _chunk({}, "tool_calls")
            data += b"data: [DONE]\n\n"
        else:
            message = f'Tool-call replay loop detected: the model replayed tool call "{name}".'
            error = {"message": message, "type": self.error_type, "param": None}
            data += _sse({"error": {**error, "code": "tool_call_replay_loop"}})
        headers = {"x-request-id": f"req_{len(self.bodies)}"}
        return Response(data, media_type="text/event-stream", headers=headers)


def test_control_qwen_code_retries_a_loop_detected_event_after_text(tmp_path: Path) -> None:
    assert installed(), "run `make agents` (npm ci in tests/agents/node) first"
    qwen = next(agent for agent in AGENTS if agent.name == "qwen-code")
    scratch = Scratch.make(tmp_path)
    upstream = ScriptedChat(qwen.steps(scratch)[1], "loop_detected")
    app = Starlette(routes=[Route("/v1/chat/completions", upstream.completions, methods=["POST"])])
    with serving(app) as server:
        call = qwen.setup(scratch, server.url + "/v1", "scripted", "Append to the log.")
        returncode, _, output = _execute(call.argv, call.env, call.stdin, scratch)
    context = output[-2000:]
    assert _runs(scratch) == 1, context
    assert output.count(QWEN_RETRY) == 3, context
    assert len(upstream.bodies) == 1 + 4, context  # the round, then the error sent 4 times
    assert returncode == 1 and LOOP_ERROR.search(output), context
