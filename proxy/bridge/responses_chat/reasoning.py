"""Reasoning text carried through the client without state (SPEC §9).

An upstream's `reasoning_content` reaches a Responses client as a `reasoning` item whose
`encrypted_content` is the text in a form the proxy recognises as its own; Codex and the
Agents SDK echo that item in their next request, and it goes back upstream as the following
assistant message's `reasoning_content` (thinking models such as Kimi K2 and DeepSeek
reasoner require it on tool-call turns). Any other `encrypted_content` is a provider's
signature the upstream cannot read.
"""

from __future__ import annotations

import base64
import binascii

PREFIX = "tcp-reasoning-v1:"


def seal(text: str) -> str:
    return PREFIX + base64.b64encode(text.encode()).decode("ascii")


def unseal(value: object) -> str | None:
    """The text of one of our own `encrypted_content` values, or None for anything else."""
    if not isinstance(value, str) or not value.startswith(PREFIX):
        return None
    try:
        return base64.b64decode(value[len(PREFIX) :], validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None
