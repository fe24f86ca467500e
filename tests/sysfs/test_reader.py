"""The sysfs reader: what it reads, and how it survives a tree that changes under it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from liken_devices.errors import InputError
from liken_devices.sysfs.model import DevNode
from liken_devices.sysfs.reader import ReaderMemo, read_sysfs
from tests.support.sysfs_builder import SysfsBuilder


def test_reads_bus_devices_nodes_drivers_and_modaliases(tmp_path: Path) -> None:
    b = SysfsBuilder(tmp_path)
    gpu = b.gpu()
    snap = read_sysfs(tmp_path)
    dev = snap.devices[gpu.path]
    assert dev.subsystem == "pci" and dev.driver == "i915"
    assert dev.props["MODALIAS"].startswith("pci:v00008086")
    render = snap.devices[gpu.path + "/drm/renderD128"]
    assert render.node == DevNode("dri/renderD128", "c", 226, 128)
    assert render.subsystem == "drm"
    assert snap.problems == ()


def test_node_name_falls_back_to_dev_file_and_kernel_default(tmp_path: Path) -> None:
    """Old kernels give only `dev`; the name then follows the class's default."""
    b = SysfsBuilder(tmp_path)
    hda = b.pci("0000:00:1b.0", driver="snd_hda_intel", cls=0x040300)
    d = b.dir(hda) / "sound" / "card0" / "pcmC0D0p"
    d.mkdir(parents=True)
    (d / "dev").write_text("116:3\n")
    (d / "uevent").write_text("")
    os.symlink(os.path.relpath(tmp_path / "class" / "sound", d), d / "subsystem")
    os.symlink(os.path.relpath(d, tmp_path / "dev" / "char"), tmp_path / "dev/char/116:3")
    snap = read_sysfs(tmp_path)
    assert snap.devices[hda.path + "/sound/card0/pcmC0D0p"].node == \
        DevNode("snd/pcmC0D0p", "c", 116, 3)


def test_a_usb_class_node_with_only_dev_is_named_under_usb(tmp_path: Path) -> None:
    """rules: usb.bus-devices-only. A node of an old kernel's usb class (uevent without DEVNAME)
    is named as usbmisc's are, ``usb/hiddev0``, and reads no USB descriptor strings; the usb
    device above it keeps its usbfs name."""
    b = SysfsBuilder(tmp_path)
    usb = b.usb_device("2-1", busnum=2, devnum=3)
    iface = b.usb_interface(usb, "1.0", driver="usbhid", cls=3)
    d = b.dir(iface) / "usb" / "hiddev0"
    d.mkdir(parents=True)
    (d / "dev").write_text("180:96\n")
    (d / "uevent").write_text("MAJOR=180\nMINOR=96\n")
    (d / "serial").write_text("not read\n")
    os.symlink(os.path.relpath(tmp_path / "class" / "usb", d), d / "subsystem")
    os.symlink(os.path.relpath(d, tmp_path / "dev" / "char"), tmp_path / "dev/char/180:96")
    snap = read_sysfs(tmp_path)
    hiddev = snap.devices[iface.path + "/usb/hiddev0"]
    assert hiddev.subsystem == "usb" and hiddev.node == DevNode("usb/hiddev0", "c", 180, 96)
    assert "serial" not in hiddev.attrs
    assert snap.devices[usb.path].node == DevNode("bus/usb/002/003", "c", 189, 130)


def test_device_vanishing_mid_walk_is_skipped_and_logged(tmp_path: Path) -> None:
    """A directory that vanishes between the index and the read: skipped, never a crash."""
    b = SysfsBuilder(tmp_path)
    b.gpu()
    gone = tmp_path / "devices/pci0000:00/0000:00:09.0"
    os.symlink(os.path.relpath(gone, tmp_path / "bus/pci/devices"),
               tmp_path / "bus/pci/devices/0000:00:09.0")
    snap = read_sysfs(tmp_path)
    assert "/devices/pci0000:00/0000:00:09.0" not in snap.devices
    assert any("vanished" in p for p in snap.problems)
    assert "/devices/pci0000:00/0000:00:02.0" in snap.devices


def test_unreadable_attribute_is_left_out_and_logged(tmp_path: Path) -> None:
    """An attribute that cannot be read (EISDIR here; EIO on real sysfs) is left out."""
    b = SysfsBuilder(tmp_path)
    usb = b.usb_device("1-2", serial="S1")
    (b.dir(usb) / "serial").unlink()
    (b.dir(usb) / "serial").mkdir()
    snap = read_sysfs(tmp_path)
    assert "serial" not in snap.devices[usb.path].attrs
    assert any("serial" in p for p in snap.problems)


def test_odd_bytes_in_serial_are_kept_raw_for_the_policy(tmp_path: Path) -> None:
    b = SysfsBuilder(tmp_path)
    usb = b.usb_device("1-2", serial=b"\xff\x00abc")
    snap = read_sysfs(tmp_path)
    assert snap.devices[usb.path].attrs["serial"] == b"\xff\x00abc"
    assert snap.devices[usb.path].attr("serial") == "\ufffd\x00abc"


def test_a_root_without_the_dev_char_index_is_not_a_sysfs_tree(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not a sysfs tree: it has no dev/char index"):
        read_sysfs(tmp_path / "nope")
    (tmp_path / "devices" / "pci0000:00").mkdir(parents=True)
    with pytest.raises(InputError, match="not a sysfs tree"):
        read_sysfs(tmp_path)  # no longer an empty snapshot: nothing would be published silently


@pytest.mark.skipif(not Path("/sys/devices").is_dir(), reason="no sysfs")
def test_reads_this_machine(tmp_path: Path) -> None:
    snap = read_sysfs("/sys")
    assert any(d.subsystem == "pci" for d in snap.devices.values()) or snap.devices


def test_rewalk_sees_binds_and_replugs(tmp_path: Path) -> None:
    """Devices are reused between walks only while unchanged: a bind (uevent's DRIVER, or only
    the driver link in a tree the kernel did not write) and a replug are seen at once."""
    memo = ReaderMemo()
    b = SysfsBuilder(tmp_path)
    hda = b.pci("0000:00:1f.3", cls=0x040300)
    usb = b.usb_device("1-2", devnum=3, serial="A")
    first = read_sysfs(tmp_path, memo)
    assert first.devices[hda.path].driver is None
    assert read_sysfs(tmp_path, memo).devices[usb.path] is first.devices[usb.path]  # reused
    b.set_driver(hda, "pci", "snd_hda_intel")  # uevent and link, as the kernel does
    assert read_sysfs(tmp_path, memo).devices[hda.path].driver == "snd_hda_intel"
    os.unlink(b.dir(hda) / "driver")  # a link-only change, uevent untouched
    (b.dir(hda) / "uevent").write_text("PCI_CLASS=40300\nPCI_ID=8086:1234\n")
    assert read_sysfs(tmp_path, memo).devices[hda.path].driver is None
    drv = tmp_path / "bus/pci/drivers/other"
    drv.mkdir(parents=True)
    os.symlink(os.path.relpath(drv, b.dir(hda)), b.dir(hda) / "driver")
    assert read_sysfs(tmp_path, memo).devices[hda.path].driver == "other"
    b.remove(usb)
    usb = b.usb_device("1-2", devnum=4, serial="B")
    again = read_sysfs(tmp_path, memo).devices[usb.path]
    assert again.attr("serial") == "B" and again.node is not None and again.node.minor == 3


def test_rewalk_sees_a_class_node_with_new_numbers(tmp_path: Path) -> None:
    """A class device's node is reused by path and numbers; new numbers are a new node."""
    memo = ReaderMemo()
    b = SysfsBuilder(tmp_path)
    usb = b.usb_device("1-2", devnum=3)
    iface = b.usb_interface(usb, driver="usbhid", cls=3)
    raw = b.node(iface, "hidraw", "hidraw0", 240, 0, subdir="hidraw")
    first = read_sysfs(tmp_path, memo).devices[raw.path]
    assert read_sysfs(tmp_path, memo).devices[raw.path] is first
    b.remove(raw)
    raw = b.node(iface, "hidraw", "hidraw0", 240, 5, devname="hidraw0", subdir="hidraw")
    again = read_sysfs(tmp_path, memo).devices[raw.path]
    assert again.node is not None and again.node.minor == 5


def test_each_memo_is_its_owners(tmp_path: Path) -> None:
    """What one walker read is reused only by the same walker's next walk: a walk with another
    memo, or with none, reads the tree afresh."""
    b = SysfsBuilder(tmp_path)
    usb = b.usb_device("1-2", devnum=3)
    mine, theirs = ReaderMemo(), ReaderMemo()
    first = read_sysfs(tmp_path, mine).devices[usb.path]
    assert read_sysfs(tmp_path, mine).devices[usb.path] is first
    assert read_sysfs(tmp_path, theirs).devices[usb.path] is not first
    assert read_sysfs(tmp_path).devices[usb.path] is not first
