"""Reasoning that round-trips through the client without state (SPEC §9).

An upstream's `reasoning_content` reaches the client as a `thinking` block whose `signature`
is `tcp-reasoning-v1:` + base64 of the text's UTF-8: the proxy recognises it in a later
request and sends the text back as the assistant message's `reasoning_content` (Kimi K2
thinking and DeepSeek reasoner want it on tool-call turns). A signature of any other form is
a provider's own and means nothing to a Chat upstream.
"""

from __future__ import annotations

import base64
import binascii

SIGNATURE_PREFIX = "tcp-reasoning-v1:"


def sign_reasoning(text: str) -> str:
    return SIGNATURE_PREFIX + base64.b64encode(text.encode("utf-8")).decode("ascii")


def is_proxy_signature(signature: object) -> bool:
    return isinstance(signature, str) and signature.startswith(SIGNATURE_PREFIX)


def signed_reasoning(signature: object) -> str | None:
    """The text a proxy signature carries; None for a foreign or damaged signature."""
    if not isinstance(signature, str) or not signature.startswith(SIGNATURE_PREFIX):
        return None
    try:
        raw = base64.b64decode(signature[len(SIGNATURE_PREFIX) :], validate=True)
        return raw.decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
