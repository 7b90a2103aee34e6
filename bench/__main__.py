"""`python -m bench`: one interleaved run, a table on stdout, bench/results/latest.json.

Phases, in order (about three minutes on two cores):
1. latency at one connection: non-streaming, a 200-chunk stream, the same 200 chunks ending in
   a Kimi-style tool call whose id the proxy rewrites (what agents get), a paced stream;
2. requests per second at 16 and 64 connections, direct then proxied, non-streaming; at 16
   connections also the tool-call stream;
3. peak RSS of a fresh proxy holding 1,000 open streams;
4. CPU per chunk of the sans-IO core;
5. the upstream transports compared (httpx default, httpx-aiohttp, the proxy's own);
6. references: the uvicorn floor (an app answering itself) and nginx when it is installed.

The machine is shared: compare a row's direct and proxied columns, not absolute numbers
between runs.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from dataclasses import asdict
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

    def __init__(self, quick: bool) -> None:
        k = 5 if quick else 1
        self.nonstream = 3000 // k
        self.streams = 400 // k
        self.paced_rounds = max(1, 10 // k)
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
    pair = interleaved.Pair(upstream.port, proxy.port)
    try:
        cpu0 = proxy.cpu_s()
        small = interleaved.non_streaming(pair, sizes.nonstream, sizes.warmup)
        cpu_small = _cpu_us_per(proxy, cpu0, sizes.nonstream + sizes.warmup)
        cpu0 = proxy.cpu_s()
        fast = interleaved.fast_streams(pair, sizes.streams, sizes.warmup // 4)
        cpu_stream = _cpu_us_per(proxy, cpu0, sizes.streams + sizes.warmup // 4)
        cpu0 = proxy.cpu_s()
        toolcall = interleaved.toolcall_streams(pair, sizes.streams, sizes.warmup // 4)
        cpu_toolcall = _cpu_us_per(proxy, cpu0, sizes.streams + sizes.warmup // 4)
        paced = interleaved.paced_streams(pair, sizes.paced_rounds)
    finally:
        pair.close()

    for pct in (50, 99):
        d, p = percentile(small.direct, pct), percentile(small.proxy, pct)
        report.add(
            Row(
                f"non-streaming p{pct}, 1 conn",
                ms(d),
                ms(p),
                added_ms(p - d),
                f"<= {TARGET_NONSTREAM_P50_MS} ms" if pct == 50 else "",
                (p - d <= TARGET_NONSTREAM_P50_MS) if pct == 50 else None,
            )
        )
    _stream_rows(report, "200-chunk stream", fast, TARGET_STREAM_P50_MS)
    _stream_rows(report, "200 chunks + Kimi tool call", toolcall, TARGET_TOOLCALL_P50_MS)
    for pct in (50, 99):
        d, p = percentile(paced.delay.direct, pct), percentile(paced.delay.proxy, pct)
        report.add(
            Row(
                f"paced stream, per-chunk delay p{pct}",
                ms(d),
                ms(p),
                added_ms(p - d),
                f"<= {TARGET_PACED_P99_MS} ms" if pct == 99 else "",
                (p - d <= TARGET_PACED_P99_MS) if pct == 99 else None,
            )
        )
    # A proxy that batched a stream would hold a delta until the next one came: a whole
    # interval late. (A busy machine can also make a delta that late, direct or not.)
    interval_ms = PACED_INTERVAL_S * 1000
    late_direct = sum(1 for d in paced.delay.direct if d >= interval_ms)
    late_proxy = sum(1 for d in paced.delay.proxy if d >= interval_ms)
    total = len(paced.delay.proxy)
    report.add(
        Row(
            f"paced stream, deltas >= {interval_ms:g} ms late",
            f"{late_direct} of {total}",
            f"{late_proxy} of {total}",
        )
    )
    report.add(Row("proxy CPU per non-streaming request", "", f"{cpu_small:.0f} us"))
    report.add(Row("proxy CPU per 200-chunk stream", "", f"{cpu_stream:.0f} us"))
    report.add(Row("proxy CPU per tool-call stream", "", f"{cpu_toolcall:.0f} us"))
    return {
        "non_streaming_ms": {"direct": small.direct, "proxy": small.proxy},
        "stream_first_byte_ms": {"direct": fast.first_byte.direct, "proxy": fast.first_byte.proxy},
        "stream_last_byte_ms": {"direct": fast.last_byte.direct, "proxy": fast.last_byte.proxy},
        "toolcall_first_byte_ms": {
            "direct": toolcall.first_byte.direct,
            "proxy": toolcall.first_byte.proxy,
        },
        "toolcall_last_byte_ms": {
            "direct": toolcall.last_byte.direct,
            "proxy": toolcall.last_byte.proxy,
        },
        "paced_delay_ms": {"direct": paced.delay.direct, "proxy": paced.delay.proxy},
        "paced_late_by_an_interval": {"direct": late_direct, "proxy": late_proxy},
        "proxy_cpu_us_per_non_streaming_request": cpu_small,
        "proxy_cpu_us_per_200_chunk_stream": cpu_stream,
        "proxy_cpu_us_per_toolcall_stream": cpu_toolcall,
    }


def _stream_rows(
    report: Report, label: str, samples: interleaved.StreamSamples, target_ms: float
) -> None:
    for name, sides in (("first", samples.first_byte), ("last", samples.last_byte)):
        for pct in (50, 99):
            d, p = percentile(sides.direct, pct), percentile(sides.proxy, pct)
            checked = name == "last" and pct == 50
            report.add(
                Row(
                    f"{label}, {name} byte p{pct}",
                    ms(d),
                    ms(p),
                    added_ms(p - d),
                    f"<= {target_ms} ms" if checked else "",
                    (p - d <= target_ms) if checked else None,
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
        "--no-transports", action="store_true", help="skip comparing upstream transports"
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "latest.json")
    args = parser.parse_args(argv)
    sizes = Sizes(args.quick)
    RESULTS.mkdir(parents=True, exist_ok=True)
    env = _environment()
    report = Report(
        f"toolcall-proxy bench: {env['cpus']} cpus, python {env['python']}, "
        f"load by {env['load_tool']}, loopback, direct and proxied interleaved in one run"
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
