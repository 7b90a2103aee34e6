"""The inspector (SPEC §12): its settings, its bounds, structure without content, the proxy-key
rule on its data, and nothing of it when it is off. The page in a browser: tests/browser."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from proxy.config.load import settings_from_argv, settings_from_flags
from proxy.core.notes import CallDropped, DeltaRepaired, IdRewritten
from proxy.ops.inspector import Inspector
from proxy.ops.observability import RequestLog
from proxy.ops.startup import startup_lines
from proxy.server.app import ProxyApp, create_app
from tests.servers import ServerThread, free_port

UPSTREAM = "http://127.0.0.1:9/v1"
SECRET_TEXT = "the user's private words"
SECRET_ARGS = "private-path"


# -- settings -------------------------------------------------------------------------------------


def test_on_by_default_with_the_simulator_only(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TOOLCALL_PROXY_INSPECT", "TOOLCALL_PROXY_UPSTREAM", "TOOLCALL_PROXY_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    assert settings_from_argv([]).inspecting
    assert not settings_from_argv(["--inspect", "off"]).inspecting
    assert not settings_from_argv(["--upstream", UPSTREAM]).inspecting
    assert settings_from_argv(["--upstream", UPSTREAM, "--inspect", "on"]).inspecting
    monkeypatch.setenv("TOOLCALL_PROXY_INSPECT", "on")
    settings = settings_from_argv(["--upstream", UPSTREAM])
    assert settings.inspecting and not settings.inspect_content
    assert settings.inspect_exchanges == 200 and settings.inspect_exchange_bytes == 64 * 1024


def test_yaml_sets_the_inspector(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOOLCALL_PROXY_INSPECT", raising=False)
    config = tmp_path / "routes.yaml"
    config.write_text(
        "inspect: on\ninspect_content: on\ninspect_exchanges: 5\n"
        f"routes:\n  - name: a\n    upstream: {UPSTREAM}\n"
    )
    settings = settings_from_argv(["--config", str(config)])
    assert settings.inspecting and settings.inspect_content and settings.inspect_exchanges == 5
    assert any(
        "inspector at http://127.0.0.1:8787/_inspect" in line for line in startup_lines(settings)
    )


async def test_off_nothing_of_it_exists() -> None:
    app = create_app(settings_from_argv(["--upstream", UPSTREAM]))
    assert isinstance(app, ProxyApp)
    assert app.inspector is None and app.exchanges.report.inspector is None
    assert not any("inspector" in line for line in startup_lines(app.settings))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as client:
        assert (await client.get("/_inspect")).status_code == 404
        assert (await client.get("/_inspect/events")).status_code == 404


# -- the ring, in process -------------------------------------------------------------------------


def _finished(inspector: Inspector, n: int, raw: bytes = b"{}") -> RequestLog:
    log = RequestLog(f"req_{n}", "r", "POST", "/v1/chat/completions")
    inspector.opened(log, raw, raw)
    inspector.notes(
        log,
        [
            IdRewritten(
                choice=0,
                index=0,
                name="bash",
                raw_id="functions.bash:0",
                client_id="c1",
                reason="counter",
            ),
            CallDropped(
                choice=0,
                name="bash",
                raw_id="functions.bash:0",
                reason="replay",
                matched="issued id",
            ),
            DeltaRepaired(kind="text_tool_call", detail="kimi"),
            DeltaRepaired(kind="missing_result"),
        ],
    )
    log.fields.update(surface="chat_completions", model="kimi-k2", status=200, duration_ms=1.0)
    inspector.finish(log)
    return log


def test_the_ring_keeps_the_newest_and_what_each_decision_was() -> None:
    inspector = Inspector(2, 64 * 1024, content=False)
    for n in range(3):
        _finished(inspector, n)
    feed, rows = inspector.subscribe()
    assert [orjson.loads(row)["seq"] for row in rows] == [2, 3]
    assert inspector.detail(1) is None and inspector.detail(4) is None
    detail = orjson.loads(inspector.detail(3) or b"")
    assert detail["row"]["changed"] and detail["row"]["tools"] == ["bash"]
    assert detail["row"]["counts"]["text_calls"] == 1
    kinds = [(d["kind"], d["direction"]) for d in detail["decisions"]]
    assert kinds == [
        ("id_rewritten", "response"),
        ("call_dropped", "response"),
        ("text_call_recovered", "response"),
        ("request_repair", "request"),
    ]
    assert detail["decisions"][0]["before"] == "call bash id functions.bash:0"
    assert detail["decisions"][0]["after"] == "call bash id c1"
    _finished(inspector, 4)
    assert feed.rows and orjson.loads(feed.rows[-1])["seq"] == 4  # live
    inspector.unsubscribe(feed)


def test_a_request_that_never_became_an_exchange_is_not_listed() -> None:
    inspector = Inspector(10, 64 * 1024, content=False)
    inspector.finish(RequestLog("r", "r", "GET", "/v1/models"))
    assert not inspector.ring


def test_one_exchange_is_bounded_in_bytes() -> None:
    history = [{"role": "user", "content": "x" * 5000}] * 200
    raw = orjson.dumps({"model": "m", "messages": history})
    inspector = Inspector(10, 8 * 1024, content=True)
    _finished(inspector, 1, raw)
    detail = inspector.detail(1) or b""
    assert len(detail) < 10 * 1024
    client = orjson.loads(detail)["request"]["client"]
    assert client["omitted"] > 190 and client["messages"][-1]["at"] == 199


# -- served, against the simulator ----------------------------------------------------------------


@pytest.fixture
def served() -> Iterator[tuple[ServerThread, Any]]:
    def start(**changes: Any) -> ServerThread:
        port = free_port()
        settings = dataclasses.replace(settings_from_flags({"port": port}), **changes)
        servers.append(ServerThread(create_app(settings), port=port).start())
        return servers[-1]

    servers: list[ServerThread] = []
    try:
        yield servers, start
    finally:
        for server in servers:
            server.stop()


def _kimi_turns(base: str, turns: int, **headers: str) -> None:
    tool = {
        "type": "function",
        "function": {
            "name": "read_file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
    messages: list[dict[str, Any]] = [{"role": "user", "content": SECRET_TEXT}]
    with httpx.Client(base_url=base, timeout=10, headers=headers) as client:
        for _ in range(turns):
            body = {"model": "kimi-k2/replay-once", "messages": messages, "tools": [tool]}
            message = client.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]
            for call in message.get("tool_calls") or []:
                call["function"]["arguments"] = orjson.dumps({"path": SECRET_ARGS}).decode()
            messages.append(message)
            for call in message.get("tool_calls") or []:
                messages.append(
                    {"role": "tool", "tool_call_id": call["id"], "content": SECRET_TEXT}
                )


def _rows(base: str, count: int, **headers: str) -> list[dict[str, Any]]:
    """The feed's first `count` rows (the ring, then live ones)."""
    rows: list[dict[str, Any]] = []
    client = httpx.Client(base_url=base, timeout=10, headers=headers)
    with client, client.stream("GET", "/_inspect/events") as events:
        assert events.headers["content-type"] == "text/event-stream"
        buffer = b""
        for chunk in events.iter_bytes():
            buffer += chunk
            *blocks, buffer = buffer.split(b"\n\n")
            for block in blocks:
                if block.startswith(b"event: exchange\n"):
                    rows.append(orjson.loads(block.split(b"data: ", 1)[1]))
            if len(rows) >= count:
                return rows
    return rows


def test_structure_only_unless_content_is_asked_for(served: Any) -> None:
    _, start = served
    server = start()
    _kimi_turns(server.url, 3)
    rows = _rows(server.url, 3)
    assert [row["counts"]["replays_answered"] for row in rows] == [0, 1, 0]
    assert all(row["counts"]["ids_rewritten"] == 1 for row in rows)
    detail = httpx.get(f"{server.url}/_inspect/exchanges/{rows[1]['seq']}").content
    assert SECRET_TEXT.encode() not in detail and SECRET_ARGS.encode() not in detail
    parsed = orjson.loads(detail)
    assert not parsed["content"]
    upstream_ids = [
        part["id"]
        for message in parsed["request"]["upstream"]["messages"]
        for part in message["parts"]
        if "id" in part
    ]
    assert upstream_ids == ["functions.read_file:0", "functions.read_file:0"]  # Kimi dialect

    content = start(inspect_content=True)
    _kimi_turns(content.url, 2)
    (row, _) = _rows(content.url, 2)
    detail = httpx.get(f"{content.url}/_inspect/exchanges/{row['seq']}").content
    assert SECRET_TEXT.encode() in detail


def test_the_page_is_static_and_its_data_follows_the_proxy_key_rule(served: Any) -> None:
    _, start = served
    server = start(proxy_keys=("k1",))
    _kimi_turns(server.url, 1, authorization="Bearer k1")
    page = httpx.get(f"{server.url}/_inspect")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert httpx.get(f"{server.url}/_inspect/inspect.js").status_code == 200
    for path in ("/_inspect/events", "/_inspect/exchanges/1"):
        refused = httpx.get(f"{server.url}{path}")
        assert (
            refused.status_code == 401 and refused.json()["error"]["type"] == "authentication_error"
        )
    assert (
        httpx.get(
            f"{server.url}/_inspect/exchanges/1", headers={"x-toolcall-proxy-key": "k1"}
        ).status_code
        == 200
    )
    assert len(_rows(server.url, 1, authorization="Bearer k1")) == 1
    assert (
        httpx.get(
            f"{server.url}/_inspect/exchanges/99", headers={"x-toolcall-proxy-key": "k1"}
        ).status_code
        == 404
    )
    assert (
        httpx.post(f"{server.url}/_inspect", headers={"x-toolcall-proxy-key": "k1"}).status_code
        == 405
    )


def test_summarized_only_when_watched_or_too_large_to_keep() -> None:
    inspector = Inspector(10, 4096, content=False)
    _finished(inspector, 1)  # small, nobody watching: kept as it was handed over
    assert inspector.ring[-1].capture is not None
    large = orjson.dumps({"messages": [{"role": "user", "content": "x" * 5000}]})
    _finished(inspector, 2, large)  # larger than the ring keeps of one: summarized at once
    assert inspector.ring[-1].capture is None
    feed, rows = inspector.subscribe()  # a page lists them: rows, no summary yet
    assert len(rows) == 2 and inspector.ring[0].capture is not None
    _finished(inspector, 3)  # a page watching: the new row goes out at the exchange's end
    assert len(feed.rows) == 1 and inspector.ring[-1].capture is not None
    assert b'"request"' in (inspector.detail(1) or b"")  # a page opens one: summarized then
    assert inspector.ring[0].capture is None


def test_a_failure_of_the_inspector_reaches_neither_request_nor_page(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(raw: bytes, content: bool, budget: int) -> dict[str, Any]:
        raise ValueError("a bug")

    monkeypatch.setattr("proxy.ops.inspector.summarize", broken)
    inspector = Inspector(10, 64 * 1024, content=False)
    inspector.subscribe()
    _finished(inspector, 1)
    detail = orjson.loads(inspector.detail(1) or b"")
    assert detail["failed"] and detail["row"]["seq"] == 1
