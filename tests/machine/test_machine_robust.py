"""The machine side never takes the agent down: one entry's failure is that entry's Failed row.

A tty whose termios calls fail makes Python raise ``termios.error``, which is not an ``OSError``.
A non-tty file at the tty's path makes every tty call fail (``ENOTTY``), so ``/dev/null`` stands
in for such a tty here; where a test needs the failure at the termios step, its system-call
layer answers the line discipline's question (TIOCGETD) as a free tty does. (A tty that serport
holds for another process is not a failure at all: tests/machine/test_machine_serio_held.py.)
"""

from __future__ import annotations

import errno
import os
import termios
from pathlib import Path

import pytest

from liken_devices.inventory.model import MachineSpec, SerioEntry
from liken_devices.machine.modules import LoadError
from liken_devices.machine.serio import N_TTY, LineOps, SerioManager
from liken_devices.machine.side import MachineSide
from liken_devices.sysfs.model import Snapshot
from tests.machine.test_machine_modules import build_tree
from tests.machine.test_machine_serio import PULSE8, RAINSHADOW, Pty, adapter_devices, plug

NULL = Pty(-1, -1, "/dev/null", os.stat("/dev/null").st_rdev)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def snapshot_with(devnum: int, *extra: dict[str, object]) -> Snapshot:
    devices = adapter_devices("1-3", "ttyACM0", NULL, "2548", "1002", None, devnum)
    for more in extra:
        devices.update(more)  # type: ignore[arg-type]
    return Snapshot(devices)


class FreeLine(LineOps):
    """The real calls, but TIOCGETD reads N_TTY, as on a tty nobody holds."""

    def get_ldisc(self, fd: int) -> int:
        return N_TTY


def test_a_termios_failure_is_the_entry_s_failed_row_with_the_kernel_s_words(
        tmp_path: Path) -> None:
    plug(tmp_path, "ttyACM0", NULL)
    manager = SerioManager(FreeLine(), dev_root=tmp_path)
    rows = manager.apply((PULSE8, RAINSHADOW), snapshot_with(2))
    first, second = rows
    assert first["state"] == "Failed" and first["tty"] == "ttyACM0"
    assert first["message"].startswith(f"configure the line {tmp_path}/ttyACM0 (tcsetattr) "
                                       f"failed: [Errno {errno.ENOTTY}] ")
    assert "Inappropriate ioctl" in first["message"]
    assert second["state"] == "Waiting"  # the other entry goes on
    manager.close()


def test_no_descriptor_leaks_over_100_walks_with_a_failing_tty(tmp_path: Path) -> None:
    plug(tmp_path, "ttyACM0", NULL)
    side = MachineSide(tmp_path / "nomodules", serio_opener=LineOps(), sys_root=tmp_path,
                       proc_root=tmp_path, dev_root=tmp_path)
    spec = MachineSpec(serio=(PULSE8,))
    side.apply(spec, snapshot_with(2))
    before = open_fds()
    for walk in range(100):
        # A new device number each walk is a replug: the line is tried again every time.
        fragment = side.apply(spec, snapshot_with(3 + walk))
        assert fragment["serio"][0]["state"] == "Failed"
        assert "(TIOCGETD) failed: [Errno 25]" in fragment["serio"][0]["message"]
    assert open_fds() == before
    assert side.serio.attach_calls == 101
    side.close()


class Exploding(FreeLine):
    """A system call layer whose failures are not OSErrors at all."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc
        self.closed: list[int] = []

    def tcgetattr(self, fd: int) -> list[object]:
        raise self.exc

    def close(self, fd: int) -> None:
        self.closed.append(fd)
        super().close(fd)


@pytest.mark.parametrize("exc", [termios.error(errno.EIO, "Input/output error"),
                                 ValueError("odd"), RuntimeError("worse")])
def test_any_error_of_an_entry_is_its_row_and_closes_its_descriptor(tmp_path: Path,
                                                                    exc: Exception) -> None:
    plug(tmp_path, "ttyACM0", NULL)
    ops = Exploding(exc)
    manager = SerioManager(ops, dev_root=tmp_path)
    (row,) = manager.apply((PULSE8,), snapshot_with(2))
    assert row["state"] == "Failed"
    assert (str(exc.args[-1]) if exc.args else "") in row["message"]
    assert len(ops.closed) == 1
    manager.close()


class Loader:
    def load(self, name: str) -> str:
        if name == "pulse8_cec":
            raise PermissionError(errno.EACCES, "Permission denied")  # not a LoadError
        if name == "rainshadow_cec":
            raise LoadError("could not insert 'rainshadow_cec': Operation not permitted")
        return "insmod serport.ko"


def test_a_module_that_fails_oddly_does_not_stop_the_others(tmp_path: Path) -> None:
    tree = build_tree(tmp_path)
    side = MachineSide(tree.dir, Loader(), sys_root=tmp_path / "nosys", proc_root=tmp_path / "np",
                       dev_root=tmp_path)
    out = side.apply(MachineSpec(modules=("pulse8_cec", "rainshadow_cec", "serport")),
                     Snapshot({}))
    states = {r["name"]: (r["state"], r["message"]) for r in out["modules"]}
    assert states["pulse8_cec"][0] == "Failed" and "Permission denied" in states["pulse8_cec"][1]
    assert states["rainshadow_cec"][0] == "Failed"
    assert states["serport"][0] == "Loaded"
    side.close()


def test_a_broken_half_leaves_the_other_half_and_rows_for_every_entry(tmp_path: Path) -> None:
    tree = build_tree(tmp_path)
    side = MachineSide(tree.dir, Loader(), sys_root=tmp_path / "nosys", proc_root=tmp_path / "np",
                       dev_root=tmp_path)

    def broken(*args: object, **kwargs: object) -> list[object]:
        raise MemoryError("the module tree")

    side.modules.apply = broken  # type: ignore[method-assign]
    entry = SerioEntry("pulse8-cec", "2548", "1002")
    out = side.apply(MachineSpec(modules=("serport",), serio=(entry,)), Snapshot({}))
    assert [(r["name"], r["state"]) for r in out["modules"]] == [("serport", "Failed")]
    assert out["serio"][0]["state"] == "Waiting"
    side.close()
