"""The install compiles what setup.py lists (mypyc): a build that silently fell back to Python
would pass every other test and lose the speed that README "Performance" measures."""

from __future__ import annotations

import importlib
import os
from importlib.machinery import EXTENSION_SUFFIXES

import pytest

from tests.conftest import ROOT, compiled_sources


@pytest.mark.skipif(
    bool(os.environ.get("TOOLCALL_PROXY_PURE_PYTHON")), reason="installed without mypyc"
)
@pytest.mark.parametrize("source", compiled_sources())
def test_each_listed_module_runs_compiled(source: str) -> None:
    compiled = (ROOT / source).with_suffix(EXTENSION_SUFFIXES[0])
    assert compiled.exists(), f"{source} was not compiled: `make unit` compiles it"
    module = importlib.import_module(source.removesuffix(".py").replace("/", "."))
    # A compiled module's functions are built-in functions, not Python ones.
    functions = [
        v for v in vars(module).values() if getattr(v, "__module__", None) == module.__name__
    ]
    assert not any(
        type(f).__name__ == "function" for f in functions if callable(f) and not isinstance(f, type)
    )


def test_the_list_names_real_sources() -> None:
    sources = compiled_sources()
    assert sources and all((ROOT / source).is_file() for source in sources)
    assert "proxy/chat/stream.py" in sources
