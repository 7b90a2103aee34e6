"""The inspector page in a real browser (SPEC §12), against the real proxy serving the built-in
simulator on loopback: a Kimi conversation whose ids are rewritten and whose replay the proxy
answers shows up live, opens side by side, filters, and shows a hostile upstream's markup as
text. Every wait is on a condition, with a deadline.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

from proxy.config.load import settings_from_flags
from proxy.server.app import create_app
from tests.servers import ServerThread, free_port

ROOT = Path(__file__).resolve().parents[2]
DEADLINE_MS = 10_000
# What a hostile upstream (or client) puts where the page shows text: were it parsed as HTML,
# the image's handler or the script would set window.__pwned.
HOSTILE_TOOL = '<img src=x onerror="window.__pwned=1">'
HOSTILE_TEXT = "<script>window.__pwned=1</script>"
KEY = "inspector-test-key"


def _tool(name: str) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    }


def _proxy(**changes: Any) -> Iterator[ServerThread]:
    port = free_port()
    settings = settings_from_flags({"port": port, "inspect_content": "on"})
    assert settings.simulated and settings.inspecting  # on by default with the simulator
    server = ServerThread(create_app(dataclasses.replace(settings, **changes)), port=port)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    """Where the page's screenshots go: TOOLCALL_PROXY_SCREENSHOTS=docs refreshes the ones
    the docs show; otherwise a temporary folder (they are taken either way)."""
    where = os.environ.get("TOOLCALL_PROXY_SCREENSHOTS")
    return ROOT / where if where else tmp_path


@pytest.fixture
def proxy() -> Iterator[ServerThread]:
    yield from _proxy()


def _converse(base: str, model: str, tool: str, turns: int, **headers: str) -> None:
    """A Kimi conversation through the proxy, the tool results sent back each turn."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": f"read it {HOSTILE_TEXT}"}]
    with httpx.Client(base_url=base, timeout=10, headers=headers) as client:
        for _ in range(turns):
            answer = client.post(
                "/v1/chat/completions",
                json={"model": model, "messages": messages, "tools": [_tool(tool)]},
            )
            assert answer.status_code == 200, answer.text
            message = answer.json()["choices"][0]["message"]
            messages.append(message)
            for call in message.get("tool_calls") or []:
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": "done"})


def _anthropic(base: str) -> None:
    body = {
        "model": "kimi-k2",
        "max_tokens": 100,
        "messages": [{"role": "user", "content": "list files"}],
        "tools": [{"name": "list_files", "input_schema": {"type": "object", "properties": {}}}],
    }
    answer = httpx.post(f"{base}/v1/messages", json=body, timeout=10)
    assert answer.status_code == 200, answer.text


def test_the_page_shows_rewritten_ids_and_answered_replays_live(
    proxy: ServerThread, page: Any, shots: Path
) -> None:
    page.goto(f"{proxy.url}/_inspect")
    expect(page.locator("#status")).to_have_text("live", timeout=DEADLINE_MS)
    expect(page.locator("#empty")).to_be_visible()
    # Live: the page is open before the exchanges happen.
    _converse(proxy.url, "kimi-k2/replay-once", "read_file", turns=3)
    rows = page.locator("#rows tr")
    expect(rows).to_have_count(3, timeout=DEADLINE_MS)
    expect(rows.first.locator("td.did")).to_contain_text("ids_rewritten 1")
    replayed = rows.filter(has_text="replays_answered 1")
    expect(replayed).to_have_count(1)
    expect(rows.first.locator("td").nth(2)).to_have_text("chat_completions")
    expect(rows.first.locator("td").nth(3)).to_have_text("kimi-k2/replay-once")

    # One exchange, opened: the replay answered and the ids before and after, side by side.
    replayed.click()
    detail = page.locator("#detail")
    expect(detail).to_be_visible(timeout=DEADLINE_MS)
    decisions = detail.locator("table.decisions").first
    expect(decisions).to_contain_text("replay answered")
    answered = decisions.locator("tr", has_text="replay answered")
    expect(answered.locator("td.before")).to_contain_text("functions.read_file:0")
    expect(answered.locator("td.after")).to_contain_text("answered by the proxy")
    rewritten = decisions.locator("tr", has_text="id rewritten")
    expect(rewritten.locator("td.before")).to_contain_text("functions.read_file:")
    expect(rewritten.locator("td.after")).to_contain_text("call_")
    # The history: the client's id on the left, the Kimi-dialect id the upstream got on the
    # right, both marked as changed.
    left = detail.locator(".sides .left .part.changed").first
    expect(left).to_contain_text("call_")
    right = detail.locator(".sides > .message:not(.left) .part.changed").first
    expect(right).to_contain_text("functions.read_file:0")
    page.screenshot(path=str(shots / "inspector.png"), full_page=True)


def test_filters_and_hostile_markup_shown_as_text(
    proxy: ServerThread, page: Any, shots: Path
) -> None:
    _converse(proxy.url, "kimi-k2", HOSTILE_TOOL, turns=2)
    _anthropic(proxy.url)
    page.goto(f"{proxy.url}/_inspect")
    rows = page.locator("#rows tr")
    expect(rows).to_have_count(3, timeout=DEADLINE_MS)

    # By surface: only the Anthropic exchange.
    page.select_option("#f-surface", "anthropic_messages")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("anthropic_messages")
    page.select_option("#f-surface", "")
    expect(rows).to_have_count(3)
    # By tool name (part of it, any case): the two exchanges that called the hostile tool.
    page.fill("#f-tool", "ONERROR")
    expect(rows).to_have_count(2)
    page.fill("#f-tool", "list_files")
    expect(rows).to_have_count(1)
    page.fill("#f-tool", "")
    # Only where the proxy changed something: each of these had an id rewritten.
    page.check("#f-changed")
    expect(rows).to_have_count(3)

    # The hostile tool name and text, opened: shown as the characters they are, never run.
    rows.filter(has_text="chat_completions").first.click()
    detail = page.locator("#detail")
    expect(detail.locator("table.decisions").first).to_contain_text(
        HOSTILE_TOOL, timeout=DEADLINE_MS
    )
    expect(detail.locator("pre.text", has_text=HOSTILE_TEXT).first).to_be_visible()
    assert page.evaluate("() => window.__pwned") is None
    assert page.locator("#detail img, #detail script").count() == 0
    page.screenshot(path=str(shots / "inspector-hostile.png"), full_page=True)


def test_with_proxy_keys_the_page_asks_for_one(page: Any) -> None:
    for server in _proxy(proxy_keys=(KEY,)):
        _converse(server.url, "kimi-k2", "read_file", turns=1, authorization=f"Bearer {KEY}")
        assert httpx.get(f"{server.url}/_inspect/events", timeout=5).status_code == 401
        page.goto(f"{server.url}/_inspect")
        expect(page.locator("#keyform")).to_be_visible(timeout=DEADLINE_MS)
        expect(page.locator("#rows tr")).to_have_count(0)
        page.fill("#key", KEY)
        page.click("#key-form button")
        expect(page.locator("#status")).to_have_text("live", timeout=DEADLINE_MS)
        expect(page.locator("#rows tr")).to_have_count(1, timeout=DEADLINE_MS)
