"""SPEC §2, §8: what the mutation audit found unpinned in the client's call and item ids
(proxy/responses/ids.py)."""

from __future__ import annotations

import re

from tests.responses.helpers import Upstream, calls_of, check_grammar, request, run


def _sent(call_id: str | None, item_id: str | None = "fc_up") -> dict[str, str]:
    body = Upstream().created().call(call_id, item_id=item_id).completed().body()
    [call] = calls_of(check_grammar(run(request(), body).events))
    return call


def test_a_raw_id_that_reads_as_an_encoded_one_is_encoded_itself() -> None:
    raw = "call_0badf00d_x"
    sent = _sent(raw)["call_id"]
    assert sent != raw and sent.endswith("_" + raw)


def test_a_raw_id_of_the_longest_encodable_length_is_encoded() -> None:
    raw = "bad id!" + "x" * 43  # 50 characters, not a valid id as it stands
    sent = _sent(raw)["call_id"]
    assert sent.endswith("_" + raw) and sent.startswith("call_")


def test_a_minted_item_id_has_twelve_bytes_of_hex() -> None:
    assert re.fullmatch(r"fc_[0-9a-f]{24}", _sent("c1", item_id=None)["id"])
