"""Which bridge serves a client's API over a route's upstream API (SPEC §9).

A bridged codec is the client surface's codec (its body rule, its error shape, its loop
behaviour) with the bridge's exchange, the upstream API's path and credential header, and the
bridge's rendering of an upstream error answer in the client's shape.
"""

from __future__ import annotations

from dataclasses import replace

from proxy.anthropic.codec import ANTHROPIC_CODEC
from proxy.bridge.anthropic_chat.exchange import new_anthropic_over_chat
from proxy.bridge.anthropic_chat.exchange import upstream_error as anthropic_upstream_error
from proxy.bridge.responses_chat.exchange import new_responses_over_chat
from proxy.bridge.responses_chat.exchange import upstream_error as responses_upstream_error
from proxy.chat.codec import CHAT_CODEC
from proxy.core.surface_codec import ExchangeFactory, SurfaceCodec, UpstreamErrorRenderer
from proxy.responses.codec import RESPONSES_CODEC


def _over(
    client: SurfaceCodec,
    upstream: SurfaceCodec,
    new_exchange: ExchangeFactory,
    upstream_error: UpstreamErrorRenderer,
) -> SurfaceCodec:
    return replace(
        client,
        new_exchange=new_exchange,
        credential_header=upstream.credential_header,
        credential_prefix=upstream.credential_prefix,
        upstream=upstream.surface,
        upstream_error=upstream_error,
    )


# (client surface label, upstream API) -> the codec that serves the client over that API.
BRIDGES: dict[tuple[str, str], SurfaceCodec] = {
    (RESPONSES_CODEC.surface.label, CHAT_CODEC.surface.label): _over(
        RESPONSES_CODEC, CHAT_CODEC, new_responses_over_chat, responses_upstream_error
    ),
    (ANTHROPIC_CODEC.surface.label, CHAT_CODEC.surface.label): _over(
        ANTHROPIC_CODEC, CHAT_CODEC, new_anthropic_over_chat, anthropic_upstream_error
    ),
}


def bridged(codec: SurfaceCodec, upstream_api: str) -> SurfaceCodec:
    """The codec that serves `codec`'s clients on a route whose upstream speaks
    `upstream_api`; `codec` itself where the upstream speaks the client's API (`same`) or no
    bridge pairs them (SPEC §9: that path is served as without a bridge)."""
    return BRIDGES.get((codec.surface.label, upstream_api), codec)


def bridges_from(upstream_api: str) -> list[str]:
    """The client paths a route with this upstream API bridges, for the start-up line."""
    return [c.surface.path for (_, api), c in BRIDGES.items() if api == upstream_api]


__all__ = ["BRIDGES", "bridged", "bridges_from"]
