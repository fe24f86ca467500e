"""Storage roles read from init's facts tree, each bound and refusal with its answer written out.

The rule (rules: hardware.facts-fail-closed): ``<facts>/storage/<role>/device`` names the
partition backing a role (a kernel block device name of at most 31 characters, "/dev/" in front
tolerated); the file is read through a link (a ConfigMap volume's files are links) and bounded at
64 bytes; at most 1024 roles are read; anything else makes the facts unreadable, and then no disk
is offered.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from liken_devices.inventory.sources import read_facts


def facts(root: Path, devices: dict[str, bytes]) -> Path:
    storage = root / "facts" / "storage"
    storage.mkdir(parents=True)
    for role, content in devices.items():
        (storage / role).mkdir()
        (storage / role / "device").write_bytes(content)
    return root / "facts"


def test_1024_roles_are_read_and_1025_are_not(tmp_path: Path) -> None:
    many = {f"r{i}": f"sd{i}\n".encode() for i in range(1024)}
    assert read_facts(facts(tmp_path / "a", many)).role_partitions == \
        frozenset(f"sd{i}" for i in range(1024))
    got = read_facts(facts(tmp_path / "b", {**many, "r1024": b"sdx\n"}))
    assert got.role_partitions is None
    assert got.error is not None and "more than 1024 roles" in got.error


def test_a_device_file_of_64_bytes_is_read_and_of_65_is_not(tmp_path: Path) -> None:
    assert read_facts(facts(tmp_path / "a", {"root": b"/dev/sda1" + b" " * 54 + b"\n"})) \
        .role_partitions == {"sda1"}
    got = read_facts(facts(tmp_path / "b", {"root": b"/dev/sda1" + b" " * 55 + b"\n"}))
    assert got.role_partitions is None
    assert got.error is not None and "longer than a partition name" in got.error


def test_the_longest_partition_name_is_31_characters(tmp_path: Path) -> None:
    assert read_facts(facts(tmp_path / "a", {"root": b"n" * 31})).role_partitions == {"n" * 31}
    assert read_facts(facts(tmp_path / "b", {"root": b"n" * 32})).role_partitions is None


@pytest.mark.parametrize(("content", "why"), [
    (b"", "is empty"),
    (b"\n", "is empty"),
    (b"/dev/", "is empty"),
    (b"sd\xffa1\n", "not a partition name"),
    (b"sda1 sdb1\n", "not a partition name"),
    (b"../sda\n", "not a partition name"),
    (b"-sda\n", "not a partition name"),
])
def test_a_device_file_that_names_no_partition_makes_the_facts_unreadable(
        tmp_path: Path, content: bytes, why: str) -> None:
    got = read_facts(facts(tmp_path, {"root": b"sda1\n", "data": content}))
    assert got.role_partitions is None
    assert got.error is not None and why in got.error and "data/device" in got.error


def test_a_device_file_is_read_through_a_link(tmp_path: Path) -> None:
    """A ConfigMap volume's files are links into a hidden directory."""
    root = facts(tmp_path, {})
    (root / "..data").mkdir()
    (root / "..data" / "device").write_text("nvme0n1p3\n")
    (root / "storage" / "root").mkdir()
    (root / "storage" / "root" / "device").symlink_to(root / "..data" / "device")
    assert read_facts(root).role_partitions == {"nvme0n1p3"}


def test_the_kernels_spellings_of_a_partition(tmp_path: Path) -> None:
    names = ["nvme0n1p3", "mmcblk0p2", "dm-0", "cciss!c0d0p1", "md127", "sr0", "a_b.c+d:e"]
    got = read_facts(facts(tmp_path, {f"r{i}": n.encode() for i, n in enumerate(names)}))
    assert got.role_partitions == frozenset(names)


def test_a_storage_or_role_that_is_a_file_is_named_so(tmp_path: Path) -> None:
    (tmp_path / "a" / "facts").mkdir(parents=True)
    (tmp_path / "a" / "facts" / "storage").write_text("root\n")
    got = read_facts(tmp_path / "a" / "facts")
    assert got.role_partitions is None
    assert got.error is not None and got.error.endswith("storage is not a directory")
    root = facts(tmp_path / "b", {})
    (root / "storage" / "root").write_text("sda1\n")
    got = read_facts(root)
    assert got.role_partitions is None
    assert got.error is not None and got.error.startswith("storage role ") \
        and got.error.endswith("root is not a directory")


def test_another_machine_given_no_facts_withholds_every_disk_and_says_so() -> None:
    """rules: hardware.other-machines-facts. A walk of another machine given no facts offers
    none of its disks (the facts are unknown, not empty) and is marked as given none, so the
    report says one plain line naming ``--facts DIR`` instead of a complaint about this host."""
    facts = read_facts(None)
    assert facts.role_partitions is None and not facts.readable
    assert facts.given is False
    assert facts.error is not None
    assert "--facts DIR" in facts.error and "withheld" in facts.error



def test_a_facts_root_the_kernel_refuses_is_unreadable_not_a_crash() -> None:
    # A name longer than the kernel takes (ENAMETOOLONG, which Path.is_dir lets through): the
    # facts fail closed, no disk is offered. rules: hardware.facts-fail-closed
    facts = read_facts(Path("/tmp") / ("x" * 5000))
    assert facts.role_partitions is None
    assert "cannot be read" in str(facts.error)
