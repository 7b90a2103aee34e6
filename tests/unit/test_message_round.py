"""A whole message's round writes its one body without `_act` when the exchange ends the round
with a single last Forward (the usual answer); anything else still goes through `_act`. The
shortcut must send what `_act` sends and end the round the same way."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from proxy.client_writer import MessageWriter
from proxy.core.events import ExchangeEvent, Forward, UpstreamBroken
from proxy.errors import ProxyError, UpstreamStreamError
from proxy.exchange_handler import ExchangeHandler
from proxy.observability import Metrics


class _Exchange:
    """An exchange that answers the round's end with the given events."""

    def __init__(self, events: list[ExchangeEvent]) -> None:
        self.events = events

    def feed(self, data: bytes) -> list[ExchangeEvent]:
        return []

    def end(self) -> list[ExchangeEvent]:
        return list(self.events)


class _Response:
    """A whole body already read; released without an await."""

    async def _body(self) -> bytes:
        return b'{"id":"x"}'

    def read(self) -> Any:
        return self._body()

    def released(self) -> bool:
        return True


async def _through(events: list[ExchangeEvent], *, shortcut: bool) -> tuple[object, list[Any]]:
    sent: list[Any] = []

    async def send(message: Any) -> None:
        sent.append(message)

    handler = ExchangeHandler(httpx.AsyncClient(), Metrics())
    writer = MessageWriter(send, 200, [(b"x-request-id", b"req_1")])
    req: Any = None  # neither way reads the request for these events
    try:
        if shortcut:
            exchange: Any = _Exchange(events)
            response: Any = _Response()
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
