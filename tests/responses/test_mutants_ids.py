"""SPEC §2, §8: what the mutation audit found unpinned in the client's call and item ids
(proxy/responses/ids.py)."""

from __future__ import annotations

import re

from proxy.responses.ids import CallIds
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


def _ids(*draws: int) -> CallIds:
    """CallIds whose entropy gives, for each draw, `n` bytes of the next value in `draws`
    (then 0xff forever): equal draws make equal minted ids, so the retry path runs."""
    queue = [1, *draws]  # the first draw is the response's hex8

    def entropy(n: int) -> bytes:
        return bytes([queue.pop(0) if queue else 0xFF]) * n

    return CallIds(entropy, frozenset())


def test_a_minted_item_id_that_collides_is_drawn_again_with_the_same_shape() -> None:
    ids = _ids(7, 7)
    first = ids.item_id(None)
    second = ids.item_id(None)
    assert first == "fc_" + "07" * 12
    assert second == "fc_" + "ff" * 12


def test_a_minted_item_id_is_remembered_so_an_upstream_reuse_of_it_is_minted_anew() -> None:
    ids = _ids(7)
    minted = ids.item_id(None)
    again = ids.item_id(minted)
    assert again != minted and re.fullmatch(r"fc_[0-9a-f]{24}", again)


def test_an_empty_other_item_id_is_kept_every_time() -> None:
    ids = _ids()
    assert ids.other_item_id("") == ""
    assert ids.other_item_id("") == ""


def test_a_repeated_other_item_id_keeps_its_first_prefix_only() -> None:
    ids = _ids(7)
    assert ids.other_item_id("msg_a_b") == "msg_a_b"
    assert ids.other_item_id("msg_a_b") == "msg_" + "07" * 12


def test_a_repeated_other_item_id_without_a_prefix_gets_item() -> None:
    ids = _ids(7)
    assert ids.other_item_id("abc") == "abc"
    assert ids.other_item_id("abc") == "item_" + "07" * 12
