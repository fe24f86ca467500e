"""Attributes (inventory/attributes.py): the set a PCI device carries, names from the ID catalogs,
absent rather than empty, strange bytes bounded.

rules: attributes.set, attributes.address-pairs, attributes.name-from-catalogs
rules: attributes.domain, attributes.bounded

Trees are built on disk with the builder and read through the real sysfs reader.
"""

from __future__ import annotations

from pathlib import Path

from liken_devices.inventory.catalogs import Catalogs
from tests.support.sysfs_builder import SysfsBuilder

from .support import Scan, dev, hid_interface


def test_pci_attributes(b: SysfsBuilder, scan: Scan) -> None:
    """Attributes: bus, address, driver, class, classCode, vendor, product, name, pciBusID."""
    b.gpu()
    a = dev(scan(), "pci-0000-00-02-0").attributes
    assert a["bus"] == "pci" and a["address"] == "0000:00:02.0" and a["driver"] == "i915"
    assert a["class"] == "display" and a["classCode"] == "030000"
    assert a["vendor"] == "8086" and a["product"] == "46a6" and a["name"] == "8086:46a6"
    assert a["resource.kubernetes.io/pciBusID"] == "0000:00:02.0"
    assert str(a["modalias"]).startswith("pci:v00008086")


def test_names_come_from_the_id_catalogs(b: SysfsBuilder, scan: Scan, tmp_path: Path) -> None:
    """Attributes: name is words from pci.ids/usb.ids, or the USB descriptor strings."""
    (tmp_path / "hw").mkdir()
    (tmp_path / "hw" / "pci.ids").write_text(
        "# comment\n8086  Intel Corporation\n\t46a6  Alder Lake-P GT2 [Iris Xe Graphics]\n"
        "C 03  Display controller\n\t00  VGA compatible controller\n")
    (tmp_path / "hw" / "usb.ids").write_text("1234  Example\n")
    b.gpu()
    usb = b.usb_device("1-2", manufacturer="Acme", product_name="Radio \x01Stick")
    hid_interface(b, usb)
    inv = scan(catalogs=Catalogs.load(tmp_path / "none", tmp_path / "hw"))
    assert dev(inv, "pci-0000-00-02-0").attributes["name"] == \
        "Intel Corporation Alder Lake-P GT2 [Iris Xe Graphics]"
    assert dev(inv, "usb-1-2-1-0").attributes["name"] == "Acme Radio ?Stick"


def test_absent_attributes_are_absent_not_empty(b: SysfsBuilder, scan: Scan) -> None:
    """Attributes: has(device.attributes["liken.sh"].serial) gives a correct result."""
    usb = b.usb_device("1-2", serial="")
    hid_interface(b, usb)
    a = dev(scan(), "usb-1-2-1-0").attributes
    assert "serial" not in a
    assert all(v != "" for v in a.values())


def test_strange_serial_bytes_never_break_the_slice(b: SysfsBuilder, scan: Scan) -> None:
    """rules: attributes.bounded. Non-printable UTF-8 is replaced, strings cut to 64 bytes."""
    usb = b.usb_device("1-2", serial=b"\xff\xfe\x00A\xe2\x82\xac" + "é".encode() * 40)
    hid_interface(b, usb)
    serial = dev(scan(), "usb-1-2-1-0").attributes["serial"]
    assert isinstance(serial, str)
    assert len(serial.encode()) <= 64
    assert serial.startswith("???A€é")
    serial.encode("utf-8")  # valid UTF-8

