"""Anthropic Messages as an API surface (`codec.py`): the exchange the codec builds is the
surface's own, with the request's body, bytes, route rules and entropy (minted ids)."""

from __future__ import annotations

import orjson

from proxy.anthropic.codec import ANTHROPIC_CODEC
from proxy.anthropic.exchange import AnthropicExchange
from proxy.core.events import Forward
from proxy.core.rounds import RouteRules
from tests.anthropic.anthropic_wire import end, entropy, request, start, tool

LS = {"command": "ls"}
UPSTREAM = start() + tool(0, "functions.Bash:0", "Bash", LS) + end()


def streamed(exchange: AnthropicExchange) -> bytes:
    exchange.begin_round(stream=True)
    events = exchange.feed(UPSTREAM)  # message_stop ends the round: no end() after it
    out = b""
    for event in events:
        assert isinstance(event, (bytes, Forward)), event
        out += event if isinstance(event, bytes) else event.data
    return out


def test_the_codecs_exchange_is_the_one_built_from_the_same_request() -> None:
    body = request()
    raw = orjson.dumps(body, option=orjson.OPT_INDENT_2)
    rules = RouteRules(ids="off")  # a rule the exchange must apply: raw ids stay
    made = ANTHROPIC_CODEC.new_exchange(body, raw, rules, entropy)
    assert isinstance(made, AnthropicExchange)
    assert made.upstream_request == raw and made.rules is rules
    assert b'"id":"functions.Bash:0"' in streamed(made)


def test_the_codecs_exchange_mints_ids_from_the_entropy_it_is_given() -> None:
    body = request()
    made = ANTHROPIC_CODEC.new_exchange(body, b"{}", RouteRules(), entropy)
    direct = AnthropicExchange(body, b"{}", RouteRules(), entropy)
    assert isinstance(made, AnthropicExchange)
    got = streamed(made)
    assert b"functions.Bash:0" not in got  # minted (SPEC §2) ...
    assert got == streamed(direct)  # ... from the same entropy
