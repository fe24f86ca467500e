"""The plugin's prepare reuses the agent's last walk only while a new walk would find the same:
no uevent since its snapshot (read or waiting unread), the same facts, the same Machine spec,
the same prepared claims (docs/plugin.md, "How fresh a prepare's inventory is")."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from liken_devices.inventory.model import NO_CLAIMS, Claimed
from tests.support.fakeapi import FakeApiServer
from tests.support.wait import wait_until

from .node import FixtureNode, is_root, synthetic_uevent
from .test_runner import start

pytestmark = [pytest.mark.root, pytest.mark.skipif(not is_root(), reason="real uevents")]


@pytest.fixture
def node(tmp_path: Path) -> FixtureNode:
    return FixtureNode(tmp_path / "node")


def reused_once(agent: Any, seconds: float = 30.0) -> bool:
    def reused() -> bool:
        last = agent.inventory
        return last is not None and agent.fresh_walk(claimed=NO_CLAIMS) is last

    return wait_until(reused, seconds, "a prepare to reuse the last walk", every=0.2)


def test_a_quiet_node_reuses_the_last_walk(api: FakeApiServer, node: FixtureNode,
                                           tmp_path: Path) -> None:
    run = start(api, node, tmp_path)
    try:
        agent = run.agent
        first = agent.fresh_walk(claimed=NO_CLAIMS)
        # Other uevents of this machine may arrive at any time (each makes prepare walk): wait
        # for a quiet moment after a walk, in which prepare reuses it.
        assert reused_once(agent)
        assert [d.name for d in first.devices] == [d.name for d in agent.inventory.devices]
        # Other claims shape the walk (a claimed USB device keeps its shape): a new walk.
        last = agent.inventory
        assert agent.fresh_walk(claimed=Claimed(frozenset({"usb-1-2"}))) is not last
    finally:
        run.stop()


def test_a_uevent_or_new_facts_make_prepare_walk_again(api: FakeApiServer, node: FixtureNode,
                                                      tmp_path: Path) -> None:
    run = start(api, node, tmp_path)
    try:
        agent = run.agent
        assert reused_once(agent)
        last = agent.inventory
        # A uevent the loop has not read yet: the socket has data, so prepare walks itself.
        name = node.plug_usb(3)
        synthetic_uevent("add")
        fresh = agent.fresh_walk(claimed=NO_CLAIMS)
        assert fresh is not last
        assert name in [d.name for d in fresh.devices]
        # Once the loop has walked after it and the node is quiet again, reuse resumes.
        run.api.wait_for(lambda: name in run.slice_names(), 10)
        assert reused_once(agent)
        quiet = agent.inventory
        # New facts (init wrote a storage role): a new walk, not the old inventory.
        role = node.facts / "storage" / "system"
        role.mkdir()
        (role / "device").write_text("sda1\n")
        assert agent.fresh_walk(claimed=NO_CLAIMS) is not quiet
    finally:
        run.stop()


def test_without_a_uevent_socket_prepare_always_walks(node: FixtureNode) -> None:
    from liken_devices.agent.runner import Agent, AgentConfig

    agent = Agent(AgentConfig(node="n", sources=node.sources()))
    assert agent.fresh_walk(claimed=NO_CLAIMS) is not agent.fresh_walk(claimed=NO_CLAIMS)


def test_claims_being_prepared_walk_again_only_for_a_bluetooth_device(
        api: FakeApiServer, node: FixtureNode, tmp_path: Path) -> None:
    """The claims a prepare is resolving change only a Bluetooth claim's count (virtual event
    nodes): the last walk still answers for the others."""
    usb = node.builder.usb_device("2-1", busnum=2, devnum=7)
    radio = node.builder.usb_interface(usb, "1.0", driver="btusb", cls=0xE0)
    node.builder.device(radio, "hci0", "bluetooth", {"DEVTYPE": "host"}, subdir="bluetooth")
    run = start(api, node, tmp_path)
    try:
        agent = run.agent

        def reused() -> Any:
            last = agent.inventory
            claimed = Claimed(frozenset(), frozenset({"pci-0000-00-02-0"}))
            return last if last is not None and agent.fresh_walk(claimed=claimed) is last else None

        # A quiet moment after a walk (other uevents of this machine may come).
        last = wait_until(reused, 30, "a prepare for the GPU to reuse the last walk", every=0.2)
        assert "usb-2-1-1-0" in last.by_name()
        assert agent.fresh_walk(claimed=Claimed(frozenset(), frozenset({"usb-2-1-1-0"}))) \
            is not last
    finally:
        run.stop()


def test_a_prepare_while_the_loop_reads_the_uevents_walks_again(
        node: FixtureNode, monkeypatch: pytest.MonkeyPatch) -> None:
    """The loop reads the socket dry and only then handles what it read: a prepare in between
    (another thread) finds no uevent waiting, and must still not reuse the walk from before
    them. Here the prepare runs exactly there, inside the loop's read."""
    import threading

    from liken_devices.agent import runner
    from liken_devices.agent.runner import Agent, AgentConfig

    agent = Agent(AgentConfig(node="n", sources=node.sources(), console=None))
    answers: list[bool] = []  # per read with a uevent: whether prepare reused the last walk

    class Socket(runner.UeventSocket):
        def drain(self, limit: int = 100_000) -> list[Any]:
            events = super().drain(limit)
            last = agent.inventory
            if events and last is not None:
                answers.append(agent.fresh_walk(claimed=NO_CLAIMS) is last)
            return events

    monkeypatch.setattr(runner, "UeventSocket", Socket)
    t = threading.Thread(target=agent.run, daemon=True)
    t.start()
    try:
        assert agent.ready.wait(10)
        node.plug_usb(4)
        synthetic_uevent("add")
        wait_until(lambda: answers, 10, "the prepare's answer")
        assert not any(answers), answers
    finally:
        agent.request_stop()
        t.join(10)
    assert not t.is_alive()


def test_a_role_past_the_256th_moved_onto_an_offered_disk_makes_prepare_walk_again(
        api: FakeApiServer, node: FixtureNode, tmp_path: Path) -> None:
    """The facts' stamp covers every role the facts reader accepts (at most MAX_ROLES): with
    300 roles, init moving the 300th onto a disk the last walk offered makes prepare walk again,
    and the new walk withholds that disk (rules: delivery.fresh-walk, hardware.storage-role)."""
    node.builder.part("disk", 0)  # sda1: where every role lives at first
    node.builder.part("disk", 1)  # sdb1: offered, until the last role moves onto it
    storage = node.facts / "storage"
    for i in range(1, 301):
        (storage / f"role-{i:04}").mkdir()
        (storage / f"role-{i:04}" / "device").write_text("sda1\n")
    run = start(api, node, tmp_path)
    try:
        agent = run.agent
        assert reused_once(agent)
        last = agent.inventory
        assert "pci-0000-00-17-1" in last.by_name() and "pci-0000-00-17-0" not in last.by_name()
        # Init moves role #300 onto the other disk, as it writes a fact: a new file renamed in.
        moved = storage / "role-0300"
        (moved / ".device.new").write_text("sdb1\n")
        os.rename(moved / ".device.new", moved / "device")
        fresh = agent.fresh_walk(claimed=NO_CLAIMS)
        assert fresh is not last, "prepare reused a walk from before the role moved"
        assert "pci-0000-00-17-1" not in fresh.by_name()
    finally:
        run.stop()
