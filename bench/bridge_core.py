"""Instructions per bridged stream in the sans-IO core alone (SPEC §9), beside Chat's own.

One upstream Chat Completions stream (a role chunk, 200 text deltas, a finish and a usage chunk,
`[DONE]`; `--call` ends it in a function call whose Kimi-style id `functions.bash:0` the proxy
rewrites) goes through three exchanges, each for a request that offers a tool (so text goes
through the leaked-markup scanner): the Chat Completions exchange itself (the reference), the
Responses client over it (`new_responses_over_chat`: Codex on a Chat-only provider) and the
Anthropic Messages client over it (`new_anthropic_over_chat`: Claude Code). Fed in 16 KiB
reads, or one event a read with `--paced` (bench/reads.py); counted under callgrind at N and
3N streams (after the same warm-up), differenced, so start-up and imports cancel out.

    python -m bench.bridge_core [--call] [--paced] [--streams N] [--only chat|responses|anthropic]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

import orjson

from bench.inprocess import per_unit
from bench.reads import add_paced_flag, reads_of
from proxy.bridge.anthropic_chat.exchange import new_anthropic_over_chat
from proxy.bridge.responses_chat.exchange import new_responses_over_chat
from proxy.chat.exchange import ChatExchange
from proxy.core.events import Forward
from proxy.core.rounds import RouteRules

WARMUP = 20
DELTAS = 200
PARAMETERS = {"type": "object", "properties": {"command": {"type": "string"}}}
USER_TEXT = "List the files."

REQUESTS: dict[str, dict[str, Any]] = {
    "chat": {
        "model": "kimi-k2",
        "stream": True,
        "messages": [{"role": "user", "content": USER_TEXT}],
        "tools": [{"type": "function", "function": {"name": "bash", "parameters": PARAMETERS}}],
    },
    "responses": {
        "model": "kimi-k2",
        "stream": True,
        "store": False,
        "input": [{"type": "message", "role": "user", "content": USER_TEXT}],
        "tools": [{"type": "function", "name": "bash", "parameters": PARAMETERS}],
    },
    "anthropic": {
        "model": "kimi-k2",
        "stream": True,
        "max_tokens": 1024,
        "messages": [{"role": "user", "content": USER_TEXT}],
        "tools": [{"name": "bash", "input_schema": PARAMETERS}],
    },
}


def _new_chat(body: dict[str, Any], raw: bytes, rules: RouteRules, entropy: Any) -> Any:
    return ChatExchange(body, raw, rules, entropy=entropy)


FACTORIES: dict[str, Callable[..., Any]] = {
    "chat": _new_chat,
    "responses": new_responses_over_chat,
    "anthropic": new_anthropic_over_chat,
}


def _event(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
    chunk = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "kimi-k2",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        **extra,
    }
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


def upstream_stream(call: bool) -> bytes:
    """What a Chat-only provider streams: Kimi's ids when the answer ends in a call."""
    events = [_event({"role": "assistant", "content": ""})]
    events += [_event({"content": f"word{i} "}) for i in range(DELTAS)]
    if call:
        function = {"name": "bash", "arguments": '{"command":"ls"}'}
        tool_call = {"index": 0, "id": "functions.bash:0", "type": "function", "function": function}
        events.append(_event({"tool_calls": [tool_call]}))
    events.append(_event({}, "tool_calls" if call else "stop"))
    usage = {"prompt_tokens": 20, "completion_tokens": DELTAS, "total_tokens": 20 + DELTAS}
    events.append(
        b"data: "
        + orjson.dumps(
            {"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [], "usage": usage}
        )
        + b"\n\n"
    )
    return b"".join(events) + b"data: [DONE]\n\n"


def _entropy(n: int) -> bytes:
    return b"\x5a" * n


def run(kind: str, streams: int, call: bool, paced: bool = False) -> None:
    body = REQUESTS[kind]
    reads = reads_of(upstream_stream(call), paced)
    raw, rules, factory = orjson.dumps(body), RouteRules(), FACTORIES[kind]
    for _ in range(WARMUP + streams):
        exchange = factory(body, raw, rules, _entropy)
        exchange.begin_round(stream=True)
        events: list[Any] = []
        for read in reads:
            events = exchange.feed(read)
        # As the shell does: the round is over once its last bytes were handed out.
        if not any(isinstance(event, Forward) and event.last for event in events):
            exchange.end()


def instructions(kind: str, streams: int, call: bool, paced: bool = False) -> int:
    flag = (["--call"] if call else []) + (["--paced"] if paced else [])
    return per_unit(
        lambda n: ["bench.bridge_core", "--only", kind, *flag, "--run", str(n)], streams
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bridge_core", description=__doc__)
    parser.add_argument("--streams", type=int, default=30)
    parser.add_argument("--call", action="store_true", help="end in a rewritten function call")
    parser.add_argument("--only", choices=sorted(FACTORIES), help="one exchange, not all three")
    add_paced_flag(parser)
    parser.add_argument("--run", type=int, help=argparse.SUPPRESS)  # the counted process
    args = parser.parse_args(argv)
    if args.run is not None:
        run(args.only or "chat", args.run, args.call, args.paced)
        return 0
    kinds = [args.only] if args.only else list(FACTORIES)
    counts = {kind: instructions(kind, args.streams, args.call, args.paced) for kind in kinds}
    ending = "ending in a rewritten call" if args.call else "text only"
    ending += ", one event a read" if args.paced else ""
    print(f"instructions per {DELTAS}-delta upstream Chat stream, core only, {ending}:")
    for kind, count in counts.items():
        ratio = f"  ({count / counts['chat']:.2f}x Chat's)" if "chat" in counts else ""
        print(f"  {kind:<10} {count:>12,}{ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
