"""Graceful shutdown: SIGTERM stops accepting, readiness turns false, open streams get the
drain timeout to finish and are then ended with the `shutting_down` error event.

The first two tests run the real `toolcall-proxy serve` in a subprocess in front of the
simulated provider (paced streams on loopback) and send it a real SIGTERM; the others check
the pieces in process (readiness through uvicorn's wrappers, a cut before the response head).
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
import uvicorn
from prometheus_client.parser import text_string_to_metric_families

from proxy.config.load import Route, Settings
from proxy.server.app import ProxyApp, create_app
from proxy.server.asgi import Message
from proxy.server.draining import (
    BACKSTOP_SECONDS,
    DrainingServer,
    ResponseProgress,
    end_for_shutdown,
    find_drainable,
    graceful_timeout,
)
from proxy.simulator import SimulatorLog, create_simulator_app
from tests.ops.helpers import clean_env, serve_process, simulator, wait_until

# Deadline for the process to exit after SIGTERM: uvicorn's own backstop comes
# BACKSTOP_SECONDS after the drain timeout, so waiting past it lets the logs tell which of the
# two ended the stream. A deadline only: what is asserted is the order of events.
EXIT_DEADLINE = BACKSTOP_SECONDS + 15.0
# uvicorn's line when its own cancellation (timeout_graceful_shutdown) ends what is left.
BACKSTOP_LINE = "timeout graceful shutdown exceeded"


def _chat(model: str) -> dict[str, Any]:
    return {
        "model": model,
        "stream": True,
        "messages": [{"role": "user", "content": "count slowly"}],
    }


def _data_events(lines: Iterator[str]) -> Iterator[bytes]:
    """The `data:` payloads of an SSE body, in order."""
    for line in lines:
        if line.startswith("data:"):
            yield line[5:].strip().encode()


def _has_content(event: bytes) -> bool:
    if event == b"[DONE]":
        return False
    chunk = orjson.loads(event)
    return any(c.get("delta", {}).get("content") for c in chunk.get("choices", ()))


def _gauge(metrics_text: str, name: str) -> float:
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            if sample.name == name:
                return float(sample.value)
    raise AssertionError(f"{name} not in /metrics")


def _assert_not_serving(base: str) -> None:
    """After SIGTERM: /readyz answers 503, or the listener is already closed (never 200)."""
    try:
        with httpx.Client(timeout=5) as fresh:
            status = fresh.get(base + "/readyz").status_code
    except httpx.TransportError:
        return  # refused or dropped: the server no longer takes requests
    assert status == 503


def _events_in_order(lines: list[str], *markers: str) -> list[int]:
    """The index of the first log line containing each marker, in the order given."""
    found = []
    for marker in markers:
        index = next((i for i, line in enumerate(lines) if marker in line), None)
        assert index is not None, f"no log line with {marker!r}:\n" + "\n".join(lines)
        found.append(index)
    return found


def test_sigterm_ends_a_stream_longer_than_the_drain_timeout_with_shutting_down() -> None:
    drain = 2.0
    with simulator() as sim:
        args = ["--upstream", sim.url + "/v1", "--port", "0", "--drain-timeout", str(drain)]
        with serve_process(args, env=clean_env()) as proxy:
            base = proxy.wait_started()
            with httpx.Client(timeout=30) as client:
                assert client.get(base + "/readyz").status_code == 200
                # 3000 chunks 20 ms apart: a minute of stream, far beyond the drain timeout.
                request = _chat("paced+chunks=3000+delay_ms=20")
                with client.stream("POST", base + "/v1/chat/completions", json=request) as reply:
                    assert reply.status_code == 200
                    events = _data_events(reply.iter_lines())
                    assert _has_content(next(e for e in events if _has_content(e)))
                    metrics = client.get(base + "/metrics").text
                    assert _gauge(metrics, "toolcall_proxy_active_streams") == 1.0
                    sent = proxy.terminate()
                    proxy.wait_for_line(lambda line: "drain_started" in line, 10, "drain start")
                    # Readiness is gone while the stream is still being served.
                    _assert_not_serving(base)
                    after = list(events)
                    ended = time.monotonic()
            code = proxy.wait_exit(timeout=drain + EXIT_DEADLINE)

    assert sum(_has_content(e) for e in after[:-1]) > 0, "the stream went on while draining"
    assert b"[DONE]" not in after
    error = orjson.loads(after[-1])["error"]
    assert error["type"] == "proxy_error"
    assert error["code"] == "shutting_down"
    assert ended - sent >= drain, "the stream was cut before the drain timeout"
    assert code in (0, -signal.SIGTERM)
    # The app's drain timer cut the stream (not uvicorn's backstop), then the server exited.
    lines = proxy.lines
    started, expired, cut, finished = _events_in_order(
        lines, '"drain_started"', '"drain_expired"', '"shutting_down"', "Finished server process"
    )
    assert started < expired < cut < finished
    assert orjson.loads(lines[expired])["cut_requests"] == 1
    assert orjson.loads(lines[cut])["status"] == 200
    assert not any(BACKSTOP_LINE in line for line in lines)


def test_sigterm_lets_a_stream_shorter_than_the_drain_timeout_finish() -> None:
    drain = 30.0
    with simulator() as sim:
        args = ["--upstream", sim.url + "/v1", "--port", "0", "--drain-timeout", str(drain)]
        with serve_process(args, env=clean_env()) as proxy:
            base = proxy.wait_started()
            with httpx.Client(timeout=30) as client:
                # 60 chunks 50 ms apart: about 3 s of stream, well inside the drain timeout.
                request = _chat("paced+chunks=60+delay_ms=50")
                with client.stream("POST", base + "/v1/chat/completions", json=request) as reply:
                    assert reply.status_code == 200
                    events = _data_events(reply.iter_lines())
                    assert _has_content(next(e for e in events if _has_content(e)))
                    proxy.terminate()
                    proxy.wait_for_line(lambda line: "drain_started" in line, 10, "drain start")
                    _assert_not_serving(base)
                    after = list(events)
            code = proxy.wait_exit(timeout=drain + EXIT_DEADLINE)

    assert sum(_has_content(e) for e in after) >= 10, "the stream was still open at SIGTERM"
    assert after[-1] == b"[DONE]"
    assert not any(b'"error"' in e for e in after)
    assert code in (0, -signal.SIGTERM)
    # It left as soon as the stream was done: the request finished and the server exited
    # before the drain timer fired (it never logged its expiry) or uvicorn's backstop.
    lines = proxy.lines
    started, done, finished = _events_in_order(
        lines, '"drain_started"', '"msg":"request"', "Finished server process"
    )
    assert started < done < finished
    assert "error" not in orjson.loads(lines[done])
    assert not any('"drain_expired"' in line or BACKSTOP_LINE in line for line in lines)


def test_stock_uvicorn_cancellation_also_ends_streams_with_shutting_down() -> None:
    """With --workers N each worker runs uvicorn's own server (no DrainingServer): its cancel
    at timeout_graceful_shutdown still ends the stream with the error event."""
    with simulator() as sim:
        app = create_app(Settings(routes=(Route(name="r", upstream=sim.url + "/v1"),)))
        config = uvicorn.Config(
            app, host="127.0.0.1", port=0, log_level="warning", timeout_graceful_shutdown=1
        )
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        wait_until(lambda: server.started or not thread.is_alive(), 15, "the proxy to start")
        port = server.servers[0].sockets[0].getsockname()[1]
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        with httpx.Client(timeout=30) as client:
            request = _chat("paced+chunks=3000+delay_ms=20")
            with client.stream("POST", url, json=request) as reply:
                events = _data_events(reply.iter_lines())
                assert _has_content(next(e for e in events if _has_content(e)))
                server.should_exit = True  # what uvicorn's own SIGTERM handler does
                after = list(events)
        thread.join(timeout=15)
        assert not thread.is_alive()
    assert b"[DONE]" not in after
    assert orjson.loads(after[-1])["error"]["code"] == "shutting_down"


async def _lifespan_startup(app: Any) -> None:
    messages: asyncio.Queue[Message] = asyncio.Queue()
    sent: list[Message] = []
    await messages.put({"type": "lifespan.startup"})

    async def send(message: Message) -> None:
        sent.append(message)

    task = asyncio.create_task(app({"type": "lifespan"}, messages.get, send))
    deadline = time.monotonic() + 5
    while not sent:
        assert time.monotonic() < deadline and not task.done(), "lifespan startup did not finish"
        await asyncio.sleep(0.01)
    assert sent[0]["type"] == "lifespan.startup.complete"
    task.cancel()


async def test_sigterm_handler_makes_readiness_false_through_uvicorn_wrappers() -> None:
    settings = Settings(
        routes=(Route(name="r", upstream="http://127.0.0.1:9/v1"),),
        cors_origins=("https://app.example.com",),
    )
    config = uvicorn.Config(create_app(settings), proxy_headers=True, log_level="warning")
    config.load()
    inner = find_drainable(config.loaded_app)
    assert isinstance(inner, ProxyApp)
    await _lifespan_startup(config.loaded_app)
    transport = httpx.ASGITransport(app=config.loaded_app)
    async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as client:
        assert (await client.get("/readyz")).status_code == 200
        server = DrainingServer(config)
        server.handle_exit(signal.SIGTERM, None)  # what the signal handler runs
        assert server.should_exit
        assert inner.draining
        ready = await client.get("/readyz")
        assert ready.status_code == 503
        assert (await client.get("/healthz")).status_code == 200


async def test_drain_timeout_cut_before_the_response_head_answers_503() -> None:
    sim_log = SimulatorLog()
    upstream = httpx.AsyncClient(transport=httpx.ASGITransport(app=create_simulator_app(sim_log)))
    app = ProxyApp(
        Settings(routes=(Route(name="r", upstream="http://sim/v1"),), drain_timeout=0.5),
        client=upstream,
    )
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as client:
        # fault-hang: the upstream sends no response head for 30 s.
        body = {"model": "fault-hang", "messages": [{"role": "user", "content": "hi"}]}
        pending = asyncio.create_task(client.post("/v1/chat/completions", json=body))
        deadline = time.monotonic() + 5
        while not (app.open_requests == 1 and sim_log.requests):
            assert time.monotonic() < deadline, "the request never reached the upstream"
            await asyncio.sleep(0.01)
        assert app.cut_open_requests() == 1
        reply = await asyncio.wait_for(pending, 5)
    assert reply.status_code == 503
    assert reply.json()["error"]["code"] == "shutting_down"
    assert reply.json()["error"]["type"] == "proxy_error"
    assert app.open_requests == 0
    assert b"toolcall_proxy_shutdown_cut_total 1.0" in app.metrics.render()
    await upstream.aclose()


class _Recorder:
    def __init__(self) -> None:
        self.messages: list[Message] = []

    async def __call__(self, message: Message) -> None:
        self.messages.append(message)


@pytest.mark.parametrize(
    ("content_type", "started", "expected"),
    [
        (None, False, "503 with the error body"),
        (b"text/event-stream; charset=utf-8", True, "error event, then end"),
        (b"application/json", True, "nothing: the server drops the connection"),
    ],
)
async def test_end_for_shutdown_matches_how_far_the_response_got(
    content_type: bytes | None, started: bool, expected: str
) -> None:
    recorder = _Recorder()
    progress = ResponseProgress(recorder)
    if started:
        headers = [(b"content-type", content_type)]
        await progress({"type": "http.response.start", "status": 200, "headers": headers})
        await progress({"type": "http.response.body", "body": b"data: {}\n\n", "more_body": True})
    before = len(recorder.messages)
    status = await end_for_shutdown(progress, "req_1")
    new = recorder.messages[before:]
    if expected.startswith("503"):
        assert status == 503
        assert new[0]["type"] == "http.response.start" and new[0]["status"] == 503
        assert orjson.loads(new[1]["body"])["error"]["code"] == "shutting_down"
    elif expected.startswith("error event"):
        assert status == 200
        assert new[0]["body"].startswith(b'data: {"error":')
        assert b'"code":"shutting_down"' in new[0]["body"]
        assert new[-1] == {"type": "http.response.body", "body": b""}
        assert progress.finished
    else:
        assert status == 200
        assert new == []
    finished_status = await end_for_shutdown(progress, "req_1")
    assert len(recorder.messages) == len(new) + before  # ending twice sends nothing more
    assert finished_status == status


def test_uvicorn_backstop_comes_after_the_drain_timeout() -> None:
    assert graceful_timeout(30.0) > 30.0
    assert graceful_timeout(0.0) > 0
