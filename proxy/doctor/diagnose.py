"""A whole doctor run: probe every surface, observe the chat responses, recommend, account."""

from __future__ import annotations

import time
from dataclasses import dataclass

from proxy.core.surfaces import CHAT_COMPLETIONS
from proxy.doctor.core import proxy_account
from proxy.doctor.observers import Finding, observe, places
from proxy.doctor.probes import SurfaceResult, probe_surfaces
from proxy.doctor.recommend import Setting, recommend
from proxy.doctor.script import MAX_REQUESTS
from proxy.doctor.session import RecordedExchange, Session
from proxy.doctor.views import view_of


def _order(exchanges: list[RecordedExchange], label: str) -> int:
    return next(i for i, exchange in enumerate(exchanges) if exchange.label == label)


@dataclass
class Diagnosis:
    upstream: str
    model: str
    key_env: str | None
    surfaces: list[SurfaceResult]
    findings: list[Finding]
    settings: list[Setting]
    account: dict[str, dict[str, int]]
    requests: int
    seconds: float
    calls_per_response: dict[str, int]  # response label -> tool calls the provider sent
    stream_errors: dict[str, str]  # response label -> the error event that ended its stream

    @property
    def incomplete(self) -> list[tuple[str, str]]:
        """(response label, why) for every chat exchange that did not end as a response should."""
        failed = [(e.label, e.error) for e in self.chat.exchanges if e.error is not None]
        ended = [
            (label, f"the stream ended with an error event: {message}")
            for label, message in self.stream_errors.items()
        ]
        return sorted(failed + ended, key=lambda item: _order(self.chat.exchanges, item[0]))

    @property
    def coverage_notes(self) -> list[str]:
        """What the run could not judge because the model did not do it."""
        counts = self.calls_per_response
        without = [label for label, count in counts.items() if count == 0]
        notes = []
        if counts and len(without) == len(counts):
            notes.append(
                "the model made no tool call at all: the tool-call checks had nothing to judge"
            )
        elif without:
            notes.append(f"the model answered without tool calls in {places(without)}")
        if counts and 0 < max(counts.values()) < 2:
            notes.append(
                "the model never made parallel calls: the checks for them had nothing to judge"
            )
        return notes

    @property
    def chat(self) -> SurfaceResult:
        return next(s for s in self.surfaces if s.surface == CHAT_COMPLETIONS)

    @property
    def responses(self) -> int:
        """Chat responses the findings are based on."""
        return sum(1 for exchange in self.chat.exchanges if exchange.ok)


def diagnose(
    upstream: str,
    model: str,
    key: str | None,
    *,
    key_env: str | None = None,
    timeout: float = 180.0,
) -> Diagnosis:
    started = time.monotonic()
    session = Session(upstream, key, MAX_REQUESTS, started + timeout)
    try:
        surfaces = probe_surfaces(session, model)
    finally:
        session.close()
    chat = next(s for s in surfaces if s.surface == CHAT_COMPLETIONS)
    answered = [exchange for exchange in chat.exchanges if exchange.ok]
    views = [view_of(exchange) for exchange in answered]
    findings = observe(views)
    settings = recommend(findings, views, model, surfaces, upstream)
    dialect = next(s.value for s in settings if s.name == "dialect")
    return Diagnosis(
        upstream,
        model,
        key_env,
        surfaces,
        findings,
        settings,
        proxy_account(answered, dialect),
        session.sent,
        time.monotonic() - started,
        {view.label: len(view.calls) for view in views},
        {view.label: view.stream_error for view in views if view.stream_error is not None},
    )
