"""The doctor's side of the wire: requests to the provider, bounded in number and in time.

Bodies are kept as the bytes that arrived (streams are parsed later, by `views`). The key
is sent only in headers and is removed from any text the provider sends back before it is
shown (error messages sometimes quote what was presented).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from proxy import __version__

# The longest body kept from one response: far above a few tool calls, and a bound on memory.
MAX_BODY_BYTES = 8 * 1024 * 1024
CONNECT_TIMEOUT = 10.0


@dataclass
class RecordedExchange:
    """One request and what came back."""

    surface: str  # a path from proxy.core.surfaces
    conversation: str  # "streaming", "non-streaming", or "probe" for a surface probe
    turn: int
    request: dict[str, Any]
    stream: bool
    status: int | None = None
    raw: bytes = b""
    error: str | None = None  # why there is no usable answer (transport, status, time limit)
    seconds: float = 0.0

    @property
    def label(self) -> str:
        return f"{self.conversation} turn {self.turn}"

    @property
    def ok(self) -> bool:
        return self.error is None and self.status == 200

    def json(self) -> Any:
        """The body as JSON, or None when it is not JSON."""
        try:
            return orjson.loads(self.raw)
        except orjson.JSONDecodeError:
            return None


@dataclass
class Session:
    """What every request shares: where, who, and how much is left (requests and seconds)."""

    base_url: str
    key: str | None
    max_requests: int
    deadline: float  # time.monotonic() after which nothing more is sent or read
    client: httpx.Client = field(default_factory=lambda: httpx.Client(follow_redirects=False))
    sent: int = 0

    def headers(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        headers = {"user-agent": f"toolcall-proxy-doctor/{__version__}"}
        if self.key:
            headers["authorization"] = f"Bearer {self.key}"
        return {**headers, **(extra or {})}

    def redact(self, text: str) -> str:
        return text.replace(self.key, "***") if self.key else text

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def post(
        self,
        surface: str,
        body: dict[str, Any],
        *,
        conversation: str = "probe",
        turn: int = 1,
        stream: bool = False,
        headers: dict[str, str] | None = None,
    ) -> RecordedExchange:
        exchange = RecordedExchange(surface, conversation, turn, body, stream)
        if self.sent >= self.max_requests:
            exchange.error = f"not sent: the limit of {self.max_requests} requests was reached"
            return exchange
        if self.remaining() <= 0:
            exchange.error = "not sent: the time limit was reached"
            return exchange
        self.sent += 1
        started = time.monotonic()
        try:
            self._send(exchange, headers)
        except httpx.TimeoutException:
            exchange.error = "no answer within the time limit"
        except httpx.HTTPError as exc:
            exchange.error = self.redact(f"the request failed: {type(exc).__name__}: {exc}")
        exchange.seconds = time.monotonic() - started
        if exchange.error is None and exchange.status != 200:
            exchange.error = self.redact(f"HTTP {exchange.status}: {_error_message(exchange)}")
        return exchange

    def _read_timeout(self) -> float:
        return max(0.1, self.remaining())

    def _send(self, exchange: RecordedExchange, headers: dict[str, str] | None) -> None:
        timeout = httpx.Timeout(
            self._read_timeout(), connect=min(CONNECT_TIMEOUT, self._read_timeout())
        )
        request = self.client.build_request(
            "POST",
            self.base_url + exchange.surface,
            content=orjson.dumps(exchange.request),
            headers={"content-type": "application/json", **self.headers(headers)},
            timeout=timeout,
        )
        response = self.client.send(request, stream=True)
        try:
            exchange.status = response.status_code
            body = bytearray()
            # Read as it arrives, so a provider that trickles forever still ends at the deadline.
            for chunk in response.iter_bytes():  # decompressed, as a client reads it
                body += chunk
                if len(body) > MAX_BODY_BYTES:
                    exchange.error = (
                        f"the body passed {MAX_BODY_BYTES} bytes; the rest was not read"
                    )
                    break
                if self.remaining() <= 0:
                    exchange.error = "the time limit was reached while the answer was arriving"
                    break
            exchange.raw = bytes(body)
        finally:
            response.close()

    def close(self) -> None:
        self.client.close()


def _error_message(exchange: RecordedExchange) -> str:
    """The provider's own words for an error: OpenAI's or Anthropic's `error.message`."""
    body = exchange.json()
    error = body.get("error") if isinstance(body, dict) else None
    message = error.get("message") if isinstance(error, dict) else error
    if isinstance(message, str) and message:
        return message[:300]
    text = exchange.raw[:300].decode("utf-8", "replace").strip()
    return text or "(empty body)"
