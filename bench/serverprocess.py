"""Instructions per request of the server process as users run it: uvicorn and all.

`bench.inprocess` counts the app, the upstream client and the transport, driven in memory.
This counts `python -m proxy serve` itself under callgrind while a client in another process
sends keep-alive requests: N, then 3N in a second run (after the same warm-up), differenced
per request. What it adds over the in-process count is uvicorn's HTTP handling, its ASGI
cycle, the event loop's callbacks and the log line's write; the kernel's share of the system
calls is not counted (only their libc wrappers). The upstream runs outside valgrind.

    python -m bench.serverprocess [--stream | --stream-toolcall] [--floor | --passthrough]
                                  [--requests N] [--syscalls]

`--floor` counts the uvicorn floor (`bench.floor`: uvicorn run as the proxy runs it, with an
app that answers by itself): what uvicorn costs per request before the proxy does anything.
`--passthrough` counts the pass-through relay (`bench.passthrough`: bytes relayed on uvloop,
the least a Python proxy can do).
`--syscalls` counts system calls per request instead (`strace -c -f`, differenced the same
way): what the kernel is asked to do, which callgrind does not see.
The count is printed with its split by shared object (libpython is interpreted Python: ours
and uvicorn's; uvloop, httptools and orjson are their compiled parts).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import NamedTuple

from bench import procs
from bench.client import Connection, chat_body, chat_request, toolcall_body
from bench.inprocess import add_kind_flags, kind_of

WARMUP = 50
# Valgrind runs the interpreter about 50x slower: starting the server takes a while.
START_TIMEOUT_S = 120.0
# A function's line: its count, its file, and its shared object unless inlined from a header.
_FUNCTION_LINE = re.compile(r"^\s*([\d,]+) \([^)]*\)\s+(\S+?)(?: \[(.+)\])?$")
_TOTAL = re.compile(r"^summary:\s*(\d+)", re.MULTILINE)


def _body(kind: str) -> dict[str, object]:
    if kind == "toolcall":
        return toolcall_body()
    return chat_body("bench-fast" if kind == "stream" else "bench-small", stream=kind == "stream")


def _send(port: int, request: bytes, count: int) -> None:
    connection = Connection(port)
    try:
        for _ in range(count):
            reply = connection.send(request)
            if reply.status != 200:
                raise RuntimeError(
                    f"the server answered {reply.status}: {bytes(reply.body)[:300]!r}"
                )
    finally:
        connection.close()


def _server_argv(upstream_port: int, port: int, server: str) -> list[str]:
    if server == "floor":
        return [sys.executable, "-m", "bench.floor", str(port)]
    if server == "passthrough":
        return [sys.executable, "-m", "bench.passthrough", str(upstream_port), str(port)]
    return [
        sys.executable,
        *("-m", "proxy", "serve", "--upstream", f"http://127.0.0.1:{upstream_port}/v1"),
        *("--host", "127.0.0.1", "--port", str(port), "--drain-timeout", "1"),
    ]


# What `Run.server` names, as the report names it.
SERVERS = {
    "proxy": "the proxy's server process",
    "floor": "the uvicorn floor",
    "passthrough": "the pass-through relay",
}


class Run(NamedTuple):
    """What one measurement runs: the request's kind and the server."""

    kind: str
    server: str  # SERVERS: the proxy, the uvicorn floor or the pass-through relay
    syscalls: bool = False  # strace's count of system calls instead of callgrind's instructions


def _profile(run: Run, requests: int, work: Path, upstream_port: int) -> Path:
    """One callgrind (or strace) run of the server over WARMUP + `requests` requests; its
    output file."""
    out = work / f"profile.{requests}"
    port = procs.free_port()
    if run.syscalls:
        argv = ["strace", "-f", "-c", "-o", str(out)]
    else:
        argv = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]
    argv += _server_argv(upstream_port, port, run.server)
    log = work / f"server.{requests}.log"
    with log.open("wb") as sink:
        server = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT)
    try:
        procs.wait_for_port(port, server, START_TIMEOUT_S)
        request = chat_request(port, _body(run.kind))
        _send(port, request, WARMUP)
        _send(port, request, requests)
    finally:
        # SIGTERM: the server drains and exits, the tool writes its file. strace passes no
        # signal on to the process it runs: that process gets it directly.
        os.kill(_server_pid(server, run.syscalls), signal.SIGTERM)
        server.wait(START_TIMEOUT_S)
    if not out.exists():
        raise RuntimeError(f"{argv[0]} wrote no profile:\n{log.read_text()[-2000:]}")
    return out


def _server_pid(tool: subprocess.Popen[bytes], traced: bool) -> int:
    """The server itself: valgrind runs it in its own process, strace as its child."""
    if not traced:
        return tool.pid
    return int(Path(f"/proc/{tool.pid}/task/{tool.pid}/children").read_text().split()[0])


def _by_object(profile: Path) -> tuple[int, Counter[str]]:
    """The run's total and its split by shared object (callgrind_annotate, every function)."""
    text = profile.read_text(errors="replace")
    total_match = _TOTAL.search(text)
    if total_match is None:
        raise RuntimeError(f"{profile} holds no total")
    annotated = subprocess.run(
        ["callgrind_annotate", "--threshold=100", str(profile)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    split: Counter[str] = Counter()
    listing = annotated.split("file:function", 1)[-1]
    for line in listing.splitlines():
        match = _FUNCTION_LINE.match(line)
        if match is not None:
            split[_object_name(match.group(2), match.group(3))] += int(
                match.group(1).replace(",", "")
            )
    return int(total_match.group(1)), split


_SYSCALL_LINE = re.compile(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)$")


def _by_syscall(profile: Path) -> tuple[int, Counter[str]]:
    """The run's count of system calls and its split by call (strace -c's table)."""
    split: Counter[str] = Counter()
    for line in profile.read_text().splitlines():
        match = _SYSCALL_LINE.match(line)
        if match is not None and match.group(2) != "total":
            split[match.group(2)] += int(match.group(1))
    return sum(split.values()), split


def _object_name(source: str, shared_object: str | None) -> str:
    if shared_object is not None:
        name = Path(shared_object).name
        return "libpython3 (the interpreter)" if name.startswith("libpython3") else name
    # Inlined from a header: CPython's own headers count as the interpreter.
    return "libpython3 (the interpreter)" if "Python-3" in source else "other (inlined)"


def measure(run: Run, requests: int) -> tuple[float, list[tuple[str, float]]]:
    """Instructions (or system calls) per request, and the split by shared object (or
    call), largest first."""
    with tempfile.TemporaryDirectory() as temp:
        work = Path(temp)
        upstream = procs.start_upstream(work)
        try:
            count = _by_syscall if run.syscalls else _by_object
            small = count(_profile(run, requests, work, upstream.port))
            large = count(_profile(run, 3 * requests, work, upstream.port))
        finally:
            upstream.stop()
    per_request = (large[0] - small[0]) / (2 * requests)
    split = {name: (large[1][name] - small[1][name]) / (2 * requests) for name in large[1]}
    ranked = sorted(((n, v) for n, v in split.items() if v > 0), key=lambda item: -item[1])
    return per_request, ranked


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.serverprocess", description=__doc__)
    add_kind_flags(parser)
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--floor", action="store_true", help="the uvicorn floor, no proxy")
    which.add_argument("--passthrough", action="store_true", help="the pass-through relay")
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--syscalls", action="store_true", help="system calls (strace -c -f)")
    args = parser.parse_args(argv)
    picked = "floor" if args.floor else "passthrough" if args.passthrough else "proxy"
    run = Run(kind_of(args), picked, args.syscalls)
    count, split = measure(run, args.requests)
    server = SERVERS[picked]
    what = "system calls" if run.syscalls else "instructions"
    shown = "{:>10,.2f}" if run.syscalls else "{:>10,.0f}"
    print(f"{what} per request ({run.kind}), {server}: {shown.format(count)}")
    for name, value in split[:8]:
        print(f"  {shown.format(value)}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
