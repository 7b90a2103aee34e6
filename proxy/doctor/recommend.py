"""The route settings that fit what the doctor saw, each with its reason."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from proxy.chat.history import resolve_dialect
from proxy.core.families import describe_family, family_of_host, family_of_model
from proxy.core.surfaces import CHAT_COMPLETIONS
from proxy.doctor.observers import Finding
from proxy.doctor.probes import SurfaceResult
from proxy.doctor.views import ResponseView

_MISTRAL_ID = re.compile(r"[A-Za-z0-9]{9}")
# Quirks the id policy `auto` takes care of.
_ID_QUIRKS = frozenset(
    {
        "counter_ids",
        "kimi_ids",
        "recurring_ids",
        "missing_ids",
        "empty_ids",
        "integer_ids",
        "invalid_ids",
        "duplicate_ids",
    }
)


@dataclass(frozen=True, slots=True)
class Setting:
    name: str  # the routes-file key (`--name` with dashes on the command line)
    value: str
    why: str


def _dialect(codes: set[str], views: Sequence[ResponseView], model: str) -> Setting:
    ids = [call.first_id for view in views for call in view.calls if call.first_id is not None]
    if "kimi_ids" in codes:
        value, why = (
            "kimi",
            "Kimi ids: Kimi models must read functions.{name}:{n} with a steady counter in their history",
        )
    elif ids and all(_MISTRAL_ID.fullmatch(raw_id) for raw_id in ids):
        value, why = (
            "alnum9",
            "ids of 9 letters and digits: Mistral's shape, the only one it accepts back",
        )
    else:
        value, why = "passthrough", "its ids need no translation in the history"
    auto = resolve_dialect("auto", model)
    same = (
        "dialect auto picks the same for this model name"
        if auto == value
        else f"dialect auto would pick {auto} for this model name"
    )
    return Setting("dialect", value, f"{why} ({same})")


def upstream_api(surfaces: Sequence[SurfaceResult]) -> Setting:
    """SPEC §9: a provider that answers Chat Completions but not another client API gets
    that API bridged to Chat Completions (Codex speaks only Responses; Claude Code only
    Anthropic Messages). The bridges go to Chat Completions only, so a provider that does
    not answer it keeps `same`."""
    answers = {result.surface: result.answers for result in surfaces}
    missing = [result.surface for result in surfaces if not result.answers]
    if not missing:
        return Setting("upstream_api", "same", "it answers every API itself")
    names = " and ".join(surface.name for surface in missing)
    if not answers.get(CHAT_COMPLETIONS, False):
        return Setting(
            "upstream_api",
            "same",
            f"it did not answer {names}; the bridges need Chat Completions, which it did not answer",
        )
    paths = " and ".join(surface.path for surface in missing)
    return Setting(
        "upstream_api",
        "chat_completions",
        f"it answers Chat Completions but not {names}: the proxy serves {paths} over Chat Completions",
    )


def upstream_profile(upstream: str, model: str) -> Setting:
    """SPEC §11: the provider family `upstream_profile: auto` detects for this upstream and
    model, and the rules it brings on top of every upstream's."""
    host = family_of_host(upstream)
    family = host or family_of_model(model) or "generic"
    source = "its host name" if host else ("the model name" if family != "generic" else "")
    found = f"auto detects {family} from {source}" if source else "auto detects no family"
    return Setting("upstream_profile", "auto", f"{found}: {describe_family(family, False)}")


def recommend(
    findings: Sequence[Finding],
    views: Sequence[ResponseView],
    model: str,
    surfaces: Sequence[SurfaceResult] = (),
    upstream: str = "",
) -> list[Setting]:
    codes = {finding.quirk.code for finding in findings}
    id_quirks = sorted(codes & _ID_QUIRKS)
    return [
        _dialect(codes, views, model),
        Setting(
            "ids",
            "auto",
            f"rewrites the ids above ({', '.join(id_quirks)}) and keeps good native ones"
            if id_quirks
            else "its ids looked native: kept, and rewritten only if one ever collides",
        ),
        Setting(
            "replay_guard",
            "on",
            "the model replayed a call it had already seen answered"
            if "replay" in codes
            else "no replay seen in this short run; replays come with long sessions",
        ),
        Setting(
            "text_tool_calls",
            "auto",
            "calls arrived as markup in the text"
            if "leaked_markup" in codes
            else "no calls in the text seen; auto recovers them if the tool parser fails",
        ),
        *([upstream_api(surfaces)] if surfaces else []),
        upstream_profile(upstream, model),
    ]
