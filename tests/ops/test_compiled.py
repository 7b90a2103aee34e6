"""The compiled build is opt-in (docs/development.md): the development install that `make run`
and `make test` make runs every module as Python, so an edit is live and a traceback points at
the source; the build backend brings mypyc only to a build that asks for it
(TOOLCALL_PROXY_COMPILE=1). The compiled wheel has its own test (tests/wheel, `make wheel-test`)."""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

import pytest
from setuptools import build_meta

from tests.conftest import ROOT, compiled_sources


def test_the_list_names_real_sources() -> None:
    sources = compiled_sources()
    assert sources and all((ROOT / source).is_file() for source in sources)
    assert "proxy/chat/stream.py" in sources


@pytest.mark.parametrize("source", compiled_sources())
def test_the_development_install_runs_each_listed_module_as_python(source: str) -> None:
    module = importlib.import_module(source.removesuffix(".py").replace("/", "."))
    assert module.__file__ == str(ROOT / source), (
        f"{source} runs compiled in this tree: `make test` tests the plain tree"
        " (`rm .venv/.dev` and `make test` installs it again)"
    )


def _backend() -> ModuleType:
    path = ROOT / "tools" / "backend" / "toolcall_build.py"
    spec = importlib.util.spec_from_file_location("toolcall_build", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "hook", ["get_requires_for_build_wheel", "get_requires_for_build_editable"]
)
def test_mypyc_is_a_build_requirement_only_when_compiling(
    hook: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = _backend()
    monkeypatch.setattr(build_meta, hook, lambda config_settings=None: ["wheel"])
    monkeypatch.delenv("TOOLCALL_PROXY_COMPILE", raising=False)
    assert getattr(backend, hook)() == ["wheel"]
    monkeypatch.setenv("TOOLCALL_PROXY_COMPILE", "1")
    compiling = getattr(backend, hook)()
    assert compiling[0] == "wheel"
    assert any(requirement.startswith("mypy>=") for requirement in compiling)
    assert any(requirement.startswith("uvicorn") for requirement in compiling)
