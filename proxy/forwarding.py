"""How the app serves what it does not repair: passthrough, and client disconnects.

- `passthrough`: SPEC §1, any other request under the base goes upstream and back unchanged,
  streamed both ways.
- `until_disconnect`: SPEC §6, a client that leaves cancels its upstream request at once.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from proxy.asgi import Receive, Scope, Send, with_request_id
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
    work: Any, receive: Receive, log: RequestLog, progress: ResponseProgress
) -> int:
    """Run `work`, cancelling it (and so the upstream request) the moment the client leaves.

    uvicorn does not fail `send()` after a disconnect, so only `receive()` tells us. Once
    the response is complete, uvicorn's `receive()` answers `http.disconnect` at once:
    that is no client leaving, and the work (reading the rest of an upstream body whose
    `[DONE]` already went out) goes on.
    """
    task = asyncio.current_task()
    assert task is not None
    left = False

    async def watch() -> None:
        nonlocal left
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                if progress.finished:
                    return
                left = True
                task.cancel()
                return

    watcher = asyncio.create_task(watch())
    try:
        return int(await work)
    except asyncio.CancelledError:
        if not left:
            raise
        task.uncancel()
        log.fields["client_disconnected"] = True
        return 499
    finally:
        watcher.cancel()
