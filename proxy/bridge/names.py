"""Client-made names and values, made fit for a response header and an error message.

What a bridge leaves out is named in the response header `x-toolcall-proxy-dropped-tools`
(SPEC §9), and many of those names come from the client's body (unknown fields, item, part
and block types). A header value must not carry control characters (the server refuses
to send the head, and a line break would start a header of the client's choosing), and it
should stay short: names keep the characters that make one, at most `MAX_NAME` of them, and
at most `MAX_NAMES` names are listed. A refusal quotes a client's value the same way,
shortened, so that its message stays a sentence.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

MAX_NAME = 64
MAX_NAMES = 32
MAX_SHOWN = 40
_UNSAFE = re.compile(r"[^A-Za-z0-9_.:/@+\-]")


def safe_name(name: str) -> str:
    """The name in header-safe characters (others become `?`), cut to MAX_NAME."""
    cleaned = _UNSAFE.sub("?", name) or "?"
    return cleaned if len(cleaned) <= MAX_NAME else cleaned[: MAX_NAME - 3] + "..."


def safe_names(names: Iterable[str]) -> tuple[str, ...]:
    """Each name once, header-safe, at most MAX_NAMES (then how many more)."""
    unique = list(dict.fromkeys(safe_name(name) for name in names))
    if len(unique) <= MAX_NAMES:
        return tuple(unique)
    return (*unique[: MAX_NAMES - 1], f"{len(unique) - MAX_NAMES + 1}-more")


def shown(value: object) -> str:
    """A client's value quoted in an error message, cut to MAX_SHOWN characters."""
    text = repr(value)
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 3] + "..."
