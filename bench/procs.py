"""Starting, watching and stopping the benchmark's server processes (all on 127.0.0.1)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 10.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(
    port: int, proc: subprocess.Popen[bytes], timeout: float = START_TIMEOUT_S
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode} before listening")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"{proc.args!r} did not listen on port {port} within {timeout:g} s")


class Server:
    """A child process serving HTTP on `port`; stopped with SIGTERM (then SIGKILL)."""

    def __init__(self, name: str, argv: Sequence[str], port: int, log: Path) -> None:
        self.name = name
        self.port = port
        self.log = log
        with log.open("wb") as sink:
            self.proc = subprocess.Popen(
                list(argv), stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        try:
            wait_for_port(port, self.proc)
        except BaseException:
            self.stop()
            raise

    @property
    def pid(self) -> int:
        return self.proc.pid

    def rss_kb(self) -> dict[str, int]:
        """VmRSS (now) and VmHWM (peak) of the process, in KiB."""
        out: dict[str, int] = {}
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0])
        return out

    def cpu_s(self) -> float:
        """User plus system CPU seconds the process used so far."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(STOP_TIMEOUT_S)


def start_upstream(log_dir: Path) -> Server:
    port = free_port()
    argv = [sys.executable, "-m", "bench.upstream", "--port", str(port)]
    return Server("upstream", argv, port, log_dir / "upstream.log")


def start_proxy(
    upstream_port: int,
    log_dir: Path,
    name: str = "proxy",
    transport: str | None = None,
    workers: int = 1,
    granian: bool = False,
    extra: Sequence[str] = (),
) -> Server:
    """The proxy as users run it (`toolcall-proxy serve --upstream URL --port P`), or with
    another upstream transport (`bench.variant`), or with worker processes, or on granian
    instead of uvicorn (`bench.granian_serve`)."""
    port = free_port()
    launcher = ["proxy", "serve"] if transport is None else ["bench.variant", transport]
    if granian:
        launcher = ["bench.granian_serve"]
    if workers > 1:
        launcher += ["--workers", str(workers)]
    argv = [
        sys.executable,
        "-m",
        *launcher,
        "--upstream",
        f"http://127.0.0.1:{upstream_port}/v1",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--drain-timeout",
        "1",
        *extra,
    ]
    return Server(name, argv, port, log_dir / f"{name}.log")


def start_command(name: str, argv: Sequence[str], port: int, log_dir: Path) -> Server:
    return Server(name, argv, port, log_dir / f"{name}.log")
