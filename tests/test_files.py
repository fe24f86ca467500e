"""The project's one atomic writer and its bounded reader (liken_devices.files)."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from liken_devices import files
from liken_devices.files import (
    FileTooLarge,
    NotRegularFile,
    read_bounded,
    sweep_temp,
    write_atomic,
)


def test_atomic_write_never_shows_a_partial_file(tmp_path: Path) -> None:
    path = tmp_path / "liken.sh-x.json"
    specs = [b"a" * 10, b"b" * 200_000]
    assert write_atomic(path, specs[0], mode=0o644)
    stop = threading.Event()
    seen: list[int] = []
    errors: list[str] = []

    def reader() -> None:
        while not stop.is_set():
            data = path.read_bytes()
            if data not in specs:
                errors.append(f"partial: {len(data)} bytes")
            seen.append(len(data))
            names = os.listdir(tmp_path)
            # The temp file is never a name a CDI runtime would load.
            if not all(n.endswith(".tmp") or n == path.name for n in names):
                errors.append(f"names: {names}")

    t = threading.Thread(target=reader)
    t.start()
    for i in range(100):
        write_atomic(path, specs[i % 2], mode=0o644)
    stop.set()
    t.join()
    assert seen and not errors
    assert not write_atomic(path, specs[1], mode=0o644)  # same bytes: not rewritten
    assert os.listdir(tmp_path) == [path.name]


def test_mode_is_explicit_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        write_atomic(tmp_path / "new" / "state.json", b"x", mode=0o600, dir_mode=0o700)
        write_atomic(tmp_path / "spec.json", b"x", mode=0o644)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new" / "state.json").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "new").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "spec.json").stat().st_mode) == 0o644
    os.umask(0o077)
    try:
        write_atomic(tmp_path / "spec.json", b"y", mode=0o644)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "spec.json").stat().st_mode) == 0o644


def test_a_planted_symlink_at_the_temp_name_is_not_followed(tmp_path: Path,
                                                            monkeypatch) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious")
    planted = tmp_path / ".state.json.1.cafe.tmp"
    planted.symlink_to(victim)
    monkeypatch.setattr(files, "temp_name", lambda path: planted)
    with pytest.raises(FileExistsError):
        write_atomic(tmp_path / "state.json", b"evil", mode=0o600)
    assert victim.read_text() == "precious"
    assert not (tmp_path / "state.json").exists()


def test_a_symlink_at_the_target_is_replaced_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / "state.json").symlink_to(victim)
    write_atomic(tmp_path / "state.json", b"new", mode=0o600)
    assert victim.read_text() == "precious"
    assert (tmp_path / "state.json").read_bytes() == b"new"
    assert not (tmp_path / "state.json").is_symlink()


def test_read_bounded_refuses_what_is_not_a_small_regular_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"12345")
    assert read_bounded(tmp_path / "f", 5) == b"12345"
    with pytest.raises(FileTooLarge):
        read_bounded(tmp_path / "f", 4)
    os.mkfifo(tmp_path / "fifo")  # would block an ordinary read forever
    with pytest.raises(NotRegularFile):
        read_bounded(tmp_path / "fifo", 10)
    (tmp_path / "d").mkdir()
    with pytest.raises(NotRegularFile):
        read_bounded(tmp_path / "d", 10)
    (tmp_path / "link").symlink_to(tmp_path / "f")
    with pytest.raises(NotRegularFile):
        read_bounded(tmp_path / "link", 10)
    with pytest.raises(NotRegularFile):
        read_bounded(Path("/dev/zero"), 10)


def test_sweep_removes_only_our_temp_files(tmp_path: Path) -> None:
    ours = [".claims.json.12.ab.tmp", ".claims.json.1.tmp"]
    others = [".other.json.1.tmp", "claims.json", ".claims.json"]
    for n in ours + others:
        (tmp_path / n).write_text("")
    (tmp_path / ".claims.json.9.dir.tmp").mkdir()
    assert sweep_temp(tmp_path, "claims.json") == sorted(ours)
    assert sorted(os.listdir(tmp_path)) == sorted([*others, ".claims.json.9.dir.tmp"])


def test_a_write_that_changes_nothing_leaves_the_access_time(tmp_path: Path) -> None:
    """The comparison read is O_NOATIME: a CDI spec's access time tells the runtime's reads."""
    from liken_devices.files import write_atomic

    path = tmp_path / "spec.json"
    assert write_atomic(path, b"{}\n", mode=0o644)
    st = os.stat(path)
    os.utime(path, ns=(st.st_mtime_ns - 10_000_000_000, st.st_mtime_ns))  # read long ago
    assert not write_atomic(path, b"{}\n", mode=0o644)
    assert os.stat(path).st_atime_ns == st.st_mtime_ns - 10_000_000_000
