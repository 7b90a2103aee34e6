"""Requests exactly as Claude Code 2.1.332 sent them (tests/agents/claude_code/requests: system
blocks with `cache_control`, 12 tools, adaptive thinking, a `role: "system"` message, thinking
blocks with signatures, parallel `tool_use` with Kimi ids, results out of call order, an
`is_error` result) through the real proxy to the simulated Kimi-like upstream.

Their Kimi ids already count calls across the conversation (`functions.Bash:0` ...
`functions.Read:3`), which is the history the Kimi dialect would write: the upstream must get
each request as it was sent, with its query and Anthropic headers, and the client a stream
whose new `tool_use` ids are valid for Anthropic and not already in the conversation.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from proxy.simulator import SimulatorLog
from tests.servers import ServerThread

FIXTURES = sorted(
    (Path(__file__).parents[1] / "agents" / "claude_code" / "requests").glob("*.json")
)
ANTHROPIC_ID = re.compile(r"^[a-zA-Z0-9_-]+$")


def _history_ids(body: dict[str, Any]) -> set[str]:
    return {
        block["id"]
        for message in body["messages"]
        if isinstance(message.get("content"), list)
        for block in message["content"]
        if block.get("type") == "tool_use"
    }


def _streamed_ids(text: str) -> list[str]:
    ids = []
    for line in text.splitlines():
        if line.startswith("data: "):
            event = orjson.loads(line[6:])
            block = event.get("content_block") or {}
            if event.get("type") == "content_block_start" and block.get("type") == "tool_use":
                ids.append(block["id"])
    return ids


def test_the_recordings_are_there() -> None:
    assert [path.name[:2] for path in FIXTURES] == ["01", "02", "03"]


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_a_claude_code_request_reaches_a_kimi_upstream_as_sent(
    proxy: ServerThread, log: SimulatorLog, path: Path
) -> None:
    fixture = orjson.loads(path.read_bytes())
    headers = fixture["headers"] | {"x-api-key": "sk-ant-test"}
    with httpx.Client(timeout=30) as http:
        response = http.post(
            proxy.url + fixture["path"], content=orjson.dumps(fixture["body"]), headers=headers
        )
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    assert log.requests[-1] == fixture["body"]
    assert log.paths[-1] == "/v1/messages"
    seen = log.headers[-1]
    for name in ("anthropic-version", "anthropic-beta", "x-api-key"):
        assert seen[name] == headers[name], name
    ids = _streamed_ids(response.text)
    assert ids, response.text  # the scripted model calls the first tool offered
    assert all(ANTHROPIC_ID.match(i) for i in ids), ids
    assert not set(ids) & _history_ids(fixture["body"]), ids
