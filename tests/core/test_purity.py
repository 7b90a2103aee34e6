"""ARCHITECTURE: the core is sans-IO. Importing it pulls in no event loop, HTTP client or
server, so it can be used (and tested) with plain function calls."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import proxy.anthropic
import proxy.chat
import proxy.core
import proxy.responses

FORBIDDEN = ["asyncio", "httpx", "httpcore", "starlette", "uvicorn", "anyio"]
ROOT = Path(__file__).resolve().parents[2]


PACKAGES = [proxy.core, proxy.chat, proxy.anthropic, proxy.responses]


def core_modules() -> list[str]:
    """The neutral core and every surface's package, each with all its modules."""
    modules = ["proxy.core.sse"]
    for package in PACKAGES:
        found = pkgutil.walk_packages(package.__path__, prefix=package.__name__ + ".")
        modules += [package.__name__, *sorted(m.name for m in found)]
    return modules


def imported_after(modules: list[str]) -> set[str]:
    code = (
        "import importlib, json, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    return set(json.loads(out.stdout))


def test_core_modules_are_all_covered() -> None:
    modules = core_modules()
    for expected in ["decide", "guard", "ledger", "ids", "notes", "events", "textcalls.markers"]:
        assert f"proxy.core.{expected}" in modules
    for expected in ["exchange", "followup", "history", "message", "stream"]:
        assert f"proxy.chat.{expected}" in modules
    for expected in ["exchange", "message", "request", "stream"]:
        assert f"proxy.anthropic.{expected}" in modules
    for expected in ["exchange", "request", "stream", "body", "ids"]:
        assert f"proxy.responses.{expected}" in modules


def test_core_imports_no_io_libraries() -> None:
    modules = core_modules()
    loaded = imported_after(modules)
    assert set(modules) <= loaded  # the check really imported them
    leaked = {m for m in loaded if m.split(".")[0] in FORBIDDEN}
    assert not leaked, f"the sans-IO core imported {sorted(leaked)}"


def test_the_check_would_notice_an_io_import() -> None:
    loaded = imported_after(["proxy.core.sse", "asyncio"])
    assert "asyncio" in loaded
