"""How the app serves what it does not repair: passthrough, and client disconnects.

- `passthrough`: SPEC §1, any other request under the base goes upstream and back unchanged,
  streamed both ways.
- `until_disconnect`: SPEC §6, a client that leaves cancels its upstream request at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Coroutine
from types import CoroutineType
from typing import Any

import httpx

from proxy.asgi import Message, Receive, Scope, Send, with_request_id
from proxy.config import Route
from proxy.observability import Metrics, RequestLog
from proxy.server import ResponseProgress
from proxy.upstream import client_response_headers, timeouts
from proxy.upstream_call import open_upstream, relay


async def passthrough(
    client: httpx.AsyncClient,
    metrics: Metrics,
    scope: Scope,
    send: Send,
    route: Route,
    url: str,
    headers: list[tuple[bytes, bytes]],
    raw: bytes,
    log: RequestLog,
) -> int:
    """SPEC §1: any other request under the base goes through unchanged."""
    response = await open_upstream(
        client, scope["method"], url, headers, raw or None, timeouts(route)
    )
    log.mark_first_byte()
    headers = with_request_id(
        client_response_headers(response.headers, keep_length=True), log.fields["request_id"]
    )
    try:
        failure = await relay(response, send, headers)
    finally:
        await response.aclose()
    if failure is not None:
        metrics.stream_failed(log, failure)
    return response.status_code


async def until_disconnect(
    work: Any,
    receive: Receive,
    log: RequestLog,
    progress: ResponseProgress,
    task: asyncio.Task[Any] | None,
) -> int:
    """Run `work`, cancelling it (and so the upstream request) the moment the client leaves.

    uvicorn does not fail `send()` after a disconnect, so only `receive()` tells us. Once
    the response is complete, uvicorn's `receive()` answers `http.disconnect` at once:
    that is no client leaving, and the work (reading the rest of an upstream body whose
    `[DONE]` already went out) goes on. `task` is the one running this.
    """
    assert task is not None
    watch = _DisconnectWatch(receive, task, progress)
    try:
        return int(await work)
    except asyncio.CancelledError:
        if not watch.left:
            raise
        task.uncancel()
        log.fields["client_disconnected"] = True
        return 499
    finally:
        watch.stop()


class _DisconnectWatch:
    """Waits for the client's `http.disconnect` beside the request's work, without a task.

    A watcher task per request cost 11K instructions more than this (of 531K for a small
    request, bench.inprocess --instructions): the task, its entry in asyncio's registry of
    tasks (a WeakSet), its scheduling, and its cancellation at the end. Here the `receive()`
    coroutine is stepped by hand from the done-callback of the future it waits on, as a
    task's step would: uvicorn's `receive()` waits on an asyncio.Event, so that is one
    future per request, and stopping the watch closes the coroutine (which takes its waiter
    off the event).
    """

    __slots__ = ("_coro", "_handle", "_progress", "_receive", "_task", "_waited", "left")

    def __init__(self, receive: Receive, task: asyncio.Task[Any], progress: ResponseProgress):
        self._receive = receive
        self._task = task
        self._progress = progress
        self.left = False  # the client went away: `task` was cancelled for that
        self._waited: asyncio.Future[Any] | None = None
        self._handle: asyncio.Handle | None = None
        self._coro: Coroutine[Any, Any, Message] | None = _receiving(receive)
        self._step()

    def _step(self, _: object = None) -> None:
        self._waited = self._handle = None
        coro = self._coro
        while coro is not None:
            try:
                waited = coro.send(None)
            except StopIteration as done:
                if done.value["type"] == "http.disconnect":
                    self._coro = None
                    if not self._progress.finished:
                        self.left = True
                        self._task.cancel()
                    return
                coro = self._coro = _receiving(self._receive)
                continue
            except Exception:  # receive() failed: there is nothing more to watch
                self._coro = None
                return
            if waited is None:  # a bare `yield` (asyncio.sleep(0)): go on at the next turn
                self._handle = self._task.get_loop().call_soon(self._step)
            else:  # an asyncio future, as a task would have awaited it
                waited._asyncio_future_blocking = False
                waited.add_done_callback(self._step)
                self._waited = waited
            return

    def stop(self) -> None:
        """The work is over: stop waiting (the coroutine's waiter leaves the event)."""
        if self._waited is not None:
            self._waited.remove_done_callback(self._step)
        if self._handle is not None:
            self._handle.cancel()
        if self._coro is not None:
            self._coro.close()
            self._coro = None


def _receiving(receive: Receive) -> Coroutine[Any, Any, Message]:
    """`receive()` as a coroutine to step (a server's receive may return another awaitable)."""
    awaitable = receive()
    if type(awaitable) is CoroutineType:
        return awaitable  # type: ignore[return-value]  # mypy cannot narrow on type(x) is
    return _awaiting(awaitable)


async def _awaiting(awaitable: Awaitable[Message]) -> Message:
    return await awaitable
