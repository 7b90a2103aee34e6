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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from proxy.simulator import SimulatorLog
from tests.e2e.conftest import ProxyFactory
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


@pytest.fixture(scope="module")
def generic_proxy(make_proxy: ProxyFactory) -> Iterator[ServerThread]:
    """The family rules off (SPEC §11 `upstream_profile: generic`): only what every upstream
    would refuse is repaired, and these requests need nothing."""
    with make_proxy(upstream_profile="generic") as server:
        yield server


def _sent(proxy: ServerThread, fixture: dict[str, Any]) -> httpx.Response:
    headers = fixture["headers"] | {"x-api-key": "sk-ant-test"}
    with httpx.Client(timeout=30) as http:
        return http.post(
            proxy.url + fixture["path"], content=orjson.dumps(fixture["body"]), headers=headers
        )


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_a_claude_code_request_reaches_a_kimi_upstream_as_sent(
    generic_proxy: ServerThread, log: SimulatorLog, path: Path
) -> None:
    fixture = orjson.loads(path.read_bytes())
    headers = fixture["headers"] | {"x-api-key": "sk-ant-test"}
    response = _sent(generic_proxy, fixture)
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


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_on_a_moonshot_family_route_only_the_tool_schemas_change(
    proxy: ServerThread, log: SimulatorLog, path: Path
) -> None:
    """`upstream_profile: auto` takes a model named kimi for the moonshot family (SPEC §11):
    Claude Code's tool schemas reach it in Moonshot's flavor, every property's name, type
    and description kept; the rest of the request goes as it was sent."""
    fixture = orjson.loads(path.read_bytes())
    response = _sent(proxy, fixture)
    assert response.status_code == 200, response.text
    sent, got = fixture["body"], log.requests[-1]
    assert {k: v for k, v in got.items() if k != "tools"} == {
        k: v for k, v in sent.items() if k != "tools"
    }
    assert [t["name"] for t in got["tools"]] == [t["name"] for t in sent["tools"]]
    assert got["tools"] != sent["tools"], "the schemas are rewritten for Moonshot"
    for before, after in zip(sent["tools"], got["tools"], strict=True):
        kept = after["input_schema"].get("properties", {})
        for name, prop in before["input_schema"].get("properties", {}).items():
            assert name in kept, (before["name"], name)
            for key in ("type", "description"):
                if key in prop:
                    assert kept[name].get(key) == prop[key], (before["name"], name, key)
