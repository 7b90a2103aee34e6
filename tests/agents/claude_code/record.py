"""Records the requests Claude Code sends, as fixtures for the Anthropic surface's tests:
`python -m tests.agents.claude_code.record` (after `make agents` installed it) rewrites
requests/*.json. See README.md beside this file.

Claude Code runs headless (`claude -p`, the same offline environment as the agent tests)
against the scripted model in model.py on loopback, which answers:
  1. a thinking block with its signature, text, and two parallel `tool_use` blocks (`ls` in
     Bash, Read of notes.txt) with Kimi's ids `functions.Bash:0`, `functions.Read:1`;
  2. a thinking block and two more parallel calls, one of which fails (Read of a file that
     does not exist), so the next request carries an `is_error` tool_result;
  3. the final text.
Each request is saved as it arrived (path with its query, the Anthropic headers, the body),
with the scratch directory written as /scratch and the kernel version left out.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson

from tests.agents.agents import Scratch, claude_argv, claude_env
from tests.agents.claude_code.model import JSON, Recorded, ScriptedModel, Turn
from tests.servers import serving

HERE = Path(__file__).parent
REQUESTS = HERE / "requests"
MODEL = "kimi-k2"
KEPT_HEADERS = ("anthropic-beta", "anthropic-version", "content-type", "user-agent", "x-app")
PROMPT = "List this directory, read notes.txt, then write done to out.txt."
NAMES = ("first-turn", "parallel-tool-use", "tool-error", "extra")
TIMEOUT = 120.0


def _tool(call_id: str, name: str, arguments: JSON) -> JSON:
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}


def turns(work: Path) -> list[Turn]:
    think = "The user wants three things done; I can do the first two at once."
    return [
        [
            {"type": "thinking", "thinking": think, "signature": "c2lnbmF0dXJlLTE="},
            {"type": "text", "text": "Listing the directory and reading the notes."},
            _tool("functions.Bash:0", "Bash", {"command": f"ls {work}", "description": "List"}),
            _tool("functions.Read:1", "Read", {"file_path": str(work / "notes.txt")}),
        ],
        [
            {"type": "thinking", "thinking": "Now the write.", "signature": "c2lnbmF0dXJlLTI="},
            _tool(
                "functions.Write:2",
                "Write",
                {"file_path": str(work / "out.txt"), "content": "done\n"},
            ),
            _tool("functions.Read:3", "Read", {"file_path": str(work / "missing.txt")}),
        ],
        [{"type": "text", "text": "Done: listed, read and written."}],
    ]


def scrub(value: Any, root: str) -> Any:
    """The fixture as recorded, without the machine: the scratch path becomes /scratch and
    the kernel version in Claude Code's environment note is left out; the client's own long
    prose (its system prompt, tool descriptions) is elided, its shape kept (elide_prose)."""
    text = orjson.dumps(value).decode().replace(root, "/scratch")
    text = re.sub(r"OS Version: [^\\\"]*", "OS Version: Linux", text)
    return elide_prose(orjson.loads(text))


# Strings under these keys longer than this are the client's own prose, which the tests do not
# need (and the project does not keep): each becomes a marker that says how long it was.
PROSE_KEYS = frozenset({"text", "description", "instructions", "content"})
PROSE_LIMIT = 240


def elide_prose(value: Any) -> Any:
    if isinstance(value, list):
        return [elide_prose(item) for item in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for key, item in value.items():
        if key in PROSE_KEYS and isinstance(item, str) and len(item) > PROSE_LIMIT:
            out[key] = f"[{len(item)} characters of the client's own text, elided]"
        else:
            out[key] = elide_prose(item)
    return out


def record(root: Path) -> list[Recorded]:
    scratch = Scratch.make(root)
    model = ScriptedModel(turns(scratch.work))
    with serving(model) as server:
        argv = claude_argv(MODEL, PROMPT)
        env = claude_env(scratch, server.url)
        proc = subprocess.run(
            argv, cwd=scratch.work, env=env, capture_output=True, text=True, timeout=TIMEOUT
        )
    if proc.returncode != 0:
        raise SystemExit(f"claude exited {proc.returncode}: {proc.stdout[-2000:]}{proc.stderr}")
    return model.recorded


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="claude-record-"))
    try:
        recorded = record(root / "run")
        shutil.rmtree(REQUESTS, ignore_errors=True)
        REQUESTS.mkdir()
        for number, request in enumerate(recorded, 1):
            headers = {k: v for k, v in sorted(request.headers.items()) if k in KEPT_HEADERS}
            fixture = {"path": request.path, "headers": headers, "body": request.body}
            name = NAMES[min(number, len(NAMES)) - 1]
            path = REQUESTS / f"{number:02d}-{name}.json"
            path.write_bytes(
                orjson.dumps(scrub(fixture, str(root / "run")), option=orjson.OPT_INDENT_2) + b"\n"
            )
            print(path.relative_to(HERE), file=sys.stderr)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
