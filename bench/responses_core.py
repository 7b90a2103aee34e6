"""Instructions per OpenAI Responses stream in the sans-IO core alone (`ResponsesExchange`).

The stream Codex CLI and the Agents SDK get on a long answer: `response.created`,
`response.in_progress`, one message (`output_item.added`, `content_part.added`, 200
`output_text.delta` events, the `.done` events), `response.completed`, numbered 0, 1, 2, ...
as a real upstream numbers them (built with the Responses test builders), for a request that
offers tools, so text goes through the leaked-markup scanner; fed in 16 KiB reads, or one
event a read with `--paced` (bench/reads.py). `--call` ends the message in a function call
whose Kimi-style id (`functions.bash:0`) the proxy rewrites. Counted under callgrind at N and
3N streams (after the same warm-up), differenced.

    python -m bench.responses_core [--call] [--paced] [--streams N] [--deltas N]
"""

from __future__ import annotations

import argparse
import sys

import orjson

from bench.reads import add_paced_flag, reads_of
from proxy.core.rounds import RouteRules
from proxy.responses.exchange import ResponsesExchange

WARMUP = 20
DELTAS = 200


def _stream(
    call: bool, deltas: int = DELTAS, paced: bool = False
) -> tuple[dict[str, object], list[bytes]]:
    # The tests' own builders (a package module of tests/, run from the repository's root).
    from tests.responses.helpers import Upstream, request

    upstream = Upstream().created().message(*(f"word{i} " for i in range(deltas)))
    if call:
        upstream.call("functions.bash:0")
    body = upstream.completed().numbered()
    return request(), reads_of(body, paced)


def run(streams: int, call: bool, deltas: int = DELTAS, paced: bool = False) -> None:
    body, reads = _stream(call, deltas, paced)
    raw, rules = orjson.dumps(body), RouteRules()
    for _ in range(WARMUP + streams):
        exchange = ResponsesExchange(body, raw, rules)
        exchange.begin_round(stream=True)
        for read in reads:
            exchange.feed(read)
        if exchange.phase.name == "RECEIVING":
            exchange.end()


def instructions(streams: int, call: bool, deltas: int = DELTAS, paced: bool = False) -> int:
    # Imported here: the counted process (`--run`) loads only the core it measures.
    from bench.inprocess import per_unit

    flags = ["--call"] if call else []
    flags += ["--deltas", str(deltas), *(["--paced"] if paced else [])]
    return per_unit(lambda n: ["bench.responses_core", *flags, "--run", str(n)], streams)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.responses_core", description=__doc__)
    parser.add_argument("--streams", type=int, default=50)
    parser.add_argument("--call", action="store_true", help="end in a rewritten function call")
    parser.add_argument(
        "--deltas",
        type=int,
        default=DELTAS,
        help="text deltas per stream (the cost of one: "
        "the difference between two counts over their difference in deltas)",
    )
    add_paced_flag(parser)
    parser.add_argument("--run", type=int, help=argparse.SUPPRESS)  # the counted process
    args = parser.parse_args(argv)
    if args.run is not None:
        run(args.run, args.call, args.deltas, args.paced)
        return 0
    count = instructions(args.streams, args.call, args.deltas, args.paced)
    what = "ending in a rewritten call" if args.call else "core only"
    what += ", one event a read" if args.paced else ""
    print(f"instructions per {args.deltas}-delta Responses stream, {what}: {count:,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
