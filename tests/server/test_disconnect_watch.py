"""The disconnect watch steps `receive()` by hand (no task per request): it must still cancel
the work the moment the client leaves, whatever awaitable the server's `receive` returns."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from proxy.ops.observability import RequestLog
from proxy.server.draining import ResponseProgress
from proxy.server.forwarding import DisconnectWatch


async def _sent(message: Any) -> None:
    return None


async def _serve(receive: Any, progress: ResponseProgress, leave: asyncio.Event) -> int:
    """Work that waits until told to stop (or for ever), under the watch."""
    log = RequestLog("req_1", "r", "POST", "/v1/chat/completions")

    async def work() -> int:
        await asyncio.wait_for(asyncio.Event().wait(), timeout=10)
        return 200

    status = 499
    with DisconnectWatch(receive, asyncio.current_task(), progress, log):
        leave.set()
        status = await work()
    return status


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

    status = 499
    with DisconnectWatch(receive, asyncio.current_task(), progress, log):
        status = await work()
    assert status == 200
    assert "client_disconnected" not in log.fields


class _UvicornLikeCycle:
    """receive() and send() as uvicorn's request cycle has them: receive waits on an event
    that send sets when the response ends (and a disconnect sets too)."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.complete = False
        self.disconnected = False
        self.calls = 0
        self.returned = 0
        self.closed = 0

    async def receive(self) -> dict[str, Any]:
        self.calls += 1
        try:
            await self.event.wait()
        except GeneratorExit:
            self.closed += 1
            raise
        self.event.clear()
        self.returned += 1
        if self.disconnected or self.complete:
            return {"type": "http.disconnect"}
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(self, message: Any) -> None:
        if message["type"] == "http.response.body" and not message.get("more_body"):
            self.complete = True
            self.event.set()

    def leave(self) -> None:
        self.disconnected = True
        self.event.set()


def _watching(cycle: _UvicornLikeCycle) -> tuple[DisconnectWatch, ResponseProgress, RequestLog]:
    """A watch over `cycle`'s receive for the running task, with the response's progress."""
    progress = ResponseProgress(cycle.send)
    log = RequestLog("req_3", "r", "POST", "/v1/chat/completions")
    return DisconnectWatch(cycle.receive, asyncio.current_task(), progress, log), progress, log


def _nothing_cancelled(log: RequestLog) -> None:
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
    assert "client_disconnected" not in log.fields


async def _turns_until(done: Any) -> bool:
    """Let the loop run until `done()` holds (bounded: 100 turns)."""
    for _ in range(100):
        if done():
            return True
        await asyncio.sleep(0)
    return done()


async def test_after_a_complete_response_receive_runs_to_its_end_and_cancels_nothing() -> None:
    cycle = _UvicornLikeCycle()
    watch, progress, log = _watching(cycle)
    status = 499
    with watch:
        await progress({"type": "http.response.start", "status": 200, "headers": []})
        await progress({"type": "http.response.body", "body": b"{}"})
        status = 200
    assert status == 200
    # The step the response's end scheduled finishes receive() (not closed), once.
    assert await _turns_until(lambda: cycle.returned == 1)
    cycle.leave()
    await _turns_until(lambda: False)
    assert (cycle.calls, cycle.returned, cycle.closed) == (1, 1, 0)
    assert not cycle.event._waiters
    _nothing_cancelled(log)


async def test_a_block_that_ends_before_the_response_closes_receive_at_once() -> None:
    cycle = _UvicornLikeCycle()
    watch, _, log = _watching(cycle)
    with pytest.raises(ValueError), watch:
        raise ValueError("the work failed before its response")  # the app answers it next
    assert (cycle.calls, cycle.closed) == (1, 1)
    assert not cycle.event._waiters  # its waiter left the event
    cycle.leave()  # the client leaving while the app answers the failure cancels nothing
    await _turns_until(lambda: False)
    _nothing_cancelled(log)


async def test_a_receive_that_answers_after_the_block_is_not_asked_again() -> None:
    cycle = _UvicornLikeCycle()
    watch, _, _ = _watching(cycle)
    with watch:
        cycle.event.set()  # something other than a disconnect arrives as the work ends
    assert await _turns_until(lambda: cycle.returned == 1)
    await _turns_until(lambda: False)
    assert cycle.calls == 1
    assert not cycle.event._waiters


async def test_a_client_that_leaves_mid_work_gets_499_and_is_logged() -> None:
    cycle = _UvicornLikeCycle()
    watch, _, log = _watching(cycle)
    status = 499
    with watch:
        asyncio.get_running_loop().call_soon(cycle.leave)
        await asyncio.wait_for(asyncio.Event().wait(), timeout=10)
        status = 200
    assert status == 499
    assert log.fields["client_disconnected"] is True
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
