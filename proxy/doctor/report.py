"""The doctor's report, for people (text) and for programs (`--json`)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from proxy.doctor.diagnose import Diagnosis
from proxy.doctor.observers import Finding, places

JSON = dict[str, Any]


def routes_file(diagnosis: Diagnosis) -> list[str]:
    """The recommended route as a routes file (every value is a checked word or URL)."""
    lines = [
        "routes:",
        f"  - name: {urlsplit(diagnosis.upstream).hostname}",
        f"    upstream: {diagnosis.upstream}",
    ]
    if diagnosis.key_env:
        lines.append(f"    upstream_key_env: {diagnosis.key_env}")
    lines += [f"    {setting.name}: {setting.value}" for setting in diagnosis.settings]
    return lines


def serve_command(diagnosis: Diagnosis) -> str:
    words = ["toolcall-proxy serve --upstream", diagnosis.upstream]
    if diagnosis.key_env:
        words += ["--upstream-key-env", diagnosis.key_env]
    words += ["--dialect", next(s.value for s in diagnosis.settings if s.name == "dialect")]
    bridge = next((s.value for s in diagnosis.settings if s.name == "upstream_api"), "same")
    if bridge != "same":
        words += ["--upstream-api", bridge]
    return " ".join(words)


def _finding_lines(number: int, finding: Finding) -> list[str]:
    return [
        f"  {number}. {finding.quirk.title}",
        f"     seen in: {places(finding.where)}",
        *(f"     e.g. {example}" for example in finding.examples),
        f"     the proxy {finding.quirk.repair}",
    ]


def _surface_lines(diagnosis: Diagnosis) -> list[str]:
    lines = ["API surfaces"]
    for result in diagnosis.surfaces:
        proxy = "the proxy repairs it" if result.surface.repaired else "the proxy passes it through"
        answer = "answers" if result.answers else f"does not answer ({result.detail})"
        lines.append(f"  {result.surface.name} ({result.surface.path}): {answer}; {proxy}")
    return lines


def _quirk_lines(diagnosis: Diagnosis) -> list[str]:
    lines = [
        f"What the provider does wrong with tool calls ({diagnosis.responses} Chat Completions "
        "responses, streaming and not)"
    ]
    for number, finding in enumerate(diagnosis.findings, 1):
        lines += _finding_lines(number, finding)
    if not diagnosis.findings:
        lines.append("  Nothing: every response had the shape OpenAI sends.")
    lines += [f"  (note: {note})" for note in diagnosis.coverage_notes]
    return lines + [f"  ({label} did not complete: {why})" for label, why in diagnosis.incomplete]


def _advice_lines(diagnosis: Diagnosis) -> list[str]:
    lines = ["What the proxy would change in these responses (its own account)"]
    lines += [
        f"  {kind}: " + ", ".join(f"{label} {count}" for label, count in counts.items())
        for kind, counts in diagnosis.account.items()
    ] or ["  nothing"]
    lines += ["", "Recommended route settings"]
    lines += [f"  {f'{s.name}: {s.value}':<24}{s.why}" for s in diagnosis.settings]
    lines += ["", "  As a routes file (toolcall-proxy serve --config routes.yaml):"]
    lines += [f"    {line}" for line in routes_file(diagnosis)]
    return [*lines, "", f"  Or: {serve_command(diagnosis)}"]


def render_text(diagnosis: Diagnosis) -> str:
    out = [
        f"toolcall-proxy doctor: model {diagnosis.model} at {diagnosis.upstream} "
        f"({diagnosis.requests} requests, {diagnosis.seconds:.1f} s)",
        "",
        *_surface_lines(diagnosis),
        "",
    ]
    if not diagnosis.responses:
        out.append("No Chat Completions response to judge: nothing to report or recommend.")
    else:
        out += [*_quirk_lines(diagnosis), "", *_advice_lines(diagnosis)]
    return "\n".join(out) + "\n"


def as_json(diagnosis: Diagnosis) -> JSON:
    return {
        "upstream": diagnosis.upstream,
        "model": diagnosis.model,
        "requests": diagnosis.requests,
        "seconds": round(diagnosis.seconds, 3),
        "surfaces": [
            {
                "name": r.surface.name,
                "path": r.surface.path,
                "answers": r.answers,
                "detail": r.detail,
                "proxy": "repairs" if r.surface.repaired else "passes through",
            }
            for r in diagnosis.surfaces
        ],
        "responses": diagnosis.responses,
        "notes": diagnosis.coverage_notes,
        "quirks": [
            {
                "code": f.quirk.code,
                "title": f.quirk.title,
                "where": f.where,
                "examples": f.examples,
                "proxy": f.quirk.repair,
            }
            for f in diagnosis.findings
        ],
        "incomplete": [{"where": label, "error": why} for label, why in diagnosis.incomplete],
        "proxy_account": diagnosis.account,
        "recommended": (
            {s.name: {"value": s.value, "why": s.why} for s in diagnosis.settings}
            if diagnosis.responses
            else None
        ),
        "routes_file": "\n".join(routes_file(diagnosis)) + "\n" if diagnosis.responses else None,
    }
