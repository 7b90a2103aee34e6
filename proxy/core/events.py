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

from proxy.core.errors import ProxyError, ReplayLoopDetected
from proxy.core.guard import Replay


# Value objects: read-only by convention and hashed by value (unsafe_hash), not frozen: a
# frozen dataclass's __init__ sets each field through object.__setattr__, about twice the
# cost of building one, and these are built per call, per note or per event.
@dataclass(slots=True, kw_only=True, unsafe_hash=True, init=False)
class Forward:
    """Bytes that end the client's body (`last`), or a whole message's body."""

    data: bytes
    last: bool

    # Written out (init=False), the defaults here only: mypyc compiles this one; the
    # one dataclasses generates would stay Python.
    def __init__(self, *, data: bytes, last: bool = False) -> None:
        self.data = data
        self.last = last


@dataclass(slots=True, kw_only=True, unsafe_hash=True)
class OpenFollowup:
    body: bytes
    replays: tuple[Replay, ...]


@dataclass(slots=True, kw_only=True, unsafe_hash=True)
class LoopDetected:
    error: ReplayLoopDetected
    before_first_byte: bool


@dataclass(slots=True, kw_only=True, unsafe_hash=True)
class UpstreamBroken:
    error: ProxyError


# Plain `bytes` is "forward these; the body goes on": the event of nearly every read of a
# stream, so no object is built for it on the hot path (measured: bench.inprocess).
ExchangeEvent = bytes | Forward | OpenFollowup | LoopDetected | UpstreamBroken


__all__ = ["ExchangeEvent", "Forward", "LoopDetected", "OpenFollowup", "UpstreamBroken"]
