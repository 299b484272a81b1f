"""Coalescing of pending work: one inspection answers everything that piled up."""

from __future__ import annotations

from agent.daemon.work import DEVICE_EVENT, RESCAN, Batch, PendingWork


def test_nothing_pending_is_none_and_taking_clears() -> None:
    pending = PendingWork()
    assert pending.take() is None
    pending.add_change(RESCAN)
    assert pending.take() == Batch(change=RESCAN)
    assert pending.take() is None


def test_a_device_event_wins_over_a_rescan_in_either_order() -> None:
    for order in ((RESCAN, DEVICE_EVENT), (DEVICE_EVENT, RESCAN)):
        pending = PendingWork()
        for trigger in order:
            pending.add_change(trigger)
        batch = pending.take()
        assert batch is not None
        assert batch.change == DEVICE_EVENT


def test_every_request_keeps_its_id_and_its_stream() -> None:
    pending = PendingWork()
    pending.add_connected(3)
    pending.add_request(2, "from-the-old-stream")
    pending.add_request(3, "a")
    pending.add_change(DEVICE_EVENT)
    pending.add_request(3, "b")
    batch = pending.take()
    assert batch is not None
    assert batch.connected == (3,)
    assert batch.requests_for(3) == ["a", "b"]
    assert batch.requests_for(2) == ["from-the-old-stream"]
    assert batch.change == DEVICE_EVENT


def test_a_local_inspection_is_work_with_nothing_to_send() -> None:
    pending = PendingWork()
    pending.add_local()
    assert pending.take() == Batch()
    assert pending.take() is None
