"""Forwarding to the upstream: header hygiene, timeouts, and the one place httpx errors map.

Every httpx exception is translated in `map_upstream_errors()` and nowhere else, into the
proxy's own error types (SPEC §6): no connection -> 502 upstream_unreachable, no response
head in time -> 504 upstream_timeout, a broken, stalled or undecodable body ->
upstream_stream_error, a status no client can be given (999, 101) -> 502 upstream_error.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Coroutine, Iterable
from operator import itemgetter
from types import TracebackType
from typing import Any, TypeVar

import httpx

# mypyc (setup.py compiles this module) builds a non-native class by looking its base up in
# the module that defines it, and declares only the modules this one imports: without these
# imports of where httpx defines the bases used below, its C does not compile (mypyc 2.4).
import httpx._client
import httpx._models
from mypy_extensions import mypyc_attr

from proxy.config.load import Route
from proxy.core.errors import (
    ClientRequestError,
    ProxyError,
    UpstreamError,
    UpstreamStreamError,
    UpstreamTimeout,
    UpstreamUnreachable,
)
from proxy.upstream.transport import (
    ConnectionPool,
    HttptoolsTransport,
    InvalidStatus,
    ResponseBody,
    origin,
    request_head,
)

# Header names as the ASGI scope and httpx's raw lists carry them: lowercase bytes.
# RFC 9110 §7.6.1 connection-specific headers, plus those only meaningful for one hop.
HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    }
)
PROXY_KEY_HEADER = b"x-toolcall-proxy-key"
# Never sent upstream: the upstream's own Host is set by the client library, body length is
# recomputed, forwarding headers from the client must not steer or mislead the upstream, the
# proxy key is the proxy's, and the request id is the proxy's own.
REQUEST_DROP = HOP_BY_HOP | {
    b"host",
    b"content-length",
    b"forwarded",
    b"x-forwarded-host",
    PROXY_KEY_HEADER,
    b"x-request-id",
}
RESPONSE_DROP = HOP_BY_HOP | {b"content-length", b"date", b"server"}


def _connection_tokens(headers: Iterable[tuple[bytes, bytes]]) -> set[bytes]:
    """The header names a Connection header lists: hop-by-hop too (RFC 9110 §7.6.1)."""
    tokens: set[bytes] = set()
    for name, value in headers:
        if name.lower() == b"connection":
            tokens.update(t.strip().lower() for t in value.split(b",") if t.strip())
    return tokens


def upstream_request_headers(
    client_headers: list[tuple[bytes, bytes]],
    route: Route,
    request_id: str,
    *,
    strip_authorization: bool,
    identity_encoding: bool,
    credential: tuple[bytes, bytes] = (b"authorization", b"Bearer "),
) -> list[tuple[bytes, bytes]]:
    """The client's headers as the upstream should see them (names lowercased).

    A route's upstream key replaces the client's credential in the header its API surface
    uses (`credential`: header name and value prefix; `x-api-key` for Anthropic Messages).
    Kept as bytes from the ASGI scope to the wire: no decoding and encoding back per header.
    """
    upstream_key = route.upstream_key
    drop = _dropped(credential[0], strip_authorization, bool(upstream_key), identity_encoding)
    headers = headers_without(client_headers, drop)
    if upstream_key:
        headers.append((credential[0], credential[1] + upstream_key.encode("latin-1")))
    if identity_encoding:
        headers.append(_IDENTITY_ENCODING)
    headers.append((b"x-request-id", request_id.encode("latin-1")))
    return headers


_IDENTITY_ENCODING = (b"accept-encoding", b"identity")


@functools.lru_cache(maxsize=64)  # a few combinations per app; a new set per request cost more
def _dropped(
    credential: bytes, strip_authorization: bool, keyed: bool, identity_encoding: bool
) -> frozenset[bytes]:
    drop = set(REQUEST_DROP)
    if strip_authorization:
        drop.add(b"authorization")
    if keyed:
        drop |= {b"authorization", credential}
    if identity_encoding:
        drop.add(b"accept-encoding")
    return frozenset(drop)


def client_response_headers(
    upstream: list[tuple[bytes, bytes]], *, keep_length: bool
) -> list[tuple[bytes, bytes]]:
    """The upstream's response headers (raw, as received) as the client should see them
    (names lowercased). Works on the raw bytes: no decoding and encoding back of every header.
    """
    return headers_without(upstream, _KEEP_LENGTH_DROP if keep_length else RESPONSE_DROP)


def headers_without(
    given: list[tuple[bytes, bytes]], drop: frozenset[bytes]
) -> list[tuple[bytes, bytes]]:
    """`given` without the names in `drop` (REQUEST_DROP or RESPONSE_DROP and any the caller
    sets itself) and those a Connection header lists; names lowercased. One pass: a
    Connection header (hop-by-hop itself) names more to drop, after it."""
    headers: list[tuple[bytes, bytes]] = []
    connection = False
    for name, value in given:
        name = name.lower()
        if name not in drop:
            headers.append((name, value))
        elif name == b"connection":
            connection = True
    if connection:
        tokens = _connection_tokens(given)
        headers = [(name, value) for name, value in headers if name not in tokens]
    return headers


_KEEP_LENGTH_DROP = RESPONSE_DROP - {b"content-length"}


def timeouts(route: Route) -> httpx.Timeout:
    """The route's timeouts, built once per route (routes are few and immutable). Kept by
    identity: hashing a Route's fields per request cost more than the lookup saves."""
    cached = _TIMEOUTS.get(id(route))
    if cached is not None and cached[0] is route:
        return cached[1]
    if len(_TIMEOUTS) >= MAX_CACHED_URLS:
        _TIMEOUTS.clear()
    timeout = httpx.Timeout(
        connect=route.connect_timeout,
        read=route.read_timeout,
        write=route.read_timeout,
        pool=route.connect_timeout,
    )
    _TIMEOUTS[id(route)] = (route, timeout)
    return timeout


_TIMEOUTS: dict[int, tuple[Route, httpx.Timeout]] = {}


# Characters httpx refuses in a URL (it raises InvalidURL, which is no transport error).
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def upstream_url(route: Route, rest: str, query: bytes) -> str:
    """SPEC §1: what follows the proxy's base is appended to the upstream base URL.

    `rest` comes percent-decoded (ASGI's `path`). A `.` or `..` segment would climb out of the
    upstream's base path once httpx normalizes the URL (`/v1/../admin` reached `/admin`), and
    control characters make httpx raise: both are refused (400). A decoded `%`, `?` or `#` is
    encoded again, so the upstream sees the path the client sent rather than a query.
    """
    url = _joined(route.upstream, rest)
    if not query:
        return url
    text = query.decode("latin-1")
    if _CONTROL.search(text) or "#" in text:
        raise ClientRequestError("the query string holds control characters", code="invalid_path")
    return f"{url}?{text}"


# A route's paths are few (chat completions, models, ...): the checks and escapes above ran
# per request otherwise. Bounded, as paths come from clients.
@functools.lru_cache(maxsize=256)
def _joined(base: str, rest: str) -> str:
    segments = rest.split("/")
    if "." in segments or ".." in segments or _CONTROL.search(rest):
        raise ClientRequestError(
            "the request path holds dot segments or control characters", code="invalid_path"
        )
    return base + rest.replace("%", "%25").replace("?", "%3F").replace("#", "%23")


# What map_upstream_errors translates: every httpx failure of a request or its body, a body
# whose content-encoding does not decode included (httpx's DecodingError is neither of the
# others: unmapped, it escaped as a 500 with a traceback, counted as a client that left).
UPSTREAM_FAILURES = (httpx.TransportError, httpx.StreamError, httpx.DecodingError)
UpstreamFailure = httpx.TransportError | httpx.StreamError | httpx.DecodingError


def map_upstream_errors(*, streaming_body: bool) -> _UpstreamErrors:
    """Translate httpx failures into the proxy's error types (SPEC §6), as a `with` block.

    `streaming_body` is True once the response head arrived: from then on every failure is a
    broken stream, whatever its cause.
    """
    return _IN_BODY if streaming_body else _BEFORE_BODY


class _UpstreamErrors:
    """map_upstream_errors' context manager: a class, not a generator (which cost about 11K
    instructions per `with`, twice per request), and stateless, so two instances serve all."""

    __slots__ = ("streaming_body",)

    def __init__(self, streaming_body: bool) -> None:
        self.streaming_body = streaming_body

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is not None and isinstance(exc, UPSTREAM_FAILURES):
            raise upstream_failure(exc, streaming_body=self.streaming_body) from None


def upstream_failure(exc: UpstreamFailure, *, streaming_body: bool) -> ProxyError:
    """The proxy's error for an httpx failure (what map_upstream_errors raises). On the hot
    path it is used directly, in an `except UPSTREAM_FAILURES`: a `with` block calls two
    Python methods even when nothing fails."""
    name = type(exc).__name__
    if isinstance(exc, httpx.DecodingError):
        # Before the client's first byte (a whole body) this is a 502; in a stream, its
        # error event. Either way upstream_stream_error: the body, not the connection, failed.
        return UpstreamStreamError(f"the upstream response body could not be decoded: {exc}")
    if isinstance(exc, InvalidStatus):
        return UpstreamError(str(exc))  # 502, code upstream_error; the message names the status
    if isinstance(exc, httpx.StreamError):
        return UpstreamStreamError(f"the upstream response could not be read ({name})")
    if isinstance(exc, httpx.TimeoutException):
        if streaming_body:
            return UpstreamStreamError(f"the upstream stalled past the read timeout ({name})")
        if isinstance(exc, httpx.ConnectTimeout | httpx.PoolTimeout):
            return UpstreamUnreachable(
                "the upstream could not be reached within the connect timeout"
            )
        return UpstreamTimeout("the upstream sent no response within the read timeout")
    if streaming_body:
        return UpstreamStreamError(f"the upstream connection broke mid-response ({name})")
    if isinstance(exc, httpx.ConnectError | httpx.UnsupportedProtocol):
        return UpstreamUnreachable("the upstream could not be reached")
    return UpstreamUnreachable(f"the upstream connection failed ({name})")


_BEFORE_BODY = _UpstreamErrors(False)
_IN_BODY = _UpstreamErrors(True)


# Parsed upstream URLs kept by UpstreamClient: routes times paths, a handful in practice.
MAX_CACHED_URLS = 256


@mypyc_attr(native_class=False)  # its base is not compiled: setup.py says why
class _NoCookies(httpx.Cookies):
    """A cookie jar that never keeps anything (see UpstreamClient)."""

    def extract_cookies(self, response: httpx.Response) -> None:
        return None


@mypyc_attr(native_class=False)  # its base is not compiled: setup.py says why
class UpstreamClient(httpx.AsyncClient):
    """httpx's AsyncClient without what a shared proxy must not have or need not pay for.

    - No cookie jar: httpx stores every response's Set-Cookie and sends it with every later
      request, which in a proxy would hand one user's upstream cookies to the next user.
      Cookies still pass through as headers, both ways. (Extracting them also cost about
      100 us of CPU per response on the benchmark machine.)
    - `build_request` for the proxy's one shape of call (an absolute URL, a header list, bytes
      content): URLs without a query are parsed once, and the client's default headers are
      merged without intermediate `Headers` objects. It builds the same request as httpx's
      (tests/upstream/test_upstream_transport.py compares them); any other call goes to httpx's.
    - `send` goes straight to the transport when httpx's auth, redirect and event-hook layers
      would have nothing to do, which is always for the proxy (they are refused here).
    - `open_raw`, over HttptoolsTransport: the same request as a header list written straight
      into a request head, and the response as received, with no httpx Request or Response
      object (proxy.upstream.call.open_upstream, the proxy's own calls, goes this way).
    Over HttptoolsTransport, a non-streaming request through the app cost 340 to 450 us of CPU
    with this client against 610 to 820 us with httpx's AsyncClient (in-process A/B runs on
    the benchmark machine).
    """

    def __init__(self, *, transport: httpx.AsyncBaseTransport, **kwargs: Any) -> None:
        for unsupported in ("base_url", "params", "cookies", "mounts", "auth", "event_hooks"):
            if kwargs.get(unsupported):
                raise TypeError(f"UpstreamClient does not take {unsupported}")
        if kwargs.get("follow_redirects"):
            raise TypeError("UpstreamClient does not follow redirects (a proxy relays them)")
        super().__init__(transport=transport, **kwargs)
        # The jar every read of `cookies` gets (httpx keeps it in `_cookies`, behind the
        # property; pinned, see request_headers). Not a property of this class: mypyc, which
        # compiles this module, builds no property setter on a class with an httpx base.
        self._cookies = _NO_COOKIES
        self._upstream = transport
        self._raw = _RawCalls(transport.pool if isinstance(transport, HttptoolsTransport) else None)

    def build_request(  # type: ignore[override]
        self,
        method: str,
        url: httpx.URL | str,
        *,
        content: bytes | None = None,
        headers: Any = None,
        timeout: Any = httpx.USE_CLIENT_DEFAULT,
        **others: Any,
    ) -> httpx.Request:
        if others or (type(url), type(headers), type(content)) not in _OWN_SHAPES:
            return super().build_request(
                method, url, content=content, headers=headers, timeout=timeout, **others
            )
        address: str = url  # type: ignore[assignment]  # a str: _OWN_SHAPES says so
        parsed = self._raw.urls.get(address) or self._raw.parsed_url(address)
        body = content or b""
        merged = request_headers(self.headers._list, headers or [], method, parsed.netloc, body)
        chosen = self.timeout if timeout is httpx.USE_CLIENT_DEFAULT else timeout
        if not isinstance(chosen, httpx.Timeout):
            chosen = httpx.Timeout(chosen)
        request = httpx.Request(
            method,
            parsed,
            headers=merged,
            stream=httpx.ByteStream(body),
            extensions={"timeout": chosen.as_dict()},
        )
        request.read()
        return request

    def open_raw(
        self,
        method: str,
        url: str,
        headers: list[tuple[bytes, bytes]],
        content: bytes,
        timeout: httpx.Timeout,
        answer: Callable[[int, list[tuple[bytes, bytes]], ResponseBody], _Answer],
    ) -> Coroutine[Any, Any, _Answer] | None:
        """Send the request httpx would build (`request_headers`) over HttptoolsTransport,
        without httpx's objects; None when that does not apply (another transport, or a URL
        with credentials, which httpx's auth layer turns into a header): use `send` then.
        The response is `answer(status, headers, body)`, as `send_head` makes it.

        Not a coroutine itself: it returns the transport's, to await (one frame less)."""
        raw = self._raw
        if raw.pool is None:
            return None
        target = raw.targets[url] if url in raw.targets else raw.target(url)
        if target is None:
            return None
        if self.is_closed:
            raise RuntimeError("Cannot send a request, as the client has been closed.")
        key, path, netloc = target
        return raw.pool.send_head(
            key,
            raw.head(self.headers._list, method, path, netloc, headers, content),
            content,
            connect_timeout=timeout.connect,
            read_timeout=timeout.read,
            answer=answer,
        )

    def _head(
        self, method: str, path: bytes, netloc: bytes, given: list[tuple[Any, Any]], body: bytes
    ) -> bytes:
        """The request head `open_raw` writes for a call (`_RawCalls.head`)."""
        return self._raw.head(self.headers._list, method, path, netloc, given, body)

    async def send(  # type: ignore[override]
        self,
        request: httpx.Request,
        *,
        stream: bool = False,
        auth: Any = httpx.USE_CLIENT_DEFAULT,
        follow_redirects: Any = httpx.USE_CLIENT_DEFAULT,
    ) -> httpx.Response:
        """Straight to the transport when there is nothing for httpx's layers to do: no auth
        (none on the client, none in the URL), no redirects, no event hooks, no cookies."""
        if (
            auth is not httpx.USE_CLIENT_DEFAULT
            or follow_redirects not in (httpx.USE_CLIENT_DEFAULT, False)
            or request.url.userinfo
            or "timeout" not in request.extensions
        ):
            return await super().send(
                request, stream=stream, auth=auth, follow_redirects=follow_redirects
            )
        if self.is_closed:
            raise RuntimeError("Cannot send a request, as the client has been closed.")
        response = await self._upstream.handle_async_request(request)
        response.request = request
        if not stream:
            try:
                await response.aread()
            except BaseException:
                await response.aclose()
                raise
        return response


class _RawCalls:
    """What UpstreamClient keeps for its own calls, and the work of `open_raw`: parsed URLs,
    request targets and head plans, and the transport's pool (None: another transport). A
    native class (setup.py compiles this module), which UpstreamClient, an httpx subclass,
    cannot be: its methods are called directly from compiled code."""

    def __init__(self, pool: ConnectionPool | None) -> None:
        self.pool = pool
        self.urls: dict[str, httpx.URL] = {}
        self.targets: dict[str, _Target | None] = {}
        self.heads: dict[tuple[Any, ...], _HeadPlan] = {}

    def head(
        self,
        defaults: list[tuple[bytes, bytes, bytes]],
        method: str,
        path: bytes,
        netloc: bytes,
        given: list[tuple[Any, Any]],
        body: bytes,
    ) -> bytes:
        """`request_head` of `request_headers`, from a plan kept per shape of call (method,
        target, the given header names, whether there is a body): a client sends the same
        header names every time, and merging, joining and checking every header per request
        cost about a tenth of a small request's instructions. `defaults`: the client's
        default headers as httpx keeps them, (name, lowercased name, value) (private to
        httpx, pinned, see request_headers; `headers.raw` builds a new list on every access
        and the names would be lowercased again)."""
        names = tuple(map(_NAME, given))
        shape = (method, path, netloc, names, not body)
        plan = self.heads.get(shape)
        if plan is not None and plan.defaults == defaults:
            values = tuple(map(_VALUE, given))
            try:
                return plan.render(values, body)
            except TypeError:  # a value that is not bytes: the general way below
                pass
        merge = _MergePlan(defaults, given, method, bool(body))
        head = request_head(method, path, merge.apply(given, netloc, body))  # checks all
        fresh = plan is None or plan.defaults != defaults  # new, or the client's headers changed
        if fresh and all(type(name) is bytes for name in names):
            if len(self.heads) >= MAX_CACHED_URLS:
                self.heads.clear()
            self.heads[shape] = _HeadPlan(merge, method, path, netloc, names)
        return head

    def target(self, url: str) -> _Target | None:
        parsed = self.urls.get(url) or self.parsed_url(url)
        target = None
        if not parsed.userinfo:
            target = (
                origin(parsed.scheme, parsed.host, parsed.port),
                parsed.raw_path,
                parsed.netloc,
            )
        if "?" not in url:  # as parsed_url: queries come from clients, not worth keeping
            if len(self.targets) >= MAX_CACHED_URLS:
                self.targets.clear()
            self.targets[url] = target
        return target

    def parsed_url(self, url: str) -> httpx.URL:
        parsed = httpx.URL(url)
        if parsed.is_relative_url:
            raise ValueError(f"UpstreamClient needs absolute URLs, got {url!r}")
        if "?" not in url:  # queries come from clients: unbounded, not worth keeping
            if len(self.urls) >= MAX_CACHED_URLS:
                self.urls.clear()
            self.urls[url] = parsed
        return parsed


_Answer = TypeVar("_Answer")
# What open_raw needs of a URL: the pool's key, the request target and the Host header.
_Target = tuple[tuple[str, str, int], bytes, bytes]
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
# The calls build_request makes itself (URL, headers, content types); others go to httpx.
_OWN_SHAPES = frozenset(
    (str, headers, content) for headers in (list, type(None)) for content in (bytes, type(None))
)


def request_headers(
    defaults: list[tuple[bytes, bytes, bytes]],
    given: list[tuple[Any, Any]],
    method: str,
    netloc: bytes,
    body: bytes,
) -> list[tuple[Any, Any]]:
    """The header list httpx would send, built in one pass.

    This is what httpx does in `AsyncClient._merge_headers` and `Request._prepare` (private:
    pyproject.toml pins the httpx releases this was checked against, and
    tests/upstream/test_upstream_headers.py fails when either changes): the client's
    defaults the caller did not override, the caller's headers, Host first and the body's
    length last (`Content-Length: 0` second, for a body method without one).
    """
    return _MergePlan(defaults, given, method, bool(body)).apply(given, netloc, body)


class _MergePlan:
    """What `request_headers` puts around the given headers, for one shape of call (the given
    names, the method, whether there is a body): UpstreamClient keeps one per shape."""

    __slots__ = ("defaults", "empty_length", "host", "kept", "length")

    def __init__(
        self,
        defaults: list[tuple[bytes, bytes, bytes]],
        given: list[tuple[Any, Any]],
        method: str,
        body: bool,
    ) -> None:
        self.defaults = list(defaults)  # a copy: httpx changes its own list in place
        try:  # the proxy's own calls: names as bytes, lowered in C
            names = set(map(bytes.lower, map(itemgetter(0), given)))
        except TypeError:
            names = {
                (name.encode("latin-1") if isinstance(name, str) else name).lower()
                for name, _ in given
            }
        self.kept: list[tuple[bytes, bytes]] = []
        for name, lowered, value in defaults:  # (name, lowercased name, value), as httpx's
            if lowered not in names:
                self.kept.append((name, value))
                names.add(lowered)
        sized = b"content-length" in names
        self.length = not sized and body
        self.empty_length = (
            not sized
            and not body
            and b"transfer-encoding" not in names
            and method.upper() in _BODY_METHODS
        )
        self.host = b"host" not in names

    def apply(
        self, given: list[tuple[Any, Any]], netloc: bytes, body: bytes
    ) -> list[tuple[Any, Any]]:
        merged: list[tuple[Any, Any]] = [(b"Host", netloc)] if self.host else []
        if self.empty_length:
            merged.append((b"Content-Length", b"0"))
        merged += self.kept
        merged += given
        if self.length:
            merged.append((b"Content-Length", str(len(body)).encode()))
        return merged


_NAME = itemgetter(0)
_VALUE = itemgetter(1)


class _HeadPlan:
    """A request head for one shape of call as a bytes format: all but the given headers'
    values (and the body's length) is fixed, and was checked for line breaks when made."""

    __slots__ = ("defaults", "format", "length")

    def __init__(self, merge: _MergePlan, method: str, path: bytes, netloc: bytes, given: Names):
        self.defaults = merge.defaults
        lines = [b"Host: " + _literal(netloc)] if merge.host else []
        if merge.empty_length:
            lines.append(b"Content-Length: 0")
        lines += [_literal(name) + b": " + _literal(value) for name, value in merge.kept]
        lines += [_literal(name) + b": %b" for name in given]
        self.length = merge.length
        if self.length:
            lines.append(b"Content-Length: %d")
        self.format = b"%b %b HTTP/1.1\r\n%b\r\n\r\n" % (
            _literal(method.encode("ascii")),
            _literal(path),
            b"\r\n".join(lines),
        )

    def render(self, values: tuple[Any, ...], body: bytes) -> bytes:
        """The head; TypeError for a value that is not bytes, LocalProtocolError for one that
        holds a line break (it would smuggle another header)."""
        # Only the values can hold a line break (the rest was checked when the plan was made):
        # deleting them from the values joined, not from the whole head (about 3K instructions
        # less; two find() calls cost about as much as this in their argument parsing).
        joined = b"".join(values)
        if len(joined.translate(None, b"\r\n")) != len(joined):
            raise httpx.LocalProtocolError("a request header contains a line break")
        return self.format % ((*values, len(body)) if self.length else values)


Names = tuple[Any, ...]


def _literal(text: bytes) -> bytes:
    """`text` inside a bytes format."""
    return text.replace(b"%", b"%%")


_NO_COOKIES = _NoCookies()


def make_upstream_client() -> httpx.AsyncClient:
    """One pooled client for the app's lifetime. Timeouts are set per request from the route."""
    # The transport, chosen by measurement (`make bench`, 2 cores shared with other work; each
    # row against the direct upstream in the same run; same UpstreamClient over each):
    #
    #   transport              added p50      added p50, 200-   req/s at 16 conns  proxy CPU per
    #                          non-streaming  chunk last byte   vs direct          request/stream*
    #   httpx default          +1.87 ms       +34.9 ms          0.01x              984 / 8979 us
    #   httpx-aiohttp          +1.00 ms       +4.1 ms           0.04x              535 / 4043 us
    #   HttptoolsTransport     +0.64 ms       +4.9 ms           0.05x              334 / 2819 us
    #
    # * in-process (app, client and transport; no uvicorn), fastest of 5 rounds. The 200-chunk
    #   latencies swing by 2x between runs on this machine; two more interleaved runs gave
    #   +4.8/+5.4 ms for HttptoolsTransport and +9.4/+6.9 ms for httpx-aiohttp. httpcore hands
    #   a 200-chunk burst on as 202 reads (so 202 core feeds and client writes), aiohttp and
    #   HttptoolsTransport as 4. Neither httpx transport comes near the +0.5 ms target, so the
    #   proxy uses its own (proxy.upstream.transport).
    transport = HttptoolsTransport(max_keepalive_connections=256, keepalive_expiry=30)
    return UpstreamClient(
        transport=transport, timeout=None, follow_redirects=False, trust_env=False
    )
