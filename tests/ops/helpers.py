"""Real processes and servers for the operations tests: `toolcall-proxy serve` in a subprocess,
the simulated provider on loopback in a thread, and waits that end at a deadline.

Every wait is a condition with a deadline (a threading.Condition woken by each log line, or a
poll of a flag), never a bare sleep.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import uvicorn

from proxy.simulator import SimulatorLog, create_simulator_app

T = TypeVar("T")
REPO = Path(__file__).resolve().parents[2]
PROXY_BIN = Path(sys.executable).with_name("toolcall-proxy")
_RUNNING = re.compile(r"Uvicorn running on http://([0-9.]+):(\d+)")


def dockerfile_instructions() -> list[tuple[str, str]]:
    """The repository's Dockerfile as (INSTRUCTION, arguments) pairs: continuation lines
    joined, comments dropped."""
    text = re.sub(r"\\\n", " ", (REPO / "Dockerfile").read_text(encoding="utf-8"))
    pairs = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            pairs.append((word.upper(), rest.strip()))
    return pairs


def copy_sources(names: Sequence[str], into: Path) -> None:
    """Copy files and folders of the repository as a fresh checkout has them (no caches, no
    compiled modules)."""
    for name in names:
        origin = REPO / name
        if origin.is_dir():
            shutil.copytree(
                origin, into / name, ignore=shutil.ignore_patterns("__pycache__", "*.so")
            )
        else:
            shutil.copy2(origin, into / name)


def wait_until(condition: Callable[[], T], timeout: float, what: str) -> T:
    """Poll `condition` until it returns something truthy; fail at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.01)


class ServeProcess:
    """`toolcall-proxy serve ...` in a subprocess, its stderr collected line by line."""

    def __init__(
        self,
        args: Sequence[str],
        *,
        executable: Path = PROXY_BIN,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.args = [str(executable), "serve", *args]
        self.env = env
        self.cwd = cwd
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self.proc: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None

    def start(self) -> ServeProcess:
        self.proc = subprocess.Popen(
            self.args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env,
            cwd=self.cwd,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def wait_for_line(self, predicate: Callable[[str], bool], timeout: float, what: str) -> str:
        """The first stderr line matching `predicate`, waiting for it up to `timeout`."""
        assert self.proc is not None

        def found() -> str | None:
            return next((line for line in self.lines if predicate(line)), None)

        with self._changed:
            ok = self._changed.wait_for(
                lambda: found() is not None or self.proc.poll() is not None,  # type: ignore[union-attr]
                timeout,
            )
            line = found()
        if line is None:
            state = "exited" if ok else f"timed out after {timeout}s"
            log = "\n".join(self.lines[-30:])
            raise AssertionError(f"{state} waiting for {what}; stderr:\n{log}")
        return line

    def wait_started(self, timeout: float = 30.0) -> str:
        """Wait for uvicorn's start-up line; returns the base URL it listens on."""
        line = self.wait_for_line(lambda text: bool(_RUNNING.search(text)), timeout, "start-up")
        match = _RUNNING.search(line)
        assert match is not None
        return f"http://{match.group(1)}:{match.group(2)}"

    def terminate(self) -> float:
        """Send SIGTERM; returns the monotonic time it was sent."""
        assert self.proc is not None
        sent = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        return sent

    def wait_exit(self, timeout: float) -> int:
        assert self.proc is not None
        code = self.proc.wait(timeout=timeout)
        if self._reader is not None:
            self._reader.join(timeout=5)
        return code

    def stop(self) -> None:
        """Make sure the process is gone (SIGTERM, then SIGKILL), whatever the test did."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)

    @property
    def stderr(self) -> str:
        return "\n".join(self.lines)


@contextmanager
def serve_process(args: Sequence[str], **kwargs: object) -> Iterator[ServeProcess]:
    process = ServeProcess(args, **kwargs).start()  # type: ignore[arg-type]
    try:
        yield process
    finally:
        process.stop()


class SimulatorThread:
    """The simulated provider on a free loopback port, in a thread with its own event loop."""

    def __init__(self) -> None:
        self.log = SimulatorLog()
        config = uvicorn.Config(
            create_simulator_app(self.log),
            host="127.0.0.1",
            port=0,
            log_level="warning",
            lifespan="off",
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def start(self) -> SimulatorThread:
        self.thread.start()
        wait_until(
            lambda: self.server.started or not self.thread.is_alive(), 15, "the simulator to start"
        )
        assert self.server.started, "the simulator did not start"
        return self

    @property
    def url(self) -> str:
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)


@contextmanager
def simulator() -> Iterator[SimulatorThread]:
    sim = SimulatorThread().start()
    try:
        yield sim
    finally:
        sim.stop()


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without any TOOLCALL_PROXY_* setting, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLCALL_PROXY_")}
    env.update(extra)
    return env
