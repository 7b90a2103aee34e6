"""The README's promise, for real: `make run` and `toolcall-proxy serve --upstream ...` start
a proxy process that an openai client completes a tool loop through."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import openai

from tests.agent import run_agent
from tests.servers import ServerThread, free_port, wait_for

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)


@contextmanager
def process(
    args: list[str], port: int, env: dict[str, str], cwd: Path = ROOT, timeout: float = 60
) -> Iterator[subprocess.Popen[bytes]]:
    """`args` as a process group of its own, once it answers /healthz within `timeout`."""
    proc = subprocess.Popen(
        args,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        wait_for(lambda: healthy(port) or proc.poll() is not None, timeout=timeout, interval=0.05)
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
        yield proc
    finally:
        stop(proc)
        try:
            proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            stop(proc, signal.SIGKILL)
            proc.communicate(timeout=5)


def environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLCALL_PROXY_")}
    return {**env, **extra}


def test_make_run_serves_the_builtin_provider() -> None:
    port = free_port()
    env = environment(TOOLCALL_PROXY_PORT=str(port))
    with process(["make", "--no-print-directory", "run"], port, env) as proc:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0)
        run = run_agent(client, "kimi-k2", stream=True)
        assert run.final_text == "All 3 rounds done."
        assert len(set(run.ids)) == 3
        stop(proc)
        _, stderr = proc.communicate(timeout=20)
    assert b"built-in simulated provider" in stderr


def test_serve_proxies_any_openai_compatible_server(simulator: ServerThread) -> None:
    port = free_port()
    args = [
        str(BIN / "toolcall-proxy"),
        "serve",
        "--upstream",
        simulator.url + "/v1",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        "warning",
    ]
    with process(args, port, environment()):
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0)
        run = run_agent(client, "name-index", stream=False)
        assert run.final_text == "All 3 rounds done." and len(set(run.ids)) == 6


def test_version_and_help() -> None:
    version = subprocess.run(
        [str(BIN / "toolcall-proxy"), "--version"], capture_output=True, timeout=30, check=True
    )
    assert version.stdout.decode().startswith("toolcall-proxy ")
    help_text = subprocess.run(
        [str(BIN / "toolcall-proxy"), "serve", "--help"],
        capture_output=True,
        timeout=30,
        check=True,
    ).stdout.decode()
    for flag in (
        "--upstream",
        "--connect-timeout",
        "--read-timeout",
        "--ids",
        "--dialect",
        "--replay-guard",
        "--max-followups",
        "--log-level",
        "examples:",
    ):
        assert flag in help_text
