"""The /chat/completions shell: moves bytes between the client, the upstream and the core.

It decides nothing about tool calls itself: translation, id decisions, stream repair and
replay detection all live in `proxy.chat`. What it owns is I/O: the upstream request, the
response head, follow-up rounds when the core asks for them (SPEC §5), and turning upstream
failures into the errors of SPEC §6.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

import httpx
import orjson

from proxy.asgi import Send, send_bytes, send_json, with_request_id
from proxy.chat.decide import ResponseIds
from proxy.chat.guard import GuardState, Replay, build_followup
from proxy.chat.history import HistoryFacts, translate_request
from proxy.chat.message import merge_continuation, sanitize_completion
from proxy.chat.notes import Note
from proxy.chat.stream import Carry, StreamPhase, StreamSanitizer, add_usage
from proxy.config import Route
from proxy.errors import ProxyError, ReplayLoopDetected, UpstreamStreamError
from proxy.jsontext import dumps
from proxy.observability import LOGGER, Metrics, RequestLog, log_decisions
from proxy.sse import SSEFramingError
from proxy.upstream import (
    client_response_headers,
    iter_body,
    map_upstream_errors,
    read_body,
    relay,
    timeouts,
)

SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
]


class ClientStream:
    """The client's event stream. Its head leaves with the first bytes, never before (SPEC §5:
    until then a replay loop can still be answered as an HTTP 422)."""

    __slots__ = ("_headers", "_send", "started")

    def __init__(self, send: Send, headers: list[tuple[bytes, bytes]]):
        self._send = send
        self._headers = headers
        self.started = False

    async def write(self, body: bytes, *, more: bool = True) -> None:
        if not self.started:
            self.started = True
            await self._send(
                {"type": "http.response.start", "status": 200, "headers": self._headers}
            )
        await self._send({"type": "http.response.body", "body": body, "more_body": more})


@dataclass(slots=True)
class ChatRequest:
    route: Route
    url: str
    headers: list[tuple[bytes, bytes]]
    request_id: str
    log: RequestLog
    # The client's response body was ended (its last message sent); nothing may follow.
    body_ended: bool = False


class ChatHandler:
    def __init__(self, client: httpx.AsyncClient, metrics: Metrics):
        self.client = client
        self.metrics = metrics

    async def handle(self, req: ChatRequest, send: Send, raw: bytes, body: dict[str, Any]) -> int:
        """Serve one chat completion; returns the status sent to the client."""
        route = req.route
        translated = translate_request(body, route.dialect)
        guard = GuardState(enabled=route.replay_guard, max_followups=route.max_followups)
        req.log.fields.update(
            model=body.get("model"),
            stream=body.get("stream") is True,
            dialect=translated.facts.dialect,
        )
        response = await self._open(req, translated.to_bytes(raw))
        try:
            status = response.status_code
            content_type = response.headers.get("content-type", "")
            if not 200 <= status < 300:
                return await self._relay(req, response, send)
            ids = ResponseIds(translated.facts, route.ids, guard)
            if "text/event-stream" in content_type:
                return await self._stream(req, send, response, ids, translated.body)
            if "json" in content_type or not content_type:
                return await self._complete(req, send, response, ids, translated.body)
            return await self._relay(req, response, send)
        finally:
            await response.aclose()

    async def _open(self, req: ChatRequest, content: bytes) -> httpx.Response:
        request = self.client.build_request(
            "POST", req.url, headers=req.headers, content=content, timeout=timeouts(req.route)
        )
        with map_upstream_errors(streaming_body=False):
            response = await self.client.send(request, stream=True)
        req.log.mark_first_byte()
        if req.log.ttfb is not None:
            self.metrics.ttfb.observe(req.log.ttfb)
        return response

    async def _relay(self, req: ChatRequest, response: httpx.Response, send: Send) -> int:
        """Non-2xx (or unknown content): status, headers and body unchanged (SPEC §6)."""
        failure = await relay(
            response, send, client_response_headers(response.headers, keep_length=False)
        )
        if failure is not None:
            self.metrics.stream_failed(req.log, failure)
            return response.status_code
        if response.status_code >= 500 or response.status_code == 429:
            self.metrics.upstream_errors.labels(f"status_{response.status_code}").inc()
        return response.status_code

    def _notes(self, req: ChatRequest, notes: list[Note]) -> None:
        if notes:
            self.metrics.record_notes(notes)
            req.log.count(notes)
            log_decisions(req.request_id, notes)
            notes.clear()

    def _answered(self, req: ChatRequest, replays: list[Replay]) -> None:
        self.metrics.replays_answered.inc(len(replays))
        req.log.fields["replays_answered"] += len(replays)
        for replay in replays:
            LOGGER.warning(
                "replay answered",
                extra={
                    "fields": {
                        "request_id": req.request_id,
                        "route": req.route.name,
                        "tool": replay.name,
                        "raw_id": replay.raw_id,
                        "client_id": replay.client_id,
                        "matched": replay.form,
                        "event": "replay_answered",
                    }
                },
            )

    def _tripped(self, req: ChatRequest, exc: ReplayLoopDetected) -> None:
        self.metrics.breaker_trips.inc()
        req.log.fields["breaker"] = True
        LOGGER.warning(
            "replay loop stopped",
            extra={
                "fields": {
                    "request_id": req.request_id,
                    "route": req.route.name,
                    "tool": exc.tool_name,
                    "raw_id": exc.raw_id,
                    "client_id": exc.client_id,
                    "reason": exc.reason,
                    "event": "breaker_trip",
                }
            },
        )

    # -- streaming ------------------------------------------------------------------------------

    async def _stream(
        self,
        req: ChatRequest,
        send: Send,
        response: httpx.Response,
        ids: ResponseIds,
        upstream_body: dict[str, Any],
    ) -> int:
        headers = _rewritten_body_headers(response, (b"content-type", b"cache-control"))
        client = ClientStream(send, with_request_id([*SSE_HEADERS, *headers], req.request_id))
        self.metrics.active_streams.inc()
        try:
            await self._pump_rounds(req, client, response, ids, upstream_body)
        finally:
            self.metrics.active_streams.dec()
        if not req.body_ended:
            await client.write(b"", more=False)
        return 200

    async def _pump_rounds(
        self,
        req: ChatRequest,
        client: ClientStream,
        response: httpx.Response,
        ids: ResponseIds,
        upstream_body: dict[str, Any],
    ) -> None:
        text_calls = req.route.text_tool_calls == "auto"
        core = StreamSanitizer(ids, text_tool_calls=text_calls)
        facts = ids.facts
        followup_response: httpx.Response | None = None
        try:
            while True:
                if not await self._pump(req, client, response, core):
                    return
                followup = core.followup
                if followup is None:
                    return
                try:
                    upstream_body, facts = build_followup(
                        upstream_body, facts, ids.guard, followup.content, followup.replays
                    )
                except ReplayLoopDetected as exc:
                    self._tripped(req, exc)
                    await self._loop_error(client, exc)
                    return
                self._answered(req, followup.replays)
                ids = ResponseIds(facts, req.route.ids, ids.guard)
                core = StreamSanitizer(ids, carry=followup.carry, text_tool_calls=text_calls)
                try:
                    # jsontext.dumps: a valid history nested past 254 levels must not raise
                    followup_response = response = await self._open(req, dumps(upstream_body))
                except ProxyError as exc:
                    await self._stream_error(req, client, exc)
                    return
                if (
                    not 200 <= response.status_code < 300
                    or "text/event-stream" not in response.headers.get("content-type", "")
                ):
                    # Its body is not read: a failure there would escape unmapped, and the
                    # transport closes a connection whose body was left unread.
                    await self._stream_error(
                        req,
                        client,
                        UpstreamStreamError(
                            f"the upstream answered the follow-up request with HTTP {response.status_code}"
                        ),
                    )
                    return
        finally:
            if followup_response is not None:
                await followup_response.aclose()

    @staticmethod
    async def _loop_error(client: ClientStream, exc: ReplayLoopDetected) -> None:
        """SPEC §5: before the first byte, the loop is a plain HTTP 422 (raised to the app,
        which answers it, so agents that retry a stream's error event do not retry it);
        after it, an error event ends the stream."""
        if not client.started:
            raise exc
        await client.write(exc.sse_bytes())

    async def _pump(
        self,
        req: ChatRequest,
        client: ClientStream,
        response: httpx.Response,
        core: StreamSanitizer,
    ) -> bool:
        """Forward one upstream round; False when the stream ended with an error."""
        chunks = iter_body(response, decoded=True)
        try:
            async for chunk in chunks:
                out = core.feed(chunk)
                if core.error is not None:
                    break  # the loop is answered below, with whatever came before it
                if out:
                    # When `[DONE]` goes out, the client's body ends in the same write rather
                    # than after the upstream's own end: nothing after `[DONE]` is forwarded.
                    done = core.phase is StreamPhase.DONE and core.followup is None
                    await client.write(out[0] if len(out) == 1 else b"".join(out), more=not done)
                    if done:
                        req.body_ended = True
                        req.log.mark_response_end()
                        await _drain(chunks)
                        break
                if core.notes:
                    self._notes(req, core.notes)
            else:
                out = core.end()
                if out and core.error is None:
                    await client.write(b"".join(out))
        except SSEFramingError as exc:
            await self._stream_error(req, client, UpstreamStreamError(str(exc)))
            return False
        except UpstreamStreamError as exc:
            await self._stream_error(req, client, exc)
            return False
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:  # our bug
            LOGGER.exception(
                "core failed on upstream data", extra={"fields": {"request_id": req.request_id}}
            )
            await self._stream_error(
                req,
                client,
                ProxyError(
                    f"the proxy could not process the upstream stream ({type(exc).__name__})",
                    code="proxy_internal_error",
                ),
            )
            return False
        finally:
            await chunks.aclose()
        self._notes(req, core.notes)
        if core.non_json_events:
            req.log.fields["non_json_events"] = (
                req.log.fields.get("non_json_events", 0) + core.non_json_events
            )
        if core.error is not None:
            self._tripped(req, core.error)
            # What the core released with the error (content before the loop) goes first.
            if not core.nothing_released:
                await client.write(b"".join(out))
            else:
                await self._loop_error(client, core.error)
            return False
        return True

    async def _stream_error(self, req: ChatRequest, client: ClientStream, exc: ProxyError) -> None:
        self.metrics.stream_failed(req.log, exc)
        await client.write(exc.sse_bytes())

    # -- non-streaming --------------------------------------------------------------------------

    async def _complete(
        self,
        req: ChatRequest,
        send: Send,
        response: httpx.Response,
        ids: ResponseIds,
        upstream_body: dict[str, Any],
    ) -> int:
        headers = _rewritten_body_headers(response, (b"content-type",))
        headers = with_request_id(headers, req.request_id)
        raw = await read_body(response)
        try:
            parsed = orjson.loads(raw)
        except orjson.JSONDecodeError:
            parsed = None
        if not isinstance(parsed, dict):
            await send_bytes(
                send, response.status_code, raw, [(b"content-type", b"application/json"), *headers]
            )
            return response.status_code
        carry: Carry | None = None
        content_before = ""
        facts: HistoryFacts = ids.facts
        while True:
            try:
                result = sanitize_completion(
                    parsed, ids, text_tool_calls=req.route.text_tool_calls == "auto"
                )
            except ReplayLoopDetected as exc:
                self._tripped(req, exc)
                raise
            self._notes(req, result.notes)
            if not result.replays:
                if carry is not None:
                    parsed = merge_continuation(carry, content_before, parsed)
                break
            if carry is None:
                carry = Carry(parsed.get("id"), parsed.get("created"), parsed.get("model"))
            carry.usage = add_usage(carry.usage, parsed.get("usage"))
            content_before += result.content
            try:
                upstream_body, facts = build_followup(
                    upstream_body, facts, ids.guard, result.content, result.replays
                )
            except ReplayLoopDetected as exc:
                self._tripped(req, exc)
                raise
            self._answered(req, result.replays)
            ids = ResponseIds(facts, req.route.ids, ids.guard)
            followup = await self._open(req, dumps(upstream_body))
            try:
                if not 200 <= followup.status_code < 300:
                    return await self._relay(req, followup, send)
                body = await read_body(followup)
            finally:
                await followup.aclose()
            try:
                parsed = orjson.loads(body)
            except orjson.JSONDecodeError:
                parsed = None
            if not isinstance(parsed, dict):
                raise UpstreamStreamError(
                    "the upstream answered the follow-up with a body that is not a JSON object"
                )
        if not result.changed and carry is None:
            await send_bytes(
                send, response.status_code, raw, [(b"content-type", b"application/json"), *headers]
            )
        else:
            await send_json(send, response.status_code, parsed, headers)
        return response.status_code


# After the client's body ended, the rest of the upstream's body is read (and dropped) so its
# connection can be reused: usually only the chunked terminator, already there. Past these
# bounds the connection is closed instead, so no upstream can hold a task after its client left.
DRAIN_BYTES = 64 * 1024
DRAIN_SECONDS = 2.0


async def _drain(chunks: AsyncGenerator[bytes, None]) -> None:
    drained = 0
    try:
        async with asyncio.timeout(DRAIN_SECONDS):
            async for chunk in chunks:
                drained += len(chunk)
                if drained > DRAIN_BYTES:
                    return
    except (TimeoutError, ProxyError):
        return  # the response is closed unread, and so is its connection


def _rewritten_body_headers(
    response: httpx.Response, replaced: tuple[bytes, ...]
) -> list[tuple[bytes, bytes]]:
    """The upstream's headers for a body the proxy re-encodes: it is sent decoded, so its
    content-encoding goes, and so do the headers the proxy sets itself (`replaced`)."""
    drop = (b"content-encoding", *replaced)
    headers = client_response_headers(response.headers, keep_length=False)
    return [h for h in headers if h[0].lower() not in drop]
