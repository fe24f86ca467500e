"""The heap settles once a process has started: start-up's objects leave the collector's view."""

from __future__ import annotations

import gc

from liken_devices import heap


def test_settle_freezes_what_start_up_made_and_later_objects_are_still_collected() -> None:
    try:
        made_at_start = [object() for _ in range(1000)]
        heap.settle()
        assert gc.get_freeze_count() >= len(made_at_start)
        assert not any(o is made_at_start for o in gc.get_objects())

        class Cycle:
            ref: object = None

        later = Cycle()
        later.ref = later
        assert any(o is later for o in gc.get_objects())  # tracked: made after the freeze
        del later
        assert gc.collect() > 0  # a cycle made after start-up is still garbage-collected
    finally:
        gc.unfreeze()
