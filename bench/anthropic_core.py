"""Instructions per Anthropic Messages stream in the sans-IO core alone (`AnthropicExchange`).

The stream Claude Code gets on a long answer: `message_start`, one text block of 200 text
deltas, `message_delta` and `message_stop` (built with the Anthropic test builders), for a
request that offers tools, so text goes through the leaked-markup scanner; fed in 16 KiB
reads, or one event a read with `--paced` (bench/reads.py). `--call` ends the message in a
tool_use block whose Kimi-style id (`functions.Bash:0`) the proxy rewrites, its input
streamed in `input_json_delta` pieces. Counted under callgrind at N and 3N streams (after the
same warm-up), differenced.

    python -m bench.anthropic_core [--call] [--paced] [--streams N]
"""

from __future__ import annotations

import argparse
import sys

import orjson

from bench.inprocess import per_unit
from bench.reads import add_paced_flag, reads_of
from proxy.anthropic.exchange import AnthropicExchange
from proxy.core.rounds import RouteRules

WARMUP = 20


def _stream(
    call: bool = False, paced: bool = False
) -> tuple[dict[str, object], bytes, list[bytes]]:
    # The tests' own builders.
    from tests.anthropic.anthropic_wire import end, request, start, text, tool

    upstream = start() + text(0, *(f"word{i} " for i in range(200)))
    if call:
        upstream += tool(1, "functions.Bash:0", "Bash", {"command": "ls -la src/"}, pieces=5)
    upstream += end("tool_use" if call else "end_turn")
    return request(), upstream, reads_of(upstream, paced)


def run(streams: int, call: bool = False, paced: bool = False) -> None:
    body, _, reads = _stream(call, paced)
    raw, rules = orjson.dumps(body), RouteRules()
    for _ in range(WARMUP + streams):
        exchange = AnthropicExchange(body, raw, rules)
        exchange.begin_round(stream=True)
        for read in reads:
            exchange.feed(read)
        if exchange.phase.name == "RECEIVING":
            exchange.end()


def instructions(streams: int, call: bool = False, paced: bool = False) -> int:
    flag = (["--call"] if call else []) + (["--paced"] if paced else [])
    return per_unit(lambda n: ["bench.anthropic_core", *flag, "--run", str(n)], streams)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.anthropic_core", description=__doc__)
    parser.add_argument("--streams", type=int, default=50)
    parser.add_argument("--call", action="store_true", help="end in a rewritten tool_use block")
    add_paced_flag(parser)
    parser.add_argument("--run", type=int, help=argparse.SUPPRESS)  # the counted process
    args = parser.parse_args(argv)
    if args.run is not None:
        run(args.run, args.call, args.paced)
        return 0
    count = instructions(args.streams, args.call, args.paced)
    what = "ending in a rewritten call" if args.call else "core only"
    what += ", one event a read" if args.paced else ""
    print(f"instructions per 200-delta Anthropic stream, {what}: {count:,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
