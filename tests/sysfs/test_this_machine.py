"""This machine, recorded with umockdev-record and walked live: both give the same answer."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from liken_devices.inventory import Context, Facts, build_inventory
from liken_devices.sysfs.reader import read_sysfs
from liken_devices.sysfs.umockdev import load_recording

pytestmark = pytest.mark.skipif(shutil.which("umockdev-record") is None
                                or shutil.which("udevadm") is None
                                or not Path("/sys/devices").is_dir(),
                                reason="umockdev-record (and udevadm) not installed")


def test_recording_of_this_machine_matches_the_live_walk(tmp_path: Path) -> None:
    rec = tmp_path / "this.umockdev"
    with rec.open("w") as out:
        subprocess.run(["umockdev-record", "--all"], stdout=out, check=True, timeout=120)
    ctx = Context(Facts(frozenset()))
    live = build_inventory(read_sysfs("/sys"), ctx)
    recorded = build_inventory(load_recording(rec), ctx)
    assert [(d.name, d.nodes) for d in recorded.devices] == [(d.name, d.nodes)
                                                            for d in live.devices]
    considered = {(o.address, o.reason) for o in live.outcomes}
    assert considered == {(o.address, o.reason) for o in recorded.outcomes}
    assert considered  # this machine has PCI functions at least
