"""The guide's cookbook through ``match``: each example pod, evaluated by the allocator rules of
``liken-devices match`` against the node that tests/deploy/test_guide.py builds for it, gets the
device the guide promises (that test enumerates the allocations with its own reading of the rules;
here the command's evaluator must agree)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("cel_expr_python")

from liken_devices.inventory import Context, Facts, build_inventory
from liken_devices.inventory.limits import DRIVER
from liken_devices.match.cel import environment
from liken_devices.match.matching import Question, answer
from liken_devices.slices import devices_json, make_slice
from liken_devices.sysfs.umockdev import parse_recording
from tests.deploy.test_guide import (
    DRANET,
    WANTED,
    built,
    cec_adapter,
    example,
    gpio_stick,
    guide_machine,
    hid_mouse,
    real,
    serial_stick,
    two_root_machine,
    ups,
)
from tests.sysfs.test_umockdev import ADAPTER


def matched(name: str, inv: Any, others: dict[str, list[dict[str, Any]]] | None = None,
            ) -> list[str] | None:
    """The devices ``match`` gives the example's pod on a node with ``inv`` (and the devices
    ``others`` publish: driver -> devices), or None."""
    q = Question()
    for doc in example(name):
        q.add(doc, name)
    slices = [make_slice("n1", DRIVER, devices_json(inv))]
    slices += [make_slice("n1", driver, devices) for driver, devices in (others or {}).items()]
    (node,) = answer(environment(), q, slices, "n1")
    ((_, results),) = node.results
    if not all(r.allocatable for r in results):
        return None
    return [d.name for r in results for rr in r.requests for d in rr.devices]


def test_zigbee_stick(tmp_path: Path) -> None:
    inv = built(tmp_path, a=lambda b: serial_stick(b, "1-2", 3, WANTED, 0),
                twin=lambda b: serial_stick(b, "1-3", 4, "0000beef", 1),
                other=lambda b: serial_stick(b, "1-4", 5, WANTED, 2, "0403", "6001"))
    assert matched("zigbee-stick.yaml", inv) == ["usb-1-2-1-0"]


def test_zigbee_stick_that_also_exposes_gpio(tmp_path: Path) -> None:
    """A CP210x with a gpiochip: no subsystem attribute, still the class's bridge."""
    inv = built(tmp_path, a=lambda b: gpio_stick(b, "1-2", 3, WANTED, 0, 2),
                twin=lambda b: gpio_stick(b, "1-3", 4, "0000beef", 1, 3),
                other=lambda b: gpio_stick(b, "1-4", 5, WANTED, 2, 4, "0403", "6001"))
    assert matched("zigbee-stick.yaml", inv) == ["usb-1-2-1-0"]


def test_render_node_on_a_real_two_gpu_machine() -> None:
    got = matched("render-node.yaml", real("mir-standard-drm-devices.umockdev"))
    assert got in (["pci-0000-00-02-0"], ["pci-0000-01-00-0"])


def test_cec_bus_and_remote_from_one_adapter(tmp_path: Path) -> None:
    inv = built(tmp_path, guide_machine("A CEC bus and its remote"),
                a=lambda b: cec_adapter(b, "1-5", 6, 0, 0, 30),
                c=lambda b: cec_adapter(b, "1-6", 7, 1, 1, 31))
    got = matched("cec-remote.yaml", inv)
    assert got is not None and len(got) == 2
    assert {g.rsplit("-", 1)[0] for g in got} in ({"usb-1-5-1-0"}, {"usb-1-6-1-0"})


def test_ups_beside_a_hid_mouse(tmp_path: Path) -> None:
    assert matched("ups.yaml", built(tmp_path, u=ups, m=hid_mouse)) == ["usb-1-9-1-0"]


def test_render_node_on_a_built_two_gpu_machine(tmp_path: Path) -> None:
    """Where the corpus is absent too: an iGPU and a card, each split in two halves."""
    inv = built(tmp_path, i=lambda b: b.gpu(),
                d=lambda b: b.gpu("0000:01:00.0", card=1, render=129, driver="amdgpu",
                                  vendor="1002", device="73bf"))
    got = matched("render-node.yaml", inv)
    assert got in (["pci-0000-00-02-0"], ["pci-0000-01-00-0"])


def test_bluetooth_radio_on_a_recorded_adapter() -> None:
    """A Bluetooth adapter recorded as umockdev-record writes one (tests/sysfs)."""
    inv = build_inventory(parse_recording(ADAPTER, "adapter"), Context(Facts(frozenset())))
    assert matched("bluetooth.yaml", inv) == ["usb-1-8-1-0"]


def test_bluetooth_radio_on_a_real_laptop() -> None:
    inv = real("udevdb-only/checkbox-dell-latitudee6430-udevdb.umockdev")
    assert matched("bluetooth.yaml", inv) == ["usb-1-1-4-1-0"]


def test_smart_card_reader(tmp_path: Path) -> None:
    def reader(b: Any) -> None:
        usb = b.usb_device("2-3", busnum=2, devnum=4, vendor="076b", product="3031")
        b.usb_interface(usb, "1.0", cls=0x0B)

    def sdr(b: Any) -> None:
        usb = b.usb_device("2-4", busnum=2, devnum=5, vendor="0bda", product="2838")
        b.usb_interface(usb, "1.0", cls=0xFF)

    assert matched("smart-card-reader.yaml", built(tmp_path, r=reader, s=sdr)) == ["usb-2-3"]
    dell = real("udevdb-only/checkbox-dell-latitudee6430-udevdb.umockdev")
    assert matched("smart-card-reader.yaml", dell) is None


def test_render_node_and_nic_on_one_pcie_root(tmp_path: Path) -> None:
    """rules: attributes.topology. The GPU on the RDMA card's root, not the other GPU and not the
    USB GPU behind that root's controller."""
    inv = built(tmp_path, m=two_root_machine)
    assert matched("render-nic-one-root.yaml", inv, {"dra.net": DRANET}) == \
        ["pci-0000-3b-00-0", "nic-0"]
