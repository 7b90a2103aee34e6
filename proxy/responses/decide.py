"""One call item's fate (SPEC §2, §5, §8), shared by streams and whole bodies: Chat
Completions' keep-or-mint, duplicate and replay decisions, then Responses' own ids."""

from __future__ import annotations

from typing import Any

from proxy.core.decide import ResponseIds, Verdict
from proxy.core.notes import IdRewritten, Note
from proxy.responses.calls import CallItem
from proxy.responses.ids import CallIds


def decide_call(
    ids: ResponseIds,
    call_ids: CallIds,
    call: CallItem,
    notes: list[Note],
    replayed: list[dict[str, Any]],
) -> bool:
    """Decide a call whose id can be decided; True when it reaches the client (its client
    ids set), False when it is dropped (a replay's item is kept in `replayed`)."""
    raw_id = call.raw_id
    decision = ids.decide(ids.choice(0), raw_id, call)
    if decision.verdict is not Verdict.DELIVER:
        call.dropped = True
        notes.append(decision.dropped(0, call.name, raw_id))
        if decision.verdict is Verdict.REPLAY:
            replayed.append({**call.item, call.key: call.final_text()})
        return False
    client_id, reason = call_ids.client_id(decision, raw_id)
    if reason is not None:
        notes.append(
            IdRewritten(
                choice=0,
                index=decision.index,
                name=call.name,
                raw_id=raw_id,
                client_id=client_id,
                reason=reason,
            )
        )
    call.client_call_id = client_id
    call.client_item_id = call_ids.item_id(call.item.get("id"))
    return True


def may_decide(ids: ResponseIds, call: CallItem) -> bool:
    """SPEC §4: a call without a raw id, or one that may be a replay or an in-response
    duplicate, waits until its arguments are complete."""
    if call.complete:
        return True
    raw_id = call.raw_id
    return raw_id is not None and not ids.needs_hold(ids.choice(0), raw_id, call.name)


def replays_only(ids: ResponseIds) -> bool:
    """The round's only calls were replays: the proxy answers them (SPEC §5)."""
    choice = ids.choice(0)
    return ids.guard.enabled and bool(choice.replays) and not choice.delivered
