"""How Claude Code treats each form an error can take, measured on the pinned version against
the scripted upstream in claude_code/model.py: the proxy's breaker must take a form that Claude
Code shows as an error and does not send again (SPEC §8), since every re-send costs up to
`max_followups` more upstream rounds.

Round 1 runs a shell command that appends to a log; round 2 is answered with the error form.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tests.agents.agents import Scratch, claude_argv, claude_env, installed
from tests.agents.claude_code.model import LOOP_MESSAGE, Recorded, ScriptedModel
from tests.servers import serving

TIMEOUT = 120.0


def _run(form: str, root: Path) -> tuple[subprocess.CompletedProcess[str], list[Recorded], int]:
    assert installed(), "run `make agents` (npm ci in tests/agents/node) first"
    scratch = Scratch.make(root)
    command = {"command": scratch.shell_command(), "description": "Append to the log"}
    call = {"type": "tool_use", "id": "toolu_01", "name": "Bash", "input": command}
    model = ScriptedModel([[call], form])
    with serving(model) as server:
        proc = subprocess.run(
            claude_argv("kimi-k2", "Append to the log."),
            cwd=scratch.work,
            env=claude_env(scratch, server.url),
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )
    runs = len(scratch.log.read_text().splitlines()) if scratch.log.exists() else 0
    return proc, [r for r in model.recorded if r.path.startswith("/v1/messages?")], runs


def _result(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    result = json.loads(proc.stdout)
    assert isinstance(result, dict), proc.stdout
    return result


def test_an_error_event_after_a_completed_block_ends_the_turn(tmp_path: Path) -> None:
    """`message_start`, one completed (empty) text block, then the `error` event: shown as
    "API Error: <message>", exit status 1, and the request is not sent again."""
    proc, requests, runs = _run("stream_block_error", tmp_path)
    result = _result(proc)
    assert proc.returncode == 1 and result["is_error"] is True, proc.stdout
    assert result["result"] == f"API Error: {LOOP_MESSAGE}", proc.stdout
    assert [r.round for r in requests] == [0, 1], "round 2 was sent once"
    assert runs == 1


def test_an_error_event_before_any_block_falls_back_to_a_request_without_streaming(
    tmp_path: Path,
) -> None:
    """`message_start` then the `error` event, with no completed content block: Claude Code
    sends the same request again without streaming ("Stream completed with message_start but
    no content blocks completed - triggering non-streaming fallback"), and re-sends the 422
    that gets (which is what the proxy answers a request without streaming)."""
    proc, requests, _ = _run("stream_error", tmp_path)
    result = _result(proc)
    assert proc.returncode == 1 and result["is_error"] is True, proc.stdout
    again = [r for r in requests if r.round == 1]
    assert [r.stream for r in again][:2] == [True, False], "the fallback without streaming"
    assert len(again) > 2, f"{len(again)} requests for round 2"


def test_an_http_4xx_is_sent_again(tmp_path: Path) -> None:
    """HTTP 422 with Anthropic's error body: Claude Code re-sends the request (dropping one
    beta feature after another) before it shows "API Error: 422 <message>"."""
    proc, requests, _ = _run("http_422", tmp_path)
    result = _result(proc)
    assert proc.returncode == 1 and result["api_error_status"] == 422, proc.stdout
    assert result["result"] == f"API Error: 422 {LOOP_MESSAGE}", proc.stdout
    again = [r for r in requests if r.round == 1]
    assert len(again) > 1, f"{len(again)} requests for round 2"
    betas = [len(r.headers.get("anthropic-beta", "").split(",")) for r in again]
    assert betas[-1] < betas[0], betas
