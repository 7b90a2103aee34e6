"""Fail when a function in the given trees is more complex than the limit (`make lint`).

The limit is radon's cyclomatic complexity (each branch, loop, `and`/`or`, comprehension
`if` and `except` adds one), at most 15 per function or method: past that a function has
more paths than its tests can name. Usage: `python tools/complexity.py proxy [--max 15]`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path

from radon.complexity import cc_visit
from radon.visitors import Function

LIMIT = 15


def blocks(path: Path) -> Iterator[Function]:
    """Every function and method in `path`, closures and nested methods included."""
    pending = list(cc_visit(path.read_text(encoding="utf-8")))
    while pending:
        block = pending.pop()
        if isinstance(block, Function):
            yield block
            pending.extend(block.closures)
        else:  # a class: its methods and nested classes
            pending.extend(block.methods)
            pending.extend(block.inner_classes)


def over_limit(roots: list[Path], limit: int) -> list[str]:
    found: dict[tuple[Path, int, str], int] = {}  # radon lists a method under its class too
    for root in roots:
        files = [root] if root.is_file() else sorted(root.rglob("*.py"))
        for path in files:
            for block in blocks(path):
                if block.complexity > limit:
                    found[(path, block.lineno, block.fullname)] = block.complexity
    return [f"{p}:{line}: {name} has complexity {cc}" for (p, line, name), cc in found.items()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("roots", nargs="+", type=Path)
    parser.add_argument("--max", type=int, default=LIMIT, dest="limit")
    args = parser.parse_args(argv)
    found = over_limit(args.roots, args.limit)
    for line in found:
        print(line)
    if found:
        print(f"{len(found)} function(s) over complexity {args.limit}: split them", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
