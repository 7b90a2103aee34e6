"""What a bridge passes on as it came (SSE comments) is valid UTF-8 (SPEC §4, §9).

The Chat exchange hands on an upstream data line that is not JSON as a comment with the
bytes it had; a body cut inside a UTF-8 character leaves half of one there. Chat clients
read comments as bytes, but the openai and anthropic SDKs decode every line of a stream as
strict UTF-8 and raise on such a line, so a bridge writes the comment with the broken
character replaced (U+FFFD), the rest of its text as it was.
"""

from __future__ import annotations


def utf8_safe(data: bytes) -> bytes:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("utf-8", "replace").encode("utf-8")
    return data
