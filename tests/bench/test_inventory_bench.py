"""Benchmark: the in-process re-walk (read sysfs + policy) for the largest recording and for
synthetic trees of 1x, 4x and 16x its size. Budget (issue 2): at most 15 ms for a 128-device
laptop, growing linearly. Run with `./tasks bench`; figures are reported in docs/performance.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from liken_devices.inventory import Context, Facts, build_inventory
from liken_devices.sysfs.reader import read_sysfs
from liken_devices.sysfs.umockdev import materialize
from tests.support.corpus import SYSFS
from tests.support.sysfs_builder import SysfsBuilder

LARGEST = "thinkpad-t60p-systemd-sys-script.umockdev"  # the largest full recording
CTX = Context(Facts(frozenset()))


def laptop(root: Path, copies: int) -> int:
    """A laptop-like tree (GPU, HDA, USB HID, camera, board devices), repeated ``copies`` times."""
    b = SysfsBuilder(root)
    for c in range(copies):
        b.gpu(f"0000:{c + 1:02x}:02.0", card=c, render=128 + c)
        b.hda(f"0000:{c + 1:02x}:1f.3", card=c, jacks=4)
        ctrl = b.pci(f"0000:{c + 1:02x}:14.0", driver="xhci_hcd", cls=0x0C0330)
        for u in range(8):
            usb = b.usb_device(f"{c + 1}-{u + 1}", parent=ctrl, busnum=c + 1, devnum=u + 2)
            iface = b.usb_interface(usb, driver="usbhid", cls=3)
            b.node(iface, "hidraw", f"hidraw{c * 8 + u}", 240, c * 8 + u, subdir="hidraw")
        for p in range(12):
            d = b.board("platform", f"dev{c}.{p}", driver="drv")
            b.node(d, "misc", f"m{c}-{p}", 10, 60 + c * 12 + p, subdir="misc")
    return copies


@pytest.mark.benchmark(group="rewalk")
def test_rewalk_largest_recording(benchmark: Any, tmp_path: Path) -> None:
    path = SYSFS / LARGEST
    if not path.is_file():
        pytest.skip("corpus absent")
    materialize(path.read_text(errors="surrogateescape"), tmp_path)
    inv = benchmark(lambda: build_inventory(read_sysfs(tmp_path), CTX))
    assert inv.devices


@pytest.mark.benchmark(group="rewalk")
@pytest.mark.parametrize("scale", [1, 4, 16])
def test_rewalk_synthetic(benchmark: Any, tmp_path: Path, scale: int) -> None:
    laptop(tmp_path, scale)
    inv = benchmark(lambda: build_inventory(read_sysfs(tmp_path), CTX))
    assert inv.total == scale * 23
