"""The disconnect watch steps `receive()` by hand (no task per request): it must still cancel
the work the moment the client leaves, whatever awaitable the server's `receive` returns."""

from __future__ import annotations

import asyncio
from typing import Any

from proxy.forwarding import until_disconnect
from proxy.observability import RequestLog
from proxy.server import ResponseProgress


async def _sent(message: Any) -> None:
    return None


async def _serve(receive: Any, progress: ResponseProgress, leave: asyncio.Event) -> int:
    """Work that waits until told to stop (or for ever), under the watch."""
    log = RequestLog("req_1", "r", "POST", "/v1/chat/completions")

    async def work() -> int:
        await asyncio.wait_for(asyncio.Event().wait(), timeout=10)
        return 200

    task = asyncio.current_task()
    serving = until_disconnect(work(), receive, log, progress, task)
    leave.set()
    return await serving


async def test_a_receive_that_returns_a_future_still_cancels_the_work() -> None:
    loop = asyncio.get_running_loop()
    disconnect: asyncio.Future[dict[str, Any]] = loop.create_future()
    leave = asyncio.Event()

    def receive() -> asyncio.Future[dict[str, Any]]:  # not a coroutine
        return disconnect

    serving = asyncio.ensure_future(_serve(receive, ResponseProgress(_sent), leave))
    await leave.wait()
    disconnect.set_result({"type": "http.disconnect"})
    assert await asyncio.wait_for(serving, timeout=5) == 499


async def test_a_receive_that_yields_to_the_loop_still_cancels_the_work() -> None:
    gone = asyncio.Event()
    leave = asyncio.Event()

    async def receive() -> dict[str, Any]:
        while not gone.is_set():
            await asyncio.sleep(0)  # a bare yield to the loop, no future
        return {"type": "http.disconnect"}

    serving = asyncio.ensure_future(_serve(receive, ResponseProgress(_sent), leave))
    await leave.wait()
    gone.set()
    assert await asyncio.wait_for(serving, timeout=5) == 499


async def test_a_disconnect_after_the_response_ended_leaves_the_work_alone() -> None:
    progress = ResponseProgress(_sent)
    await progress({"type": "http.response.start", "status": 200, "headers": []})
    await progress({"type": "http.response.body", "body": b"{}"})
    log = RequestLog("req_2", "r", "POST", "/v1/chat/completions")

    async def receive() -> dict[str, Any]:
        return {"type": "http.disconnect"}  # what uvicorn answers once the response is done

    async def work() -> int:
        await asyncio.sleep(0)
        return 200

    assert await until_disconnect(work(), receive, log, progress, asyncio.current_task()) == 200
    assert "client_disconnected" not in log.fields
