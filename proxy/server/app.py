"""The ASGI app: routing, lifespan, health, metrics, auth, passthrough and disconnects.

Raw ASGI rather than a framework router: the chat route is the hot path, and every wrapper
here is a plain function around `send` (never a buffering middleware on a stream).
The app decides before it acts: which route, whether the body is acceptable and whether the
caller is allowed are settled before any byte goes upstream.
"""

from __future__ import annotations

import asyncio
import gc
import hmac
import os
from collections.abc import Awaitable, Coroutine
from dataclasses import dataclass
from typing import Any

import httpx
import orjson

from proxy.config.load import FLAGS_ENV, SIMULATOR_MOUNT, Route, Settings, settings_from_flags
from proxy.core.errors import (
    AuthenticationError,
    ClientRequestError,
    ProxyError,
    RequestTooLarge,
    openai_error_response,
)
from proxy.core.surface_codec import SurfaceCodec
from proxy.ops.inspector import Inspector
from proxy.ops.observability import LOGGER, Metrics, RequestLog, configure_logging
from proxy.ops.tracing import Tracer, tracer_from_environment
from proxy.server.asgi import (
    ASGIApp,
    ClientDisconnected,
    Receive,
    RequestBody,
    Scope,
    Send,
    check_header_limits,
    header,
    redacting,
    refuse_websocket,
    send_bytes,
    send_json,
    send_refusal,
)
from proxy.server.bridging import answer_count_tokens, bridged_codec, counts_tokens
from proxy.server.codecs import codec_for, credential_for
from proxy.server.cors import CORSMiddleware
from proxy.server.draining import end_for_shutdown
from proxy.server.exchange_handler import ExchangeHandler, ExchangeRequest
from proxy.server.forwarding import DisconnectWatch, passthrough
from proxy.server.inspect_page import INSPECT_PATH, InspectPage
from proxy.server.progress import ResponseProgress
from proxy.upstream.client import (
    PROXY_KEY_HEADER,
    make_upstream_client,
    upstream_request_headers,
    upstream_url,
)

_REQUEST_ID_OK = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:")


class ProxyApp:
    def __init__(
        self,
        settings: Settings,
        client: httpx.AsyncClient | None = None,
        metrics: Metrics | None = None,
    ):
        self.settings = settings
        self.metrics = metrics or Metrics()
        self._own_client = client is None
        self.client = client or make_upstream_client()
        self.exchanges = ExchangeHandler(self.client, self.metrics)
        self.ready = False
        self.draining = False
        self._open: set[asyncio.Task[Any]] = set()  # requests being served, for the drain
        self._simulator: ASGIApp | None = None
        if settings.simulated:
            from proxy.simulator import create_simulator_app

            self._simulator = create_simulator_app()
        # SPEC §12: the inspector, only when on; off, nothing of it exists and each of its
        # hooks (here, in the exchange handler and its reporter) is one `is None` test.
        self.inspector: Inspector | None = None
        self._inspect_page: InspectPage | None = None
        if settings.inspecting:
            self.inspector = Inspector(
                settings.inspect_exchanges,
                settings.inspect_exchange_bytes,
                settings.inspect_content,
            )
            self.exchanges.report.inspector = self.inspector
            self._inspect_page = InspectPage(self.inspector, self._authorize, lambda: self.draining)
        # SPEC §12: traces, only with the otel extra and OTEL_EXPORTER_OTLP_ENDPOINT; off, no
        # OpenTelemetry module is imported and each hook is one `is None` test.
        self.tracer: Tracer | None = tracer_from_environment()
        self.exchanges.report.tracer = self.tracer

    # -- graceful shutdown (proxy.server.draining.DrainingServer drives these) ---------------------------

    @property
    def drain_timeout(self) -> float:
        return self.settings.drain_timeout

    @property
    def open_requests(self) -> int:
        return len(self._open)

    # -- slow clients (proxy.server.draining.OpenAIErrorHttpProtocol reads these) -----------------

    @property
    def head_timeout(self) -> float:
        return self.settings.head_timeout

    @property
    def body_timeout(self) -> float:
        return self.settings.body_timeout

    def start_draining(self) -> None:
        """Shutdown began: /readyz answers 503 from now on. Only sets flags (signal-safe)."""
        self.draining = True

    def cut_open_requests(self) -> int:
        """The drain timeout expired: end every open request with the shutting_down error."""
        tasks = list(self._open)
        for task in tasks:
            task.cancel()
        return len(tasks)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)
        elif kind == "websocket":
            await refuse_websocket(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                # Everything built at start-up lives as long as the process: keep it out of
                # the collector's way, so full collections (stream-time pauses) stay short.
                gc.collect()
                gc.freeze()
                self.ready = True
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                self.ready = False
                self.draining = True
                if self._own_client:
                    await self.client.aclose()
                if self.tracer is not None:  # the spans not yet exported
                    await asyncio.to_thread(self.tracer.shutdown)
                await send({"type": "lifespan.shutdown.complete"})
                return

    def _http(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[object]:
        """What serves the request, to await: not a coroutine itself, which would add a frame
        to every request (the app's own `__call__` stays one, as ASGI servers detect)."""
        path: str = scope["path"]
        if path == "/healthz":
            return send_json(send, 200, {"status": "ok"})
        if path == "/readyz":
            ok = self.ready and not self.draining
            return send_json(send, 200 if ok else 503, {"status": "ready" if ok else "not ready"})
        if path == "/metrics":
            return send_bytes(
                send,
                200,
                self.metrics.render(),
                [(b"content-type", b"text/plain; version=0.0.4; charset=utf-8")],
            )
        if self._inspect_page is not None and path.startswith(INSPECT_PATH):
            return self._inspect_page(scope, receive, send)
        if self._simulator is not None and path.startswith(SIMULATOR_MOUNT + "/"):
            # Mounted the ASGI way: the full path, and the mount point as root_path (so the
            # simulator's /docs page links its /_simulator/openapi.json).
            root = scope.get("root_path", "") + SIMULATOR_MOUNT
            return self._simulator(dict(scope, root_path=root), receive, send)
        given_id, declared = _request_id_and_length(scope["headers"])
        request_id = _request_id(given_id)
        request_body = RequestBody(receive, scope)
        prefix, rest = self._split(path)
        codec = codec_for(scope["method"], rest) if rest is not None else None
        try:
            if rest is None:
                raise ClientRequestError(
                    f"no route for {path}; the API is under /v1", code="not_found", status=404
                )
            check_header_limits(scope)  # 431: uvicorn+httptools bound neither count nor size
            self._authorize(scope)
        except ProxyError as exc:
            render = codec.error_response if codec is not None else openai_error_response
            return send_refusal(send, exc, request_id, request_body, render)
        call = _Call(scope, request_body, receive, send, prefix, rest, request_id, codec, declared)
        return self._serve(call)

    def _split(self, path: str) -> tuple[str, str | None]:
        """`/v1/x` -> ("", "/x"); `/kimi/v1/x` -> ("/kimi", "/x") for a route prefix."""
        if path == "/v1" or path.startswith("/v1/"):
            return "", path[3:]
        for prefix in self.settings.path_prefixes:
            base = prefix + "/v1"
            if path == base or path.startswith(base + "/"):
                return prefix, path[len(base) :]
        return "", None

    def _authorize(self, scope: Scope) -> None:
        keys = self.settings.proxy_keys
        if not keys:
            return
        presented = header(scope, PROXY_KEY_HEADER)
        if presented is None:
            auth = header(scope, b"authorization") or b""
            presented = auth[7:].strip() if auth[:7].lower() == b"bearer " else None
        if presented is None:
            raise AuthenticationError(
                "a proxy key is required (Authorization: Bearer or x-toolcall-proxy-key)"
            )
        ok = False
        for key in keys:  # compare with every key, in constant time, whatever matches first
            ok |= hmac.compare_digest(presented, key.encode())
        if not ok:
            raise AuthenticationError("the proxy key is not valid")

    async def _serve(self, call: _Call) -> None:
        scope = call.scope
        log = RequestLog(call.request_id, "?", scope["method"], scope["path"])
        surface = call.codec.surface.label if call.codec is not None else "other"
        status = 500
        call.send = progress = ResponseProgress(call.send)
        task = asyncio.current_task()
        if task is not None:
            self._open.add(task)
        try:
            self._check_length(call.declared_length)
            raw = await call.request_body.read(self.settings.max_body_bytes)
            route, body = self._route(call, raw)
            log.fields["route"] = route.name
            if call.codec is not None and route.upstream_api != "same":
                call.codec = bridged_codec(call.codec, route.upstream_api, log)
            call.stream = body is not None and body.get("stream") is True
            work = self._forward(call, route, raw, body, log)
            status = 499  # what a client that leaves gets: the watch ends the work for it
            with DisconnectWatch(call.receive, task, progress, log):
                status = await work
        except ClientDisconnected:
            status = 499
        except ProxyError as exc:
            status = await self._refuse(call, exc, log)
        except asyncio.CancelledError:
            # Client disconnects are settled by the DisconnectWatch; what else cancels a request
            # task is the server stopping (the drain timeout, or uvicorn's own at its timeout).
            if task is None:
                raise
            task.uncancel()
            log.fields["error"] = "shutting_down"
            self.metrics.shutdown_cuts.inc()
            status = await end_for_shutdown(progress, call.request_id)
        finally:
            if task is not None:
                self._open.discard(task)
            duration = log.finish(status, stream=call.stream)
            self.metrics.duration.observe(duration)
            self.metrics.requests.count((log.fields["route"], status, call.stream, surface))
            if self.inspector is not None:
                self.inspector.finish(log)
            if self.tracer is not None:
                self.tracer.finish(log)

    def _check_length(self, declared: bytes | None) -> None:
        """SPEC §6: a body announced past the limit is refused before it is read (413)."""
        limit = self.settings.max_body_bytes
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise RequestTooLarge(f"request body exceeds the limit of {limit} bytes")

    def _route(self, call: _Call, raw: bytes) -> tuple[Route, dict[str, Any] | None]:
        """The request's body (parsed, for a repaired surface) and the route that serves it.
        Plain functions around the body's read, not a coroutine: a frame less per request."""
        body = call.codec.parse_body(raw) if call.codec is not None else None
        model = body.get("model") if body is not None else None
        route = self.settings.route_for(call.prefix, model if isinstance(model, str) else None)
        if route is None:
            raise ClientRequestError(
                f"no route matches model {model!r}", code="model_not_found", status=404
            )
        return route, body

    async def _refuse(self, call: _Call, exc: ProxyError, log: RequestLog) -> int:
        """An error before the response began, in the shape of the request's surface."""
        if exc.error_type == "upstream_error":
            self.metrics.upstream_errors.labels(exc.code or "upstream").inc()
        log.fields["error"] = exc.code
        render = call.codec.error_response if call.codec is not None else openai_error_response
        return await send_refusal(call.send, exc, call.request_id, call.request_body, render)

    def _forward(
        self,
        call: _Call,
        route: Route,
        raw: bytes,
        body: dict[str, Any] | None,
        log: RequestLog,
    ) -> Coroutine[Any, Any, int]:
        """The work that serves the request, to await (a plain function: one frame less);
        a request it cannot be built for raises here."""
        scope = call.scope
        if body is None and counts_tokens(route, scope["method"], call.rest):
            return answer_count_tokens(call.send, raw, call.request_id, log)
        strip_auth = bool(self.settings.proxy_keys) and header(scope, PROXY_KEY_HEADER) is None
        headers = upstream_request_headers(
            scope["headers"],
            route,
            call.request_id,
            strip_authorization=strip_auth,
            identity_encoding=body is not None,
            credential=(
                (call.codec.credential_header, call.codec.credential_prefix)
                if call.codec is not None
                else credential_for(call.rest)
            ),
        )
        upstream = call.codec.upstream if call.codec is not None else None
        rest = call.rest if upstream is None else upstream.path  # a bridge's (SPEC §9)
        url = upstream_url(route, rest, scope.get("query_string", b""))
        if body is not None and call.codec is not None:
            request = ExchangeRequest(call.codec, route, url, headers, call.request_id, log)
            return self.exchanges.handle(request, call.send, raw, body)
        # SPEC §6: an error body that echoes the route's key or a proxy key is redacted.
        key = route.upstream_key
        secrets = [k.encode() for k in (key, *self.settings.proxy_keys) if k]
        send = redacting(call.send, secrets)
        return passthrough(self.client, self.metrics, scope, send, route, url, headers, raw, log)


@dataclass(slots=True)
class _Call:
    """One request under the API base, as the app serves it."""

    scope: Scope
    request_body: RequestBody
    receive: Receive
    send: Send
    prefix: str  # the route prefix (`/kimi` of `/kimi/v1/...`), or ""
    rest: str  # the path under the base: `/chat/completions`
    request_id: str
    codec: SurfaceCodec | None  # the repaired surface that serves it; None: passed through
    declared_length: bytes | None  # its Content-Length header
    stream: bool = False


def _request_id_and_length(headers: list[tuple[bytes, bytes]]) -> tuple[bytes | None, bytes | None]:
    """The first X-Request-Id and Content-Length headers, in one pass over the head rather
    than one each."""
    given = length = None
    for name, value in headers:
        name = name.lower()
        if name == b"x-request-id":
            if given is None:
                given = bytes(value)
        elif name == b"content-length" and length is None:
            length = bytes(value)
    return given, length


def _request_id(given: bytes | None) -> str:
    if given:
        text = given.decode("latin-1")
        if len(text) <= 128 and set(text) <= _REQUEST_ID_OK:
            return text
    # 128 random bits as hex, like a uuid4's, without building a UUID object (5 us -> 1 us).
    return "req_" + os.urandom(16).hex()


def create_app(
    settings: Settings, client: httpx.AsyncClient | None = None, metrics: Metrics | None = None
) -> ProxyApp | CORSMiddleware:
    """The proxy, wrapped for CORS when `cors_origins` is configured (the inner app is `.app`)."""
    app = ProxyApp(settings, client, metrics)
    if settings.cors_origins:
        return CORSMiddleware(app, settings.cors_origins)
    return app


def app_from_environment() -> ProxyApp | CORSMiddleware:
    """Factory for uvicorn workers: rebuilds the settings the parent process resolved."""
    settings = settings_from_flags(orjson.loads(os.environ.get(FLAGS_ENV, "{}")))
    configure_logging(settings.log_level)
    return create_app(settings)


__all__ = ["LOGGER", "ProxyApp", "create_app"]
