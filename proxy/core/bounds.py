"""SPEC §6: the bounds on one upstream response's tool calls, checked as their bytes arrive.

A stream core holds a call's arguments until the call is decided (a possible replay waits
for all of them) and keeps a little state per call for the response's end, so both are
bounded; past a bound the round is broken (`CallBoundExceeded`): the core stops reading and
the client's stream ends with the surface's `upstream_stream_error`, as for a broken upstream.

- `CALL_ARGUMENTS_LIMIT`: characters of one call's arguments (or custom input). Real calls
  carry a command, a path or a file to write: a large generated file is a few hundred KB, and
  models' output limits (tens of thousands of tokens, about 4 characters each) stay under
  1 MiB. 16 Mi characters is far above that, and bounds what a held call keeps (16 MiB of
  ASCII, at most 64 MiB as Python stores the widest characters).
- `CALLS_LIMIT`: the calls of one upstream response (all its choices). Parallel calls come
  by the few, or the tens when a model fans out over files; 4096 is far above that, and
  bounds the per-call state (a slot, its ids, its notes) a response can make the proxy keep
  and an agent would have to run.

Both are characters or calls the proxy has read, never what it has sent, so the check costs
one comparison per fragment or call.
"""

from __future__ import annotations

from typing import Final

from proxy.core.errors import CallBoundExceeded

CALL_ARGUMENTS_LIMIT: Final = 16 * 1024 * 1024
CALLS_LIMIT: Final = 4096


def check_arguments(length: int) -> None:
    """A call's arguments have grown to `length` characters: past the bound, the round breaks."""
    if length > CALL_ARGUMENTS_LIMIT:
        raise CallBoundExceeded(
            f"the upstream sent a tool call whose arguments exceed {CALL_ARGUMENTS_LIMIT} "
            "characters (the proxy's bound on one call)"
        )


def check_calls(count: int) -> None:
    """The response has started its `count`-th call: past the bound, the round breaks."""
    if count > CALLS_LIMIT:
        raise CallBoundExceeded(
            f"the upstream sent more than {CALLS_LIMIT} tool calls in one response "
            "(the proxy's bound on calls per response)"
        )


__all__ = [
    "CALLS_LIMIT",
    "CALL_ARGUMENTS_LIMIT",
    "CallBoundExceeded",
    "check_arguments",
    "check_calls",
]
