"""umockdev recordings: the text format, derived attributes, and agreement with the tree reader."""

from __future__ import annotations

from pathlib import Path

import pytest

from liken_devices.inventory import Context, Facts, build_inventory
from liken_devices.sysfs.model import DevNode
from liken_devices.sysfs.reader import read_sysfs
from liken_devices.sysfs.umockdev import c_unescape, parse_recording
from tests.support.corpus import recording, recording_params
from tests.support.recording_tree import materialize

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

P: /devices/pci0000:00/0000:00:14.0
E: SUBSYSTEM=pci

P: /devices/pci0000:00/0000:00:14.0/usb1
E: SUBSYSTEM=usb
E: DEVTYPE=usb_device

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
            "P: /devices/pci0000:00/0000:00:1d.0\nE: SUBSYSTEM=pci\n\n"
            "P: /devices/pci0000:00/0000:00:1d.0/usb2\nE: SUBSYSTEM=usb\n\n"
            "P: /devices/pci0000:00/0000:00:1d.0/usb2/2-1\nE: SUBSYSTEM=usb\n\n"
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


# ---- whole recordings (rules: hardware.whole-recordings) -------------------------------------

# A Bluetooth adapter as `umockdev-record /dev/...` writes it: the device first, then each of its
# parents up to the PCI host controller, every record its P:, E:, A: and L: lines.
_PCI = "/devices/pci0000:00/0000:00:14.0"
ADAPTER = f"""P: {_PCI}/usb1/1-8/1-8:1.0/bluetooth/hci0
E: DEVTYPE=host
E: SUBSYSTEM=bluetooth
A: type=Primary
L: device=../../../1-8:1.0

P: {_PCI}/usb1/1-8/1-8:1.0
E: DEVTYPE=usb_interface
E: DRIVER=btusb
E: INTERFACE=224/1/1
E: MODALIAS=usb:v8087p0A2Bd0001dcE0dsc01dp01icE0isc01ip01in00
E: PRODUCT=8087/a2b/1
E: SUBSYSTEM=usb
A: bInterfaceClass=e0
A: bInterfaceNumber=00
L: driver=../../../../../../bus/usb/drivers/btusb

P: {_PCI}/usb1/1-8/1-8:1.1
E: DEVTYPE=usb_interface
E: DRIVER=btusb
E: INTERFACE=224/1/1
E: PRODUCT=8087/a2b/1
E: SUBSYSTEM=usb
A: bInterfaceClass=e0
A: bInterfaceNumber=01
L: driver=../../../../../../bus/usb/drivers/btusb

P: {_PCI}/usb1/1-8
N: bus/usb/001/003
E: BUSNUM=001
E: DEVNAME=/dev/bus/usb/001/003
E: DEVNUM=003
E: DEVTYPE=usb_device
E: DRIVER=usb
E: MAJOR=189
E: MINOR=2
E: PRODUCT=8087/a2b/1
E: SUBSYSTEM=usb
E: TYPE=224/1/1
A: bDeviceClass=e0
A: busnum=1
A: devnum=3
A: idProduct=0a2b
A: idVendor=8087
L: driver=../../../../../bus/usb/drivers/usb

P: {_PCI}/usb1
N: bus/usb/001/001
E: BUSNUM=001
E: DEVNAME=/dev/bus/usb/001/001
E: DEVNUM=001
E: DEVTYPE=usb_device
E: DRIVER=usb
E: MAJOR=189
E: MINOR=0
E: PRODUCT=1d6b/2/606
E: SUBSYSTEM=usb
A: bDeviceClass=09
A: busnum=1
A: devnum=1
A: idProduct=0002
A: idVendor=1d6b
L: driver=../../../../bus/usb/drivers/usb

P: {_PCI}
E: DRIVER=xhci_hcd
E: PCI_CLASS=C0330
E: PCI_ID=8086:A36D
E: SUBSYSTEM=pci
A: class=0x0c0330
A: device=0xa36d
A: vendor=0x8086
L: driver=../../../bus/pci/drivers/xhci_hcd
"""
RADIO = "usb-1-8-1-0"


def _published(text: str) -> list[str]:
    inv = build_inventory(parse_recording(text, "rec"), Context(Facts(frozenset())))
    return [d.name for d in inv.devices]


def test_the_whole_adapter_recording_publishes_the_radio() -> None:
    assert RADIO in _published(ADAPTER)
    assert RADIO in _published(ADAPTER + "\n")  # a blank line after the last record


@pytest.mark.parametrize(("cut", "says"), [
    (ADAPTER.index("E: DRIVER=usb\n") + 12, "rec:{line}: the recording ends inside a record"),
    (ADAPTER.index(f"P: {_PCI}\n") + len(f"P: {_PCI}\n"),
     "rec:{line}: the recording ends inside the record of /devices/pci0000:00/0000:00:14.0 "
     "(it has no E: line"),
    (ADAPTER.index("A: class=0x0c0330"),
     "rec:{line}: the recording ends inside the record of /devices/pci0000:00/0000:00:14.0 "
     "(it has no A:, H: or L: line"),
    (ADAPTER.index(f"P: {_PCI}/usb1\n"),
     "rec:{line}: /devices/pci0000:00/0000:00:14.0/usb1/1-8 hangs from "
     "/devices/pci0000:00/0000:00:14.0/usb1, which the recording lacks"),
    (ADAPTER.index(f"P: {_PCI}/usb1/1-8/1-8:1.0\n"),  # past the glue directory bluetooth/
     "rec:{line}: /devices/pci0000:00/0000:00:14.0/usb1/1-8/1-8:1.0/bluetooth/hci0 hangs from "
     "/devices/pci0000:00/0000:00:14.0/usb1/1-8/1-8:1.0, which the recording lacks"),
    (ADAPTER.index(f"P: {_PCI}/usb1/1-8\n"),
     "rec:{line}: /devices/pci0000:00/0000:00:14.0/usb1/1-8/1-8:1.0 hangs from "
     "/devices/pci0000:00/0000:00:14.0/usb1/1-8, which the recording lacks"),
])
def test_a_cut_recording_is_refused_naming_the_line(cut: int, says: str) -> None:
    """Before: exit 0, and the radio (or the whole adapter) silently missing."""
    text = ADAPTER[:cut]
    if "hangs from" in says:
        child = says.split(": ", 1)[1].split(" hangs", 1)[0]
        line = text.splitlines().index(f"P: {child}") + 1
    elif "inside a record" in says:
        line = text.count("\n") + 1
    else:
        line = text.splitlines().index(f"P: {_PCI}") + 1
    with pytest.raises(ValueError) as err:
        parse_recording(text, "rec")
    assert says.format(line=line) in str(err.value)
    assert "\n" not in str(err.value)


def test_a_cut_anywhere_is_refused_or_keeps_the_radio() -> None:
    """Every byte at which the recording can be cut: refused in one line, or the radio is
    published as from the whole recording; never a slice without it and exit 0."""
    for cut in range(1, len(ADAPTER)):
        try:
            names = _published(ADAPTER[:cut])
        except ValueError as exc:
            assert "\n" not in str(exc) and str(exc).startswith("rec:")
            continue
        assert RADIO in names, f"cut at byte {cut}: {ADAPTER[cut - 20:cut]!r}"


@pytest.mark.parametrize("line", ["E: SUBSYSTEM", "A: idVendor", "L: driver", "H: descriptors"])
def test_a_line_without_its_value_is_refused(line: str) -> None:
    text = ADAPTER.replace("E: DEVTYPE=usb_interface\n", line + "\n", 1)
    with pytest.raises(ValueError, match=r"rec:8: a .: line with no '='"):
        parse_recording(text, "rec")


def test_a_recording_of_one_class_names_no_parent_it_lacks() -> None:
    """A dump of the block devices alone (their glue directory block/ is no device) is read as
    it is: no bus device is named as a parent."""
    text = ("P: /devices/pci0000:00/0000:00:1f.2/ata1/host0/target0:0:0/0:0:0:0/block/sda\n"
            "N: sda\nE: DEVTYPE=disk\nE: MAJOR=8\nE: MINOR=0\nE: SUBSYSTEM=block\nA: size=8\n")
    assert "/devices/pci0000:00/0000:00:1f.2/ata1/host0/target0:0:0/0:0:0:0/block/sda" in \
        parse_recording(text).devices


def test_the_command_refuses_a_cut_recording(tmp_path: Path) -> None:
    from tests.support.hostile import assert_fails_closed, run_cli

    path = tmp_path / "cut.umockdev"
    path.write_text(ADAPTER[:ADAPTER.index(f"P: {_PCI}/usb1/1-8\n")])
    out = run_cli(["scan", "--recording", str(path), "--node", "n", "--modules-dir",
                   str(tmp_path), "--hwdata-dir", str(tmp_path)])
    assert_fails_closed(out, allowed=(2,))
    assert "hangs from /devices/pci0000:00/0000:00:14.0/usb1/1-8, which the recording lacks" \
        in out.stderr
