"""SPEC §9: which codec serves a client's API over a route's upstream API, as the shell picks
it (`bridged`) and names it at start-up (`bridges_from`); the mutation audit found these only
reached through the server's tests."""

from __future__ import annotations

import json

from proxy.anthropic.codec import ANTHROPIC_CODEC
from proxy.bridge.codecs import bridged, bridges_from
from proxy.chat.codec import CHAT_CODEC
from proxy.core.rounds import RouteRules
from proxy.responses.codec import RESPONSES_CODEC

CHAT = CHAT_CODEC.surface.label


def entropy(n: int) -> bytes:
    return b"\x01" * n


def test_a_client_api_over_chat_is_served_by_its_bridge() -> None:
    bodies = (
        (RESPONSES_CODEC, {"model": "m", "input": "hi", "store": False}),
        (
            ANTHROPIC_CODEC,
            {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]},
        ),
    )
    for client, body in bodies:
        codec = bridged(client, CHAT)
        # The client's own body rule and error shape, the upstream's API, path and credential.
        assert (codec.surface, codec.parse_body, codec.error_response) == (
            client.surface,
            client.parse_body,
            client.error_response,
        )
        assert codec.loop_in_stream is client.loop_in_stream
        assert codec.upstream == CHAT_CODEC.surface
        assert (codec.credential_header, codec.credential_prefix) == (b"authorization", b"Bearer ")
        # The exchange sends the upstream a Chat body, whatever the client's API.
        exchange = codec.new_exchange(body, b"", RouteRules(), entropy)
        upstream = json.loads(exchange.upstream_request)
        assert upstream["messages"] == [{"role": "user", "content": "hi"}]
        assert codec.upstream_error is not None


def test_each_bridge_renders_an_upstream_error_in_its_clients_shape() -> None:
    responses = bridged(RESPONSES_CODEC, CHAT).upstream_error
    anthropic = bridged(ANTHROPIC_CODEC, CHAT).upstream_error
    assert responses is not None and anthropic is not None
    assert json.loads(responses(429, b"slow down"))["error"]["message"] == "slow down"
    assert json.loads(anthropic(429, b"slow down")) == {
        "type": "error",
        "error": {"type": "rate_limit_error", "message": "slow down"},
    }


def test_no_bridge_serves_the_client_as_it_is() -> None:
    assert bridged(CHAT_CODEC, CHAT) is CHAT_CODEC
    assert bridged(ANTHROPIC_CODEC, ANTHROPIC_CODEC.surface.label) is ANTHROPIC_CODEC
    assert bridged(RESPONSES_CODEC, ANTHROPIC_CODEC.surface.label) is RESPONSES_CODEC


def test_the_paths_a_chat_upstream_bridges() -> None:
    assert bridges_from(CHAT) == ["/responses", "/messages"]
    assert bridges_from(RESPONSES_CODEC.surface.label) == []
