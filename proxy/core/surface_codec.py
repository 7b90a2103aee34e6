"""What an API surface gives the shell: its exchange and its error shape (SPEC §8).

The shell (`proxy.server.exchange_handler`) runs one round loop for every surface; everything that
depends on a surface's grammar is behind these two types. A surface declares its
`SurfaceCodec` in its own package; `proxy.server.codecs` is the table the app routes by.
Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from proxy.core.errors import ErrorRenderer, ProxyError
from proxy.core.events import ExchangeEvent
from proxy.core.ledger import HistoryFacts
from proxy.core.notes import Note
from proxy.core.surfaces import Surface


class Exchange(Protocol):
    """One client request across its upstream rounds (sans-IO; `ChatExchange` is one)."""

    upstream_request: bytes  # the first round's body
    facts: HistoryFacts  # what the history said (its dialect is logged)
    # What the request's mapping to another API left out (a bridge's, SPEC §9: hosted tools,
    # fields the upstream has no word for); named in a response header and the log line.
    dropped: tuple[str, ...]

    def begin_round(self, *, stream: bool) -> None:
        """An upstream response head arrived: its body is an event stream or one message."""

    def feed(self, data: bytes) -> list[ExchangeEvent]: ...

    def end(self) -> list[ExchangeEvent]:
        """The round's upstream body ended cleanly."""

    def report(self) -> tuple[list[Note], int]:
        """The decisions not yet reported, and the data lines that were not JSON so far."""

    def stream_error(self, error: ProxyError) -> bytes:
        """The bytes that end the client's stream with `error`, in the surface's grammar and
        with the stream's running state (sequence numbers, indexes)."""


# An upstream's error answer (status, body) as the client's error body (a bridge's, SPEC §9).
UpstreamErrorRenderer = Callable[[int, bytes], bytes]

# (body, raw body, the route's rules, entropy) -> the request's exchange
ExchangeFactory = Callable[[dict[str, Any], bytes, Any, Callable[[int], bytes]], Exchange]


@dataclass(frozen=True, slots=True, kw_only=True)
class SurfaceCodec:
    surface: Surface
    # The request body as the surface's dict; raises ClientRequestError (400) for a body the
    # surface cannot serve (not JSON, not an object, no history list).
    parse_body: Callable[[bytes], dict[str, Any]]
    new_exchange: ExchangeFactory
    # Status and JSON body of every error answered before the first byte of a response.
    error_response: ErrorRenderer
    # True: a replay loop on a stream is an in-stream event even before any byte (a surface
    # whose main client retries every HTTP 4xx, SPEC §8).
    loop_in_stream: bool = False
    # Where a route's upstream key goes, and its prefix (`Authorization: Bearer <key>`).
    credential_header: bytes = b"authorization"
    credential_prefix: bytes = b"Bearer "
    # A bridge's (SPEC §9): the API its upstream speaks (its rounds go to that API's path) and
    # how an upstream error answer reads in the client's shape. None: the client's own API,
    # and error answers relayed as they came (SPEC §6).
    upstream: Surface | None = None
    upstream_error: UpstreamErrorRenderer | None = None


__all__ = ["Exchange", "ExchangeFactory", "SurfaceCodec", "UpstreamErrorRenderer"]
