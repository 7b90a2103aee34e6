"""What the shell does with an upstream's answer before any round is fed: how it reaches the
client (an event stream, one message), or, when the exchange cannot read it, relayed as it
came (SPEC §6) or put in the client's error shape over a bridge (SPEC §9).

Split from `proxy.server.exchange_handler`, which runs the rounds; this module decides only
what an answer's status, content type and headers call for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from proxy.core.surface_codec import Exchange
from proxy.ops.observability import Metrics
from proxy.server.asgi import REDACTED, Send, redacting, send_bytes, with_request_id
from proxy.server.client_writer import ClientWriter, EventStreamWriter, MessageWriter
from proxy.upstream.call import UpstreamResponse, relay
from proxy.upstream.client import (
    RESPONSE_DROP,
    UPSTREAM_FAILURES,
    client_response_headers,
    headers_without,
    upstream_failure,
)

if TYPE_CHECKING:
    from proxy.server.exchange_handler import ExchangeRequest

DROPPED_HEADER = b"x-toolcall-proxy-dropped-tools"
# SPEC §11: the kinds of repair the request needed before it left, on the answer's head.
REPAIRED_HEADER = b"x-toolcall-proxy-repaired"
SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
]
# The upstream's headers for a body the proxy re-encodes: it is sent decoded, so its
# content-encoding goes, and so do the headers the proxy sets itself.
_EVENT_STREAM_DROP = RESPONSE_DROP | {b"content-encoding", b"content-type", b"cache-control"}
_MESSAGE_DROP = RESPONSE_DROP | {b"content-encoding", b"content-type"}


def client_writer(
    req: ExchangeRequest, send: Send, response: UpstreamResponse, exchange: Exchange
) -> ClientWriter | None:
    """How this answer reaches the client; None: the exchange cannot read it (see `refuse`)."""
    if not 200 <= response.status_code < 300:
        return None
    content_type = response.content_type()
    if "text/event-stream" in content_type:
        headers = headers_without(response.headers, _EVENT_STREAM_DROP)
        return EventStreamWriter(
            send,
            with_request_id(
                [*SSE_HEADERS, *headers, *_dropped(exchange), *repaired(req)], req.request_id
            ),
            render=exchange.stream_error,
            loop_in_stream=req.codec.loop_in_stream,
        )
    if "json" in content_type or not content_type:
        headers = headers_without(response.headers, _MESSAGE_DROP)
        return MessageWriter(
            send,
            response.status_code,
            with_request_id([*headers, *_dropped(exchange), *repaired(req)], req.request_id),
        )
    return None


async def refuse(
    req: ExchangeRequest, response: UpstreamResponse, send: Send, metrics: Metrics
) -> int:
    """An answer the exchange cannot read (non-2xx, unknown content) reaches the client
    unchanged (SPEC §6), or in its own API's shape over a bridge (SPEC §9); returns the
    status sent."""
    if req.codec.upstream_error is not None:
        return await _translated_error(req, response, send, metrics)
    return await _relay(req, response, send, metrics)


async def _translated_error(
    req: ExchangeRequest, response: UpstreamResponse, send: Send, metrics: Metrics
) -> int:
    """SPEC §9: a bridged upstream's error answer in the client's error shape, its status
    and message kept."""
    status = response.status_code
    render = req.codec.upstream_error
    assert render is not None
    key = req.route.upstream_key
    try:
        # Read decoded, so a body that breaks or does not decode fails here: nothing was
        # sent yet, so it is the client's 502 (raised for the app to answer in its shape).
        raw = await response.read()
    except UPSTREAM_FAILURES as exc:
        raise upstream_failure(exc, streaming_body=True) from None
    body = render(status, raw.replace(key.encode(), REDACTED) if key else raw)
    headers = with_request_id(
        [(b"content-type", b"application/json"), *repaired(req)], req.request_id
    )
    await send_bytes(send, status, body, headers)
    _count_upstream_error(metrics, status)
    return status


async def _relay(
    req: ExchangeRequest, response: UpstreamResponse, send: Send, metrics: Metrics
) -> int:
    """Non-2xx (or unknown content): status, headers and body unchanged (SPEC §6), but for
    the route's upstream key, redacted from a non-2xx body that echoes it."""
    key = req.route.upstream_key
    send = redacting(send, [key.encode()] if key else [])
    headers = client_response_headers(response.headers, keep_length=False)
    failure = await relay(response, send, [*headers, *repaired(req)])
    if failure is not None:
        metrics.stream_failed(req.log, failure)
        return response.status_code
    _count_upstream_error(metrics, response.status_code)
    return response.status_code


def _count_upstream_error(metrics: Metrics, status: int) -> None:
    if status >= 500 or status == 429:
        metrics.upstream_errors.labels(f"status_{status}").inc()


def repaired(req: ExchangeRequest) -> list[tuple[bytes, bytes]]:
    """SPEC §11: the kinds of repair the request needed (the log line's `request_repairs`,
    reported before the answer), named to the client; none when it went as it came."""
    kinds = req.log.fields.get("request_repairs")
    if not kinds:
        return []
    return [(REPAIRED_HEADER, ",".join(kinds).encode())]


def _dropped(exchange: Exchange) -> list[tuple[bytes, bytes]]:
    """SPEC §9: what a bridge left out of the upstream request, named to the client."""
    if not exchange.dropped:
        return []
    return [(DROPPED_HEADER, ", ".join(exchange.dropped).encode())]


__all__ = [
    "DROPPED_HEADER",
    "REPAIRED_HEADER",
    "SSE_HEADERS",
    "client_writer",
    "refuse",
    "repaired",
]
