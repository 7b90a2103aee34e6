"""A whole message's round writes its one body without `_act` when the exchange ends the round
with a single last Forward (the usual answer); anything else still goes through `_act`. The
shortcut must send what `_act` sends and end the round the same way."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from proxy.config.load import Route
from proxy.core.errors import ProxyError, UpstreamStreamError
from proxy.core.events import ExchangeEvent, Forward, UpstreamBroken
from proxy.core.sse import SSEFramingError
from proxy.ops.observability import LOGGER, Metrics, RequestLog
from proxy.server.client_writer import EventStreamWriter, MessageWriter
from proxy.server.codecs import codec_for
from proxy.server.exchange_handler import ExchangeHandler, ExchangeRequest
from proxy.upstream.call import UpstreamResponse
from tests.ops.test_request_log import Records


class _Exchange:
    """An exchange that answers the round's end with the given events."""

    def __init__(self, events: list[ExchangeEvent]) -> None:
        self.events = events

    def feed(self, data: bytes) -> list[ExchangeEvent]:
        return []

    def end(self) -> list[ExchangeEvent]:
        return list(self.events)


class _Body(httpx.AsyncByteStream):
    """A body that is there whole, as a stream."""

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield b'{"id":"x"}'


def _response() -> UpstreamResponse:
    """A whole body, as any httpx client's answer comes to the shell (the compiled shell
    checks its arguments' types: an UpstreamResponse, not a stand-in)."""
    return UpstreamResponse.of(httpx.Response(200, stream=_Body()))


def _request(request_id: str = "req_1") -> ExchangeRequest:
    codec = codec_for("POST", "/chat/completions")
    assert codec is not None
    log = RequestLog(request_id, "r", "POST", "/")
    return ExchangeRequest(
        codec, Route(name="r", upstream="http://127.0.0.1:9/v1"), "", [], request_id, log
    )


async def _through(events: list[ExchangeEvent], *, shortcut: bool) -> tuple[object, list[Any]]:
    sent: list[Any] = []

    async def send(message: Any) -> None:
        sent.append(message)

    handler = ExchangeHandler(httpx.AsyncClient(), Metrics())
    writer = MessageWriter(send, 200, [(b"x-request-id", b"req_1")])
    req = _request()  # neither way reads it for these events
    try:
        if shortcut:
            exchange: Any = _Exchange(events)
            response = _response()
            step = await handler._message_round(req, exchange, writer, response)
        else:
            step = await handler._act(req, writer, events)
    except (ProxyError, AssertionError) as exc:  # the writer refuses or raises the error
        step = type(exc)
    return step, sent


@pytest.mark.parametrize(
    "events",
    [
        [Forward(data=b'{"id":"x"}', last=True)],  # the shortcut
        [Forward(data=b"", last=True)],  # the shortcut, an empty body
        [Forward(data=b'{"id":"x"}', last=False)],  # not last: _act's way
        [Forward(data=b"{}", last=True), Forward(data=b"{}", last=True)],  # two: _act's way
        [UpstreamBroken(error=UpstreamStreamError("broken"))],  # raised by the writer
        [],
    ],
)
async def test_a_message_round_ends_as_act_ends_it(events: list[ExchangeEvent]) -> None:
    assert await _through(events, shortcut=True) == await _through(events, shortcut=False)


class _Failing(_Exchange):
    """An exchange whose round's end raises `error`."""

    def __init__(self, error: Exception) -> None:
        super().__init__([])
        self.error = error

    def begin_round(self, *, stream: bool) -> None:
        return None

    def end(self) -> list[ExchangeEvent]:
        raise self.error

    def stream_error(self, error: ProxyError) -> bytes:
        return b"data: " + error.code.encode() + b"\n\n"


@pytest.mark.parametrize(
    ("error", "code", "logged"),
    [
        (KeyError("choices"), "proxy_internal_error", True),  # our bug: logged, with its cause
        (SSEFramingError("an event past the limit"), "upstream_stream_error", False),
        (UpstreamStreamError("broken"), "upstream_stream_error", False),
    ],
)
async def test_a_round_that_breaks_tells_the_client(
    error: Exception, code: str, logged: bool
) -> None:
    records = Records()
    LOGGER.addHandler(records)
    try:
        handler = ExchangeHandler(httpx.AsyncClient(), Metrics())
        req = _request("req_9")
        exchange: Any = _Failing(error)
        # A whole message: the error is raised for the app to answer with its status.
        writer = MessageWriter(_ignore, 200, [])
        with pytest.raises(ProxyError) as raised:
            await handler._rounds(req, exchange, writer, _response())
        assert raised.value.code == code
        # A stream: the error event ends it.
        sent: list[Any] = []

        async def send(message: Any) -> None:
            sent.append(message)

        stream = EventStreamWriter(send, [], render=exchange.stream_error)
        assert await handler._rounds(req, exchange, stream, _response()) == 200
        assert b"".join(m.get("body", b"") for m in sent) == b"data: " + code.encode() + b"\n\n"
        assert req.log.fields["error"] == code
    finally:
        LOGGER.removeHandler(records)
    failures = [r for r in records.records if r.getMessage() == "core failed on upstream data"]
    assert len(failures) == (2 if logged else 0)
    assert all(r.levelno == logging.ERROR and r.exc_info for r in failures)


async def _ignore(message: Any) -> None:
    return None
