"""Comparison rows: the proxy over each upstream transport, and nginx when it is installed.

Each candidate gets the same measurements, each against the direct upstream in the same
moment: added p50 of the small non-streaming request, added p50 time to last byte of the
200-chunk stream and of the same stream ending in a Kimi-style tool call, and requests per
second at 16 connections as a ratio to direct, non-streaming and with the tool-call stream.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import interleaved, load, procs
from bench.client import toolcall_body
from bench.report import Report, percentile

if TYPE_CHECKING:
    from bench.__main__ import Sizes

TRANSPORTS = (
    ("default", "httpx default transport (httpcore)"),
    ("aiohttp", "httpx-aiohttp AiohttpTransport"),
    ("proxy", "make_upstream_client() (in use)"),
)
_HEADERS = (
    "proxy / upstream transport",
    "non-streaming p50 added",
    "non-streaming p99 added",
    "200-chunk last byte p50 added",
    "tool-call stream last byte p50 added",
    "req/s at 16 conns vs direct",
    "tool-call streams/s at 16 conns vs direct",
)

_NGINX_CONF = """\
worker_processes 1;
daemon off;
pid {dir}/nginx.pid;
error_log {dir}/nginx-error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {dir}/nginx-body;
    proxy_temp_path {dir}/nginx-proxy;
    # nginx closes a keep-alive connection after 1,000 requests by default, which the bench
    # client (one connection, thousands of requests) would read as a failure.
    keepalive_requests 10000000;
    upstream bench {{
        server 127.0.0.1:{upstream};
        keepalive 256;
        keepalive_requests 10000000;
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://bench;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }}
    }}
}}
"""


def _measure(
    upstream: procs.Server,
    candidate: procs.Server,
    sizes: Sizes,
    work: Path,
    *,
    rewrites: bool = True,
) -> Any:
    """`rewrites`: the candidate is the proxy (the tool call's id must arrive rewritten)."""
    pair = interleaved.Pair(upstream.port, candidate.port)
    try:
        small = interleaved.non_streaming(pair, sizes.variant_nonstream, sizes.warmup // 2)
        fast = interleaved.fast_streams(pair, sizes.variant_streams, 10)
        toolcall = interleaved.toolcall_streams(pair, sizes.variant_streams, 10, rewrites=rewrites)
    finally:
        pair.close()
    return {
        "non_streaming_p50_added_ms": percentile(small.proxy, 50) - percentile(small.direct, 50),
        "non_streaming_p99_added_ms": percentile(small.proxy, 99) - percentile(small.direct, 99),
        "stream_last_byte_p50_added_ms": percentile(fast.last_byte.proxy, 50)
        - percentile(fast.last_byte.direct, 50),
        "toolcall_last_byte_p50_added_ms": percentile(toolcall.last_byte.proxy, 50)
        - percentile(toolcall.last_byte.direct, 50),
        **_rps16(upstream, candidate, sizes, work, "rps16", None),
        **_rps16(upstream, candidate, sizes, work, "toolcall_rps16", toolcall_body()),
    }


def _rps16(
    upstream: procs.Server,
    candidate: procs.Server,
    sizes: Sizes,
    work: Path,
    key: str,
    body: dict[str, object] | None,
) -> dict[str, float]:
    """Requests per second at 16 connections, direct and through `candidate`, after a short
    unmeasured run (so neither side pays for opening its pool)."""
    load.run(candidate.port, 16, 1.0, work, body)
    direct = load.run(upstream.port, 16, sizes.load_s, work, body)
    proxied = load.run(candidate.port, 16, sizes.load_s, work, body)
    return {
        f"{key}_direct": direct.rps,
        key: proxied.rps,
        f"{key}_ratio": proxied.rps / direct.rps if direct.rps else 0.0,
        f"{key}_errors": proxied.errors,
    }


def _row(label: str, m: dict[str, Any]) -> tuple[str, ...]:
    return (
        label,
        f"{m['non_streaming_p50_added_ms']:+.3f} ms",
        f"{m['non_streaming_p99_added_ms']:+.3f} ms",
        f"{m['stream_last_byte_p50_added_ms']:+.3f} ms",
        f"{m['toolcall_last_byte_p50_added_ms']:+.3f} ms",
        f"{m['rps16_ratio']:.2f}x ({m['rps16']:,.0f} of {m['rps16_direct']:,.0f})",
        f"{m['toolcall_rps16_ratio']:.2f}x "
        f"({m['toolcall_rps16']:,.0f} of {m['toolcall_rps16_direct']:,.0f})",
    )


def transports(report: Report, upstream: procs.Server, sizes: Sizes, work: Path) -> Any:
    results: dict[str, Any] = {}
    rows = []
    for name, label in TRANSPORTS:
        try:
            proxy = procs.start_proxy(upstream.port, work, name=f"proxy-{name}", transport=name)
        except RuntimeError as exc:  # httpx-aiohttp is not a dependency: it may be missing
            results[name] = {"error": str(exc)}
            rows.append((label, "did not start (see bench/results/*.log)", *[""] * 5))
            continue
        try:
            results[name] = _measure(upstream, proxy, sizes, work)
        finally:
            proxy.stop()
        rows.append(_row(label, results[name]))
    report.section("upstream transports (same run, each against direct)", _HEADERS, rows)
    return results


def others(report: Report, upstream: procs.Server, sizes: Sizes, work: Path) -> Any:
    """The uvicorn floor, the Python pass-through floor (`bench.passthrough`), the proxy with
    two worker processes, the proxy on granian, and nginx (installed by `make bench`; a row
    says so when one is missing)."""
    results: dict[str, Any] = {}
    rows = []
    for key, label, module in (
        ("uvicorn_floor", "uvicorn floor (answers itself, no upstream)", ["bench.floor"]),
        (
            "python_passthrough",
            "Python pass-through floor (bytes relayed)",
            ["bench.passthrough", str(upstream.port)],
        ),
    ):
        results[key] = _module_floor(upstream, sizes, work, module)
        rows.append(_row(label, results[key]))
    # Worker processes share the same two cores with the load tool and the upstream here.
    workers = procs.start_proxy(upstream.port, work, name="proxy-workers", workers=2)
    try:
        results["proxy_workers_2"] = _measure(upstream, workers, sizes, work)
    finally:
        workers.stop()
    rows.append(_row("the proxy with --workers 2", results["proxy_workers_2"]))
    for count in (1, 2):
        key = f"proxy_granian_workers_{count}"
        results[key] = _granian(upstream, sizes, work, count)
        label = f"the proxy on granian, {count} worker{'s' if count > 1 else ''}"
        if "error" in results[key]:
            rows.append((label, f"did not run: {results[key]['error']}", *[""] * 5))
        else:
            rows.append(_row(label, results[key]))
    nginx = shutil.which("nginx")
    if nginx is not None:
        results["nginx"] = _nginx(nginx, upstream, sizes, work)
        if "error" in results["nginx"]:
            rows.append(("nginx", f"did not start: {results['nginx']['error']}", *[""] * 5))
        else:
            rows.append(_row("nginx (proxy_buffering off)", results["nginx"]))
    report.section("references (same run, each against direct)", _HEADERS, rows)
    return results


def _module_floor(upstream: procs.Server, sizes: Sizes, work: Path, module: list[str]) -> Any:
    """A floor served by `python -m <module> [args] PORT` (it rewrites no id)."""
    port = procs.free_port()
    argv = [sys.executable, "-m", *module, str(port)]
    server = procs.start_command(module[0].rpartition(".")[2], argv, port, work)
    try:
        return _measure(upstream, server, sizes, work, rewrites=False)
    finally:
        server.stop()


def _granian(upstream: procs.Server, sizes: Sizes, work: Path, workers: int) -> Any:
    """The same app on granian (installed by `make bench` only; docs/performance.md, "ASGI servers")."""
    if importlib.util.find_spec("granian") is None:
        return {"error": "granian is not installed (make bench installs it)"}
    try:
        server = procs.start_proxy(
            upstream.port, work, name=f"proxy-granian-{workers}", workers=workers, granian=True
        )
    except RuntimeError as exc:
        return {"error": str(exc)}
    try:
        return _measure(upstream, server, sizes, work)
    except (OSError, RuntimeError) as exc:  # a reference row must never sink the run
        return {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        server.stop()


def _nginx(nginx: str, upstream: procs.Server, sizes: Sizes, work: Path) -> Any:
    port = procs.free_port()
    conf = work / "nginx.conf"
    conf.write_text(_NGINX_CONF.format(dir=work, upstream=upstream.port, port=port))
    try:
        server = procs.start_command("nginx", [nginx, "-p", str(work), "-c", str(conf)], port, work)
    except RuntimeError as exc:
        return {"error": str(exc)}
    try:
        return _measure(upstream, server, sizes, work, rewrites=False)
    except (OSError, RuntimeError) as exc:  # a reference row must never sink the run
        return {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        server.stop()
