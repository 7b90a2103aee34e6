"""Which errors Codex CLI treats as final: the reason the proxy ends a Responses replay loop with
an HTTP 400, or with `response.failed` and code `invalid_prompt` once the stream has begun
(SPEC §8). A retried loop error would re-run the proxy's follow-up rounds upstream each time.

A small scripted Responses upstream answers Codex's first request with one `exec_command` call
(a shell command that appends to the log), and every later request with the error under test;
the test counts the requests that reached it after the first. Codex's own behaviour, pinned for
the version in tests/agents/node: when it changes, the proxy's error forms must be revisited.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.agents.agents import AGENTS, JSON, Scratch, installed
from tests.agents.runs import LOOP_ERROR, _execute, _runs
from tests.servers import serving

CODEX = next(agent for agent in AGENTS if agent.name == "codex")
MESSAGE = "Tool-call replay loop detected (tool_call_replay_loop)"
FINAL = {"http-400", "failed-invalid_prompt", "error-then-failed-invalid_prompt"}
# Codex reconnects 5 times (6 requests in all) after these.
RETRIED = {"http-422", "failed-other-code", "error-event-only"}


def _sse(events: list[JSON]) -> bytes:
    return b"".join(
        f"event: {event['type']}\ndata: {json.dumps({**event, 'sequence_number': n})}\n\n".encode()
        for n, event in enumerate(events)
    )


def _first_round(command: str) -> bytes:
    call = {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "exec_command",
        "arguments": json.dumps({"cmd": command}),
        "status": "completed",
    }
    response: JSON = {"id": "resp_1", "object": "response", "status": "in_progress", "output": []}
    return _sse(
        [
            {"type": "response.created", "response": response},
            {"type": "response.output_item.added", "output_index": 0, "item": call},
            {"type": "response.output_item.done", "output_index": 0, "item": call},
            {
                "type": "response.completed",
                "response": {**response, "status": "completed", "output": [call]},
            },
        ]
    )


def _failure(mode: str) -> Response:
    if mode.startswith("http-"):
        error = {"message": MESSAGE, "type": "invalid_request_error", "param": None}
        return JSONResponse({"error": {**error, "code": "tool_call_replay_loop"}}, int(mode[5:]))
    code = "invalid_prompt" if mode.endswith("invalid_prompt") else "tool_call_replay_loop"
    response: JSON = {"id": "resp_2", "object": "response", "status": "in_progress", "output": []}
    error_event = {"type": "error", "code": code, "message": MESSAGE, "param": None}
    failed = {
        "type": "response.failed",
        "response": {**response, "status": "failed", "error": {"code": code, "message": MESSAGE}},
    }
    events = [{"type": "response.created", "response": response}]
    events += [error_event] if mode.startswith("error-") else []
    events += [] if mode == "error-event-only" else [failed]
    return Response(_sse(events), media_type="text/event-stream")


@dataclass
class ScriptedUpstream:
    mode: str
    command: str
    bodies: list[Any] = field(default_factory=list)

    async def responses(self, request: Request) -> Response:
        self.bodies.append(await request.json())
        if len(self.bodies) == 1:
            return Response(_first_round(self.command), media_type="text/event-stream")
        return _failure(self.mode)


@dataclass(frozen=True)
class Outcome:
    requests_after_first: int
    returncode: int | None
    runs: int
    output: str


def _run(mode: str, root: Path) -> Outcome:
    scratch = Scratch.make(root)
    upstream = ScriptedUpstream(mode, scratch.shell_command())
    app = Starlette(routes=[Route("/v1/responses", upstream.responses, methods=["POST"])])
    with serving(app) as server:
        call = CODEX.invocation(scratch, server.url, "scripted")
        returncode, _seconds, output = _execute(call.argv, call.env, call.stdin, scratch)
    return Outcome(len(upstream.bodies) - 1, returncode, _runs(scratch), output)


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Outcome]]:
    assert installed(), "run `make agents` (npm ci in tests/agents/node) first"
    modes = sorted(FINAL | RETRIED)
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {m: pool.submit(_run, m, tmp_path_factory.mktemp("codex-errors")) for m in modes}
    yield {mode: future.result() for mode, future in futures.items()}


@pytest.mark.parametrize("mode", sorted(FINAL))
def test_codex_stops_at_once(outcomes: dict[str, Outcome], mode: str) -> None:
    outcome = outcomes[mode]
    context = outcome.output[-2000:]
    assert outcome.runs == 1, context  # the first round's command ran, once
    assert outcome.requests_after_first == 1, context
    assert outcome.returncode not in (None, 0), context
    assert LOOP_ERROR.search(outcome.output), context


@pytest.mark.parametrize("mode", sorted(RETRIED))
def test_codex_reconnects_five_times(outcomes: dict[str, Outcome], mode: str) -> None:
    """Why the proxy avoids these forms: each reconnect would be another loop upstream."""
    outcome = outcomes[mode]
    context = outcome.output[-2000:]
    assert outcome.runs == 1, context
    assert outcome.requests_after_first == 6, context
    assert "Reconnecting... 5/5" in outcome.output, context
    assert outcome.returncode not in (None, 0), context
