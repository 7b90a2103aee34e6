"""The shell's part of a bridge (SPEC §9): the route's upstream API picks the codec, and a
bridged Anthropic route answers `count_tokens` itself (a Chat Completions upstream has none).

Everything about the two grammars is the bridge's (`proxy.bridge`); here only which codec
serves a request, and one answer the upstream cannot give.
"""

from __future__ import annotations

from proxy.bridge.anthropic_chat import count_tokens_estimate
from proxy.bridge.codecs import bridged
from proxy.config.settings import Route
from proxy.core.body import parse_json_object
from proxy.core.surface_codec import SurfaceCodec
from proxy.core.surfaces import ANTHROPIC_MESSAGES
from proxy.ops.observability import RequestLog
from proxy.server.asgi import Send, send_json, with_request_id

COUNT_TOKENS_PATH = ANTHROPIC_MESSAGES.path + "/count_tokens"
ESTIMATE_HEADER = (b"x-toolcall-proxy-estimate", b"1")


def bridged_codec(codec: SurfaceCodec, upstream_api: str, log: RequestLog) -> SurfaceCodec:
    """The codec that serves this request on a route whose upstream speaks `upstream_api`;
    the log line names the upstream's API when it is not the client's."""
    serving = bridged(codec, upstream_api)
    if serving.upstream is not None:
        log.fields["upstream_api"] = serving.upstream.label
    return serving


def counts_tokens(route: Route, method: str, rest: str) -> bool:
    """Is this Anthropic's `count_tokens` on a route bridged to Chat Completions?"""
    return (
        method == "POST" and rest == COUNT_TOKENS_PATH and route.upstream_api == "chat_completions"
    )


async def answer_count_tokens(send: Send, raw: bytes, request_id: str, log: RequestLog) -> int:
    """SPEC §9: an estimate, marked as one, so Claude Code keeps working on a bridged route.
    A body that is not a JSON object raises SPEC §6's 400 for the app to answer."""
    body = parse_json_object(raw)
    log.fields["estimate"] = True
    headers = with_request_id([ESTIMATE_HEADER], request_id)
    await send_json(send, 200, count_tokens_estimate(body), headers)
    return 200


__all__ = ["answer_count_tokens", "bridged_codec", "counts_tokens"]
