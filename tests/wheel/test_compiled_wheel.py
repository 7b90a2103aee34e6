"""The release wheel (`make wheel`, built with TOOLCALL_PROXY_COMPILE=1) ships every module
setup.py lists compiled by mypyc, and `make wheel-test` runs the end-to-end tests on it: a build
that silently fell back to Python would pass every other test and lose the speed that
docs/performance.md measures. Not part of `make unit` (the plain tree has nothing compiled)."""

from __future__ import annotations

import importlib
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

import proxy
from tests.conftest import ROOT, compiled_sources


def test_this_run_imports_the_installed_wheel_not_the_tree() -> None:
    location = Path(proxy.__file__).resolve()
    assert not location.is_relative_to(ROOT / "proxy"), (
        f"proxy was imported from {location}: `make wheel-test` runs these tests on the wheel"
    )


@pytest.mark.parametrize("source", compiled_sources())
def test_each_listed_module_runs_compiled(source: str) -> None:
    module = importlib.import_module(source.removesuffix(".py").replace("/", "."))
    assert module.__file__ is not None and module.__file__.endswith(EXTENSION_SUFFIXES[0]), (
        f"{source} is not compiled in the wheel"
    )
    # A compiled module's functions are built-in functions, not Python ones.
    functions = [
        v for v in vars(module).values() if getattr(v, "__module__", None) == module.__name__
    ]
    assert not any(
        type(f).__name__ == "function" for f in functions if callable(f) and not isinstance(f, type)
    )
