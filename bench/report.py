"""The results table (stdout) and the JSON file."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile (no interpolation: a reported value was observed)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass(slots=True)
class Row:
    metric: str
    direct: str = ""
    proxy: str = ""
    delta: str = ""
    target: str = ""
    met: bool | None = None  # None: reported, no target


@dataclass(slots=True)
class Report:
    title: str
    rows: list[Row] = field(default_factory=list)
    sections: list[tuple[str, tuple[str, ...], list[tuple[str, ...]]]] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)

    def add(self, row: Row) -> None:
        self.rows.append(row)

    def section(self, heading: str, headers: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
        self.sections.append((heading, headers, rows))

    def render(self) -> str:
        lines = [self.title, ""]
        lines += _table(_HEADERS, [_cells(r) for r in self.rows])
        for heading, headers, rows in self.sections:
            lines += ["", heading]
            lines += _table(headers, rows)
        checked = [r for r in self.rows if r.met is not None]
        met = sum(1 for r in checked if r.met)
        lines += ["", f"targets met: {met} of {len(checked)}"]
        return "\n".join(lines)

    def write_json(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        rows = [
            {
                "metric": r.metric,
                "direct": r.direct,
                "proxy": r.proxy,
                "added_or_ratio": r.delta,
                "target": r.target,
                "met": r.met,
            }
            for r in self.rows
        ]
        sections = [
            {"heading": h, "rows": [dict(zip(headers, row, strict=True)) for row in rows]}
            for h, headers, rows in self.sections
        ]
        payload = {"title": self.title, "rows": rows, "sections": sections, **self.data}
        path.write_bytes(orjson.dumps(payload, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))


_HEADERS = ("metric", "direct", "proxy", "added/ratio", "target", "met")


def _cells(r: Row) -> tuple[str, ...]:
    met = "" if r.met is None else ("yes" if r.met else "NO")
    return (r.metric, r.direct, r.proxy, r.delta, r.target, met)


def _table(headers: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    cells = [headers, *rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    out = []
    for n, row in enumerate(cells):
        out.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return out


def ms(value: float) -> str:
    return f"{value:.3f} ms"


def added_ms(value: float) -> str:
    return f"{value:+.3f} ms"
