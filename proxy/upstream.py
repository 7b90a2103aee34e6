"""Forwarding to the upstream: header hygiene, timeouts, and the one place httpx errors map.

Every httpx exception is translated in `map_upstream_errors()` and nowhere else, into the
proxy's own error types (SPEC §6): no connection -> 502 upstream_unreachable, no response
head in time -> 504 upstream_timeout, a broken or stalled body -> upstream_stream_error.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import contextmanager

import httpx

from proxy.config import Route
from proxy.errors import UpstreamStreamError, UpstreamTimeout, UpstreamUnreachable

# RFC 9110 §7.6.1 connection-specific headers, plus those only meaningful for one hop.
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
# Never sent upstream: the upstream's own Host is set by the client library, body length is
# recomputed, and forwarding headers from the client must not steer or mislead the upstream.
REQUEST_DROP = HOP_BY_HOP | {"host", "content-length", "forwarded", "x-forwarded-host"}
RESPONSE_DROP = HOP_BY_HOP | {"content-length", "date", "server"}
PROXY_KEY_HEADER = "x-toolcall-proxy-key"


def _connection_tokens(headers: Iterable[tuple[bytes, bytes]]) -> set[str]:
    tokens: set[str] = set()
    for name, value in headers:
        if name.lower() == b"connection":
            tokens.update(
                t.strip().lower() for t in value.decode("latin-1").split(",") if t.strip()
            )
    return tokens


def upstream_request_headers(
    client_headers: list[tuple[bytes, bytes]],
    route: Route,
    request_id: str,
    *,
    strip_authorization: bool,
    identity_encoding: bool,
) -> list[tuple[str, str]]:
    """The client's headers as the upstream should see them."""
    drop = REQUEST_DROP | _connection_tokens(client_headers) | {PROXY_KEY_HEADER, "x-request-id"}
    upstream_key = route.upstream_key
    if upstream_key or strip_authorization:
        drop = drop | {"authorization"}
    if identity_encoding:
        drop = drop | {"accept-encoding"}
    headers = [
        (name.decode("latin-1"), value.decode("latin-1"))
        for name, value in client_headers
        if name.decode("latin-1").lower() not in drop
    ]
    if upstream_key:
        headers.append(("authorization", f"Bearer {upstream_key}"))
    if identity_encoding:
        headers.append(("accept-encoding", "identity"))
    headers.append(("x-request-id", request_id))
    return headers


def client_response_headers(
    upstream: httpx.Headers, *, keep_length: bool
) -> list[tuple[bytes, bytes]]:
    """The upstream's response headers as the client should see them."""
    drop = RESPONSE_DROP | {t.strip().lower() for t in upstream.get_list("connection")}
    if keep_length:
        drop = drop - {"content-length"}
    return [
        (name.encode("latin-1"), value.encode("latin-1"))
        for name, value in upstream.multi_items()
        if name.lower() not in drop
    ]


def timeouts(route: Route) -> httpx.Timeout:
    return httpx.Timeout(
        connect=route.connect_timeout,
        read=route.read_timeout,
        write=route.read_timeout,
        pool=route.connect_timeout,
    )


def upstream_url(route: Route, rest: str, query: bytes) -> str:
    """SPEC §1: what follows the proxy's base is appended to the upstream base URL."""
    url = route.upstream + rest
    return f"{url}?{query.decode('latin-1')}" if query else url


@contextmanager
def map_upstream_errors(*, streaming_body: bool) -> Iterator[None]:
    """Translate httpx failures into the proxy's error types (SPEC §6).

    `streaming_body` is True once the response head arrived: from then on every failure is a
    broken stream, whatever its cause.
    """
    try:
        yield
    except httpx.TimeoutException as exc:
        if streaming_body:
            raise UpstreamStreamError(
                f"the upstream stalled past the read timeout ({type(exc).__name__})"
            ) from None
        if isinstance(exc, httpx.ConnectTimeout | httpx.PoolTimeout):
            raise UpstreamUnreachable(
                "the upstream could not be reached within the connect timeout"
            ) from None
        raise UpstreamTimeout("the upstream sent no response within the read timeout") from None
    except httpx.TransportError as exc:
        if streaming_body:
            raise UpstreamStreamError(
                f"the upstream connection broke mid-response ({type(exc).__name__})"
            ) from None
        if isinstance(exc, httpx.ConnectError | httpx.UnsupportedProtocol):
            raise UpstreamUnreachable("the upstream could not be reached") from None
        raise UpstreamUnreachable(
            f"the upstream connection failed ({type(exc).__name__})"
        ) from None
    except httpx.StreamError as exc:
        raise UpstreamStreamError(
            f"the upstream response could not be read ({type(exc).__name__})"
        ) from None


async def iter_body(response: httpx.Response, *, decoded: bool) -> AsyncIterator[bytes]:
    """The upstream body as it arrives, with failures mapped.

    `decoded` undoes a content-encoding (what the chat core needs); otherwise the bytes are
    passed on as they came, with the upstream's content-encoding header kept.
    """
    with map_upstream_errors(streaming_body=True):
        chunks = response.aiter_bytes() if decoded else response.aiter_raw()
        async for chunk in chunks:
            yield chunk


def make_upstream_client() -> httpx.AsyncClient:
    """One pooled client for the app's lifetime. Timeouts are set per request from the route."""
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=256, keepalive_expiry=30)
    return httpx.AsyncClient(limits=limits, timeout=None, follow_redirects=False, trust_env=False)
