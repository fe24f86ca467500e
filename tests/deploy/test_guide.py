"""docs/guide.md's cookbook: every manifest in docs/examples/ is valid in every supported
Kubernetes minor, the guide shows each one, and each claim's selectors, evaluated with a real CEL
implementation (cel-python), select exactly the intended device of a node's slice: a real
recording's where ../shared/sysfs has such hardware, else a built sysfs tree that holds the
intended device beside look-alikes. (The GPU-by-decode example is in tests/media, where the fake
VA drivers are.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from liken_devices.inventory import Context, Facts, MachineSpec, SerioEntry
from liken_devices.inventory.machinefile import parse_machine
from liken_devices.inventory.policy import build_inventory
from liken_devices.slices import devices_json
from liken_devices.sysfs.reader import read_sysfs
from liken_devices.sysfs.umockdev import load_recording
from tests.support.corpus import recording
from tests.support.sysfs_builder import Dev, SysfsBuilder

from .support import MINORS, REPO, allocations, by_kind

EXAMPLES = REPO / "docs" / "examples"
GUIDE = REPO / "docs" / "guide.md"


def example(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d]


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_example_is_valid_and_in_the_guide(path: Path) -> None:
    docs = example(path.name)
    for doc in docs:
        for minor in MINORS:
            kubernetes_validate.validate(doc, minor, strict=True)
    kinds = [d["kind"] for d in docs]
    assert "ResourceClaimTemplate" in kinds and "Pod" in kinds and "DeviceClass" in kinds
    [template] = by_kind(docs, "ResourceClaimTemplate")
    [pod] = by_kind(docs, "Pod")
    # The pod names the template, and its container the claim: applyable as it is.
    [ref] = pod["spec"]["resourceClaims"]
    assert ref["resourceClaimTemplateName"] == template["metadata"]["name"]
    assert any(c["name"] == ref["name"] for ct in pod["spec"]["containers"]
               for c in ct["resources"]["claims"])
    assert f"examples/{path.name}" in GUIDE.read_text()


def liken(inv: Any) -> dict[str, list[dict[str, Any]]]:
    return {"liken.sh": devices_json(inv)}


def built(tmp_path: Path, machine: MachineSpec | None = None, **build: Any) -> Any:
    b = SysfsBuilder(tmp_path / "sys")
    b.console("ttyS0")
    for make in build.values():
        make(b)
    return build_inventory(read_sysfs(b.root),
                           Context(Facts(frozenset(), None), machine or MachineSpec()))


def real(name: str, machine: MachineSpec | None = None) -> Any:
    return build_inventory(load_recording(recording(name)),
                           Context(Facts(frozenset(), None), machine or MachineSpec()))


def claim(name: str, slices: dict[str, list[dict[str, Any]]],
          extra: dict[str, dict[str, Any]] | None = None) -> list[tuple[str, ...]]:
    docs = example(name)
    classes = {c["metadata"]["name"]: c for c in by_kind(docs, "DeviceClass")}
    classes.update(extra or {})
    [template] = by_kind(docs, "ResourceClaimTemplate")
    return allocations(template, classes, slices)


# ---- the hardware --------------------------------------------------------------------------


def serial_stick(b: SysfsBuilder, port: str, devnum: int, serial: str, tty: int,
                 vendor: str = "10c4", product: str = "ea60") -> Dev:
    usb = b.usb_device(port, devnum=devnum, vendor=vendor, product=product, serial=serial)
    iface = b.usb_interface(usb, "1.0", driver="cp210x", cls=0xFF)
    line = b.device(iface, f"ttyUSB{tty}", "usb-serial", driver="cp210x")
    b.node(line, "tty", f"ttyUSB{tty}", 188, tty, subdir="tty")
    return usb


WANTED = "a8b2c4d6e8f0a1b3c5d7e9f1a2b4c6d8"


def test_zigbee_stick_by_vendor_product_and_serial(tmp_path: Path) -> None:
    inv = built(tmp_path, a=lambda b: serial_stick(b, "1-2", 3, WANTED, 0),
                twin=lambda b: serial_stick(b, "1-3", 4, "0000beef", 1),
                other=lambda b: serial_stick(b, "1-4", 5, WANTED, 2, "0403", "6001"))
    assert len([d for d in inv.devices if d.attributes.get("subsystem") == "tty"]) == 3
    assert claim("zigbee-stick.yaml", liken(inv)) == [("liken.sh/usb-1-2-1-0",)]


def test_shared_render_node_on_a_real_two_gpu_machine() -> None:
    inv = real("mir-standard-drm-devices.umockdev")
    got = claim("render-node.yaml", liken(inv))
    assert got == [("liken.sh/pci-0000-00-02-0",), ("liken.sh/pci-0000-01-00-0",)]
    assert all(inv.by_name()[n.split("/")[1]].shareable for (n,) in got)
    assert "pci-0000-00-02-0-display" in inv.by_name()  # there, and never chosen


def gpio_stick(b: SysfsBuilder, port: str, devnum: int, serial: str, tty: int, chip: int,
               vendor: str = "10c4", product: str = "ea60") -> Dev:
    """A CP210x whose GPIO pins the driver exposes: cp210x registers a gpiochip whose parent is
    the USB interface, so the interface delivers its tty and /dev/gpiochipN (char 254)."""
    usb = serial_stick(b, port, devnum, serial, tty, vendor, product)
    iface = Dev(f"{usb.path}/{usb.name}:1.0")
    b.node(iface, "gpio", f"gpiochip{chip}", 254, chip)
    return usb


def test_zigbee_stick_that_also_exposes_gpio(tmp_path: Path) -> None:
    """Its interface hands out two kinds of node, so it has no subsystem: the class selects the
    bridge by its driver (before: it wanted subsystem "tty" and matched nothing)."""
    inv = built(tmp_path, a=lambda b: gpio_stick(b, "1-2", 3, WANTED, 0, 2),
                twin=lambda b: gpio_stick(b, "1-3", 4, "0000beef", 1, 3),
                other=lambda b: gpio_stick(b, "1-4", 5, WANTED, 2, 4, "0403", "6001"))
    wanted = inv.by_name()["usb-1-2-1-0"]
    assert "subsystem" not in wanted.attributes
    assert claim("zigbee-stick.yaml", liken(inv)) == [("liken.sh/usb-1-2-1-0",)]


def guide_machine(section: str) -> MachineSpec:
    """The Machine a recipe of the guide shows (the first yaml block of its section), read as
    the agent reads a Machine."""
    text = GUIDE.read_text()
    start = text.index(f"### {section}\n")
    end = text.find("\n### ", start + 1)
    body = text[start:end if end > 0 else len(text)]
    block = body.split("```yaml\n", 1)[1].split("```", 1)[0]
    return parse_machine(yaml.safe_load(block), f"the guide's {section!r}")


CEC_DRIVERS = {"pulse8-cec": "pulse8_cec", "rainshadow-cec": "rainshadow_cec"}


def test_the_cec_recipe_declares_the_modules_its_line_needs() -> None:
    """Each spec.serio line needs its adapter's serio driver and serport, the line discipline
    (docs/machine.md): the recipe's Machine declares them."""
    spec = guide_machine("A CEC bus and its remote")
    assert spec.serio, "the recipe declares its adapter"
    for entry in spec.serio:
        assert {"serport", CEC_DRIVERS[entry.protocol]} <= set(spec.modules)


PULSE8 = SerioEntry("pulse8-cec", "2548", "1002")


def cec_adapter(b: SysfsBuilder, port: str, devnum: int, tty: int, cec: int, event: int) -> None:
    usb = b.usb_device(port, devnum=devnum, vendor="2548", product="1002", serial=f"P8-{tty}")
    acm = b.usb_interface(usb, "1.0", driver="cdc_acm", cls=2)
    b.usb_interface(usb, "1.1", driver="cdc_acm", cls=0x0A)
    line = b.node(acm, "tty", f"ttyACM{tty}", 166, tty, subdir="tty")
    serio = b.device(line, f"serio{tty + 2}", "serio", driver="pulse8-cec")
    b.node(serio, "cec", f"cec{cec}", 242, cec, subdir="cec")
    rc = b.device(serio, f"rc{cec}", "rc", subdir="rc")
    inp = b.device(rc, f"input{event}", "input")
    b.node(inp, "input", f"event{event}", 13, 64 + event, devname=f"input/event{event}")


def test_cec_bus_and_its_remote_paired_by_address(tmp_path: Path) -> None:
    """Two adapters on one node: the bus and the remote always come from the same one."""
    def keyboard(b: SysfsBuilder) -> None:
        usb = b.usb_device("1-7", devnum=9, vendor="046d", product="c31c")
        iface = b.usb_interface(usb, "1.0", driver="usbhid", cls=3)
        inp = b.device(iface, "input40", "input")
        b.node(inp, "input", "event20", 13, 84, devname="input/event20")

    # The Machine is the one the guide shows with the recipe.
    inv = built(tmp_path, guide_machine("A CEC bus and its remote"),
                a=lambda b: cec_adapter(b, "1-5", 6, 0, 0, 30),
                c=lambda b: cec_adapter(b, "1-6", 7, 1, 1, 31), k=keyboard)
    assert sorted(claim("cec-remote.yaml", liken(inv))) == [
        ("liken.sh/usb-1-5-1-0-cec", "liken.sh/usb-1-5-1-0-input"),
        ("liken.sh/usb-1-6-1-0-cec", "liken.sh/usb-1-6-1-0-input")]


def ups(b: SysfsBuilder) -> None:
    """An APC UPS: a HID interface with its hidraw and hiddev nodes."""
    usb = b.usb_device("1-9", devnum=10, vendor="051d", product="0002", serial="3B1234X")
    iface = b.usb_interface(usb, "1.0", driver="usbhid", cls=3)
    hid = b.device(iface, "0003:051D:0002.0001", "hid")
    b.node(hid, "hidraw", "hidraw0", 240, 0, subdir="hidraw")
    b.node(iface, "usbmisc", "hiddev0", 180, 0, devname="usb/hiddev0", subdir="usbmisc")


def hid_mouse(b: SysfsBuilder) -> None:
    usb = b.usb_device("1-10", devnum=11, vendor="046d", product="c077")
    iface = b.usb_interface(usb, "1.0", driver="usbhid", cls=3)
    hid = b.device(iface, "0003:046D:C077.0002", "hid")
    b.node(hid, "hidraw", "hidraw1", 240, 1, subdir="hidraw")


def test_ups_through_libusb(tmp_path: Path) -> None:
    inv = built(tmp_path, u=ups, m=hid_mouse)
    [(name,)] = claim("ups.yaml", liken(inv))
    assert name == "liken.sh/usb-1-9-1-0"
    paths = [n.path for n in inv.by_name()["usb-1-9-1-0"].nodes]
    assert "/dev/bus/usb/001/010" in paths  # what libusb opens


def test_bluetooth_radio_on_a_real_laptop() -> None:
    inv = real("udevdb-only/checkbox-dell-latitudee6430-udevdb.umockdev")
    assert claim("bluetooth.yaml", liken(inv)) == [("liken.sh/usb-1-1-4-1-0",)]
    nodes = [n.path for n in inv.by_name()["usb-1-1-4-1-0"].nodes]
    assert "/dev/uinput" in nodes and "/dev/input/event31" in nodes


def test_smart_card_reader_by_class_code(tmp_path: Path) -> None:
    def reader(b: SysfsBuilder) -> None:
        usb = b.usb_device("2-3", busnum=2, devnum=4, vendor="076b", product="3031")
        b.usb_interface(usb, "1.0", cls=0x0B)  # CCID, no kernel driver: pcscd's libusb

    def sdr(b: SysfsBuilder) -> None:
        usb = b.usb_device("2-4", busnum=2, devnum=5, vendor="0bda", product="2838")
        b.usb_interface(usb, "1.0", cls=0xFF)  # a radio without a driver: also whole, not 0b

    inv = built(tmp_path, r=reader, s=sdr)
    assert {"usb-2-3", "usb-2-4"} <= set(inv.by_name())
    assert claim("smart-card-reader.yaml", liken(inv)) == [("liken.sh/usb-2-3",)]


def test_smart_card_class_leaves_a_real_laptops_fingerprint_processor() -> None:
    """The Dell's BCM5880 carries a CCID interface behind a vendor-specific first one; the
    class reads the first interface, so it is not taken for a reader."""
    inv = real("udevdb-only/checkbox-dell-latitudee6430-udevdb.umockdev")
    assert "usb-2-1-8" in inv.by_name()
    assert claim("smart-card-reader.yaml", liken(inv)) == []


def two_root_machine(b: SysfsBuilder) -> None:
    """Two GPUs on two PCIe roots (pci0000:17, pci0000:3a), each behind a root port, and a USB
    GPU's render node behind the xHCI controller of root pci0000:3a."""
    for root in ("17", "3a"):
        port = b.pci(f"0000:{root}:00.0", driver="pcieport", cls=0x060400)
        bus = f"{int(root, 16) + 1:02x}"
        b.gpu(f"0000:{bus}:00.0", card=int(root, 16) % 8, render=128 + int(root, 16) % 8,
              parent=port, numa_node="0" if root == "17" else "1")
    hc = b.pci("0000:3a:14.0", driver="xhci_hcd", cls=0x0C0330, numa_node="1")
    usb = b.usb_device("3-1", parent=hc, busnum=3, devnum=2, vendor="1d5c", product="2000")
    iface = b.usb_interface(usb, "1.0", driver="gud", cls=0xFF)
    b.node(iface, "drm", "renderD140", 226, 140, devname="dri/renderD140", subdir="drm")


def dranet_nic(name: str, root: str, rdma: bool) -> dict[str, Any]:
    """A network card as DRANET (driver dra.net) publishes it: its own attributes qualified
    with its domain, and the standard PCIe root."""
    return {"name": name, "attributes": {"dra.net/rdma": {"bool": rdma},
                                         "dra.net/ifName": {"string": f"eth-{name}"},
                                         "resource.kubernetes.io/pcieRoot": {"string": root}}}


DRANET = [dranet_nic("nic-0", "pci0000:3a", True), dranet_nic("nic-1", "pci0000:5d", True),
          dranet_nic("nic-2", "pci0000:17", False)]


def test_render_node_and_another_drivers_nic_on_one_pcie_root(tmp_path: Path) -> None:
    """rules: attributes.topology, attributes.usb-no-topology. Of two GPUs the one on the root
    of the only RDMA card that shares a root with a GPU; the USB GPU on that root's controller
    carries no pcieRoot and is never paired."""
    inv = built(tmp_path, m=two_root_machine)
    renders = [d.name for d in inv.devices if d.attributes.get("renderNode")]
    assert sorted(renders) == ["pci-0000-18-00-0", "pci-0000-3b-00-0", "usb-3-1-1-0"]
    assert claim("render-nic-one-root.yaml", {**liken(inv), "dra.net": DRANET}) == [
        ("liken.sh/pci-0000-3b-00-0", "dra.net/nic-0")]


def test_the_bluetooth_docs_match_the_rule_and_say_when_to_declare_uhid() -> None:
    """No promise of "the 32 legacy input event nodes" where numbers are left out; when to
    declare uhid (Bluetooth LE input) and what fails without it."""
    example = (REPO / "docs" / "examples" / "bluetooth.yaml").read_text()
    for text in (GUIDE.read_text(), example):
        flat = " ".join(text.replace("#", " ").split())
        assert "32 legacy input event nodes" not in flat
        assert "left out" in flat
        assert "uhid" in flat and "input-hog profile accept failed" in flat
        assert "LE input" in flat
