"""The machine's own nodes and disks, case by case (rules: hardware.reserved-nodes;
rules: hardware.storage-role).

Each expected answer is written out: the four reserved kinds (the console, ``/dev/rtc0``, the
TPM's ``tpm<N>``/``tpmrm<N>``, a serio-attached tty), and the block devices backing a storage
role followed down through device-mapper and md slaves.
"""

from __future__ import annotations

import pytest

from liken_devices.inventory.model import Facts
from liken_devices.inventory.reserved import backing, reserved_kind, role_partitions
from liken_devices.sysfs.model import DevNode, SysDevice


@pytest.mark.parametrize(("name", "kind"), [
    ("ttyS0", "the console"),
    ("rtc0", "the system clock"),
    ("tpm0", "the TPM"),
    ("tpmrm0", "the TPM"),
    ("tpm12", "the TPM"),
    ("tpmrm7", "the TPM"),
    ("ttyS1", "a serio-attached serial line"),
    # rules: hardware.watchdogs. The first watchdog's legacy node and every numbered one.
    ("watchdog", "a watchdog (it resets the machine)"),
    ("watchdog0", "a watchdog (it resets the machine)"),
    ("watchdog13", "a watchdog (it resets the machine)"),
    # Not reserved: another clock, a name that only looks like the TPM's, other ttys.
    ("rtc1", None),
    ("tpm", None),
    ("tpmrm", None),
    ("tpm0x", None),
    ("xtpm0", None),
    ("tpm0/../x", None),
    ("ttyS2", None),
    ("rtc", None),
    ("xwatchdog0", None),
])
def test_reserved_kind(name: str, kind: str | None) -> None:
    assert reserved_kind(DevNode(name, "c", 1, 1), ["ttyS0", "tty0"], ["ttyS1"]) == kind


def test_a_tpm_node_in_a_directory_is_still_the_tpm() -> None:
    assert reserved_kind(DevNode("tpm/tpm0", "c", 10, 224), (), ()) == "the TPM"
    assert reserved_kind(DevNode("x/rtc0", "c", 1, 1), (), ()) is None  # only /dev/rtc0


def block(path: str, name: str, slaves: tuple[str, ...] = (), typ: str = "b") -> SysDevice:
    return SysDevice(path=path, subsystem="block", driver=None, props={},
                     node=DevNode(name, typ, 8, 0), slaves=slaves)


DEVS = {d.path: d for d in [
    block("/devices/virtual/block/dm-0", "dm-0", ("md0",)),
    block("/devices/virtual/block/md0", "md0", ("sda2", "sdb2")),
    block("/devices/pci/sda/sda2", "sda2"),
    block("/devices/pci/sdb/sdb2", "sdb2"),
    block("/devices/pci/sdc/sdc1", "sdc1"),
    block("/devices/pci/loop/loop0", "loop0", ("nvme0n1p9",), typ="c"),  # not a block node
]}


def test_role_partitions_follow_slaves_down() -> None:
    assert role_partitions(DEVS, Facts(frozenset({"dm-0"}))) == {"dm-0", "md0", "sda2", "sdb2"}
    assert role_partitions(DEVS, Facts(frozenset({"sdc1"}))) == {"sdc1"}
    assert role_partitions(DEVS, Facts(frozenset())) == frozenset()
    # A role naming a device the walk did not see is kept (it backs a role wherever it is).
    assert role_partitions(DEVS, Facts(frozenset({"nvme9n1p1"}))) == {"nvme9n1p1"}
    # Only block nodes are followed.
    assert role_partitions(DEVS, Facts(frozenset({"loop0"}))) == {"loop0"}


def test_a_block_node_in_a_directory_is_found_by_its_last_component() -> None:
    devs = {d.path: d for d in [block("/devices/virtual/block/dm-3", "mapper/dm-3", ("sdy1",)),
                                block("/devices/pci/sdy/sdy1", "disk/sdy1")]}
    assert role_partitions(devs, Facts(frozenset({"dm-3"}))) == {"dm-3", "sdy1"}


def test_a_block_node_whose_kernel_name_has_a_bang_is_found_by_that_name() -> None:
    """The kernel names a Smart Array disk ``cciss!c0d0`` (its sysfs directory, a ``slaves``
    entry, the facts) and its node /dev/cciss/c0d0: a role names the kernel's spelling."""
    devs = {d.path: d for d in [
        block("/devices/virtual/block/dm-4", "dm-4", ("cciss!c0d0p2",)),
        block("/devices/pci/c/cciss!c0d0", "cciss/c0d0"),
        block("/devices/pci/c/cciss!c0d0/cciss!c0d0p2", "cciss/c0d0p2", ("ida!c1d0p1",)),
        block("/devices/pci/i/ida!c1d0/ida!c1d0p1", "ida/c1d0p1")]}
    assert role_partitions(devs, Facts(frozenset({"dm-4"}))) == \
        {"dm-4", "cciss!c0d0p2", "ida!c1d0p1"}
    assert role_partitions(devs, Facts(frozenset({"cciss!c0d0p2"}))) == \
        {"cciss!c0d0p2", "ida!c1d0p1"}
    nodes = list(devs.values())
    assert backing(nodes, frozenset({"cciss!c0d0p2"})) == ["cciss/c0d0p2"]
    assert backing(nodes, frozenset({"cciss!c0d0", "ida!c1d0p1"})) == ["cciss/c0d0",
                                                                      "ida/c1d0p1"]
    assert backing(nodes, frozenset({"cciss!c0d0p1", "c1d0", "ida!c0d0p1"})) == []
    # The last component still names it, as for a node in any directory.
    assert backing(nodes, frozenset({"c0d0p2"})) == ["cciss/c0d0p2"]


def test_role_partitions_of_unreadable_facts_is_none() -> None:
    assert role_partitions(DEVS, Facts(None, "facts root missing")) is None


def test_a_slave_loop_ends() -> None:
    devs = {d.path: d for d in [block("/devices/virtual/block/dm-1", "dm-1", ("dm-2",)),
                                block("/devices/virtual/block/dm-2", "dm-2", ("dm-1",))]}
    assert role_partitions(devs, Facts(frozenset({"dm-1"}))) == {"dm-1", "dm-2"}


def test_backing() -> None:
    nodes = [block("/devices/pci/sdb/sdb2", "sdb2"), block("/devices/pci/sda/sda2", "sda2"),
             block("/devices/pci/sdc/sdc1", "sdc1"),
             block("/devices/x/c", "sdd1", typ="c"),  # a character node of that name
             SysDevice("/devices/pci/sde", "block", None, {})]  # no node
    assert backing(nodes, frozenset({"sda2", "sdb2", "sdd1"})) == ["sda2", "sdb2"]
    assert backing(nodes, frozenset()) == []
    # A node in a directory is matched by its last component.
    assert backing([block("/devices/x/y", "mapper/sdx1")], frozenset({"sdx1"})) == ["mapper/sdx1"]
