"""The API surfaces the core repairs, by path: the table the app routes requests by.

A surface's codec lives in its own package; adding a surface adds one line here and sets
`repaired=True` on its row of `proxy.core.surfaces`.
"""

from __future__ import annotations

from proxy.anthropic.codec import ANTHROPIC_CODEC
from proxy.chat.codec import CHAT_CODEC
from proxy.core.surface_codec import SurfaceCodec
from proxy.responses.codec import RESPONSES_CODEC

CODECS: dict[str, SurfaceCodec] = {
    codec.surface.path: codec for codec in (CHAT_CODEC, ANTHROPIC_CODEC, RESPONSES_CODEC)
}


def codec_for(method: str, rest: str) -> SurfaceCodec | None:
    """The codec that serves `POST {base}{rest}`; None: the request is passed through."""
    return CODECS.get(rest) if method == "POST" else None


def credential_for(rest: str) -> tuple[bytes, bytes]:
    """Where a route's upstream key goes for a path: the header of the surface the path
    belongs to (`/messages/count_tokens` is Anthropic's), else `Authorization: Bearer`."""
    for path, codec in CODECS.items():
        if rest == path or rest.startswith(path + "/"):
            return codec.credential_header, codec.credential_prefix
    return b"authorization", b"Bearer "


__all__ = ["CODECS", "codec_for", "credential_for"]
