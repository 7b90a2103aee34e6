"""The canned upstream: replays stored bytes, whatever the request asks.

Every answer is registered under a key; a request names the key it wants in the
`x-canned-stream` header (which the proxy forwards like any other end-to-end header), so one
server on loopback serves every stream of a module, straight to the SDK or behind the proxy.
Built on the reliability tests' `ScriptedUpstream` (tests/reliability/upstreams.py), which
records each request before it picks the answer.
"""

from __future__ import annotations

import hashlib

from tests.reliability.upstreams import JSON_HEADERS, SSE_HEADERS, Script, ScriptedUpstream

KEY_HEADER = "x-canned-stream"


def sse_pieces(body: bytes) -> tuple[bytes, ...]:
    """The body cut after each blank line (one write per event, as a provider flushes them),
    whatever its line ends; the bytes themselves are untouched."""
    pieces: list[bytes] = []
    start = 0
    for sep in (b"\r\n\r\n", b"\n\n", b"\r\r"):
        if sep in body:
            at = body.find(sep)
            while at != -1:
                pieces.append(body[start : at + len(sep)])
                start = at + len(sep)
                at = body.find(sep, start)
            break
    if start < len(body):
        pieces.append(body[start:])
    return tuple(pieces)


class CannedUpstream(ScriptedUpstream):
    """`put` a body, get the key a request must name to have it replayed."""

    def put(self, body: bytes, *, stream: bool) -> str:
        key = hashlib.sha256((b"sse:" if stream else b"json:") + body).hexdigest()[:16]
        if key not in self.scripts:
            script = (
                Script(headers=SSE_HEADERS, pieces=sse_pieces(body))
                if stream
                else Script(headers=JSON_HEADERS, pieces=(body,))
            )
            self.scripts[key] = script
        return key

    def pick(self, path: str, stream: bool) -> Script:
        key = self.seen[-1].headers.get(KEY_HEADER, "")
        script = self.scripts.get(key)
        if script is None:  # a request the harness did not prepare: say so loudly
            return Script(status=500, pieces=(b'{"error": "no canned answer for this key"}',))
        return script
