"""ObjectWatch against the loopback API server: it learns of changes, and a server that ends
every watch at once is not hammered (re-opens back off with jitter; docs/agent.md,
"Publishing")."""

from __future__ import annotations

import threading
from typing import Any

from liken_devices.kube import Backoff, ObjectWatch, Resources
from tests.support.fakeapi import FakeApiServer

NODE = "node-a"
MINUTE = 60.0


class FakeTime:
    """A clock that only the watch's sleeps move; the watch stops itself after ``until``."""

    def __init__(self, until: float) -> None:
        self.now = 0.0
        self.until = until
        self.sleeps: list[float] = []
        self.done = threading.Event()

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> bool:
        self.sleeps.append(seconds)
        self.now += seconds
        if self.now >= self.until:
            self.done.set()
            return True
        return False


def watch_requests(api: FakeApiServer) -> list[tuple[str, str, str]]:
    return [r for r in api.requests if r[1].endswith("/resourceslices")]


def test_a_server_that_ends_every_watch_sees_few_requests_in_a_minute(
        api: FakeApiServer, client: Any) -> None:
    api.watch_lifetime = 0  # every watch ends as soon as it is opened
    fake = FakeTime(until=MINUTE)
    events: list[str] = []
    watch = ObjectWatch(lambda: client, Resources.slice(), {"spec.nodeName": NODE},
                        lambda kind, _obj: events.append(kind), "slices", owns_client=False,
                        clock=fake.clock, sleep=fake.sleep)
    watch.start()
    try:
        assert fake.done.wait(30), "the watch never reached a minute of its own time"
    finally:
        watch.stop()
    requests = watch_requests(api)
    # Every connection is one list and one watch. Backing off from 1 s to 30 s, a minute holds
    # at most 1 + 2 + 4 + 8 + 16 + 30 s of (jittered down to half) delays: about ten re-opens.
    assert 4 <= len(requests) <= 24, len(requests)
    assert len(events) == len(requests) // 2 or len(events) == (len(requests) + 1) // 2
    # Growing delays, each at least half its exponential step, never more than 30 s.
    steps = [min(2.0 ** i, 30.0) for i in range(len(fake.sleeps))]
    assert all(step / 2 <= s <= step for s, step in zip(fake.sleeps, steps, strict=True))
    assert len(set(fake.sleeps)) == len(fake.sleeps)  # jittered: no two nodes in step


def test_a_long_lived_watch_that_times_out_reconnects_promptly(api: FakeApiServer,
                                                               client: Any) -> None:
    """A watch that lived its full time resets the backoff: the next one opens after the first
    step (at most 1 s), not after a delay grown by earlier failures."""
    api.watch_lifetime = 0
    fake = FakeTime(until=1e9)
    lived = {"n": 0}

    def clock() -> float:
        # The watch reads the clock when a connection opens and when it ends: from the fifth
        # connection on, each one "lasts" an hour.
        lived["n"] += 1
        return fake.now + (3600.0 * lived["n"] if len(fake.sleeps) >= 4 else 0.0)

    stop_after = threading.Event()

    def sleep(seconds: float) -> bool:
        fake.sleep(seconds)
        if len(fake.sleeps) >= 8:
            stop_after.set()
            return True
        return False

    watch = ObjectWatch(lambda: client, Resources.slice(), {"spec.nodeName": NODE},
                        lambda *_: None, "slices", owns_client=False, clock=clock, sleep=sleep)
    watch.start()
    try:
        assert stop_after.wait(30)
    finally:
        watch.stop()
    assert fake.sleeps[3] > 4.0  # backing off while connections die at once
    assert all(s <= 1.0 for s in fake.sleeps[5:])  # healthy connections: back to the first step


def test_events_are_delivered_and_a_deletion_is_seen(api: FakeApiServer, client: Any) -> None:
    api.add_node(NODE, uid="uid-a")
    events: list[tuple[str, str | None]] = []
    seen = threading.Event()

    def on_event(kind: str, obj: dict[str, Any] | None) -> None:
        events.append((kind, (obj or {}).get("metadata", {}).get("name")))
        seen.set()

    watch = ObjectWatch(lambda: client, Resources.slice(), {"spec.nodeName": NODE}, on_event,
                        "slices", owns_client=False)
    watch.start()
    try:
        assert watch.connected.wait(5)
        api.put_object("resourceslices", {
            "metadata": {"name": f"{NODE}-liken.sh"},
            "spec": {"nodeName": NODE, "driver": "liken.sh",
                     "pool": {"name": NODE, "generation": 1, "resourceSliceCount": 1},
                     "devices": []}})
        api.wait_for(lambda: ("ADDED", f"{NODE}-liken.sh") in events)
        api.delete_object("resourceslices", f"{NODE}-liken.sh")
        api.wait_for(lambda: ("DELETED", f"{NODE}-liken.sh") in events)
    finally:
        watch.stop()
    assert events[0] == ("RESYNC", None)
    assert watch.reconnects == 0


def test_backoff_jitter_stays_within_its_step_and_above_a_hint() -> None:
    draws = iter([1.0, 0.0, 0.5, 1.0])
    b = Backoff(initial=1.0, maximum=4.0, rng=lambda: next(draws))
    assert b.next() == 0.5  # step 1, jittered down by half
    assert b.next() == 2.0  # step 2, no jitter drawn
    assert b.next() == 3.0  # step 4, a quarter off
    assert b.next(at_least=10.0) == 10.0  # a Retry-After hint is a floor jitter never crosses
