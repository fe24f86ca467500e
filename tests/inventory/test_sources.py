"""Facts fail closed (inventory/sources.py; rules: hardware.facts-fail-closed): each hostile facts
tree reads as "facts unreadable", so no disk at all is offered and FactsPublished is False with
the reason."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from liken_devices.inventory import Sources
from liken_devices.inventory.model import Reason
from liken_devices.inventory.sources import read_facts
from liken_devices.kube.machine import facts_condition
from tests.support.sysfs_builder import SysfsBuilder


def role(facts: Path, name: str, content: bytes | str) -> Path:
    d = facts / "storage" / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "device").write_bytes(content if isinstance(content, bytes) else content.encode())
    return d


def dangling_storage(facts: Path) -> None:
    facts.mkdir()
    (facts / "storage").symlink_to(facts / "nowhere")


def looping_storage(facts: Path) -> None:
    facts.mkdir()
    (facts / "storage").symlink_to(facts / "storage")


def storage_is_a_file(facts: Path) -> None:
    facts.mkdir()
    (facts / "storage").write_text("root\n")


def role_is_a_file(facts: Path) -> None:
    role(facts, "root", "nvme0n1p3\n")
    (facts / "storage" / "data").write_text("sda1\n")


def role_without_device(facts: Path) -> None:
    role(facts, "root", "nvme0n1p3\n")
    (facts / "storage" / "data").mkdir()


def empty_device_file(facts: Path) -> None:
    role(facts, "root", "")


def blank_device_file(facts: Path) -> None:
    role(facts, "root", " \n")


def not_a_partition_name(facts: Path) -> None:
    role(facts, "root", "../../sda1\n")


def two_words(facts: Path) -> None:
    role(facts, "root", "sda1 sda2\n")


def binary_content(facts: Path) -> None:
    role(facts, "root", b"\xff\xfe\x00sda")


def too_long(facts: Path) -> None:
    role(facts, "root", "a" * 200 + "\n")


def dangling_device_link(facts: Path) -> None:
    d = facts / "storage" / "root"
    d.mkdir(parents=True)
    (d / "device").symlink_to(d / "gone")


def dangling_role_link(facts: Path) -> None:
    (facts / "storage").mkdir(parents=True)
    (facts / "storage" / "root").symlink_to(facts / "gone")


def looping_role_link(facts: Path) -> None:
    (facts / "storage").mkdir(parents=True)
    (facts / "storage" / "root").symlink_to(facts / "storage" / "root")


def device_is_a_fifo(facts: Path) -> None:
    d = facts / "storage" / "root"
    d.mkdir(parents=True)
    os.mkfifo(d / "device")


def no_facts_root(facts: Path) -> None:
    del facts


HOSTILE: list[Callable[[Path], None]] = [
    dangling_storage, looping_storage, storage_is_a_file, role_is_a_file, role_without_device,
    empty_device_file, blank_device_file, not_a_partition_name, two_words, binary_content,
    too_long, dangling_device_link, dangling_role_link, looping_role_link, device_is_a_fifo,
    no_facts_root,
]


@pytest.mark.parametrize("make", HOSTILE, ids=lambda f: f.__name__)
def test_facts_fail_closed(tmp_path: Path, make: Callable[[Path], None]) -> None:
    """Anything but a listable storage/ of role directories, each with a partition name, is
    "facts unreadable": no disk at all, FactsPublished=False with the reason."""
    facts = tmp_path / "facts"
    make(facts)
    got = read_facts(facts)
    assert not got.readable and got.error
    b = SysfsBuilder(tmp_path / "sys")
    sata = b.pci("0000:00:17.0", driver="ahci", cls=0x010601)
    disk = b.node(sata, "block", "sda", 8, 0, block=True, subdir="ata1/host0/block")
    b.node(disk, "block", "sda1", 8, 1, block=True)
    b.gpu()
    inv = Sources(sysfs=b.root, facts=facts, modules_dir=tmp_path, hwdata_dir=tmp_path).walk()
    assert all(n.type != "b" for d in inv.devices for n in d.nodes)
    assert [o.reason for o in inv.outcomes if o.address == "0000:00:17.0"] \
        == [Reason.FACTS_UNREADABLE]
    assert "pci-0000-00-02-0" in inv.by_name()  # a device with no disk stays
    cond = facts_condition(inv)
    assert (cond["status"], cond["reason"]) == ("False", "FactsUnreadable")
    assert cond["message"] == got.error


def test_a_facts_root_with_no_storage_at_all_means_no_roles(tmp_path: Path) -> None:
    (tmp_path / "facts").mkdir()
    got = read_facts(tmp_path / "facts")
    assert got.readable and got.role_partitions == frozenset()


def test_readable_facts_name_each_roles_partition(tmp_path: Path) -> None:
    facts = tmp_path / "facts"
    role(facts, "root", "nvme0n1p3\n")
    role(facts, "data", "/dev/mmcblk0p2")  # "/dev/" in front is tolerated
    role(facts, "swap", "dm-0\n")
    (facts / "storage" / "linked").symlink_to(facts / "storage" / "root")  # a link that resolves
    got = read_facts(facts)
    assert got.role_partitions == frozenset({"nvme0n1p3", "mmcblk0p2", "dm-0"})
