"""The Dockerfile's install steps, for real, without a Docker engine (`make wheel-test` runs it:
the image is the compiled build, which `make test`'s plain tree does not build).

One test, about four minutes (compiling the mypyc modules, which the image's build opts in to,
is most of it): copy what the Dockerfile's build stage copies, build the wheel with the same
command and variables, install it by its
path into a fresh virtualenv without pip of its own (its dependencies come from the package
index, as in the image), then run the installed `toolcall-proxy serve`, configured only by
environment like the image, from a directory where the source tree cannot be imported. The
image's HEALTHCHECK command and the compose file's sidecar agent run against it, and a chat
completion goes through the built-in simulated provider.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.ops.helpers import REPO, ServeProcess, clean_env, copy_sources, dockerfile_instructions

DRAIN = 3.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _build_stage_copies() -> list[str]:
    """The sources the build stage copies (the first stage's COPY lines)."""
    pairs = dockerfile_instructions()
    froms = [i for i, (word, _) in enumerate(pairs) if word == "FROM"]
    stage = pairs[froms[0] : froms[1]]
    sources: list[str] = []
    for word, args in stage:
        if word == "COPY":
            sources.extend(shlex.split(args)[:-1])
    return sources


def _build_command(wheels: Path) -> tuple[dict[str, str], list[str]]:
    """The build stage's wheel command as it is written (its variables, such as the opt-in
    compile, included), with this interpreter and `wheels` for the image's paths."""
    pairs = dockerfile_instructions()
    froms = [i for i, (word, _) in enumerate(pairs) if word == "FROM"]
    [run] = [a for word, a in pairs[froms[0] : froms[1]] if word == "RUN" and "pip wheel" in a]
    words = shlex.split(run.split("&&")[0])
    variables = dict(word.split("=", 1) for word in words if "=" in word and "/" not in word)
    command = [word for word in words if word not in {f"{k}={v}" for k, v in variables.items()}]
    assert command[0] == "python", command
    return variables, [sys.executable, *(str(wheels) if w == "/wheels" else w for w in command[1:])]


def _healthcheck() -> list[str]:
    args = next(a for word, a in dockerfile_instructions() if word == "HEALTHCHECK")
    command = json.loads(args[args.index("CMD") + 3 :].strip())
    assert isinstance(command, list)
    return [str(part) for part in command]


def _compose_agent_command() -> list[str]:
    compose = yaml.safe_load((REPO / "deploy" / "docker-compose.yml").read_text(encoding="utf-8"))
    agent = compose["services"]["agent"]
    return [str(part) for part in agent["command"]]


def _run(args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, check=False, **kwargs)


def test_wheel_installs_into_a_clean_venv_and_serves(tmp_path: Path) -> None:
    env = clean_env(PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("PYTHONPATH", None)
    env.pop("VIRTUAL_ENV", None)

    # Build stage: the same files, the same command.
    context = tmp_path / "context"
    context.mkdir()
    sources = _build_stage_copies()
    assert "proxy" in sources and "pyproject.toml" in sources
    copy_sources(sources, context)
    wheels = tmp_path / "wheels"
    variables, command = _build_command(wheels)
    assert variables.get("TOOLCALL_PROXY_COMPILE") == "1", "the image is the compiled build"
    built = _run(
        command,
        cwd=context,
        env={**env, **variables},
        # A guard against a hung build, not a budget: the compile takes about three minutes
        # on two cores and more on a busy machine.
        timeout=900,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    [wheel] = wheels.glob("toolcall_proxy-*.whl")

    # Final stage: a virtualenv without pip; the wheel by its path, dependencies from the index.
    venv = tmp_path / "venv"
    made = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], env=env, timeout=120)
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    installed = _run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", str(wheel)],
        env=env,
        timeout=600,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr

    workdir = tmp_path / "run"
    workdir.mkdir()
    probe = _run(
        [
            str(python),
            "-c",
            "import importlib.util as u, proxy, proxy.chat.sse_scan as s, proxy.chat.stream as c; "
            "print(proxy.__file__); "
            "print(*(m for m in ('pytest', 'ruff', 'mypy', 'pip') if u.find_spec(m))); "
            "print(s.native_scan is not None); print(c.__file__.endswith('.so'))",
        ],
        cwd=workdir,
        env=env,
        timeout=60,
    )
    assert probe.returncode == 0, probe.stderr
    location, dev_modules, native, compiled = probe.stdout.splitlines()
    assert Path(location).is_relative_to(venv), "imported from the venv, not the source tree"
    assert dev_modules == "", "only runtime dependencies in the image's virtualenv"
    assert native == "True", "the wheel carries the compiled hot-path scan"
    assert compiled == "True", "the image's wheel runs the mypyc-compiled cores"

    # Run it as the image does: configuration by environment only.
    port = _free_port()
    run_env = {
        **env,
        "PATH": f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        "TOOLCALL_PROXY_HOST": "127.0.0.1",
        "TOOLCALL_PROXY_PORT": str(port),
        "TOOLCALL_PROXY_DRAIN_TIMEOUT": str(DRAIN),
    }
    healthcheck = _healthcheck()
    assert healthcheck[0] == "python"
    proxy = ServeProcess([], executable=venv / "bin" / "toolcall-proxy", env=run_env, cwd=workdir)
    proxy.start()
    try:
        base = proxy.wait_started(timeout=60)
        assert base == f"http://127.0.0.1:{port}"
        assert "built-in simulated provider" in proxy.stderr

        health = _run(healthcheck, cwd=workdir, env=run_env, timeout=30)
        assert health.returncode == 0, health.stderr
        assert httpx.get(base + "/healthz", timeout=10).json() == {"status": "ok"}

        body = {
            "model": "kimi-k2",
            "messages": [{"role": "user", "content": "Run the build steps."}],
        }
        reply = httpx.post(base + "/v1/chat/completions", json=body, timeout=30)
        assert reply.status_code == 200
        calls = reply.json()["choices"][0]["message"]["tool_calls"]
        assert calls and not calls[0]["id"].startswith("functions."), "the id was repaired"

        agent_env = {**run_env, "OPENAI_BASE_URL": base + "/v1", "OPENAI_API_KEY": "sk-local"}
        agent_env["AGENT_MODEL"] = "kimi-k2"
        agent = _run(_compose_agent_command(), cwd=workdir, env=agent_env, timeout=60)
        assert agent.returncode == 0, agent.stderr
        assert json.loads(agent.stdout)["role"] == "assistant"

        sent = proxy.terminate()
        code = proxy.wait_exit(timeout=DRAIN + 10)
        assert time.monotonic() - sent < DRAIN + 10
        assert code in (0, -signal.SIGTERM)
    finally:
        proxy.stop()
    down = _run(healthcheck, cwd=workdir, env=run_env, timeout=30)
    assert down.returncode != 0, "the healthcheck fails once the proxy is gone"
