"""What every client test shares: the simulator profiles, the tools, the result of one tool
loop and the assertions made on it.

Each client module runs the same multi-turn tool loop its users would write (or the client's
own loop), through the real proxy on loopback, and turns what happened into a `Loop`: the
final text, every tool execution as the tool implementation recorded it, and the error the
client reported. The assertions are the issue's: every round completes, each call executes
exactly once, ids are unique, and a replay loop surfaces as an error the client reports.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.servers import ServerThread

# Simulator profile -> how many tool calls its 3 rounds make (2 per round: parallel calls).
PROFILES: dict[str, int] = {
    "kimi": 3,  # functions.<name>:0 reused every turn
    "name-index": 6,  # <name>_0 / <name>_1 parallel calls, reused every turn
    "repeat-fields": 3,  # id, type and name repeated on every delta
    "id-every-delta": 3,  # a fresh random id on every delta
    "no-index": 3,  # no index, whole call in one delta, finish_reason stop
    "missing-type": 3,  # no index and no type on any delta, arguments in fragments
    "missing-id": 3,  # no id at all, arguments as a JSON object
    "empty-id": 3,  # "" ids
    "index0-parallel": 6,  # parallel calls all at index 0, bare "0"/"1" ids on every delta
    "replay-once": 3,  # round 2 replays round 1's call with its id, once
    "kimi-k2/replay-once": 3,  # the same behind the Kimi dialect
}
REPLAY_LOOP = "replay-loop"  # every turn after round 1 replays the latest call, forever
FINAL_TEXT = "All 3 rounds done."
LOOP_ERROR = "Tool-call replay loop detected"
CLIENT_ID = re.compile(r"^[A-Za-z0-9_-]{1,40}$")
MAX_STEPS = 8  # 3 tool rounds and the answer need 4

TOOL_NAMES = ("run_shell_command", "read_file")
TOOL_PROPERTY = {"run_shell_command": "command", "read_file": "path"}
USER_PROMPT = "Run the build steps."

# The same two tools as JSON schema, in the order the simulator relies on (it calls the first
# tool, and the second one for parallel calls).
TOOL_SCHEMAS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": "Run a shell command" if name == "run_shell_command" else "Read a file",
            "parameters": {
                "type": "object",
                "properties": {TOOL_PROPERTY[name]: {"type": "string"}},
                "required": [TOOL_PROPERTY[name]],
            },
        },
    }
    for name in TOOL_NAMES
]


@dataclass
class Call:
    id: str | None
    name: str
    arguments: Any  # parsed when it was JSON, else the raw value

    @property
    def key(self) -> tuple[str, str]:
        return self.name, json.dumps(self.arguments, sort_keys=True)


@dataclass
class Loop:
    """What one tool loop did, as the client and the tool implementations saw it."""

    final_text: str | None = None
    executed: list[Call] = field(default_factory=list)
    error: str | None = None  # "<exception type>: <message>" of what the client raised
    status: int | None = None  # the HTTP status of that error, when it came from one
    code: str | None = None  # the error's `code`, when it had one
    steps: int = 0  # model responses
    usage: list[int] = field(default_factory=list)  # total tokens, each time usage came

    def execute(self, call_id: str | None, name: str, arguments: Any) -> str:
        """The tool implementations: record the call, answer with a short result."""
        if isinstance(arguments, str):
            with contextlib.suppress(ValueError):  # not JSON: kept as the raw string
                arguments = json.loads(arguments)
        self.executed.append(Call(call_id, name, arguments))
        return f"executed {name} {json.dumps(arguments)}"

    @property
    def ids(self) -> list[str | None]:
        return [call.id for call in self.executed]

    def fail(self, exc: BaseException) -> None:
        self.error = f"{type(exc).__name__}: {exc}"
        status = getattr(exc, "status_code", None)
        self.status = status if isinstance(status, int) else None
        code = getattr(exc, "code", None)
        self.code = code if isinstance(code, str) else None


def expected_calls(profile: str, profiles: dict[str, int] = PROFILES) -> list[tuple[str, str]]:
    """The calls the scripted model makes over its 3 rounds, each exactly once."""
    per_round = profiles[profile] // 3
    return [
        Call(None, name, {TOOL_PROPERTY[name]: f"echo round-{rnd}-{i}"}).key
        for rnd in (1, 2, 3)
        for i, name in enumerate(TOOL_NAMES[:per_round])
    ]


def assert_loop_completes(loop: Loop, profile: str) -> None:
    context = f"{profile}: {loop}"
    assert loop.error is None, context
    assert loop.final_text == FINAL_TEXT, context
    # Every round completed and every call ran exactly once (no replay, none lost or merged).
    assert sorted(call.key for call in loop.executed) == sorted(expected_calls(profile)), context
    ids = loop.ids
    assert all(isinstance(i, str) and CLIENT_ID.match(i) for i in ids), context
    assert len(set(ids)) == len(ids), f"ids collide: {context}"


def assert_usage_reported(loop: Loop, steps: int = 4) -> None:
    """Asked for usage: every response reported it once (a replay answered by the proxy is
    part of its response, not an extra report)."""
    assert loop.steps == steps, loop
    assert len(loop.usage) == steps and all(total > 0 for total in loop.usage), loop


def assert_replay_loop_reported(loop: Loop) -> None:
    """The first round runs once; then the client reports the proxy's loop error. The looping
    model sends nothing before its replay, so even a stream gets a plain HTTP 422 (SPEC §5:
    the head leaves with the first byte), which clients raise and do not retry."""
    context = str(loop)
    assert loop.error is not None and LOOP_ERROR in loop.error, context
    assert loop.status == 422, context
    assert "run_shell_command" in loop.error, context
    first_call = ("run_shell_command", json.dumps({"command": "echo round-1-0"}))
    assert [call.key for call in loop.executed] == [first_call], context
    assert loop.final_text is None, context


# --- Node clients --------------------------------------------------------------------------

NODE_DIR = Path(__file__).parent / "node"
NODE_TIMEOUT = 90.0  # one process runs every profile's loop in turn


def run_node(script: str, base_url: str, models: list[str], mode: str) -> dict[str, Loop]:
    """Run a Node client script for several models; one `Loop` per model."""
    node = shutil.which("node")
    assert node is not None, "Node.js is required for tests/clients (Node 20+)"
    assert (NODE_DIR / "node_modules").is_dir(), (
        "run `make tests/clients/node/node_modules/.installed` (npm ci) first"
    )
    proc = subprocess.run(
        [node, str(NODE_DIR / script), base_url, ",".join(models), mode, str(MAX_STEPS)],
        cwd=NODE_DIR,
        capture_output=True,
        text=True,
        timeout=NODE_TIMEOUT,
        check=False,
    )
    assert proc.returncode == 0, f"{script} {mode} exited {proc.returncode}: {proc.stderr}"
    loops: dict[str, Loop] = {}
    for line in proc.stdout.splitlines():
        if not line.startswith("{"):
            continue
        raw = json.loads(line)
        loop = Loop(final_text=raw["final_text"], steps=raw["steps"], usage=raw["usage"])
        for call in raw["executed"]:
            loop.execute(call.get("id"), call["name"], call["arguments"])
        if raw["error"] is not None:
            loop.error = f"{raw['error']['name']}: {raw['error']['message']}"
            loop.status = raw["error"].get("status")
            loop.code = raw["error"].get("code")
        loops[raw["model"]] = loop
    assert sorted(loops) == sorted(models), proc.stdout + proc.stderr
    return loops


def url(server: ServerThread) -> str:
    """The OpenAI base URL of a proxy or simulator on loopback."""
    return server.url + "/v1"
