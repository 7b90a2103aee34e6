"""`python -m bench`: one interleaved run, a table on stdout, bench/results/latest.json.

Phases, in order (about three minutes on two cores):
1. latency at one connection: non-streaming, a 200-chunk stream, the same 200 chunks ending in
   a Kimi-style tool call whose id the proxy rewrites (what agents get), a paced stream; in
   `--runs` alternating rounds, each added value the median of the rounds';
2. requests per second at 16 and 64 connections, direct then proxied, non-streaming; at 16
   connections also the tool-call stream;
3. peak RSS of a fresh proxy holding 1,000 open streams;
4. CPU per chunk of the sans-IO core;
5. the upstream transports compared (httpx default, httpx-aiohttp, the proxy's own);
6. references: the uvicorn floor (an app answering itself), the Python pass-through floor (bytes
   relayed on uvloop, `bench.passthrough`), the proxy with two workers, the proxy on granian
   (one and two workers) and nginx (`make bench` installs it).

The machine is shared: compare a row's direct and proxied columns, not absolute numbers
between runs.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench import core, interleaved, load, procs, reference, streams
from bench.client import toolcall_body
from bench.report import Report, Row, added_ms, ms, percentile
from bench.upstream import PACED_INTERVAL_S

RESULTS = Path(__file__).resolve().parent / "results"

# Targets: added latency on the small request and on the stream agents get (a Kimi-like
# upstream's 200 chunks and tool call), throughput at 16 connections as a ratio to direct
# for both; the pure-content stream and the paced stream keep their earlier limits.
TARGET_NONSTREAM_P50_MS = 0.25
TARGET_STREAM_P50_MS = 1.0
TARGET_TOOLCALL_P50_MS = 0.6
TARGET_PACED_P99_MS = 2.0
TARGET_RPS16_RATIO = 0.15
TARGET_RSS_MB = 200.0
TARGET_PASS_US = 5.0
TARGET_TOOL_US = 30.0


class Sizes:
    """How many samples each phase takes; `--quick` divides them for a smoke run."""

    def __init__(self, quick: bool, runs: int) -> None:
        k = 5 if quick else 1
        self.runs = runs
        # The latency phase's samples are split over its rounds.
        self.nonstream = 3000 // k // runs
        self.streams = 400 // k // runs
        self.paced_rounds = max(1, 10 // k // runs)
        self.warmup = 200 // k
        self.load_s = 2.0 if quick else 5.0
        self.open_streams = 200 if quick else streams.OPEN_STREAMS
        self.variant_nonstream = 1000 // k
        self.variant_streams = 150 // k


def _cpu_us_per(server: procs.Server, before: float, count: int) -> float:
    return (server.cpu_s() - before) / count * 1e6


def latency_phase(
    report: Report, upstream: procs.Server, proxy: procs.Server, sizes: Sizes
) -> dict[str, Any]:
    """`sizes.runs` alternating rounds of every latency measurement; each added value in the
    table is the median over the rounds of that round's added percentile (a round is a few
    seconds of this shared machine: one busy moment moves one round, not the median)."""
    pair = interleaved.Pair(upstream.port, proxy.port)
    rounds: list[_Round] = []
    cpu = {"small": 0.0, "stream": 0.0, "toolcall": 0.0}
    try:
        for _ in range(sizes.runs):
            rounds.append(_latency_round(pair, proxy, sizes, cpu))
    finally:
        pair.close()
    runs = len(rounds)
    _percentile_rows(
        report,
        "non-streaming",
        [r.small for r in rounds],
        TARGET_NONSTREAM_P50_MS,
    )
    for label, samples, target in (
        ("200-chunk stream", [r.fast for r in rounds], TARGET_STREAM_P50_MS),
        ("200 chunks + Kimi tool call", [r.toolcall for r in rounds], TARGET_TOOLCALL_P50_MS),
    ):
        _percentile_rows(report, f"{label}, first byte", [s.first_byte for s in samples], None)
        _percentile_rows(report, f"{label}, last byte", [s.last_byte for s in samples], target)
    paced = [r.paced.delay for r in rounds]
    _percentile_rows(
        report, "paced stream, per-chunk delay", paced, TARGET_PACED_P99_MS, checked_pct=99
    )
    # A proxy that batched a stream would hold a delta until the next one came: a whole
    # interval late. (A busy machine can also make a delta that late, direct or not.)
    interval_ms = PACED_INTERVAL_S * 1000
    late_direct = sum(1 for s in paced for d in s.direct if d >= interval_ms)
    late_proxy = sum(1 for s in paced for d in s.proxy if d >= interval_ms)
    total = sum(len(s.proxy) for s in paced)
    report.add(
        Row(
            f"paced stream, deltas >= {interval_ms:g} ms late",
            f"{late_direct} of {total}",
            f"{late_proxy} of {total}",
        )
    )
    streams_per_round = sizes.streams + sizes.warmup // 4
    cpu_small = cpu["small"] / (runs * (sizes.nonstream + sizes.warmup))
    cpu_stream = cpu["stream"] / (runs * streams_per_round)
    cpu_toolcall = cpu["toolcall"] / (runs * streams_per_round)
    report.add(Row("proxy CPU per non-streaming request", "", f"{cpu_small:.0f} us"))
    report.add(Row("proxy CPU per 200-chunk stream", "", f"{cpu_stream:.0f} us"))
    report.add(Row("proxy CPU per tool-call stream", "", f"{cpu_toolcall:.0f} us"))

    def sides(pick: Callable[[_Round], interleaved.Samples]) -> dict[str, Any]:
        return {
            "direct": [pick(r).direct for r in rounds],
            "proxy": [pick(r).proxy for r in rounds],
        }

    return {
        "rounds": runs,
        "non_streaming_ms": sides(lambda r: r.small),
        "stream_first_byte_ms": sides(lambda r: r.fast.first_byte),
        "stream_last_byte_ms": sides(lambda r: r.fast.last_byte),
        "toolcall_first_byte_ms": sides(lambda r: r.toolcall.first_byte),
        "toolcall_last_byte_ms": sides(lambda r: r.toolcall.last_byte),
        "paced_delay_ms": sides(lambda r: r.paced.delay),
        "paced_late_by_an_interval": {"direct": late_direct, "proxy": late_proxy},
        "proxy_cpu_us_per_non_streaming_request": cpu_small,
        "proxy_cpu_us_per_200_chunk_stream": cpu_stream,
        "proxy_cpu_us_per_toolcall_stream": cpu_toolcall,
    }


@dataclass(frozen=True, slots=True)
class _Round:
    small: interleaved.Samples
    fast: interleaved.StreamSamples
    toolcall: interleaved.StreamSamples
    paced: interleaved.PacedSamples


def _latency_round(
    pair: interleaved.Pair, proxy: procs.Server, sizes: Sizes, cpu: dict[str, float]
) -> _Round:
    """One round of each latency measurement; the proxy's CPU time is added to `cpu`."""
    cpu0 = proxy.cpu_s()
    small = interleaved.non_streaming(pair, sizes.nonstream, sizes.warmup)
    cpu1 = proxy.cpu_s()
    fast = interleaved.fast_streams(pair, sizes.streams, sizes.warmup // 4)
    cpu2 = proxy.cpu_s()
    toolcall = interleaved.toolcall_streams(pair, sizes.streams, sizes.warmup // 4)
    cpu3 = proxy.cpu_s()
    cpu["small"] += (cpu1 - cpu0) * 1e6
    cpu["stream"] += (cpu2 - cpu1) * 1e6
    cpu["toolcall"] += (cpu3 - cpu2) * 1e6
    paced = interleaved.paced_streams(pair, sizes.paced_rounds)
    return _Round(small, fast, toolcall, paced)


def _percentile_rows(
    report: Report,
    label: str,
    rounds: list[interleaved.Samples],
    target_ms: float | None,
    *,
    checked_pct: int = 50,
) -> None:
    """p50 and p99 rows: pooled direct and proxied values, and the median over the rounds of
    each round's added value (the one a target is judged on)."""
    for pct in (50, 99):
        direct = percentile([v for r in rounds for v in r.direct], pct)
        proxied = percentile([v for r in rounds for v in r.proxy], pct)
        added = statistics.median(
            percentile(r.proxy, pct) - percentile(r.direct, pct) for r in rounds
        )
        checked = target_ms is not None and pct == checked_pct
        report.add(
            Row(
                f"{label} p{pct}",
                ms(direct),
                ms(proxied),
                added_ms(added),
                f"<= {target_ms} ms" if checked else "",
                (added <= target_ms) if checked and target_ms is not None else None,
            )
        )


def load_phase(
    report: Report, upstream: procs.Server, proxy: procs.Server, sizes: Sizes
) -> dict[str, Any]:
    results: dict[str, Any] = {}
    cases: tuple[tuple[str, int, dict[str, object] | None], ...] = (
        ("16", 16, None),
        ("64", 64, None),
        ("16_toolcall_stream", 16, toolcall_body()),
    )
    for key, connections, body in cases:
        # A short unmeasured run first, so neither side pays for opening its pool.
        load.run(proxy.port, connections, 1.0, RESULTS, body)
        direct = load.run(upstream.port, connections, sizes.load_s, RESULTS, body)
        proxied = load.run(proxy.port, connections, sizes.load_s, RESULTS, body)
        ratio = proxied.rps / direct.rps if direct.rps else 0.0
        target = connections == 16
        what = "tool-call streams" if body is not None else "requests"
        report.add(
            Row(
                f"{what}/s at {connections} conns ({direct.tool})",
                f"{direct.rps:,.0f}",
                f"{proxied.rps:,.0f}",
                f"{ratio:.2f}x",
                f">= {TARGET_RPS16_RATIO}x" if target else "",
                ratio >= TARGET_RPS16_RATIO if target else None,
            )
        )
        if direct.errors or proxied.errors:
            report.add(
                Row(f"  errors at {connections} conns", str(direct.errors), str(proxied.errors))
            )
        results[key] = {
            "direct": asdict(direct),
            "proxy": asdict(proxied),
            "ratio": ratio,
        }
    return results


def memory_phase(report: Report, upstream: procs.Server, sizes: Sizes) -> dict[str, Any]:
    proxy = procs.start_proxy(upstream.port, RESULTS, name="proxy-memory")
    try:
        result = streams.measure(proxy, sizes.open_streams)
    finally:
        proxy.stop()
    report.add(
        Row(
            f"peak RSS, {result.opened} of {result.streams} streams open",
            "",
            f"{result.peak_rss_mb:.1f} MB",
            f"idle {result.baseline_rss_mb:.1f} MB",
            f"<= {TARGET_RSS_MB:g} MB",
            result.peak_rss_mb <= TARGET_RSS_MB and result.opened == result.streams,
        )
    )
    return asdict(result)


def core_phase(report: Report) -> dict[str, Any]:
    result = core.measure()
    report.add(
        Row(
            "core CPU per pass-through chunk",
            "",
            f"{result.pass_through_us:.2f} us",
            f"median {result.pass_through_median_us:.2f} us",
            f"<= {TARGET_PASS_US:g} us",
            result.pass_through_us <= TARGET_PASS_US,
        )
    )
    if result.pass_through_python_scan_us is not None:
        report.add(
            Row(
                "  the same, pure-Python scan (fallback)",
                "",
                f"{result.pass_through_python_scan_us:.2f} us",
                "no C compiler at install",
            )
        )
    else:
        report.add(Row("  (the compiled scan is missing here: pure-Python fallback measured)"))
    report.add(
        Row(
            "core CPU per tool-call chunk",
            "",
            f"{result.tool_call_us:.2f} us",
            f"median {result.tool_call_median_us:.2f} us",
            f"<= {TARGET_TOOL_US:g} us",
            result.tool_call_us <= TARGET_TOOL_US,
        )
    )
    return asdict(result)


def _environment() -> dict[str, Any]:
    rev = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    return {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_tool": "wrk" if load.have_wrk() else "asyncio",
        "git": rev,
        "loadavg_start": os.getloadavg(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer samples: a smoke run")
    parser.add_argument(
        "--runs",
        type=int,
        default=1,
        help="rounds of the latency phase; each added value is the median over them",
    )
    parser.add_argument(
        "--no-transports", action="store_true", help="skip comparing upstream transports"
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "latest.json")
    args = parser.parse_args(argv)
    sizes = Sizes(args.quick, max(1, args.runs))
    RESULTS.mkdir(parents=True, exist_ok=True)
    env = _environment()
    report = Report(
        f"toolcall-proxy bench: {env['cpus']} cpus, python {env['python']}, "
        f"load by {env['load_tool']}, loopback, direct and proxied interleaved in one run; "
        f"latency added: median of {sizes.runs} round(s)"
    )
    started = time.monotonic()
    upstream = procs.start_upstream(RESULTS)
    try:
        proxy = procs.start_proxy(upstream.port, RESULTS)
        try:
            print("latency at 1 connection ...", file=sys.stderr, flush=True)
            report.data["latency"] = latency_phase(report, upstream, proxy, sizes)
            print("requests per second ...", file=sys.stderr, flush=True)
            report.data["load"] = load_phase(report, upstream, proxy, sizes)
        finally:
            proxy.stop()
        print("open streams ...", file=sys.stderr, flush=True)
        report.data["memory"] = memory_phase(report, upstream, sizes)
        print("core CPU ...", file=sys.stderr, flush=True)
        report.data["core"] = core_phase(report)
        if not args.no_transports:
            print("transports ...", file=sys.stderr, flush=True)
            report.data["transports"] = reference.transports(report, upstream, sizes, RESULTS)
        report.data["references"] = reference.others(report, upstream, sizes, RESULTS)
    finally:
        upstream.stop()
    env["loadavg_end"] = os.getloadavg()
    env["duration_s"] = round(time.monotonic() - started, 1)
    report.data["environment"] = env
    print(report.render())
    report.write_json(args.out)
    print(f"\n{args.out} written in {env['duration_s']:g} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
