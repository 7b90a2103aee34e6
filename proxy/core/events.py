"""What an exchange tells the shell after each read of an upstream body (every API surface).

- `bytes`: more of the client's body; `Forward`: bytes that end it (a stream's last event, or
  a whole message);
- `OpenFollowup`: a replay-only round was answered by the proxy; send this request upstream
  and feed its body to the same exchange (SPEC §5);
- `LoopDetected`: the breaker tripped; `before_first_byte` says whether the client can still
  get a plain HTTP error (nothing of the response reached it yet);
- `UpstreamBroken`: the upstream sent what cannot be answered (a follow-up body that is not a
  JSON object).
"""

from __future__ import annotations

from dataclasses import dataclass

from proxy.core.guard import Replay
from proxy.errors import ProxyError, ReplayLoopDetected


@dataclass(frozen=True, slots=True, kw_only=True)
class Forward:
    """Bytes that end the client's body (`last`), or a whole message's body."""

    data: bytes
    last: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class OpenFollowup:
    body: bytes
    replays: tuple[Replay, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class LoopDetected:
    error: ReplayLoopDetected
    before_first_byte: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class UpstreamBroken:
    error: ProxyError


# Plain `bytes` is "forward these; the body goes on": the event of nearly every read of a
# stream, so no object is built for it on the hot path (measured: bench.inprocess).
ExchangeEvent = bytes | Forward | OpenFollowup | LoopDetected | UpstreamBroken


__all__ = ["ExchangeEvent", "Forward", "LoopDetected", "OpenFollowup", "UpstreamBroken"]
