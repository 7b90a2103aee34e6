"""The retry rules tests/core/test_loop_message.py holds are the ones the installed agents ship.

That test proves no client's rule matches the proxy's loop error; it holds copies of the rules
(the core suite runs without the agents installed). Here each copy is checked against the
installed package's own code, so a version bump that changes a rule fails here first.
"""

from __future__ import annotations

import mmap
from pathlib import Path

import pytest

from tests.agents.agents import MODULES, installed
from tests.core import test_loop_message as rules


def _holds(path: Path, *needles: str) -> list[str]:
    """The needles the file does not hold (a compiled binary is searched as bytes)."""
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        return [needle for needle in needles if data.find(needle.encode()) < 0]


@pytest.fixture(autouse=True)
def _installed() -> None:
    assert installed(), "run `make agents` (npm ci in tests/agents/node) first"


def test_pi_retries_by_this_pattern() -> None:
    source = MODULES / "@mariozechner" / "pi-coding-agent" / "dist" / "core" / "agent-session.js"
    assert not _holds(source, f"return /{rules.PI.pattern}/i.test(err);")


def test_opencode_retries_by_these_patterns() -> None:
    flags = [("i" if p.flags & 2 else "") for p in rules.OPENCODE]
    listed = ",".join(f"/{p.pattern}/{f}" for p, f in zip(rules.OPENCODE, flags, strict=True))
    words = [f'i.includes("{word}")' for word in rules.OPENCODE_WORDS]
    binary = MODULES / "opencode-ai" / "bin" / "opencode.exe"
    # the list is written with `\s` and `\b` as they are in the binary
    assert not _holds(binary, f"[{listed}]", *words)


def test_qwen_code_reads_these_from_a_message() -> None:
    chunks = MODULES / "@qwen-code" / "qwen-code" / "chunks"
    assert not _holds(chunks / "chunk-S34QJ6IR.js", r"err.message.match(/HTTP_STATUS\/(\d{3})\b/)")
    assert not _holds(
        chunks / "chunk-H4VGADZA.js",
        r"/^too many requests\b/i.test(detail.trim()) && /\b(?:wait|try(?:ing)? again)\b/i",
        "var NETWORK_FAILURE_MESSAGE_RE = /network error for request /i;",
    )


def test_claude_code_reads_these_from_a_message() -> None:
    binary = MODULES / "@anthropic-ai" / "claude-code" / "bin" / "claude.exe"
    assert not _holds(binary, *(f"e.message?.includes('{c}')" for c in rules.CLAUDE))


def test_codex_reads_only_a_delay_from_a_message() -> None:
    vendor = MODULES / "@openai" / "codex-linux-x64" / "vendor"
    binary = next(vendor.glob("*/bin/codex"))
    assert not _holds(binary, f"(?i){rules.CODEX.pattern}")
