"""A newcomer's first hour, for real.

From a fresh copy of the repository, `make run` installs quietly, says where the command
line is and what each route does, serves a tool loop to the openai SDK, and stops on Ctrl-C
without a traceback or a word from make. `serve` with a routes file prints one line per route
naming its upstream, dialect, id policy, guard and API surfaces, and never a key.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

import httpx
import openai

from proxy.core.surfaces import SURFACES
from tests.agent import run_agent
from tests.e2e.test_cli_serve import environment, process
from tests.ops.helpers import ServeProcess, clean_env, copy_sources, simulator
from tests.servers import free_port

# What a clone holds that `make run` needs (tests, benchmarks and the rest are not used).
CLONE = ("Makefile", "pyproject.toml", "setup.py", "README.md", "proxy", "tools/backend")
# What the first install printed before it was made quiet.
INSTALL_NOISE = ("setuptools", "experimental", "Editable installation", "BuildBackendWarning", "!!")
SECRET = "sk-startup-line-secret-0123456789"


def test_fresh_clone_make_run_is_quiet_serves_and_stops_cleanly_on_ctrl_c(tmp_path: Path) -> None:
    clone = tmp_path / "toolcall-proxy"
    clone.mkdir()
    copy_sources(CLONE, clone)
    port = free_port()
    env = environment(TOOLCALL_PROXY_PORT=str(port))
    env.pop("VIRTUAL_ENV", None)
    # The first run creates the virtualenv and installs into it: minutes, not seconds.
    with process(["make", "--no-print-directory", "run"], port, env, clone, 900) as proc:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0)
        run = run_agent(client, "kimi-k2", stream=True)
        assert run.final_text == "All 3 rounds done." and len(set(run.ids)) == 3
        # Ctrl-C in a terminal signals the whole foreground process group: make and the server.
        os.killpg(proc.pid, signal.SIGINT)
        _, raw = proc.communicate(timeout=60)
    stderr = raw.decode()
    for noise in INSTALL_NOISE:
        assert noise not in stderr, stderr
    assert "make: ***" not in stderr and "Traceback" not in stderr, stderr
    assert "Finished server process" in stderr
    # The C stream scan was compiled (it is optional: a failed build would pass silently).
    assert list((clone / "proxy" / "chat").glob("_sse_scan*.so"))
    assert ".venv/bin/toolcall-proxy" in stderr and "source .venv/bin/activate" in stderr
    assert f"route simulator at http://127.0.0.1:{port}/v1 ->" in stderr
    # The command line is where the hint says.
    version = subprocess.run(
        [str(clone / ".venv/bin/toolcall-proxy"), "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert version.stdout.startswith("toolcall-proxy ")


def test_serve_names_every_route_on_start_up_and_never_its_key(tmp_path: Path) -> None:
    config = tmp_path / "routes.yaml"
    with simulator() as sim:
        upstream = f"{sim.url}/v1"
        config.write_text(
            f"""\
routes:
  - name: moonshot
    match: {{path_prefix: /kimi}}
    upstream: {upstream}
    upstream_key_env: STARTUP_TEST_KEY
    dialect: kimi
    ids: always
  - name: local
    match: {{model: "qwen*"}}
    upstream: {upstream}
    replay_guard: off
    text_tool_calls: off
""",
            encoding="utf-8",
        )
        port = free_port()
        env = clean_env(STARTUP_TEST_KEY=SECRET)
        args = ["--config", str(config), "--port", str(port)]
        proxy = ServeProcess(args, env=env).start()
        try:
            proxy.wait_started()
            lines = [line for line in proxy.lines if line.startswith("toolcall-proxy: route ")]
            # The base URL each line names serves a chat completion for that route's models.
            for line, model in zip(lines, ("kimi-k2", "qwen3-coder"), strict=True):
                base = re.search(r" at (http://\S+) ", line)
                assert base is not None, line
                body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
                reply = httpx.post(base.group(1) + "/chat/completions", json=body, timeout=10)
                assert reply.status_code == 200, reply.text
            proxy.proc.send_signal(signal.SIGINT)  # type: ignore[union-attr]
            assert proxy.wait_exit(timeout=30) == 0
        finally:
            proxy.stop()
    moonshot, local = lines
    assert moonshot.startswith(
        f"toolcall-proxy: route moonshot at http://127.0.0.1:{port}/kimi/v1 "
    )
    assert f"-> {upstream}, key from $STARTUP_TEST_KEY;" in moonshot
    assert "; dialect kimi; ids always; replay guard on, max 2 follow-ups; " in moonshot
    assert "; text tool calls auto; " in moonshot
    assert local.startswith(
        f"toolcall-proxy: route local at http://127.0.0.1:{port}/v1 for models qwen* -> {upstream}, "
    )
    assert "the client's Authorization is forwarded" in local
    assert "; dialect auto (kimi for models named kimi or moonshot, else passthrough); " in local
    assert "; ids auto; replay guard off; repeat guard on; " in local
    # SPEC §11: a loopback host names no family, so each request's model name decides
    assert "; request repair on, provider family auto (from each request's model name); " in local
    assert "; text tool calls off; " in local
    repaired = ", ".join(s.path for s in SURFACES if s.repaired)
    passed = "".join(f"{s.path}, " for s in SURFACES if not s.repaired).removesuffix(", ")
    others = f"{passed} and every other path" if passed else "every other path"
    for line in lines:
        assert line.endswith(f"repairs {repaired}, passes through {others}")
    assert SECRET not in proxy.stderr
    assert "Traceback" not in proxy.stderr
