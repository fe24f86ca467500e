"""umockdev recordings: the text format, derived attributes, and agreement with the tree reader."""

from __future__ import annotations

from pathlib import Path

import pytest

from liken_devices.inventory import Context, Facts, build_inventory
from liken_devices.sysfs.model import DevNode
from liken_devices.sysfs.reader import read_sysfs
from liken_devices.sysfs.umockdev import c_unescape, materialize, parse_recording
from tests.support.corpus import recording, recording_params

FULL = """P: /devices/pci0000:00/0000:00:02.0
E: DRIVER=i915
E: PCI_CLASS=30000
E: PCI_ID=8086:0166
E: SUBSYSTEM=pci
A: vendor=0x8086\\n
L: driver=../../../bus/pci/drivers/i915

P: /devices/pci0000:00/0000:00:02.0/drm/renderD128
N: dri/renderD128
E: DEVNAME=/dev/dri/renderD128
E: MAJOR=226
E: MINOR=128
E: SUBSYSTEM=drm
A: dev=226:128\\n

P: /devices/pci0000:00/0000:00:14.0/usb1/1-2
N: bus/usb/001/002=12011001
E: SUBSYSTEM=usb
E: DEVTYPE=usb_device
E: PRODUCT=46d/c52b/1201
E: BUSNUM=001
E: DEVNUM=002
E: MAJOR=189
E: MINOR=1
A: serial=U.are.U\\302\\256 4500\\n
H: descriptors=12011001

P: /devices/virtual/tty/console
E: SUBSYSTEM=tty
A: active=tty0 ttyS0\\n

P: /devices/virtual/tty/tty0
E: SUBSYSTEM=tty
A: active=tty2\\n
"""


def test_c_escapes_are_undone() -> None:
    assert c_unescape(r"U.are.U\302\256 4500\n") == "U.are.U® 4500\n".encode()
    assert c_unescape(r"a\\b\"c\t") == b'a\\b"c\t'


def test_parse_full_recording() -> None:
    snap = parse_recording(FULL)
    gpu = snap.devices["/devices/pci0000:00/0000:00:02.0"]
    assert gpu.driver == "i915" and gpu.attr("vendor") == "0x8086"
    assert snap.devices[gpu.path + "/drm/renderD128"].node == DevNode("dri/renderD128", "c",
                                                                       226, 128)
    usb = snap.devices["/devices/pci0000:00/0000:00:14.0/usb1/1-2"]
    assert usb.node == DevNode("bus/usb/001/002", "c", 189, 1)
    assert usb.attr("serial") == "U.are.U® 4500"
    assert usb.attr("idVendor") == "046d" and usb.attr("idProduct") == "c52b"
    assert snap.console == ("tty0", "tty2", "ttyS0")


def test_udevdb_only_properties_are_derived() -> None:
    text = ("P: /devices/pci0000:00/0000:00:1f.3\nE: SUBSYSTEM=pci\nE: DRIVER=snd_hda_intel\n"
            "E: PCI_CLASS=40300\nE: PCI_ID=8086:1E20\nE: MODALIAS=pci:v00008086d00001E20\n\n"
            "P: /devices/pci0000:00/0000:00:1d.0/usb2/2-1/2-1:1.0\nE: SUBSYSTEM=usb\n"
            "E: DEVTYPE=usb_interface\nE: INTERFACE=11/0/0\nE: DRIVER=usbhid\n")
    snap = parse_recording(text)
    pci = snap.devices["/devices/pci0000:00/0000:00:1f.3"]
    assert pci.driver == "snd_hda_intel"
    assert pci.attr("class") == "0x040300" and pci.attr("vendor") == "0x8086"
    iface = snap.devices["/devices/pci0000:00/0000:00:1d.0/usb2/2-1/2-1:1.0"]
    assert iface.attr("bInterfaceClass") == "0b"


def test_bad_line_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="not a umockdev line"):
        parse_recording("P: /devices/x\nthis is not a line\n")


def test_recording_and_materialized_tree_agree(tmp_path: Path) -> None:
    """The same recording read directly and through a real tree gives the same inventory."""
    text = recording("thinkpad-t60p-systemd-sys-script.umockdev").read_text(
        errors="surrogateescape")
    materialize(text, tmp_path)
    ctx = Context(Facts(frozenset()))
    direct = build_inventory(parse_recording(text), ctx)
    via_tree = build_inventory(read_sysfs(tmp_path), ctx)
    assert [(d.name, d.nodes, dict(d.attributes)) for d in direct.devices] == \
        [(d.name, d.nodes, dict(d.attributes)) for d in via_tree.devices]
    assert len(direct.devices) > 5


@pytest.mark.parametrize("path", recording_params())
def test_every_recording_parses(path: Path) -> None:
    snap = parse_recording(path.read_text(errors="surrogateescape"), str(path))
    assert snap.devices
    assert all(p.startswith("/devices/") for p in snap.devices)
