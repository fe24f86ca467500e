"""Facts fail closed (inventory/sources.py; rules: hardware.facts-fail-closed): each hostile facts
tree reads as "facts unreadable", so no disk at all is offered and FactsPublished is False with
the reason."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from liken_devices.inventory import Sources
from liken_devices.inventory.limits import MAX_ROLES
from liken_devices.inventory.model import Reason
from liken_devices.inventory.sources import facts_stamp, read_facts
from liken_devices.kube.machine import facts_condition
from tests.support.hostile import examples
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


# -- the facts' stamp covers every role the reader accepts ----------------------------------------


def _move(role_dir: Path, how: str, partition: str) -> None:
    """Init moving a role onto ``partition``, in one of the ways a file can change."""
    device = role_dir / "device"
    if how == "rename":  # a new file renamed into place (a new inode)
        (role_dir / ".device.new").write_text(partition + "\n")
        os.rename(role_dir / ".device.new", device)
    elif how == "rewrite":  # the same file written again (its size changes)
        device.write_text(partition + "\n")
    else:  # "relink": the device file is a link, pointed at another file
        target = role_dir / f".{partition}"
        target.write_text(partition + "\n")
        os.unlink(device)
        device.symlink_to(target.name)


@settings(max_examples=examples(8), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(count=st.integers(1, MAX_ROLES), pick=st.floats(0, 1), how=st.sampled_from(
    ["rename", "rewrite", "relink"]))
@example(count=300, pick=1.0, how="rename")
@example(count=MAX_ROLES, pick=1.0, how="rewrite")
@example(count=MAX_ROLES, pick=0.5, how="relink")
def test_moving_any_role_the_reader_accepts_changes_the_facts_stamp(
        count: int, pick: float, how: str) -> None:
    """rules: delivery.fresh-walk, hardware.storage-role: whatever the number of roles the
    reader accepts (up to MAX_ROLES), moving any one of them onto another disk changes the
    stamp, so prepare never reuses a walk from before the move."""
    target = min(count - 1, int(pick * count))
    with tempfile.TemporaryDirectory() as tmp:
        facts = Path(tmp) / "facts"
        for i in range(count):
            d = facts / "storage" / f"r{i:05}"
            d.mkdir(parents=True)
            if how == "relink":
                (d / ".sda1").write_text("sda1\n")
                (d / "device").symlink_to(".sda1")
            else:
                (d / "device").write_text("sda1\n")
        before = facts_stamp(facts)
        assert read_facts(facts).role_partitions == {"sda1"}
        _move(facts / "storage" / f"r{target:05}", how, "nvme0n1p2")
        # A real move: the reader now reads the role on the other disk.
        assert read_facts(facts).role_partitions == {"nvme0n1p2"} | (
            {"sda1"} if count > 1 else set())
        assert facts_stamp(facts) != before, f"role {target + 1} of {count} moved unseen"


def test_the_reader_accepts_no_more_roles_than_the_stamp_covers(tmp_path: Path) -> None:
    """One limit for both (inventory/limits.py): MAX_ROLES roles read, one more is unreadable
    facts (no disk offered; rules: hardware.facts-fail-closed)."""
    facts = tmp_path / "facts"
    for i in range(MAX_ROLES):
        role(facts, f"r{i:05}", "sda1\n")
    assert read_facts(facts).readable
    role(facts, "zz-one-more", "sda1\n")
    got = read_facts(facts)
    assert not got.readable and f"more than {MAX_ROLES} roles" in (got.error or "")
