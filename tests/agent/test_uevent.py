"""The uevent socket reads the real kernel's messages; the burst, net and action rules hold.

rules: uevents.quiet-second, uevents.virtual-net, uevents.actions. A walk one second after the
last uevent of a burst, at most five
seconds after its first; uevents under /devices/virtual/net/ wake nothing; only add, remove,
bind, unbind and move wake a walk, change, online and offline do not.
"""

from __future__ import annotations

import select
import time
from collections.abc import Callable

import pytest

from liken_devices.agent.uevent import (
    WAKING_ACTIONS,
    Action,
    Debouncer,
    Uevent,
    UeventSocket,
    parse,
    wakes_walk,
)

from .node import is_root, loop_device, synthetic_uevent, veth_pair, zram_device

root = pytest.mark.skipif(not is_root(), reason="needs root for real uevents")


def test_parse_kernel_message() -> None:
    data = (b"add@/devices/virtual/block/zram3\0ACTION=add\0DEVPATH=/devices/virtual/block/"
            b"zram3\0SUBSYSTEM=block\0MAJOR=253\0MINOR=3\0DEVNAME=zram3\0SEQNUM=4242\0")
    ev = parse(data)
    assert ev == Uevent("add", "/devices/virtual/block/zram3", {
        "ACTION": "add", "DEVPATH": "/devices/virtual/block/zram3", "SUBSYSTEM": "block",
        "MAJOR": "253", "MINOR": "3", "DEVNAME": "zram3", "SEQNUM": "4242"})
    assert ev.subsystem == "block"


@pytest.mark.parametrize("data", [b"libudev\0\xfe\xed\xca\xfe....", b"", b"garbage",
                                  b"add@relative/path\0"])
def test_parse_refuses_what_is_not_a_kernel_uevent(data: bytes) -> None:
    assert parse(data) is None


@pytest.mark.parametrize("path, wakes", [
    ("/devices/virtual/net/veth0", False),
    ("/devices/virtual/net/veth0/queues/rx-0", False),
    ("/devices/virtual/net/mvt0/macvtap/tap7", False),
    ("/devices/virtual/netdev", True),  # only the net directory itself is excluded
    ("/devices/pci0000:00/0000:00:03.0/virtio1/net/eth0", True),  # a real NIC's events count
    ("/devices/virtual/block/loop40", True),
    ("/devices/pci0000:00/0000:00:14.0/usb1/1-2", True),
])
def test_virtual_net_wakes_nothing(path: str, wakes: bool) -> None:
    assert wakes_walk(Uevent("add", path, {})) is wakes


# Every action the kernel sends (kobject_action in <linux/kobject.h>) and whether it wakes a walk.
KERNEL_ACTIONS = {"add": True, "remove": True, "bind": True, "unbind": True, "move": True,
                  "change": False, "online": False, "offline": False}


@pytest.mark.parametrize("action, wakes", sorted(KERNEL_ACTIONS.items()))
def test_only_arrive_leave_and_driver_changes_wake_a_walk(action: str, wakes: bool) -> None:
    path = "/devices/pci0000:00/0000:00:14.0/usb1/1-2/1-2:1.0"
    assert wakes_walk(Uevent(action, path, {})) is wakes
    assert wakes_walk(parse(f"{action}@{path}\0ACTION={action}\0".encode())  # type: ignore[arg-type]
                      ) is wakes


@pytest.mark.parametrize("action", ["", "ADD", "add ", "bogus", "changed"])
def test_an_unknown_action_wakes_nothing(action: str) -> None:
    assert not wakes_walk(Uevent(action, "/devices/platform/serial8250", {}))


def test_a_lost_burst_wakes_a_walk() -> None:
    """The socket overflowed: what was lost is unknown, so a walk is due."""
    assert wakes_walk(Uevent(Action.OVERRUN, "/", {}))
    assert set(WAKING_ACTIONS) == {Action(a) for a, w in KERNEL_ACTIONS.items() if w} | {
        Action.OVERRUN}


def test_debounce_one_second_after_the_last() -> None:
    d = Debouncer()
    assert d.due_at() is None and not d.due(100.0)
    d.wake(10.0)
    assert d.due_at() == 11.0
    d.wake(10.6)
    assert d.due_at() == pytest.approx(11.6)
    assert not d.due(11.5) and d.due(11.6)
    d.clear()
    assert not d.pending


def test_debounce_at_most_five_seconds_after_the_first() -> None:
    d = Debouncer()
    t = 0.0
    while t < 4.9:  # a node that is never quiet
        d.wake(t)
        t += 0.5
    d.wake(4.9)
    assert d.due_at() == 5.0
    assert d.due(5.0)


def wait_for(sock: UeventSocket, match: Callable[[Uevent], bool],
             timeout: float = 5.0) -> list[Uevent]:
    seen: list[Uevent] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([sock], [], [], max(0.0, deadline - time.monotonic()))
        if ready:
            seen.extend(sock.drain())
            if any(match(e) for e in seen):
                return seen
    raise AssertionError(f"no matching uevent in {timeout}s; saw {[e.devpath for e in seen]}")


@root
@pytest.mark.parametrize("action, wakes", sorted(KERNEL_ACTIONS.items()))
def test_real_uevent_of_each_action_wakes_or_not(action: str, wakes: bool) -> None:
    """The kernel sends each action as written to a device's uevent file; the rule reads the
    action from the kernel's own message."""
    sock = UeventSocket()
    try:
        tag = synthetic_uevent(action)

        def ours(e: Uevent) -> bool:
            return e.env.get("SYNTH_UUID") == tag

        ev = next(e for e in wait_for(sock, ours) if ours(e))
        assert ev.action == action and ev.devpath == "/devices/virtual/tty/tty9"
        assert ev.subsystem == "tty"
        assert wakes_walk(ev) is wakes
    finally:
        sock.close()


@root
def test_loop_device_add_and_remove_arrive() -> None:
    sock = UeventSocket()
    try:
        with loop_device() as n:
            path = f"/devices/virtual/block/loop{n}"
            seen = wait_for(sock, lambda e: e.devpath == path and e.action == "add")
            add = next(e for e in seen if e.devpath == path and e.action == "add")
            assert add.env["DEVNAME"] == f"loop{n}" and add.env["MAJOR"] == "7"
        wait_for(sock, lambda e: e.devpath == path and e.action == "remove")
    finally:
        sock.close()


@root
def test_zram_hot_add_and_remove_arrive() -> None:
    sock = UeventSocket()
    try:
        with zram_device() as n:
            path = f"/devices/virtual/block/zram{n}"
            wait_for(sock, lambda e: e.devpath == path and e.action == "add")
        wait_for(sock, lambda e: e.devpath == path and e.action == "remove")
    finally:
        sock.close()


@root
def test_veth_uevents_are_all_ignored() -> None:
    sock = UeventSocket()
    try:
        with veth_pair() as name:
            seen = wait_for(sock, lambda e: e.devpath.endswith(f"/{name}"))
        seen += wait_for(sock, lambda e: e.action == "remove" and e.devpath.endswith(f"/{name}"))
        ours = [e for e in seen if name in e.devpath]
        assert len(ours) >= 4  # the pair, their queues, their removal
        assert not any(wakes_walk(e) for e in ours)
    finally:
        sock.close()
