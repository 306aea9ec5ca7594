"""The coordinator's answer to ``GET /credit/mine`` read with checks: a well-formed one becomes
``CreditedEpochs``, anything else a ``CoordinatorUnavailable`` naming what is wrong."""

from __future__ import annotations

from typing import Any

import pytest

from core.account import CoordinatorUnavailable
from core.account.replies import CreditedEpochs, Reply, credited_epochs
from core.net import Identity

PEER = Identity.generate().peer_id


def read(**changes: Any) -> CreditedEpochs:
    body = {"peer": str(PEER), "samples": 112, "epochs": [[3, 64], [4, 48]], "newest_epoch": 4}
    return credited_epochs(Reply(body | changes, "GET /credit/mine", "http://c"), PEER)


def test_a_well_formed_answer_is_read() -> None:
    assert read() == CreditedEpochs(PEER, 112, {3: 64, 4: 48}, 2, 4)
    assert read(epochs=[], newest_epoch=None) == CreditedEpochs(PEER, 112, {}, 0, None)
    cut = read(notes=[[3, 100, "cut to the weight its round saw"]])
    assert cut.notes == {3: (100, "cut to the weight its round saw")}


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"peer": str(Identity.generate().peer_id)}, "another peer"),
        ({"peer": "nonsense"}, "bad peer id"),
        ({"samples": -1}, "samples"),
        ({"samples": True}, "samples"),
        ({"epochs": [[3]]}, "pairs"),
        ({"epochs": [[3, "many"]]}, "epochs"),
        ({"epochs": "all"}, "epochs"),
        ({"newest_epoch": 1.5}, "newest_epoch"),
        ({"notes": "cut"}, "notes"),
        ({"notes": [[3, 100]]}, "triples"),
        ({"notes": [[3, -1, "x"]]}, "notes"),
        ({"notes": [[3, 100, 7]]}, "triples"),
    ],
)
def test_a_malformed_answer_says_what_is_wrong(changes: dict[str, Any], says: str) -> None:
    with pytest.raises(CoordinatorUnavailable, match=says):
        read(**changes)
