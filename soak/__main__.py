"""`python -m soak`: start the simulator and the proxy as separate processes on loopback, run
a bounded mixed load through the proxy, and report what the clients got and what the proxy
process held at the start and at the end.

    SOAK_SECONDS=120 SOAK_CONCURRENCY=200 python -m soak

A warm-up of max(45 s, 25%) at the same concurrency comes first. The proxy is sampled
(/proc/PID/status VmRSS, /proc/PID/fd) at two quiet points: after the warm-up and after the
load, each once no stream is active and no client or upstream connection is open (idle
keep-alive connections close on the simulator's 5 s timeout), so descriptors are compared
like for like. Exit status 0 only when every client result was the expected one, RSS and fds
grew by less than 10%, active_streams is 0 and the proxy logged no traceback; the report says
which check failed otherwise. SOAK_SEED picks another random mix; SOAK_LOG_DIR keeps the
processes' logs.

RSS under glibc creeps a little with large transient buffers (the dynamic mmap threshold);
Python's own heap stays flat (checked with tracemalloc). With MALLOC_MMAP_THRESHOLD_=131072
in the environment, RSS stays flat too.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import orjson

from soak.http import request
from soak.scenarios import Outcome, check_profiles, one_unit

START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 15.0
# The proxy's read timeout. The stall and hang faults outlast it (scenarios.STALL_S); it must
# also stay well above the response latency of a loaded 2-core machine: at 2 s, 200 concurrent
# streams (some dripping one byte per write) made ordinary heads late, and the proxy rightly
# answered 504.
READ_TIMEOUT_S = 10.0
GROWTH_LIMIT = 0.10
# RSS is compared from the end of the warm-up: the allocator's high-water mark (512 KiB
# chunks, hundreds of buffers at once) is reached in the first tens of seconds and then held,
# which is not a leak. The warm-up outlasts the longest unit (a 15 s stall) twice over.
WARMUP_FRACTION = 0.25
WARMUP_MIN_S = 45.0
DRAIN_TIMEOUT_S = 90.0  # units still running after the deadline get this long to finish
IDLE_TIMEOUT_S = 20.0  # the simulator closes idle keep-alive connections after 5 s


@dataclass
class Sample:
    rss_kib: int
    fds: int


def sample(pid: int) -> Sample:
    rss = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1])
    return Sample(rss, len(os.listdir(f"/proc/{pid}/fd")))


def tcp_peers(pid: int) -> list[tuple[int, int]]:
    """(local port, remote port) of each connected TCP socket the process holds open."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    peers = []
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
                fields = line.split()
                if fields[9] in inodes and fields[3] != "0A":  # 0A: LISTEN
                    local, remote = fields[1], fields[2]
                    peers.append(
                        (int(local.rsplit(":", 1)[1], 16), int(remote.rsplit(":", 1)[1], 16))
                    )
    return peers


async def quiesce(pid: int, timeout: float = IDLE_TIMEOUT_S) -> int:
    """Wait (bounded) until the proxy holds no client or upstream connection: idle keep-alive
    connections to the simulator close on uvicorn's keep-alive timeout (5 s). Samples taken
    in this state compare the proxy's own descriptors, not how full its pool happens to be.
    Returns the connections still open at the deadline (0 when it settled)."""
    deadline = time.monotonic() + timeout
    while True:
        open_now = len(tcp_peers(pid))
        if open_now == 0 or time.monotonic() > deadline:
            return open_now
        await asyncio.sleep(0.2)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(args: list[str], port: int, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"soak: {args[1]} exited early; see {log}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return proc
        time.sleep(0.05)
    stop(proc)
    raise SystemExit(f"soak: {args[1]} did not listen on {port} in {START_TIMEOUT_S:g} s")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(STOP_TIMEOUT_S)


async def run_load(port: int, seconds: float, concurrency: int, seed: int) -> Outcome:
    outcome = Outcome()
    deadline = time.monotonic() + seconds

    async def worker(n: int) -> None:
        rng = random.Random(seed * 100_003 + n)
        while time.monotonic() < deadline:
            await one_unit(port, rng, outcome)

    tasks = [asyncio.create_task(worker(n)) for n in range(concurrency)]
    done, pending = await asyncio.wait(tasks, timeout=seconds + DRAIN_TIMEOUT_S)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    if pending:
        outcome.mismatch("hung", f"{len(pending)} workers still busy after the drain timeout")
    for task in done:
        if task.exception() is not None:
            outcome.mismatch("soak_bug", repr(task.exception()))
    return outcome


async def active_streams(port: int) -> float:
    reply = await request(port, "GET", "/metrics", b"", timeout=10)
    for line in reply.body.decode().splitlines():
        if line.startswith("toolcall_proxy_active_streams "):
            return float(line.split()[1])
    return -1.0


async def settle(port: int) -> float:
    """Wait (bounded) until the proxy serves no stream; returns the gauge's last value."""
    value = -1.0
    for _ in range(200):
        value = await active_streams(port)
        if value == 0:
            return value
        await asyncio.sleep(0.05)
    return value


async def proxy_statuses(port: int) -> dict[str, int]:
    """The proxy's own count of what it answered, by status (toolcall_proxy_requests_total)."""
    reply = await request(port, "GET", "/metrics", b"", timeout=10)
    counts: Counter[str] = Counter()
    for line in reply.body.decode().splitlines():
        match = re.match(r'toolcall_proxy_requests_total\{.*status="(\d+)".*\} (\S+)', line)
        if match:
            counts[match.group(1)] += int(float(match.group(2)))
    return dict(sorted(counts.items()))


def growth(before: int, after: int) -> float:
    return (after - before) / before if before else 0.0


async def main_async(seconds: float, concurrency: int, seed: int, workdir: Path) -> int:
    exe = shutil.which("toolcall-proxy", path=str(Path(sys.executable).parent))
    if exe is None:
        raise SystemExit("soak: toolcall-proxy is not installed in this virtualenv")
    sim_port, proxy_port = free_port(), free_port()
    simulator = start([exe, "simulate", "--port", str(sim_port)], sim_port, workdir / "sim.log")
    proxy_log = workdir / "proxy.log"
    proxy = None
    try:
        proxy = start(
            [
                exe,
                "serve",
                "--upstream",
                f"http://127.0.0.1:{sim_port}/v1",
                "--port",
                str(proxy_port),
                "--read-timeout",
                str(READ_TIMEOUT_S),
                "--log-level",
                "warning",
            ],
            proxy_port,
            proxy_log,
        )
        warmup = max(WARMUP_MIN_S, seconds * WARMUP_FRACTION)
        at_start = sample(proxy.pid)
        print(
            f"soak: proxy pid {proxy.pid} on :{proxy_port}, simulator on :{sim_port}; "
            f"warm-up {warmup:g} s, then {seconds:g} s at {concurrency} concurrent clients",
            flush=True,
        )
        warm = await run_load(proxy_port, warmup, concurrency, seed)
        await settle(proxy_port)
        lingering = await quiesce(proxy.pid)
        first = sample(proxy.pid)
        peak = first.rss_kib
        started = time.monotonic()
        load = asyncio.create_task(run_load(proxy_port, seconds, concurrency, seed + 1))
        trajectory: list[int] = []
        while not load.done():
            await asyncio.wait({load}, timeout=1.0)
            trajectory.append(sample(proxy.pid).rss_kib)
            peak = max(peak, trajectory[-1])
        outcome = load.result()
        elapsed = time.monotonic() - started
        gauge = await settle(proxy_port)
        statuses = await proxy_statuses(proxy_port)
        lingering += await quiesce(proxy.pid)
        last = sample(proxy.pid)
        alive = proxy.poll() is None
    finally:
        if proxy is not None:
            stop(proxy)
        stop(simulator)
    tracebacks = proxy_log.read_text(errors="replace").count("Traceback")
    drops = sum(o.answers.get("client_dropped_mid_stream", 0) for o in (warm, outcome))
    print(
        f"  proxy's answers by status (warm-up included): {statuses}; "
        f"clients that dropped a stream on purpose: {drops}",
        flush=True,
    )
    step = max(1, len(trajectory) // 10)
    points = ", ".join(f"{kib / 1024:.1f}" for kib in trajectory[::step])
    print(
        f"  proxy RSS at start {at_start.rss_kib / 1024:.1f} MiB; during the load, MiB: {points}",
        flush=True,
    )
    if lingering:
        outcome.mismatch(
            "lingering", f"{lingering} connections still open {IDLE_TIMEOUT_S:g} s after the load"
        )
    return report(
        warm, outcome, elapsed, concurrency, first, last, peak, gauge, alive, tracebacks, proxy_log
    )


def report(
    warm: Outcome,
    outcome: Outcome,
    elapsed: float,
    concurrency: int,
    first: Sample,
    last: Sample,
    peak: int,
    gauge: float,
    alive: bool,
    tracebacks: int,
    proxy_log: Path,
) -> int:
    mismatches = Counter(kind for kind, _ in outcome.mismatches)
    rss_growth, fd_growth = growth(first.rss_kib, last.rss_kib), growth(first.fds, last.fds)
    problems = []
    if outcome.mismatches or warm.mismatches:
        problems.append("client results differ from the expected ones")
    if rss_growth >= GROWTH_LIMIT:
        problems.append(f"RSS grew {rss_growth:.1%}")
    if fd_growth >= GROWTH_LIMIT:
        problems.append(f"open fds grew {fd_growth:.1%}")
    if gauge != 0:
        problems.append(f"active_streams is {gauge:g} after the load")
    if not alive:
        problems.append("the proxy process died")
    if tracebacks:
        problems.append(f"{tracebacks} tracebacks in the proxy's log ({proxy_log})")
    lines = [
        "",
        f"soak: {elapsed:.0f} s at {concurrency} concurrent clients (after warm-up)",
        f"  requests        {outcome.requests} ({outcome.requests / elapsed:.0f}/s), "
        f"warm-up {warm.requests}",
        "  answers by kind (each the documented one):",
        *(f"    {kind:<28}{n}" for kind, n in sorted(outcome.answers.items())),
        f"  mismatches      {len(outcome.mismatches)} (warm-up {len(warm.mismatches)})",
        *(f"    {kind:<28}{n}" for kind, n in sorted(mismatches.items())),
        *(
            f"    e.g. {kind}: {detail}"
            for kind, detail in (warm.mismatches + outcome.mismatches)[:8]
        ),
        f"  proxy RSS       {first.rss_kib / 1024:.1f} MiB -> {last.rss_kib / 1024:.1f} MiB "
        f"({rss_growth:+.1%}), peak {peak / 1024:.1f} MiB",
        f"  proxy open fds  {first.fds} -> {last.fds} ({fd_growth:+.1%}), sampled with no "
        "client or upstream connection open",
        f"  active_streams  {gauge:g} after the load; proxy tracebacks in log: {tracebacks}",
        f"  result          {'PASS' if not problems else 'FAIL: ' + '; '.join(problems)}",
    ]
    print("\n".join(lines), flush=True)
    summary = {
        "requests": outcome.requests,
        "seconds": round(elapsed, 1),
        "concurrency": concurrency,
        "answers": outcome.answers,
        "mismatches": dict(mismatches),
        "rss_kib": [first.rss_kib, last.rss_kib, peak],
        "fds": [first.fds, last.fds],
        "pass": not problems,
    }
    print("soak-json: " + orjson.dumps(summary).decode(), flush=True)
    return 0 if not problems else 1


def main() -> int:
    seconds = float(os.environ.get("SOAK_SECONDS", "120"))
    concurrency = int(os.environ.get("SOAK_CONCURRENCY", "200"))
    seed = int(os.environ.get("SOAK_SEED", "1"))
    check_profiles()
    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        workdir = Path(os.environ.get("SOAK_LOG_DIR") or tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        return asyncio.run(main_async(seconds, concurrency, seed, workdir))


if __name__ == "__main__":
    sys.exit(main())
