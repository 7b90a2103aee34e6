"""The shell of every repaired API surface: moves bytes between client, upstream and core.

It decides nothing about tool calls, nor about any surface's grammar: translation, id
decisions, stream repair, replay detection and the shape of errors inside a stream are the
request's exchange's (`proxy.core.surface_codec`; one per surface, e.g. `proxy.chat`). What it owns
is I/O: the upstream request, the response head, follow-up rounds when the exchange asks for
them (SPEC §5), turning upstream failures into the errors of SPEC §6, logs and metrics.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from types import AsyncGeneratorType
from typing import Any, assert_never

import httpx

from proxy.config.load import Route
from proxy.core.errors import ProxyError, UpstreamStreamError
from proxy.core.events import (
    ExchangeEvent,
    Forward,
    LoopDetected,
    OpenFollowup,
    UpstreamBroken,
)
from proxy.core.families import route_profile
from proxy.core.rounds import RouteRules
from proxy.core.sse import SSEFramingError
from proxy.core.surface_codec import Exchange, SurfaceCodec
from proxy.ops.observability import LOGGER, Metrics, RequestLog
from proxy.server.asgi import Send
from proxy.server.client_writer import ClientWriter
from proxy.server.exchange_report import ExchangeReporter
from proxy.server.upstream_answer import client_writer, refuse
from proxy.upstream.call import UpstreamResponse, open_upstream
from proxy.upstream.client import (
    UPSTREAM_FAILURES,
    map_upstream_errors,
    timeouts,
    upstream_failure,
)


@dataclass(slots=True)
class ExchangeRequest:
    codec: SurfaceCodec
    route: Route
    url: str
    headers: list[tuple[bytes, bytes]]
    request_id: str
    log: RequestLog


class ExchangeHandler:
    def __init__(self, client: httpx.AsyncClient, metrics: Metrics):
        self.client = client
        self.metrics = metrics
        self.report = ExchangeReporter(metrics)
        # Each route's tool-call rules, built once (routes are fixed for the app's life).
        # Keyed by identity: hashing and comparing a Route's fields per request cost more
        # than building the rules.
        self._rules: dict[int, tuple[Route, RouteRules]] = {}

    def _rules_for(self, route: Route) -> RouteRules:
        cached = self._rules.get(id(route))
        if cached is not None and cached[0] is route:
            return cached[1]
        rules = RouteRules(
            ids=route.ids,
            dialect=route.dialect,
            replay_guard=route.replay_guard,
            max_followups=route.max_followups,
            repeat_guard=route.repeat_guard,
            repeat_exempt=route.repeat_exempt,
            text_tool_calls=route.text_tool_calls == "auto",
            request_repair=route.request_repair,
            upstream_profile=route_profile(route.upstream_profile, route.upstream),
            reasoning_passback=route.reasoning_passback,
        )
        self._rules[id(route)] = (route, rules)
        return rules

    async def handle(
        self, req: ExchangeRequest, send: Send, raw: bytes, body: dict[str, Any]
    ) -> int:
        """Serve one request of a repaired surface; returns the status sent to the client."""
        exchange = req.codec.new_exchange(body, raw, self._rules_for(req.route), os.urandom)
        fields = req.log.fields  # set one by one: update(**) would build a dict to copy
        fields["surface"] = req.codec.surface.label
        fields["model"] = body.get("model")
        fields["stream"] = body.get("stream") is True
        fields["dialect"] = exchange.facts.dialect
        if exchange.dropped:
            fields["dropped"] = list(exchange.dropped)
        inspector = self.report.inspector  # SPEC §12: references only, summarized at the end
        if inspector is not None:
            inspector.opened(req.log, raw, exchange.upstream_request)
        tracer = self.report.tracer  # SPEC §12: the request's span, from here to its end
        if tracer is not None:
            send = tracer.opened(req.log, req.route, fields["surface"], body, req.headers, send)
        self.report.opened(req, exchange)  # before the answer's head names the repairs
        response = await self._open(req, exchange.upstream_request)
        try:
            writer = client_writer(req, send, response, exchange)
            if writer is None:
                return await refuse(req, response, send, self.metrics)
            if writer.streaming:
                self.metrics.active_streams.inc()
            try:
                return await self._rounds(req, exchange, writer, response)
            finally:
                if writer.streaming:
                    self.metrics.active_streams.dec()
                self.report.record(req, exchange)
        finally:
            if not response.released():
                await response.aclose()

    async def _open(self, req: ExchangeRequest, content: bytes) -> UpstreamResponse:
        """Send one round's request; its time to the response head is observed on its own
        (the log line's `ttfb` is the first round's, from the client's request)."""
        follow_up = req.log.ttfb is not None
        headers = req.headers
        tracer = self.report.tracer  # SPEC §12: the round's span, its traceparent upstream
        if tracer is not None:
            headers = tracer.round(req.log, headers)
        sent = time.perf_counter()
        try:
            response = await open_upstream(
                self.client, "POST", req.url, headers, content, timeouts(req.route)
            )
        except UPSTREAM_FAILURES as exc:  # map_upstream_errors, without a with block
            raise upstream_failure(exc, streaming_body=False) from None
        if tracer is not None:
            tracer.round_answered(req.log, response.status_code)
        if follow_up:
            self.metrics.ttfb.observe(time.perf_counter() - sent)
        else:
            req.log.mark_first_byte()
            self.metrics.ttfb.observe(req.log.ttfb or 0.0)
        return response

    # -- the rounds: one loop, streaming or not ---------------------------------------------------

    async def _rounds(
        self,
        req: ExchangeRequest,
        exchange: Exchange,
        writer: ClientWriter,
        response: UpstreamResponse,
    ) -> int:
        """Feed the exchange each round's body and act on what it says (SPEC §5). A round's
        body is read under the upstream error mapping (the exchange's errors and the writer's
        are no httpx errors, so the mapping leaves them alone); what breaks a round is told to
        the client as `_round_failure` says. Each round is awaited here, not through a coroutine of its
        own around it: a frame less, on the request's way and at each of its waits."""
        followup_response: UpstreamResponse | None = None
        try:
            while True:
                exchange.begin_round(stream=writer.streaming)
                try:
                    if writer.streaming:
                        step = await self._stream_round(req, exchange, writer, response)
                    else:
                        step = await self._message_round(req, exchange, writer, response)
                except _ROUND_FAILURES as exc:
                    await self._fail(req, writer, _round_failure(req, exc))
                    step = None
                if not isinstance(step, OpenFollowup):
                    if not writer.ended:
                        await writer.close()
                    return writer.status
                self.report.answered(req, list(step.replays))
                try:
                    followup_response = response = await self._open(req, step.body)
                except ProxyError as exc:
                    await self._fail(req, writer, exc)
                    return await _ended(writer)
                if not await self._accepted(req, writer, response):
                    return await _ended(writer) if writer.streaming else response.status_code
        finally:
            if followup_response is not None:
                await followup_response.aclose()

    async def _accepted(
        self, req: ExchangeRequest, writer: ClientWriter, response: UpstreamResponse
    ) -> bool:
        """Is a follow-up's answer one the round can read? If not, the client is told."""
        ok = 200 <= response.status_code < 300
        if ok and not writer.streaming:
            return True  # a body that is not a JSON object is the exchange's to refuse
        if ok and "text/event-stream" in response.content_type():
            return True
        if writer.streaming:
            # Its body is not read: a failure there would escape unmapped, and the transport
            # closes a connection whose body was left unread.
            await self._fail(
                req,
                writer,
                UpstreamStreamError(
                    f"the upstream answered the follow-up request with HTTP {response.status_code}"
                ),
            )
        else:
            await refuse(req, response, writer.send, self.metrics)
        return False

    async def _stream_round(
        self,
        req: ExchangeRequest,
        exchange: Exchange,
        writer: ClientWriter,
        response: UpstreamResponse,
    ) -> OpenFollowup | _RoundOver | None:
        """A stream's body, fed as it arrives. Its source is read here rather than through
        `iter_body`: an async generator more per round cost a hook call and an entry in the
        loop's WeakSet of them, and a generator step per read."""
        chunks = response.chunks(decoded=True).__aiter__()
        try:
            with map_upstream_errors(streaming_body=True):
                async for chunk in chunks:
                    events = exchange.feed(chunk) if chunk else None
                    if not events:
                        continue
                    if len(events) == 1 and type(first := events[0]) is bytes:
                        await writer.write(first)  # the hot path: a stream goes on
                        continue
                    if (step := await self._act(req, writer, events)) is not None:
                        await _drain(response, chunks)  # the rest is not needed
                        return step
                if not response.released():  # the body ended: its connection goes back now
                    await response.aclose()
            return await self._act(req, writer, exchange.end())
        finally:
            if isinstance(chunks, AsyncGeneratorType):
                await chunks.aclose()

    async def _message_round(
        self,
        req: ExchangeRequest,
        exchange: Exchange,
        writer: ClientWriter,
        response: UpstreamResponse,
    ) -> OpenFollowup | _RoundOver | None:
        """A whole message: read to its end (the exchange answers only then), then fed once."""
        try:
            body = await response.read()
        except UPSTREAM_FAILURES as exc:  # map_upstream_errors, without a with block
            raise upstream_failure(exc, streaming_body=True) from None
        if not response.released():  # its connection goes back before the answer is worked on
            await response.aclose()
        events = exchange.feed(body) if body else None
        if events and (step := await self._act(req, writer, events)) is not None:
            return step
        events = exchange.end()
        if len(events) == 1 and type(only := events[0]) is Forward and only.last:
            # The usual answer, one whole body: what _act does with it, without its coroutine.
            await writer.write(only.data, last=True)
            return ROUND_OVER
        return await self._act(req, writer, events)

    async def _act(
        self, req: ExchangeRequest, writer: ClientWriter, events: list[ExchangeEvent]
    ) -> OpenFollowup | _RoundOver | None:
        """Carry out the exchange's events; None while the round goes on."""
        for event in events:
            match event:
                case bytes():
                    await writer.write(event)
                case Forward(data=data, last=last):
                    await writer.write(data, last=last)
                    if last:
                        # The client's body ended (a stream's with `[DONE]`): the rest of the
                        # upstream's is not forwarded, and the request's duration ends here.
                        if writer.streaming:
                            req.log.mark_response_end()
                        return ROUND_OVER
                case OpenFollowup():
                    return event
                case LoopDetected(error=error):
                    self.report.tripped(req, error)
                    await writer.stop_loop(error)
                    return ROUND_OVER
                case UpstreamBroken(error=error):
                    await self._fail(req, writer, error)  # counted as the upstream's fault
                    return ROUND_OVER
                case _:
                    assert_never(event)
        return None

    async def _fail(self, req: ExchangeRequest, writer: ClientWriter, exc: ProxyError) -> None:
        if writer.streaming:
            self.metrics.stream_failed(req.log, exc)
        await writer.fail(exc)


async def _ended(writer: ClientWriter) -> int:
    """A response the rounds stopped early still ends its body: a stream cut off after its
    error event is a broken connection to the client, which retries it (SPEC §6)."""
    if not writer.ended:
        await writer.close()
    return writer.status


class _RoundOver:
    """What _act returns when the response ended (written whole, or stopped)."""


ROUND_OVER = _RoundOver()


def _round_failure(req: ExchangeRequest, exc: Exception) -> ProxyError:
    """What the client is told (SPEC §6) of a round that broke: the upstream's stream, or our
    bug (the exchange failed on what the upstream sent), which is logged with its traceback."""
    if isinstance(exc, SSEFramingError):
        return UpstreamStreamError(str(exc))
    if isinstance(exc, UpstreamStreamError):
        return exc
    LOGGER.error(
        "core failed on upstream data",
        exc_info=exc,
        extra={"fields": {"request_id": req.request_id}},
    )
    return ProxyError(
        f"the proxy could not process the upstream stream ({type(exc).__name__})",
        code="proxy_internal_error",
    )


# What breaks a round (see _round_failure): the upstream's stream, or the exchange failing on it.
_ROUND_FAILURES = (
    SSEFramingError,
    UpstreamStreamError,
    KeyError,
    TypeError,
    ValueError,
    AttributeError,
    IndexError,
)


# After the client's body ended, the rest of the upstream's body is read (and dropped) so its
# connection can be reused: usually only the chunked terminator, already there. Past these
# bounds the connection is closed instead, so no upstream can hold a task after its client left.
DRAIN_BYTES = 64 * 1024
DRAIN_SECONDS = 2.0


async def _drain(response: UpstreamResponse, chunks: AsyncIterator[bytes]) -> None:
    """Read the rest of the body for the pool, within bounds; directly when all of it has
    arrived and been read (the usual case: the end came with the last read), since
    `asyncio.timeout` schedules and cancels a timer and looks up the task."""
    if response.body_settled():
        async for _ in chunks:  # ends at once: nothing to wait for
            pass
        return
    drained = 0
    try:
        async with asyncio.timeout(DRAIN_SECONDS):
            with map_upstream_errors(streaming_body=True):
                async for chunk in chunks:
                    drained += len(chunk)
                    if drained > DRAIN_BYTES:
                        return
    except (TimeoutError, ProxyError):
        return  # the response is closed unread, and so is its connection
