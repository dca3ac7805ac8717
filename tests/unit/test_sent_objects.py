"""What a client can send again when the scheduler asks (resendObjects): what it still holds, until it deletes it."""

from __future__ import annotations

from scaler.client.sent_objects import SentObjects
from scaler.protocol import messages as m
from scaler.store.store_client import StoreTimeout

KEPT = b"\x01" * 16
DELETED = b"\x02" * 16
UNPUTTABLE = b"\x03" * 16


def stored_again(object_id: bytes) -> m.ObjectPayload:
    return m.ObjectPayload(object_id=object_id, payload=b"", size=10, holder="tcp://127.0.0.1:1")


def no_store() -> m.ObjectPayload:
    raise StoreTimeout("the store at tcp://127.0.0.1:1 did not answer Put in time")


def test_what_it_still_holds_is_put_again_and_the_rest_is_answered_lost() -> None:
    sent = SentObjects()
    sent.remember(KEPT, lambda: stored_again(KEPT))
    sent.remember(DELETED, lambda: stored_again(DELETED))
    sent.remember(UNPUTTABLE, no_store)
    sent.forget([DELETED])

    again, lost = sent.resend([KEPT, DELETED, UNPUTTABLE, b"\x04" * 16])

    assert again == [stored_again(KEPT)]
    assert lost == [DELETED, UNPUTTABLE, b"\x04" * 16]
    assert len(sent) == 2, "a resend keeps what it holds: the new store may be lost too"


def test_after_clear_nothing_is_held() -> None:
    sent = SentObjects()
    sent.remember(KEPT, lambda: stored_again(KEPT))
    sent.forget_all()
    assert sent.resend([KEPT]) == ([], [KEPT])
