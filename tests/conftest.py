"""What every test run checks first: the compiled cores are compiled from the source here.

setup.py compiles some modules with mypyc, in place; Python imports a module's compiled file
before its source. A source edited after the last install would then not be what runs, and
tests would pass or fail on the old code: the run stops and says how to rebuild instead.
"""

from __future__ import annotations

from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def compiled_sources() -> list[str]:
    """setup.py's COMPILED list, read from the file (setup.py runs setup() when imported)."""
    text = (ROOT / "setup.py").read_text()
    start = text.index("COMPILED = [")
    listing = text[start : text.index("]", start)]
    return [line.strip().strip('",') for line in listing.splitlines()[1:] if line.strip()]


def stale_modules() -> list[str]:
    """Modules whose compiled file (which Python imports before the source) is older than
    their source. None when they run as Python (no compiled file beside them)."""
    stale = []
    for source in compiled_sources():
        path = ROOT / source
        compiled = path.with_suffix(EXTENSION_SUFFIXES[0])
        if compiled.exists() and compiled.stat().st_mtime < path.stat().st_mtime:
            stale.append(source)
    return stale


def pytest_sessionstart(session: pytest.Session) -> None:
    stale = stale_modules()
    if stale:
        pytest.exit(
            f"{', '.join(stale)} changed since mypyc compiled them: `make unit` (or"
            " `pip install -e .`) compiles them again",
            returncode=4,
        )
