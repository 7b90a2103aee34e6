"""How the app serves what it does not repair: passthrough, and client disconnects.

- `passthrough`: SPEC §1, any other request under the base goes upstream and back unchanged,
  streamed both ways.
- `DisconnectWatch`: SPEC §6, a client that leaves cancels its upstream request at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Coroutine
from types import CoroutineType, TracebackType
from typing import Any

import httpx

from proxy.config.load import Route
from proxy.ops.observability import Metrics, RequestLog
from proxy.server.asgi import Message, Receive, Scope, Send, with_request_id
from proxy.server.progress import ResponseProgress
from proxy.upstream.call import open_upstream, relay
from proxy.upstream.client import client_response_headers, map_upstream_errors, timeouts


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
    with map_upstream_errors(streaming_body=False):
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


class DisconnectWatch:
    """SPEC §6: while its `with` block runs, a client that leaves cancels the work (and so the
    upstream request) at once; the block then ends quietly, the client noted in the log.

        status = 499  # what a client that left gets
        with DisconnectWatch(receive, task, progress, log):
            status = await work

    uvicorn does not fail `send()` after a disconnect, so only `receive()` tells us: once the
    body has been read, its next `receive()` waits until the client leaves or the response
    is complete. Once the response is complete it answers `http.disconnect` at once: that is
    no client leaving, and the work (reading the rest of an upstream body whose `[DONE]`
    already went out) goes on. `task` is the one running the block.

    It waits beside the work without a task: a watcher task per request cost 11K instructions
    more than this (of 531K for a small request, bench.inprocess --instructions): the task,
    its entry in asyncio's registry of tasks (a WeakSet), its scheduling, and its cancellation
    at the end. Here the `receive()` coroutine is stepped by hand from the done-callback of
    the future it waits on, as a task's step would: uvicorn's `receive()` waits on an
    asyncio.Event, so that is one future per request. A `with` block rather than a coroutine
    around the work: a frame less, on the request's way and at each of its waits.
    """

    __slots__ = (
        "_coro",
        "_handle",
        "_log",
        "_progress",
        "_receive",
        "_stopped",
        "_task",
        "_waited",
        "left",
    )

    def __init__(
        self,
        receive: Receive,
        task: asyncio.Task[Any] | None,
        progress: ResponseProgress,
        log: RequestLog,
    ):
        assert task is not None
        self._receive = receive
        self._task = task
        self._progress = progress
        self._log = log
        self.left = False  # the client went away: `task` was cancelled for that
        self._stopped = False  # the block ended: a later disconnect cancels nothing
        self._waited: asyncio.Future[Any] | None = None
        self._handle: asyncio.Handle | None = None
        self._coro: Coroutine[Any, Any, Message] | None = None
        awaitable = receive()  # _receiving(receive), inlined: this runs for every request
        self._coro = (
            awaitable if type(awaitable) is CoroutineType else _awaiting(awaitable)  # type: ignore[assignment]
        )
        self._step()

    def __enter__(self) -> DisconnectWatch:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        # The work is over: stop waiting. When the future receive() waits on is already done
        # (uvicorn sets its event as the response ends, so after every complete response),
        # the step it scheduled lets receive() return, which costs less than closing the
        # coroutine (a GeneratorExit thrown through its frames). Otherwise it stops now.
        self._stopped = True
        if self._coro is not None:
            waited = self._waited
            if waited is None or not waited.done():
                self._stop_waiting()
        if self.left and isinstance(exc, asyncio.CancelledError):
            self._task.uncancel()
            self._log.fields["client_disconnected"] = True
            return True  # the work was cancelled for the client that left: it ends here
        return False

    def _client_left(self) -> None:
        """`receive()` answered `http.disconnect`: the client left before the response was
        complete (unless the block has ended or the response is finished)."""
        if not self._stopped and not self._progress.finished:
            self.left = True
            self._task.cancel()

    def _step(self, _: object = None) -> None:
        self._waited = self._handle = None
        coro = self._coro
        while coro is not None:
            try:
                waited = coro.send(None)
            except StopIteration as done:
                if self._stopped:  # receive() ran to its end after the block: nothing to do
                    self._coro = None
                    return
                if done.value["type"] == "http.disconnect":
                    self._coro = None
                    self._client_left()
                    return
                coro = self._coro = _receiving(self._receive)
                continue
            except Exception:  # receive() failed: there is nothing more to watch
                self._coro = None
                return
            if self._stopped:  # it waits again after the block: stop it now
                self._close()
            elif waited is None:  # a bare `yield` (asyncio.sleep(0)): go on at the next turn
                self._handle = self._task.get_loop().call_soon(self._step)
            else:  # an asyncio future, as a task would have awaited it
                waited._asyncio_future_blocking = False
                waited.add_done_callback(self._step)
                self._waited = waited
            return

    def _stop_waiting(self) -> None:
        """Close the coroutine now (its waiter leaves the event) and forget its wake-up."""
        waited = self._waited
        if waited is not None:
            waited.remove_done_callback(self._step)
            self._waited = None
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._close()

    def _close(self) -> None:
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
