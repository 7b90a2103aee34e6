"""`make lint` keeps the layout's two rules, so neither is a habit: no surface imports another
(and the core and the surfaces import no shell and do no I/O: pyproject's
[tool.importlinter]), and no function is over radon complexity 15 (tools/complexity.py).
Each check is run on the tree as it is (it passes) and on a copy with one violation (it
fails, naming it)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=tree,
        env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def _copy(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    shutil.copytree(ROOT / "proxy", tree / "proxy", ignore=shutil.ignore_patterns("*.so", "*.c"))
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    return tree


def _append(path: Path, line: str) -> None:
    path.write_text(path.read_text(encoding="utf-8") + line + "\n", encoding="utf-8")


def test_the_tree_keeps_the_import_contract(tmp_path: Path) -> None:
    result = _lint_imports(_copy(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_a_cross_surface_import_fails_the_contract(tmp_path: Path) -> None:
    tree = _copy(tmp_path)
    _append(tree / "proxy/anthropic/wire.py", "from proxy.responses.ids import CallIds  # noqa")
    result = _lint_imports(tree)
    assert result.returncode != 0
    assert "surfaces are independent of each other BROKEN" in result.stdout
    assert "proxy.anthropic.wire -> proxy.responses.ids" in result.stdout


def test_io_in_the_core_fails_the_contract(tmp_path: Path) -> None:
    tree = _copy(tmp_path)
    _append(tree / "proxy/core/ids.py", "import asyncio  # noqa")
    result = _lint_imports(tree)
    assert result.returncode != 0
    assert "do no I/O (sans-IO) BROKEN" in result.stdout


def _complexity(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "tools/complexity.py"), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_tree_keeps_the_complexity_limit() -> None:
    result = _complexity(str(ROOT / "proxy"))
    assert result.returncode == 0, result.stdout


def _branchy(ifs: int) -> str:
    """A method whose radon complexity is `ifs` + 1."""
    body = "".join(f"        if x == {n}:\n            return {n}\n" for n in range(ifs))
    return f"class Picker:\n    def pick(self, x):\n{body}        return -1\n"


def test_a_method_over_complexity_15_fails_and_one_at_15_passes(tmp_path: Path) -> None:
    source = tmp_path / "branchy.py"
    source.write_text(_branchy(15), encoding="utf-8")
    result = _complexity(str(tmp_path))
    assert result.returncode == 1
    assert "Picker.pick has complexity 16" in result.stdout
    source.write_text(_branchy(14), encoding="utf-8")
    assert _complexity(str(tmp_path)).returncode == 0
